/* What the helper's C files share: the library's declarations, the module's own API and
 * the few functions one file provides to another.
 *
 * The library's prototypes come from cdefs/ (build_ffi.py passes it as an include dir), the
 * same files cffi's ABI module and the mock are built from: a function pointer type here is
 * `__typeof__(aclprofX) *`, so a prototype change in cdefs/ reaches the helper through the
 * compiler instead of through a hand-kept copy. Nothing is linked: the helper only ever calls
 * through pointers the loader hands it, so naming a prototype adds no undefined symbol.
 *
 * _fast.h (the cdef cffi reads) is included too, so the compiler checks each definition
 * against the declaration Python calls through. */
#ifndef ACLPROF_FAST_INTERNAL_H
#define ACLPROF_FAST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acl_base.h"
#include "acl_prof.h"
#include "aclprof_records.h" /* ProfOpDesc, aclprof_record, aclprof_op_row */
#include "aclprof_unaligned.h" /* ld32, ld64, st32: rows are packed, records unaligned */

#include "_fast.h"

/* Shared between the module's files only, not part of its ABI. */
#define ACLPROF_FAST_HIDDEN __attribute__((visibility("hidden")))

/* _fast_crc.c: builds the table and picks the hardware or table path; called once when the
 * loader binds the op getters (under its lock), so later calls never race to initialise. */
ACLPROF_FAST_HIDDEN void aclprof_crc_init(void);

/* _fast_names.c: fetch rec's type and name once each through the library (the entries are
 * one-shot) and intern them into *type and *name (UINT32_MAX: the library had none, or
 * refused it). Returns 1 when they are the step keypoint's "na" / "keypoint_op", else 0. */
ACLPROF_FAST_HIDDEN int aclprof_names_fetch(aclprof_interner *in, const uint8_t *rec, uint32_t rec_size,
                                            uint32_t *type, uint32_t *name);

/* _fast_ops.c: the calling thread's last aclprof_read_pipe: when its first read() returned
 * (host CLOCK_MONOTONIC ns) and what it got. A read that then coalesces returns up to
 * coalesce_ns later; the records of that first read were all written before this time, a
 * tighter clock bound than the return (issue 25's tap). */
ACLPROF_FAST_HIDDEN extern _Thread_local int64_t aclprof_read_first_ns;
ACLPROF_FAST_HIDDEN extern _Thread_local int64_t aclprof_read_first_bytes;

/* _fast_billtap.c: the reader's hand-off of one read's rows (n packed aclprof_op_row),
 * nothing unless a request was marked. The read's clock note: the newest end of the first
 * note_rows rows, all written before host ns note_at (note_rows 0: of all n, before
 * arrival). */
/* _fast_ops.c: the host's CLOCK_MONOTONIC in ns (the clock Python's time.monotonic reads). */
ACLPROF_FAST_HIDDEN int64_t aclprof_mono_ns(void);

/* Where a field of an op row's record is (the record starts the packed row). */
#define ACLPROF_ROW_AT(field) (offsetof(aclprof_op_row, rec) + offsetof(aclprof_record, field))

ACLPROF_FAST_HIDDEN void aclprof_tap_feed(aclprof_bill_tap *t, int slot, const uint8_t *rows, uint64_t n,
                                          int64_t arrival, uint64_t note_rows, int64_t note_at);

#endif
