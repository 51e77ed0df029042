"""Pipe bytes -> :class:`~aclprof.api.records.OpBatch`: the subscription's record decoder.

One C call per chunk of whole records (:meth:`aclprof.binding.opdecode.NameTable.decode_ops`,
GIL released): it checks every signature, fetches every name and type exactly once
through the library (which frees the library's table entry), interning them, and writes
the numeric fields, device ids and keypoint marks straight into the batch's
:data:`OP_DTYPE` rows; Python only allocates the array and wraps it. Once
per subscription the offsets are checked against the library's own getters (audit row
14); an unknown layout or record size falls back to the getters for every field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aclprof._log import get_logger
from aclprof.api.records import KEYPOINT_NAME, KEYPOINT_TYPE, OP_DTYPE, OpBatch, raw_dtype
from aclprof.binding import lowlevel
from aclprof.binding.errors import InvalidParamError, UnsupportedError
from aclprof.binding.opdecode import OP_ROW_SIZE, NameTable, read_pipe, signature

__all__ = ["Decoder"]

_log = get_logger("aclprof.api.subscription")
# OP_DTYPE is the C decoder's row (both come from cdefs/aclprof_records.h): nothing to check.
_MAX_NAMES = 1 << 20  # interned names per subscription; beyond it names read "?" (counted)


class Decoder:
    """Turns pipe bytes into :class:`OpBatch` objects. Owned by one thread at a time.

    Feed it chunks of any size; it keeps a partial record for the next chunk. It never
    raises on bad bytes: corrupt records are counted and skipped. Should decoding itself
    fail (a bug), the records of that chunk are counted in ``failed`` and the exception
    propagates.
    """

    def __init__(self, record_size: int, *, validate: bool = True, default_device: int = 0,
                 max_records: int = 4096):
        self.record_size = record_size
        self.validate = validate
        self.default_device = default_device
        self._raw = raw_dtype(record_size)
        self.capacity = max_records
        self.buffer = bytearray(record_size * (max_records + 1))
        self.filled = 0
        # the rows the C calls decode into
        self._row_bytes = np.empty(max_records * OP_ROW_SIZE, np.uint8)
        self._rows = self._row_bytes.view(OP_DTYPE)
        self._unread = 0  # bytes read() left for finish() to decode (before the layout check)
        self._decoded = (0, 0)  # (whole records, rows) read() decoded for finish() to wrap
        self.max_end = 0  # the largest record end decoded so far (library units)
        self._table = NameTable(_MAX_NAMES)
        # The C calls' counts (aclprof_decode_counts): corrupt, missing_names, keypoints,
        # max_end (decode_ops), and whole, rows, left (read_ops).
        self._counts = self._table.new_counts()
        self.names: list[str] = []
        #: decode the interned names into :attr:`names` with each batch: off in agent mode,
        #: where the names go to the agent's queue from C and nothing in Python reads them
        #: (a model's thousands of names decoded one by one held the GIL ~1 ms at its first
        #: batch, inside the service's first steps)
        self.names_in_python = True
        self._kp_name = self._kp_type = -1  # interned ids of "keypoint_op" / "na", once seen
        self._sync_names()
        self.records_read = 0
        self.records_decoded = 0
        self.corrupt = 0
        self.failed = 0
        self.names_missing = 0
        self.keypoints = 0
        self.by_getters = 0
        self.layout_mismatch = False
        self._layout_checked = self._raw is None

    def free_space(self) -> memoryview:
        """Where the next read should go (a multiple of the record size, minus leftovers)."""
        return memoryview(self.buffer)[self.filled:self.record_size * self.capacity]

    def commit(self, nbytes: int) -> OpBatch | None:
        """Account ``nbytes`` just read into :meth:`free_space`; decode whole records."""
        self.filled += nbytes
        whole = self.filled // self.record_size
        if whole == 0:
            return None
        used = whole * self.record_size
        try:
            batch = self._decode(whole)
        except BaseException:
            self.failed += whole  # counted, never silently lost
            raise
        finally:
            rest = self.filled - used
            if rest:
                self.buffer[:rest] = self.buffer[used:self.filled]
            self.filled = rest
        return batch

    def feed(self, data: bytes) -> list[OpBatch]:
        """Decode ``data`` (any length); for tests and tools that read pipes themselves."""
        batches = []
        view = memoryview(data)
        while view:
            space = self.free_space()
            n = min(len(space), len(view))
            space[:n] = view[:n]
            view = view[n:]
            batch = self.commit(n)
            if batch is not None and len(batch):
                batches.append(batch)
        return batches

    def read(self, fd: int, wake_fd: int, coalesce_ns: int) -> tuple[int, int]:
        """Wait for and read the pipe ``fd`` into :meth:`free_space` with the GIL released
        (see :func:`aclprof.binding.opdecode.read_pipe`); once the layout is checked the
        same C call also decodes the whole records. :meth:`finish` then wraps them (or
        decodes them, before the check). Returns ``(bytes read, READ_* flags)``.

        Raises:
            OSError: the poll or the read failed.
        """
        room = self.record_size * self.capacity
        if self._layout_checked and self._raw is not None:
            counts = self._counts
            counts.corrupt = counts.missing_names = counts.keypoints = 0
            n, flags = self._table.read_ops(fd, wake_fd, self.buffer, self.filled, room,
                                            self.record_size, coalesce_ns, self.validate,
                                            self.default_device, self._rows, counts)
            self.filled = counts.left
            self._decoded = (counts.whole, counts.rows)
        else:
            n, flags = read_pipe(fd, wake_fd, self.buffer, self.filled, room, coalesce_ns)
            self._unread = n
        return n, flags

    @property
    def table(self) -> NameTable:
        """The C name table (the ids of every batch's op_name/op_type)."""
        return self._table

    @property
    def native_ready(self) -> bool:
        """Whether records can be decoded wholly in C (the layout is checked and known)."""
        return self._layout_checked and self._raw is not None

    def run_sink(self, sink: Any, fd: int, wake_fd: int, coalesce_ns: int, lag_factor: int) -> int:
        """Agent mode (issue 21): read, check, decode and name every record until EOF or
        a wake-up with the pipe empty, appending the rows to ``sink``
        (:class:`aclprof.binding.agentpath.QueueSink`), all in one C call without the GIL;
        the counts are the sink's slot's. Returns the READ_* flags; a partial record is
        left in ``filled``. Only once :attr:`native_ready`.

        Raises:
            OSError: the poll or the read failed.
        """
        if not self.native_ready:
            raise RuntimeError("Decoder.run_sink: the record layout is not checked yet")
        room = self.record_size * self.capacity
        flags = int(sink.run(self._table, fd, wake_fd, self.buffer, self.filled, room, self.record_size,
                             coalesce_ns, self.validate, self.default_device, lag_factor,
                             self._rows, self._counts))
        self.filled = int(self._counts.left)
        return flags

    def finish(self) -> OpBatch | None:
        """The batch of what the last :meth:`read` brought, None if not one whole record.

        Never raises on bad bytes (counted); should wrapping or decoding itself fail (a
        bug), that chunk's records are counted in ``failed`` and the exception propagates.
        """
        if self._unread:
            n, self._unread = self._unread, 0
            return self.commit(n)
        whole, rows = self._decoded
        self._decoded = (0, 0)
        if whole == 0:
            return None
        self.records_read += whole
        try:
            return self._batch(rows)
        except BaseException:
            self.failed += whole  # counted, never silently lost
            raise

    def _decode(self, count: int) -> OpBatch:
        self.records_read += count
        if not self._layout_checked and self._raw is not None:
            self._check_layout(count)
        if self._raw is None:
            return self._decode_with_getters(count)
        # One C call, GIL released, whatever the chunk size: signatures, names, every
        # numeric field, device ids and keypoint marks (issue 12: the reader thread must not
        # hold the GIL for per-record or per-field work while the inference thread waits).
        counts = self._counts
        counts.corrupt = counts.missing_names = counts.keypoints = 0
        rows = self._table.decode_ops(self.buffer, count, self.record_size, self.validate,
                                      self.default_device, self._rows, counts)
        return self._batch(rows)

    def _batch(self, rows: int) -> OpBatch:
        """Wrap the first ``rows`` decoded rows and take the C call's counts: O(1) Python,
        one copy of ``rows`` x 57 bytes (the scratch rows are reused; a batch of 200
        records keeps 11 KB, not the whole scratch). The copy is of the bytes: copying the
        packed structured rows field by field takes ~25x longer (~185 us for 4096 rows),
        all of it with the GIL held."""
        if self.names_in_python:
            self._sync_names()
        counts = self._counts
        self.corrupt += counts.corrupt
        self.names_missing += counts.missing_names
        self.keypoints += counts.keypoints
        self.max_end = counts.max_end
        self.records_decoded += rows
        return OpBatch(self._row_bytes[:rows * OP_ROW_SIZE].copy().view(OP_DTYPE), self.names)

    def _mark_keypoints(self, out: np.ndarray) -> None:
        """Sets the ``keypoint`` column: name AND type are CANN's keypoint pair."""
        if self._kp_name < 0 or self._kp_type < 0:
            out["keypoint"] = False
            return
        np.logical_and(out["op_name"] == self._kp_name, out["op_type"] == self._kp_type,
                       out=out["keypoint"])
        self.keypoints += int(np.count_nonzero(out["keypoint"]))

    def _check_layout(self, count: int) -> None:
        """Audit row 14: ``ProfOpDesc`` is internal to CANN and the layout is chosen by size
        alone, so a same-size change would mis-decode silently (the CRC covers the bytes,
        not their meaning). Once per subscription, before anything consumes the records'
        names (the name getters are one-shot), compare the first valid record's offsets
        with the library's own getters (the time and model-id getters can be called again).
        """
        size = self.record_size
        raw = np.frombuffer(self.buffer, dtype=self._raw, count=count)
        for i in range(count):
            rec = bytes(self.buffer[i * size:(i + 1) * size])
            if signature(rec, size) != raw["signature"][i]:
                continue  # corrupt: the getters would reject it; try the next one
            self._layout_checked = True
            ours = {"start": int(raw["start"][i]), "end": int(raw["end"][i]),
                    "duration": int(raw["duration"][i]), "model_id": int(raw["modelId"][i])}
            theirs = {"start": lowlevel.get_op_start(rec, 0), "end": lowlevel.get_op_end(rec, 0),
                      "duration": lowlevel.get_op_duration(rec, 0),
                      "model_id": lowlevel.get_model_id(rec, 0)}
            differ = sorted(k for k in ours if ours[k] != theirs[k])
            if differ:
                self.layout_mismatch = True
                self._raw = None
                _log.warning("op record layout differs from the library's getters; decoding "
                             "through the getters (slower) for the rest of this subscription",
                             record_size=size, fields=differ,
                             by_offset={k: ours[k] for k in differ},
                             by_getter={k: theirs[k] for k in differ})
            return
        # Every record of this batch was corrupt: check the next batch.

    def _decode_with_getters(self, count: int) -> OpBatch:
        """Unknown record size: every field through the library's getters (slow, exact)."""
        size = self.record_size
        rows = []
        for i in range(count):
            rec = bytes(self.buffer[i * size:(i + 1) * size])
            try:
                type_name = lowlevel.get_op_type(rec, 0, lowlevel.get_op_type_len(rec, 0))
                op_name = lowlevel.get_op_name(rec, 0, lowlevel.get_op_name_len(rec, 0))
            except InvalidParamError:
                self.corrupt += 1
                continue
            start, end, duration = lowlevel.get_op_times(rec, 0)
            rows.append({"model_id": lowlevel.get_model_id(rec, 0), "op_name": self._intern_py(op_name),
                         "op_type": self._intern_py(type_name), "flag": self._flag(rec),
                         "device_id": self.default_device, "start": start, "end": end,
                         "duration": duration})
        self.records_decoded += len(rows)
        self.by_getters += len(rows)
        # By name: the fields the getters do not give (thread_id, execution_time, and any
        # field added to the row later) stay 0; keypoint is set below.
        out = np.zeros(len(rows), dtype=OP_DTYPE)
        for name in rows[0] if rows else ():
            out[name] = [r[name] for r in rows]
        if len(out):  # the reader's lag clock reads it, as after the C path's batches
            self.max_end = max(self.max_end, int(out["end"].max()))
        self._mark_keypoints(out)
        return OpBatch(out, self.names)

    @staticmethod
    def _flag(rec: bytes) -> int:
        try:
            return lowlevel.get_op_flag(rec, 0)
        except UnsupportedError:  # older CANN: no aclprofGetOpFlag
            return 0

    def _intern_py(self, data: bytes) -> int:
        """The id of a name the getters gave, interned in the C table as the C path's are:
        one lookup, not a scan of :attr:`names`; ``names`` stays aligned with the table (an
        agent's sink copies the names from it); past ``_MAX_NAMES`` the placeholder "?"
        (id 0), counted in :attr:`names_overflowed`. (Before, a full table still grew
        ``names`` without bound, out of step with the table.)"""
        # backslashreplace output has no lone surrogate: encoding it back cannot fail
        name_id = self._table.add(data.decode("utf-8", "backslashreplace").encode("utf-8"))
        self._sync_names()
        return name_id

    def _append_name(self, text: str) -> None:
        if text == KEYPOINT_NAME:
            self._kp_name = len(self.names)
        elif text == KEYPOINT_TYPE:
            self._kp_type = len(self.names)
        self.names.append(text)

    def _sync_names(self) -> None:
        """Copy the names the C table interned since the last call (ids stay aligned)."""
        if len(self._table) > len(self.names):
            for data in self._table.entries(len(self.names)):
                self._append_name(data.decode("utf-8", "backslashreplace"))

    @property
    def names_overflowed(self) -> int:
        return self._table.overflows

    @property
    def names_cut(self) -> int:
        """Names and types cut to ``NAME_LIMIT`` bytes (``aclprof.binding.opdecode``)."""
        return self._table.cut
