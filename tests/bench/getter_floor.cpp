// A cost model of CANN's one-shot op getters, for tests/bench/bench_getter_floor.py.
//
// Written from the facts of CANN's implementation (hicann/runtime @ 681ef7610,
// src/dfx/msprof/collector/dvvp/: analyze/src/op_desc_parser.cpp and common/utils/utils.cpp;
// fidelity-audit-3.md compiled and ran both), not from its text: every Get re-checks the
// signature of every record of the buffer it is given (CheckData) with a 256-entry table
// CRC-32C that takes one byte per step; then, under one mutex, it finds the record's opIndex
// in an ordered map (std::map<uint64_t, std::string>, one per kind), copies the string and
// erases the entry (one-shot). The mock (mock_acl/src/opdesc.c) keeps the rules but is
// cheaper: a CRC that takes 8 bytes per step and a hash table. A reader must make two such
// calls per record (type and name), so this is the floor a record costs before any of our
// code runs; the bench times both implementations through the same loop.
//
// Built by the bench at run time (c++ -O2 -shared -I cdefs); not part of the package.
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#define _Bool bool  // the header is C11 (its op row has a _Bool); only ProfOpDesc is used here
#include "aclprof_records.h"  // ProfOpDesc (cdefs/: the layout the mock writes)
#undef _Bool

namespace {

constexpr uint32_t kRecord = sizeof(ProfOpDesc);
constexpr size_t kOpIndexAt = offsetof(ProfOpDesc, opIndex);
static_assert(kRecord == 80, "the 80-byte record");
constexpr int kInvalidParam = 100000;

uint32_t g_table[256];

struct Init {
    Init()
    {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            g_table[i] = c;
        }
    }
} g_init;

// CRC-32C of [p, p + n), init ~0, no final XOR, one byte a step (CANN's signature).
uint32_t signature(const uint8_t *p, uint64_t n)
{
    uint32_t s = ~0u;
    while (n--)
        s = g_table[(s ^ *p++) & 0xffu] ^ (s >> 8);
    return s;
}

uint64_t op_index(const uint8_t *rec)
{
    uint64_t v;
    std::memcpy(&v, rec + kOpIndexAt, sizeof v);
    return v;
}

std::mutex g_mu;
std::map<uint64_t, std::string> g_names, g_types;

bool check_data(const void *data, uint32_t len)
{
    if (len % kRecord != 0)
        return false;
    auto p = static_cast<const uint8_t *>(data);
    for (uint32_t i = 0; i < len / kRecord; i++) {
        uint32_t want;
        std::memcpy(&want, p + i * kRecord, sizeof want);
        if (signature(p + i * kRecord + 4, kRecord - 4) != want)
            return false;
    }
    return true;
}

// aclprofGetOp(Type|Name)'s arguments; CANN narrows both lengths to uint32_t
int get_string(std::map<uint64_t, std::string> &table, const void *data, size_t data_len, uint32_t index,
               char *out, size_t out_size)
{
    const uint32_t len = static_cast<uint32_t>(data_len), out_len = static_cast<uint32_t>(out_size);
    if (data == nullptr || out == nullptr || out_len == 0 || !check_data(data, len) ||
        (uint64_t)index >= len / kRecord)
        return kInvalidParam;
    const uint64_t key = op_index(static_cast<const uint8_t *>(data) + (size_t)index * kRecord);
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = table.find(key);
    if (it == table.end() || it->second.size() > out_len)
        return kInvalidParam;
    std::memcpy(out, it->second.data(), it->second.size());
    out[out_len - 1] = '\0';
    table.erase(it);
    return 0;
}

int model_get_type(const void *data, size_t len, uint32_t index, char *out, size_t out_len)
{
    return get_string(g_types, data, len, index, out, out_len);
}

int model_get_name(const void *data, size_t len, uint32_t index, char *out, size_t out_len)
{
    return get_string(g_names, data, len, index, out, out_len);
}

