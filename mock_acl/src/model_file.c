/* Model description files: reads a file and parses the text format of mock_acl/README.md
 * ("Model runtime and subscription"): a magic first line, `device`/`seed`/`gap` directives
 * and one `op` line per operator, with escaped names. Pure parsing: no global state, no
 * lock (aclmdlLoadFromFile calls it before taking g_mock_lock), except that `device` is
 * checked against the current device count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

#define MODEL_MAGIC "aclmock-model 1"
#define MAX_FILE_BYTES (256u << 20)       /* refuse absurd files instead of exhausting memory */
#define MAX_OP_NS 1000000000000ull        /* 1000 s per op: keeps all time sums far from 2^64 */
#define MAX_TENSOR_DIMS 128               /* more than any real tensor (CANN: ACL_MAX_DIM_CNT) */
#define MAX_OP_TENSORS 4096               /* inputs (or outputs) per op */

static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0 || n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes a name/type field: \\ \t \n \r and \xNN (any byte but 00, since the API hands
 * names out as C strings). Everything else is taken byte for byte, so UTF-8 or any other
 * bytes may also appear raw. Returns a malloc'd string, or NULL if malformed. */
static char *unescape(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[o++] = s[i];
            continue;
        }
        if (++i == n)
            goto bad;
        switch (s[i]) {
        case '\\': out[o++] = '\\'; break;
        case 't': out[o++] = '\t'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 'x': {
            if (n - i < 3)   /* two hex digits must follow */
                goto bad;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                goto bad;
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
            break;
        }
        default:
            goto bad;
        }
    }
    out[o] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static void tensors_free(mock_tensor *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(t[i].dims);
    free(t);
}

void mock_op_free(mock_op *op)
{
    free(op->name);
    free(op->type);
    tensors_free(op->inputs, op->ninputs);
    tensors_free(op->outputs, op->noutputs);
}

void model_parsed_free(parsed *p)
{
    for (size_t i = 0; i < p->nops; i++)
        mock_op_free(&p->ops[i]);
    free(p->ops);
}

/* A signed decimal that fits int64 (a leading '-' allowed), in [min, max]. */
static bool parse_i64(const char *s, size_t n, int64_t min, int64_t max, int64_t *out)
{
    bool neg = n > 0 && s[0] == '-';
    uint64_t mag;
    if (!parse_u64(s + neg, n - neg, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag))
        return false;
    int64_t v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* `in|out<TAB>dtype<TAB>format<TAB>dims`: a tensor of the op on the line before; dims are
 * comma-separated signed decimals (-1: unknown), empty for a scalar. */
static bool parse_tensor(parsed *p, const char *line, size_t len, bool input)
{
    if (p->nops == 0)
        return false;   /* a tensor belongs to the op above it */
    const char *f[4];
    size_t fl[4], nf = 0;
    const char *start = line;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == '\t') {
            if (nf == 4)
                return false;
            f[nf] = start;
            fl[nf] = (size_t)(line + i - start);
            nf++;
            start = line + i + 1;
        }
    }
    if (nf != 4)
        return false;
    int64_t dtype, format;
    if (!parse_i64(f[1], fl[1], INT32_MIN, INT32_MAX, &dtype) ||
        !parse_i64(f[2], fl[2], INT32_MIN, INT32_MAX, &format))
        return false;
    size_t ndims = 0;
    if (fl[3] > 0) {
        ndims = 1;
        for (size_t i = 0; i < fl[3]; i++)
            ndims += f[3][i] == ',';
    }
    if (ndims > MAX_TENSOR_DIMS)
        return false;
    int64_t *dims = NULL;
    if (ndims > 0 && (dims = malloc(ndims * sizeof *dims)) == NULL)
        return false;
    const char *d = f[3];
    for (size_t k = 0; k < ndims; k++) {
        const char *comma = memchr(d, ',', (size_t)(f[3] + fl[3] - d));
        size_t dl = comma ? (size_t)(comma - d) : (size_t)(f[3] + fl[3] - d);
        if (!parse_i64(d, dl, -2, INT64_MAX, &dims[k])) {   /* -1 unknown dim, -2 unknown rank */
            free(dims);
            return false;
        }
        d += dl + 1;
    }
    mock_op *op = &p->ops[p->nops - 1];
    mock_tensor **arr = input ? &op->inputs : &op->outputs;
    size_t *count = input ? &op->ninputs : &op->noutputs;
    if (*count == MAX_OP_TENSORS) {
        free(dims);
        return false;
    }
    mock_tensor *n = realloc(*arr, (*count + 1) * sizeof *n);
    if (n == NULL) {
        free(dims);
        return false;
    }
    n[*count] = (mock_tensor){ .dtype = (int32_t)dtype, .format = (int32_t)format,
                               .ndims = ndims, .dims = dims };
    *arr = n;
    (*count)++;
    return true;
}

