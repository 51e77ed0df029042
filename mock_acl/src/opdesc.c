/* The ProfOpDesc record, its CRC-32C signature, the op name/type side table and the
 * aclprofGetOp* getters (reference sections 3.4 and 4).
 *
 * Faithful to CANN's OpDescParser (analyze/src/op_desc_parser.cpp):
 *   - opInfoLen and the caller's buffer length are narrowed to uint32_t, as the real
 *     functions take uint32_t parameters;
 *   - CheckData checks len % size and the signature of EVERY record of the buffer, so a
 *     getter on an n-record buffer costs O(n) (a binding should pass one-record slices);
 *   - names and types live in two logical maps keyed by opIndex: GetOpName erases only the
 *     name, GetOpType only the type; the *Len getters erase nothing;
 *   - GetOpType/GetOpName copy with memcpy_s semantics: strlen > bufLen fails (and securec
 *     clears the destination, which we copy), bufLen > 0x7fffffff fails untouched; then
 *     buf[bufLen-1] = '\0'.
 * Deliberate deviation: the index check is computed in 64 bits. The real one multiplies in
 * 32 bits and can wrap for huge indexes, reading out of bounds; the mock returns "out of
 * range" there instead.
 *
 * Locking: the side table has its own mutex (g_names_lock), never g_mock_lock. A reader
 * thread calls these getters while another thread may sit in aclprofModelUnSubscribe
 * waiting for that very reader to drain the pipe; taking the global lock here could
 * deadlock. The real getters do not take ProfAclMgr's lock either.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* ---- CRC-32C (Castagnoli), reference section 4 ---------------------------------------- */

/* Slicing-by-8: still the table-driven CRC of Utils::GenerateSignature (same result as
 * the byte loop `s = T[(s ^ *p++) & 0xff] ^ (s >> 8)`), about 5x faster. The writer and
 * every getter compute it, so it is on the hot path. */
static uint32_t g_crc_table[8][256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = g_crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = g_crc_table[0][c & 0xffu] ^ (c >> 8);
            g_crc_table[t][n] = c;
        }
    }
}

/* Init 0xFFFFFFFF, no final XOR: that is what the real signature is (= ~crc32c_std).
 * Eight bytes a step; under ACLMOCK_SIGNATURE=cann one byte a step, as CANN's
 * GenerateSignature takes them: the same values at CANN's cost (~5x the time, the largest
 * part of what a reader's two Gets per record cost there; README "Deviations and choices
 * (subscription)"). */