using getter = int (*)(const void *, size_t, uint32_t, char *, size_t);

// A getter that does nothing: the drain loop's own cost (the bench subtracts it).
int null_getter(const void *, size_t, uint32_t, char *, size_t) { return 0; }

int64_t thread_ns()
{
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

}  // namespace

extern "C" {

// The model's getters, with aclprofGetOpType's and aclprofGetOpName's prototype (cdefs/acl_prof.h).
uintptr_t gf_model_type(void) { return reinterpret_cast<uintptr_t>(&model_get_type); }
uintptr_t gf_model_name(void) { return reinterpret_cast<uintptr_t>(&model_get_name); }

// Fetch every record's type then name through type_fn / name_fn, one record a call (a
// one-record slice, index 0), into a zeroed buffer of buf_len bytes, as the reader's C loop
// does (aclprof/binding/_fast_names.c: one Get per string); each string is kept in its slot
// (2 * slot_len bytes a record: type, name; cut to slot_len - 1) and the buffer zeroed again.
// Returns this thread's CPU ns for the whole loop; *failed counts the calls that did not
// return 0.
int64_t gf_drain(uintptr_t type_fn, uintptr_t name_fn, const uint8_t *recs, uint32_t n, uint32_t buf_len,
                 char *slots, uint32_t slot_len, uint64_t *failed)
{
    auto get_type = reinterpret_cast<getter>(type_fn);
    auto get_name = reinterpret_cast<getter>(name_fn);
    std::vector<char> buf(buf_len + 1, 0);
    uint64_t bad = 0;
    const int64_t t0 = thread_ns();
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + (size_t)i * kRecord;
        char *slot = slots + (size_t)i * 2 * slot_len;
        for (int k = 0; k < 2; k++) {
            bad += (k ? get_name : get_type)(rec, kRecord, 0, buf.data(), buf_len) != 0;
            const size_t got = strnlen(buf.data(), buf_len);
            const size_t keep = got < slot_len ? got : slot_len - 1;
            std::memcpy(slot + k * slot_len, buf.data(), keep);
            slot[k * slot_len + keep] = '\0';
            std::memset(buf.data(), 0, got < buf_len ? got + 1 : buf_len);
        }
    }
    const int64_t spent = thread_ns() - t0;
    *failed = bad;
    return spent;
}

uintptr_t gf_null(void) { return reinterpret_cast<uintptr_t>(&null_getter); }

// The slots' strings into the model's tables, keyed by each record's opIndex (the library's
// writer does this in CANN, on its own thread: not part of a reader's cost).
void gf_register(const uint8_t *recs, const char *slots, uint32_t n, uint32_t slot_len)
{
    std::lock_guard<std::mutex> lk(g_mu);
    for (uint32_t i = 0; i < n; i++) {
        const char *slot = slots + (size_t)i * 2 * slot_len;
        const uint64_t key = op_index(recs + (size_t)i * kRecord);
        g_types[key] = std::string(slot);
        g_names[key] = std::string(slot + slot_len);
    }
}

// This thread's CPU ns for two signature checks per record (the CRC share of a record's two
// Gets): two passes over the records, a compiler barrier between, so neither is elided.
int64_t gf_signatures(const uint8_t *recs, uint32_t n, uint32_t *bad)
{
    uint32_t b = 0;
    const int64_t t0 = thread_ns();
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < n; i++)
            b += !check_data(recs + (size_t)i * kRecord, kRecord);
        __asm__ __volatile__("" ::: "memory");
    }
    const int64_t spent = thread_ns() - t0;
    *bad = b;
    return spent;
}

// Entries left in the model's tables (0 after a drain of everything registered).
uint64_t gf_model_left(void)
{
    std::lock_guard<std::mutex> lk(g_mu);
    return g_names.size() + g_types.size();
}

}  // extern "C"
