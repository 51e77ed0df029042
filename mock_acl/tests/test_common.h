/* Minimal test harness for the mock's C tests (header-only, one test binary per file).
 *
 * Usage:
 *     #include "test_common.h"
 *     TEST(start_twice) { CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS); ... }
 *     int main(void) { RUN(start_twice); ...; return test_summary(); }
 *
 * Each RUN() calls aclmockReset() first, so every test starts from a freshly loaded
 * library. A failed CHECK_* prints file:line and both values and marks the current test
 * failed, but the test goes on (so one run shows every broken check). REQUIRE_* returns
 * from the test function instead, for checks whose failure would make the rest crash.
 * test_summary() prints "N passed, N failed" and returns non-zero if anything failed.
 */
#ifndef ACLMOCK_TEST_COMMON_H
#define ACLMOCK_TEST_COMMON_H

#include <ftw.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acl_base.h"
#include "acl_prof.h"
#include "acl_runtime.h"
#include "aclmock.h"

static int tc_passed;
static int tc_failed;
static int tc_current_failed;      /* checks failed in the running test */
static const char *tc_current = "";

#define TC_FAIL_HEADER() \
    fprintf(stderr, "%s:%d: [%s] ", __FILE__, __LINE__, tc_current)

/* Integers of any width/signedness are compared as intmax_t when both fit, which covers
 * aclError, size_t lengths and uint64_t up to INT64_MAX; use CHECK_EQ_U64 beyond that. */
#define CHECK_EQ(actual, expected)                                                      \
    do {                                                                                \
        intmax_t tc_a_ = (intmax_t)(actual), tc_e_ = (intmax_t)(expected);              \
        if (tc_a_ != tc_e_) {                                                           \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "CHECK_EQ(%s, %s): got %jd, expected %jd\n", #actual,       \
                    #expected, tc_a_, tc_e_);                                           \
            tc_current_failed++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_NE(actual, unexpected)                                                    \
    do {                                                                                \
        intmax_t tc_a_ = (intmax_t)(actual), tc_e_ = (intmax_t)(unexpected);            \
        if (tc_a_ == tc_e_) {                                                           \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "CHECK_NE(%s, %s): both are %jd\n", #actual, #unexpected,   \
                    tc_a_);                                                             \
            tc_current_failed++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_EQ_U64(actual, expected)                                                  \
    do {                                                                                \
        uint64_t tc_a_ = (uint64_t)(actual), tc_e_ = (uint64_t)(expected);              \
        if (tc_a_ != tc_e_) {                                                           \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "CHECK_EQ_U64(%s, %s): got %#" PRIx64 ", expected %#" PRIx64 \
                    "\n", #actual, #expected, tc_a_, tc_e_);                            \
            tc_current_failed++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "CHECK(%s) failed\n", #cond);                               \
            tc_current_failed++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_NULL(p) CHECK((p) == NULL)
#define CHECK_NOT_NULL(p) CHECK((p) != NULL)

#define CHECK_STR_EQ(actual, expected)                                                  \
    do {                                                                                \
        const char *tc_a_ = (actual), *tc_e_ = (expected);                              \
        if (tc_a_ == NULL || tc_e_ == NULL || strcmp(tc_a_, tc_e_) != 0) {              \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "CHECK_STR_EQ(%s, %s): got \"%s\", expected \"%s\"\n",      \
                    #actual, #expected, tc_a_ ? tc_a_ : "(null)",                       \
                    tc_e_ ? tc_e_ : "(null)");                                          \
            tc_current_failed++;                                                        \
        }                                                                               \
    } while (0)

/* Like CHECK but returns from the (void) test function when it fails. */
#define REQUIRE(cond)                                                                   \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            TC_FAIL_HEADER();                                                           \
            fprintf(stderr, "REQUIRE(%s) failed, test aborted\n", #cond);               \
            tc_current_failed++;                                                        \
            return;                                                                     \
        }                                                                               \
    } while (0)

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                                       \
    do {                                                                                \
        tc_current = #name;                                                             \
        tc_current_failed = 0;                                                          \
        aclmockReset();                                                                 \
        test_##name();                                                                  \
        if (tc_current_failed) {                                                        \
            tc_failed++;                                                                \
            fprintf(stderr, "FAIL %s\n", #name);                                        \
        } else {                                                                        \
            tc_passed++;                                                                \
        }                                                                               \
    } while (0)

/* ---- file helpers (static inline: a test file need not use them all) ---------------- */

/* Creates a fresh directory under $TMPDIR (or /tmp); buf receives its path. */
static inline bool tc_make_tmpdir(char *buf, size_t cap)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, cap, "%s/aclmock_test_XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(buf) != NULL;
}

static inline int tc_rm_entry(const char *path, const struct stat *st, int flag,
                              struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* rm -rf (does not follow symlinks). */
static inline void tc_rm_rf(const char *path)
{
    nftw(path, tc_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file as a NUL-terminated malloc'd string (free it), NULL if unreadable. */
static inline char *tc_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* Number of lines in a string. */
static inline size_t tc_count_lines(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* The unsigned integer after "key": in a JSON text (first occurrence at or after `from`),
 * or `missing` when absent or not a number. */
static inline uint64_t tc_json_u64(const char *from, const char *key, uint64_t missing)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = from ? strstr(from, pat) : NULL;
    if (!p)
        return missing;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return missing;
    return strtoull(p, NULL, 10);
}

static inline int tc_summary(const char *file)
{
    aclmockReset();   /* release whatever the last test left, so leak checkers stay quiet */
    printf("%s: %d passed, %d failed\n", file, tc_passed, tc_failed);
    return tc_failed ? 1 : 0;
}
#define test_summary() tc_summary(__FILE__)

/* aclmdlExecute with two empty datasets, created and destroyed around the call: CANN rejects
 * NULL datasets with 100000, and the mock's models have no inputs or outputs. */
static inline aclError execute_empty(uint32_t model)
{
    aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
    aclError ret = (in && out) ? aclmdlExecute(model, in, out) : ACL_ERROR_BAD_ALLOC;
    if (in)
        aclmdlDestroyDataset(in);
    if (out)
        aclmdlDestroyDataset(out);
    return ret;
}

#endif