/* `op<TAB>name<TAB>type<TAB>duration_ns[<TAB>jitter_ns[<TAB>flag[<TAB>thread_id]]]` */
static bool parse_op(parsed *p, const char *line, size_t len)
{
    const char *f[8];
    size_t fl[8];
    size_t nf = 0;
    const char *start = line;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == '\t') {
            if (nf == 8)
                return false;
            f[nf] = start;
            fl[nf] = (size_t)(line + i - start);
            nf++;
            start = line + i + 1;
        }
    }
    if (nf < 4 || nf > 7)
        return false;
    mock_op op = { 0 };
    uint64_t v;
    if (!parse_u64(f[3], fl[3], MAX_OP_NS, &op.duration_ns))
        return false;
    if (nf > 4 && !parse_u64(f[4], fl[4], MAX_OP_NS, &op.jitter_ns))
        return false;
    if (nf > 5) {
        if (!parse_u64(f[5], fl[5], UINT32_MAX, &v))
            return false;
        op.flag = (uint32_t)v;
    }
    if (nf > 6) {
        if (!parse_u64(f[6], fl[6], UINT32_MAX, &v))
            return false;
        op.thread_id = (uint32_t)v;
    }
    if (p->nops == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        mock_op *n = realloc(p->ops, ncap * sizeof *n);
        if (n == NULL)
            return false;
        p->ops = n;
        p->cap = ncap;
    }
    op.name = unescape(f[1], fl[1]);
    op.type = unescape(f[2], fl[2]);
    if (op.name == NULL || op.type == NULL) {
        free(op.name);
        free(op.type);
        return false;
    }
    p->ops[p->nops++] = op;
    return true;
}

/* `device <id>`, `seed <n>`, `gap <ns>`: keyword, spaces or tabs, a decimal number. */
static bool parse_directive(parsed *p, const char *line, size_t len)
{
    size_t k = 0;
    while (k < len && line[k] != ' ' && line[k] != '\t')
        k++;
    size_t v = k;
    while (v < len && (line[v] == ' ' || line[v] == '\t'))
        v++;
    size_t e = len;
    while (e > v && (line[e - 1] == ' ' || line[e - 1] == '\t'))
        e--;
    if (v == k)
        return false;
    uint64_t num;
    if (k == 6 && memcmp(line, "device", 6) == 0) {
        if (p->have_device || !parse_u64(line + v, e - v, UINT32_MAX, &num) ||
            num >= mock_device_count())
            return false;
        p->device = (uint32_t)num;
        p->have_device = true;
    } else if (k == 4 && memcmp(line, "seed", 4) == 0) {
        if (p->have_seed || !parse_u64(line + v, e - v, UINT64_MAX, &num))
            return false;
        p->seed = num;
        p->have_seed = true;
    } else if (k == 3 && memcmp(line, "gap", 3) == 0) {
        if (p->have_gap || !parse_u64(line + v, e - v, MAX_OP_NS, &num))
            return false;
        p->gap_ns = num;
        p->have_gap = true;
    } else {
        return false;
    }
    return true;
}

static bool parse_model(const char *buf, size_t n, parsed *p)
{
    if (memchr(buf, '\0', n) != NULL)
        return false;   /* names are C strings: a raw NUL could only truncate silently */
    size_t pos = 0;
    bool first = true;
    while (pos < n) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - line) : n - pos;
        pos += len + (nl ? 1 : 0);
        if (len > 0 && line[len - 1] == '\r')
            len--;   /* tolerate CRLF files; a CR inside a name must be written \r */
        if (first) {
            if (len != strlen(MODEL_MAGIC) || memcmp(line, MODEL_MAGIC, len) != 0)
                return false;
            first = false;
            continue;
        }
        if (len == 0 || line[0] == '#')
            continue;
        bool ok;
        if (len >= 3 && memcmp(line, "op\t", 3) == 0)
            ok = parse_op(p, line, len);
        else if (len >= 3 && memcmp(line, "in\t", 3) == 0)
            ok = parse_tensor(p, line, len, true);
        else if (len >= 4 && memcmp(line, "out\t", 4) == 0)
            ok = parse_tensor(p, line, len, false);
        else
            ok = parse_directive(p, line, len);
        if (!ok)
            return false;
    }
    return !first;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {   /* e.g. the path is a directory: EISDIR */
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

bool model_file_load(const char *path, parsed *p)
{
    size_t len;
    char *buf = read_file(path, &len);
    if (buf == NULL)
        return false;
    bool ok = parse_model(buf, len, p);
    free(buf);
    if (!ok) {
        model_parsed_free(p);
        *p = (parsed){ 0 };
    }
    return ok;
}
