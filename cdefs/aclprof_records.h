/* The op record layouts, each defined once (issue 18). Every C file that reads or writes
 * one includes this header and uses offsetof/sizeof; the Python dtypes are built from it:
 *
 *   ProfOpDesc       the record the library writes into the subscription pipe. The mock
 *                    writes it (mock_acl/src), _fast_ops.c decodes it, and
 *                    aclprof.binding.layout builds the raw numpy dtypes from it.
 *   aclprof_record   the ten fields of one decoded op: the wire record of a BATCH frame
 *                    (daemon/PROTOCOL.md; little-endian, 56 bytes in protocol 1: a change
 *                    here is a change of the protocol) and the first 56 bytes of an op row.
 *                    _fast_agent.c writes it, aclprof.protocol._jsonl reads it (and gives
 *                    aclprof.protocol.wire the layout it builds RECORD_DTYPE from).
 *   aclprof_op_row   one row of aclprof.api.records.OP_DTYPE (native-endian, packed, 57
 *                    bytes): a record and the keypoint byte. _fast_ops.c writes it,
 *                    _fast_agent.c reads it, aclprof.binding.layout builds OP_DTYPE from it.
 *
 * cffi's cdef parser reads this file too (cdefs/build_ffi.py, for aclprof.binding._fast):
 * it drops the preprocessor lines but `#define NAME <integer>`, and declares the structs
 * marked ACLPROF_PACKED packed (cffi has no __attribute__). Keep the declarations plain:
 * one `typedef struct name { ... } name;` each, one field per line, fixed-width types. */
#ifndef ACLPROF_RECORDS_H
#define ACLPROF_RECORDS_H

#include <stddef.h> /* offsetof, for the files that use these layouts */
#include <stdint.h>

#define ACLPROF_PACKED __attribute__((packed))

/* The 80-byte pipe record (72 bytes in older CANN: the same up to devId, which it lacks),
 * as CANN's analyze/inc/data_struct.h lays it out. */
typedef struct ProfOpDesc {
    uint32_t signature;
    uint32_t modelId;
    uint32_t flag;
    uint32_t threadId;
    uint64_t opIndex;
    uint64_t duration;
    uint64_t start;
    uint64_t end;
    uint64_t executionTime;
    uint64_t cubeFops;
    uint64_t vectorFops;
    uint32_t devId;
} ProfOpDesc;

/* One op. op_name/op_type are ids: into the subscription's name table in an op row, into
 * the sending connection's (NAMES frames) on the wire. execution_time is carried and
 * stored but shown nowhere (daemon/PROTOCOL.md "BATCH"). */
typedef struct aclprof_record {
    uint32_t model_id;
    uint32_t op_name;
    uint32_t op_type;
    uint32_t flag;
    uint32_t thread_id;
    uint32_t device_id;
    uint64_t start;
    uint64_t end;
    uint64_t duration;
    uint64_t execution_time;
} aclprof_record;

/* A step keypoint record: this bit of a wire record's flag (the library's flags are small).
 * An op row says it with its keypoint byte instead (the public OP_DTYPE column). */
#define ACLPROF_FLAG_KEYPOINT 2147483648

typedef struct aclprof_op_row {
    aclprof_record rec;
    _Bool keypoint;
} ACLPROF_PACKED aclprof_op_row;

#endif