static uint32_t crc32c_raw(const unsigned char *p, size_t n)
{
    pthread_once(&g_crc_once, crc_init);
    uint32_t s = 0xFFFFFFFFu;
    const bool bytewise = mock_signature_cann() != 0;
    while (n >= 8 && !bytewise) {
        /* Bytes are combined explicitly, so the result does not depend on endianness. */
        uint32_t lo = s ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        s = g_crc_table[7][lo & 0xffu] ^ g_crc_table[6][(lo >> 8) & 0xffu] ^
            g_crc_table[5][(lo >> 16) & 0xffu] ^ g_crc_table[4][lo >> 24] ^
            g_crc_table[3][p[4]] ^ g_crc_table[2][p[5]] ^ g_crc_table[1][p[6]] ^
            g_crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        s = g_crc_table[0][(s ^ *p++) & 0xffu] ^ (s >> 8);
    return s;
}

uint32_t mock_crc32c_signature(const void *data, size_t len)
{
    if (len <= sizeof(uint32_t))
        return crc32c_raw(NULL, 0);
    return crc32c_raw((const unsigned char *)data + sizeof(uint32_t), len - sizeof(uint32_t));
}

/* ---- name/type side table ---------------------------------------------------------- */

/* Open addressing with linear probing and backward-shift deletion (no tombstones), keyed
 * by opIndex (never 0). One malloc per record holds "name\0type\0"; the two presence bits
 * model CANN's two maps (opNames_, opTypes_). The slot is freed when both are gone.
 * Load factor <= 1/2; the table also shrinks, so a burst of 1M unread records does not
 * pin memory forever once they are read. */
#define HAVE_NAME 1u
#define HAVE_TYPE 2u
#define TABLE_MIN_CAP 1024u

typedef struct name_slot {
    uint64_t key;       /* opIndex; 0 = empty */
    char *blob;         /* name bytes, NUL, type bytes, NUL */
    size_t name_len;    /* strlen(name); type starts at blob + name_len + 1 */
    size_t type_len;
    unsigned have;      /* HAVE_NAME | HAVE_TYPE */
} name_slot;

static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static name_slot *g_slots;
static size_t g_cap;          /* power of two, or 0 before the first insert */
static size_t g_count;
static uint64_t g_next_index; /* last opIndex handed out; the first one is 1 */

/* fork(): take the table locks across fork() so the child's copy is consistent (a getter
 * in the child would otherwise deadlock on a lock held by a thread that no longer exists).
 * Called by common.c's handlers, after g_sub_lock (the lock order g_sub_lock ->
 * g_names_lock). Plain mutexes: the child may unlock them (no owner check). */
static pthread_mutex_t g_attr_lock = PTHREAD_MUTEX_INITIALIZER;

void names_fork_prepare(void)
{
    pthread_mutex_lock(&g_names_lock);
    pthread_mutex_lock(&g_attr_lock);
}

void names_fork_release(void)
{
    pthread_mutex_unlock(&g_attr_lock);
    pthread_mutex_unlock(&g_names_lock);
}

static size_t slot_home(uint64_t key, size_t cap)
{
    /* Fibonacci hashing: opIndex is sequential, the multiply spreads it over the table. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

/* Caller holds g_names_lock. Returns false when out of memory (table unchanged). */
static bool table_resize(size_t new_cap)
{
    name_slot *ns = calloc(new_cap, sizeof *ns);
    if (ns == NULL)
        return false;
    for (size_t i = 0; i < g_cap; i++) {
        if (g_slots[i].key == 0)
            continue;
        size_t j = slot_home(g_slots[i].key, new_cap);
        while (ns[j].key != 0)
            j = (j + 1) & (new_cap - 1);
        ns[j] = g_slots[i];
    }
    free(g_slots);
    g_slots = ns;
    g_cap = new_cap;
    return true;
}

/* Caller holds g_names_lock. */
static name_slot *table_find(uint64_t key)
{
    if (g_cap == 0 || key == 0)
        return NULL;
    size_t i = slot_home(key, g_cap);
    while (g_slots[i].key != 0) {
        if (g_slots[i].key == key)
            return &g_slots[i];
        i = (i + 1) & (g_cap - 1);
    }
    return NULL;
}

/* Caller holds g_names_lock; frees the slot's strings and closes the gap. */
static void table_remove(name_slot *s)
{
    free(s->blob);
    size_t i = (size_t)(s - g_slots);
    size_t j = i;
    for (;;) {
        j = (j + 1) & (g_cap - 1);
        if (g_slots[j].key == 0)
            break;
        size_t k = slot_home(g_slots[j].key, g_cap);
        /* Slot j may move back to i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            g_slots[i] = g_slots[j];
            i = j;
        }
    }
    memset(&g_slots[i], 0, sizeof g_slots[i]);
    g_count--;
    if (g_cap > TABLE_MIN_CAP && g_count < g_cap / 8)
        (void)table_resize(g_cap / 2);   /* failure only keeps the bigger table */
}

uint64_t mock_opdesc_register(const char *name, const char *type)
{
    /* (NULL, NULL) only reserves an index: used for deliberately corrupted records, whose
     * strings a reader can never fetch (the getters reject them), so storing them would
     * leak table entries. */
    char *blob = NULL;
    size_t nl = 0, tl = 0;
    if (name != NULL || type != NULL) {
        nl = name ? strlen(name) : 0;
        tl = type ? strlen(type) : 0;
        blob = malloc(nl + tl + 2);   /* outside the lock: keep the critical section short */
        if (blob == NULL)
            return 0;
        memcpy(blob, name ? name : "", nl + 1);
        memcpy(blob + nl + 1, type ? type : "", tl + 1);
    }

    pthread_mutex_lock(&g_names_lock);
    if (g_next_index == UINT64_MAX) {   /* "Op name and type full" in CANN */
        pthread_mutex_unlock(&g_names_lock);
        free(blob);
        return 0;
    }
    uint64_t idx = ++g_next_index;
    if (blob != NULL) {
        if ((g_count + 1) * 2 > g_cap &&
            !table_resize(g_cap ? g_cap * 2 : TABLE_MIN_CAP)) {
            pthread_mutex_unlock(&g_names_lock);
            free(blob);
            return 0;
        }
        size_t i = slot_home(idx, g_cap);
        while (g_slots[i].key != 0)
            i = (i + 1) & (g_cap - 1);
        g_slots[i] = (name_slot){ idx, blob, nl, tl, HAVE_NAME | HAVE_TYPE };
        g_count++;
    }
    pthread_mutex_unlock(&g_names_lock);
    return idx;
}

void mock_opdesc_reset(void)
{
    pthread_mutex_lock(&g_names_lock);
    for (size_t i = 0; i < g_cap; i++)
        free(g_slots[i].blob);
    free(g_slots);
    g_slots = NULL;
    g_cap = 0;
    g_count = 0;
    g_next_index = 0;
    pthread_mutex_unlock(&g_names_lock);
}

/* nameTableEntries counts records with a name or a type still unread (one slot each),
 * i.e. what a reader that fetches both strings of every record drives back to 0. */
void mock_opdesc_stats(aclmockStats *out)
{
    pthread_mutex_lock(&g_names_lock);
    out->nameTableEntries = g_count;
    pthread_mutex_unlock(&g_names_lock);
}

/* ---- getters ------------------------------------------------------------------------ */

/* The real parser's len is uint32_t: a size_t argument is silently narrowed. */
static uint32_t narrow(size_t len)
{
    return (uint32_t)len;
}

static uint32_t desc_size(void)
{
    return mock_op_desc_size();
}

static aclError check_data(const void *data, uint32_t len)
{
    uint32_t size = desc_size();
    if (len % size != 0)
        return ACL_ERROR_INVALID_PARAM;
    const unsigned char *p = data;
    for (uint32_t i = 0; i < len / size; i++, p += size) {
        uint32_t sig;
        memcpy(&sig, p, sizeof sig);   /* the buffer need not be aligned */
        if (sig != mock_crc32c_signature(p, size))
            return ACL_ERROR_INVALID_PARAM;
    }
    return ACL_SUCCESS;
}

static bool index_ok(uint32_t index, uint32_t len)
{
    return index != UINT32_MAX && ((uint64_t)index + 1) * desc_size() <= len;
}

/* Reads one field of record `index` (offsets of ProfOpDesc; memcpy: unaligned-safe). */
static uint64_t field_u64(const void *data, uint32_t index, size_t offset)
{
    uint64_t v;
    memcpy(&v, (const unsigned char *)data + (size_t)index * desc_size() + offset, sizeof v);
    return v;
}

static uint32_t field_u32(const void *data, uint32_t index, size_t offset)
{
    uint32_t v;
    memcpy(&v, (const unsigned char *)data + (size_t)index * desc_size() + offset, sizeof v);
    return v;
}

MOCK_EXPORT aclError aclprofGetOpDescSize(size_t *opDescSize)
{
    MOCK_FAULT_RETURN_CODE();
    if (opDescSize == NULL)
        return ACL_ERROR_INVALID_PARAM;
    *opDescSize = desc_size();
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofGetOpNum(const void *opInfo, size_t opInfoLen, uint32_t *opNumber)
{
    MOCK_FAULT_RETURN_CODE();
    uint32_t len = narrow(opInfoLen);
    if (opInfo == NULL || opNumber == NULL)
        return ACL_ERROR_INVALID_PARAM;
    aclError ret = check_data(opInfo, len);
    if (ret != ACL_SUCCESS)
        return ret;
    *opNumber = len / desc_size();
    return ACL_SUCCESS;
}

/* Common prologue of the four string getters: CheckData and the index check. */
static aclError locate(const void *opInfo, uint32_t len, uint32_t index, uint64_t *op_index)
{
    aclError ret = check_data(opInfo, len);
    if (ret != ACL_SUCCESS)
        return ret;
    if (!index_ok(index, len))
        return ACL_ERROR_INVALID_PARAM;
    *op_index = field_u64(opInfo, index, offsetof(ProfOpDesc, opIndex));
    return ACL_SUCCESS;
}

static aclError get_len(const void *opInfo, size_t opInfoLen, uint32_t index, size_t *out,
                        unsigned which)
{
    if (opInfo == NULL || out == NULL)
        return ACL_ERROR_INVALID_PARAM;
    uint64_t key;
    aclError ret = locate(opInfo, narrow(opInfoLen), index, &key);
    if (ret != ACL_SUCCESS)
        return ret;
    pthread_mutex_lock(&g_names_lock);
    name_slot *s = table_find(key);
    if (s == NULL || !(s->have & which)) {
        ret = ACL_ERROR_INVALID_PARAM;   /* "maybe it has been got already" */
    } else {
        *out = (which == HAVE_NAME ? s->name_len : s->type_len) + 1;
    }
    pthread_mutex_unlock(&g_names_lock);
    return ret;
}

/* The largest destMax securec's memcpy_s accepts (SECUREC_MEM_MAX_LEN). */
#define SECUREC_MEM_MAX_LEN 0x7fffffffu

static aclError get_str(const void *opInfo, size_t opInfoLen, uint32_t index, char *buf,
                        size_t bufLen, unsigned which)
{
    uint32_t blen = narrow(bufLen);
    if (opInfo == NULL || buf == NULL || blen == 0)
        return ACL_ERROR_INVALID_PARAM;
    uint64_t key;
    aclError ret = locate(opInfo, narrow(opInfoLen), index, &key);
    if (ret != ACL_SUCCESS)
        return ret;
    pthread_mutex_lock(&g_names_lock);
    name_slot *s = table_find(key);
    if (s == NULL || !(s->have & which)) {
        ret = ACL_ERROR_INVALID_PARAM;
    } else {
        const char *str = which == HAVE_NAME ? s->blob : s->blob + s->name_len + 1;
        size_t n = which == HAVE_NAME ? s->name_len : s->type_len;
        if (blen > SECUREC_MEM_MAX_LEN) {
            ret = ACL_ERROR_INVALID_PARAM;            /* ERANGE: buffer left untouched */
        } else if (n > blen) {
            memset(buf, 0, blen);                     /* ERANGE_AND_RESET */
            ret = ACL_ERROR_INVALID_PARAM;            /* the entry is kept */
        } else {
            memcpy(buf, str, n);
            buf[blen - 1] = '\0';                     /* so blen == n drops the last byte */
            s->have &= ~which;                        /* one-shot: erase this string only */
            if (s->have == 0)
                table_remove(s);
        }
    }
    pthread_mutex_unlock(&g_names_lock);
    return ret;
}

MOCK_EXPORT aclError aclprofGetOpTypeLen(const void *opInfo, size_t opInfoLen, uint32_t index,
                                         size_t *opTypeLen)
{
    MOCK_FAULT_RETURN_CODE();
    return get_len(opInfo, opInfoLen, index, opTypeLen, HAVE_TYPE);
}

MOCK_EXPORT aclError aclprofGetOpNameLen(const void *opInfo, size_t opInfoLen, uint32_t index,
                                         size_t *opNameLen)
{
    MOCK_FAULT_RETURN_CODE();
    return get_len(opInfo, opInfoLen, index, opNameLen, HAVE_NAME);
}

MOCK_EXPORT aclError aclprofGetOpType(const void *opInfo, size_t opInfoLen, uint32_t index,
                                      char *opType, size_t opTypeLen)
{
    MOCK_FAULT_RETURN_CODE();
    return get_str(opInfo, opInfoLen, index, opType, opTypeLen, HAVE_TYPE);
}

MOCK_EXPORT aclError aclprofGetOpName(const void *opInfo, size_t opInfoLen, uint32_t index,
                                      char *opName, size_t opNameLen)
{
    MOCK_FAULT_RETURN_CODE();
    return get_str(opInfo, opInfoLen, index, opName, opNameLen, HAVE_NAME);
}

/* Where the fields that ACLMOCK_OPDESC_SHUFFLED moves are (audit row 14). */
typedef struct field_offsets {
    size_t model_id, thread_id, duration, start, end;
} field_offsets;

static const field_offsets k_standard = {
    offsetof(ProfOpDesc, modelId), offsetof(ProfOpDesc, threadId),
    offsetof(ProfOpDesc, duration), offsetof(ProfOpDesc, start), offsetof(ProfOpDesc, end),
};
static const field_offsets k_shuffled = {
    offsetof(ProfOpDesc, threadId), offsetof(ProfOpDesc, modelId),
    offsetof(ProfOpDesc, end), offsetof(ProfOpDesc, duration), offsetof(ProfOpDesc, start),
};

/* The getters read the layout in force when they are called (a record emitted under the
 * other layout reads wrong, as a record of another CANN version would). */
static const field_offsets *offsets(void)
{
    return mock_opdesc_layout() == ACLMOCK_OPDESC_SHUFFLED ? &k_shuffled : &k_standard;
}

void mock_opdesc_to_wire(const ProfOpDesc *r, ProfOpDesc *wire)
{
    memcpy(wire, r, sizeof *wire);   /* memcpy keeps the zeroed padding */
    const field_offsets *o = offsets();
    unsigned char *w = (unsigned char *)wire;
    memcpy(w + o->model_id, &r->modelId, sizeof r->modelId);
    memcpy(w + o->thread_id, &r->threadId, sizeof r->threadId);
    memcpy(w + o->duration, &r->duration, sizeof r->duration);
    memcpy(w + o->start, &r->start, sizeof r->start);
    memcpy(w + o->end, &r->end, sizeof r->end);
}

/* GetOpStart/End/Duration: 0 on any error (NULL data, CheckData, index). */
static uint64_t get_time(const void *opInfo, size_t opInfoLen, uint32_t index, size_t offset)
{
    uint32_t len = narrow(opInfoLen);
    if (opInfo == NULL || check_data(opInfo, len) != ACL_SUCCESS || !index_ok(index, len))
        return 0;
    return field_u64(opInfo, index, offset);
}

/* Value-returning functions return the injected code converted to their return type. */
MOCK_EXPORT uint64_t aclprofGetOpStart(const void *opInfo, size_t opInfoLen, uint32_t index)
{
    MOCK_FAULT_RETURN((uint64_t)(int64_t)fault_code_);
    return get_time(opInfo, opInfoLen, index, offsets()->start);
}

MOCK_EXPORT uint64_t aclprofGetOpEnd(const void *opInfo, size_t opInfoLen, uint32_t index)
{
    MOCK_FAULT_RETURN((uint64_t)(int64_t)fault_code_);
    return get_time(opInfo, opInfoLen, index, offsets()->end);
}

MOCK_EXPORT uint64_t aclprofGetOpDuration(const void *opInfo, size_t opInfoLen, uint32_t index)
{
    MOCK_FAULT_RETURN((uint64_t)(int64_t)fault_code_);
    return get_time(opInfo, opInfoLen, index, offsets()->duration);
}

/* Errors come back as (size_t)ACL_ERROR_INVALID_PARAM = 100000, not 0 (the header comment
 * of CANN is wrong about this). */
MOCK_EXPORT size_t aclprofGetModelId(const void *opInfo, size_t opInfoLen, uint32_t index)
{
    MOCK_FAULT_RETURN((size_t)(int64_t)fault_code_);
    uint32_t len = narrow(opInfoLen);
    if (opInfo == NULL)
        return (size_t)ACL_ERROR_INVALID_PARAM;
    aclError ret = check_data(opInfo, len);
    if (ret != ACL_SUCCESS)
        return (size_t)ret;
    if (!index_ok(index, len))
        return (size_t)ACL_ERROR_INVALID_PARAM;
    return field_u32(opInfo, index, offsets()->model_id);
}

/* No CheckData in the real one: a corrupt record still yields its flag. */
MOCK_EXPORT aclprofSubscribeOpFlag aclprofGetOpFlag(const void *opInfo, size_t opInfoLen,
                                                    uint32_t index)
{
    MOCK_FAULT_RETURN((aclprofSubscribeOpFlag)fault_code_);
    if (opInfo == NULL)
        return ACL_SUBSCRIBE_NONE;
    if (!index_ok(index, narrow(opInfoLen)))
        return ACL_SUBSCRIBE_OP;   /* 0: what the real function returns for a bad index */
    return (aclprofSubscribeOpFlag)field_u32(opInfo, index, offsetof(ProfOpDesc, flag));
}

/* One process-wide buffer, like CANN's global std::string g_aclprofSubscribeOpAttriValue:
 * the next call (from any thread) overwrites it. Written under g_attr_lock so two writers
 * never interleave; a caller must copy the string before calling again. */
static char g_attr_value[24];

MOCK_EXPORT const char *aclprofGetOpAttriValue(const void *opInfo, size_t opInfoLen,
                                               uint32_t index, aclprofSubscribeOpAttri attri)
{
    MOCK_FAULT_RETURN(NULL);
    if (opInfo == NULL || !index_ok(index, narrow(opInfoLen)))
        return NULL;
    if (attri != ACL_SUBSCRIBE_ATTRI_THREADID)
        return NULL;
    if (field_u32(opInfo, index, offsetof(ProfOpDesc, flag)) != ACL_SUBSCRIBE_OP_THREAD)
        return NULL;
    uint32_t tid = field_u32(opInfo, index, offsets()->thread_id);
    pthread_mutex_lock(&g_attr_lock);
    snprintf(g_attr_value, sizeof g_attr_value, "%" PRIu32, tid);
    pthread_mutex_unlock(&g_attr_lock);
    return g_attr_value;
}
