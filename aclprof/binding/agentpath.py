"""The agent's record conversion in the compiled helper (``_fast_agent.c``).

:func:`convert` turns one batch of library op records (``OP_DTYPE``) into wire records
(``RECORD_DTYPE``) written in place into the agent's frame buffer: every field copied, the
name ids mapped to the connection's, the keypoint byte folded into ``flag``. It is one C
call that runs without the GIL, where numpy would take four operations holding it
(a strided copy, two ``take``s, a masked ``|=``): the service's step thread, which needs
the GIL to return from ``aclmdlExecute``, does not wait behind the agent's sender for
that work.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from aclprof.binding.built import import_built
from aclprof.binding.layout import FLAG_KEYPOINT, OP_ROW_DTYPE, RECORD_SIZE

__all__ = ["convert", "WIRE_RECORD_SIZE", "FLAG_KEYPOINT", "AgentQueue", "QueueSink", "SlotNames",
           "FRAMED", "NEED_WATCH", "NEED_NAMES", "DEVICE", "Pump", "PumpResult", "PUMP_PYTHON", "PUMP_INCOMING",
           "PUMP_TIMEOUT", "PUMP_ERROR", "window_end"]

_fast: Any = import_built("_fast")
_ffi, _lib = _fast.ffi, _fast.lib

#: bytes of one wire record written (``aclprof_record``, cdefs/aclprof_records.h)
WIRE_RECORD_SIZE: int = RECORD_SIZE
#: what _fast_agent.c reads of an op row: each field's offset (``aclprof_op_row``)
_ROW_OFFSETS = {name: field[1] for name, field in (OP_ROW_DTYPE.fields or {}).items()}
_U32 = np.dtype(np.uint32)
_checked: set[np.dtype] = set()  # dtypes whose layout was checked (the check costs ~3 us)


def _check_op_layout(dtype: np.dtype) -> None:
    """The C code reads op rows at the offsets of ``aclprof_op_row``: refuse any other layout
    (a dtype with more fields after them, or wider rows, is fine)."""
    want = _ROW_OFFSETS
    fields: dict[str, Any] = dict(dtype.fields or {})
    got = {name: fields[name][1] for name in want if name in fields}
    if got != want or not all(fields[n][0].isnative for n in want):
        raise TypeError(f"aclprof.binding.agentpath.convert: op records of dtype {dtype} do not "
                        "have the layout _fast_agent.c reads (aclprof.api.records.OP_DTYPE)")


def convert(out: np.ndarray, at: int, data: np.ndarray, mapping: np.ndarray | None) -> int:
    """Write ``len(data)`` wire records at byte ``at`` of ``out`` (a uint8 array with room
    for them). ``mapping[i]`` is the connection id of the subscription's name id ``i``.

    Returns -1 when done; otherwise the largest name id of the batch, which ``mapping``
    does not cover yet (nothing usable was written: extend the mapping and call again).
    """
    n = len(data)
    if n == 0:
        return -1
    if at < 0 or at + n * WIRE_RECORD_SIZE > len(out) or out.dtype != np.uint8:
        raise ValueError(f"aclprof.binding.agentpath.convert: no room for {n} records at {at} "
                         f"in a buffer of {len(out)} bytes")
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    if data.dtype not in _checked:
        _check_op_layout(data.dtype)
        _checked.add(data.dtype)
    if mapping is None or len(mapping) == 0:
        map_ptr, map_len = _ffi.NULL, 0
    else:
        if mapping.dtype != _U32 or not mapping.flags.c_contiguous:
            raise TypeError("aclprof.binding.agentpath.convert: the mapping must be a contiguous "
                            "uint32 array")
        map_ptr, map_len = _ffi.from_buffer("uint32_t[]", mapping), len(mapping)
    dst = _ffi.from_buffer("uint8_t[]", out, require_writable=True)
    src = _ffi.from_buffer("uint8_t[]", data)
    return int(_lib.aclprof_agent_convert(dst + at, src, n, data.dtype.itemsize, map_ptr, map_len))


_ROW = OP_ROW_DTYPE.itemsize
#: AgentQueue.frame's codes (``_fast.h`` ACLPROF_AQ_*)
FRAMED, NEED_WATCH, NEED_NAMES, DEVICE = (_lib.ACLPROF_AQ_FRAMED, _lib.ACLPROF_AQ_NEED_WATCH,
                                         _lib.ACLPROF_AQ_NEED_NAMES, _lib.ACLPROF_AQ_DEVICE)
#: Pump.run's own codes (``_fast.h`` ACLPROF_PUMP_*); it also returns the three stops above
PUMP_PYTHON, PUMP_INCOMING, PUMP_TIMEOUT, PUMP_ERROR = (_lib.ACLPROF_PUMP_PYTHON, _lib.ACLPROF_PUMP_INCOMING,
                                                      _lib.ACLPROF_PUMP_TIMEOUT, _lib.ACLPROF_PUMP_ERROR)
_NO_LIMIT = (1 << 64) - 1


class AgentQueue:
    """The agent's bounded record queue in C (``_fast_aqueue.c``, issue 21): subscription
    readers in agent mode append decoded rows to it without the GIL and without Python per
    batch (:class:`QueueSink`); the sender takes them with one call per wake-up.

    ``bound`` rows at most: past it the oldest are dropped and counted. ``wake_fd`` is
    written once when the sender sleeps (:meth:`arm`) and enough rows gathered."""

    def __init__(self, bound: int, wake_fd: int):
        if not 1 <= int(bound) <= 1 << 32:
            raise ValueError(f"AgentQueue: bound must be 1 to 2**32 records, got {bound!r}")
        q = _lib.aclprof_aq_new(int(bound), int(wake_fd))
        if q == _ffi.NULL:
            raise MemoryError(f"AgentQueue: could not allocate a queue of {bound} records")
        self._q = _ffi.gc(q, _lib.aclprof_aq_free)
        self._totals = _ffi.new("aclprof_aq_totals *")
        self._head = _ffi.new("uint64_t *")
        self._res = _ffi.new("aclprof_aq_frame_result *")
        self._rows = np.empty(0, np.uint8)
        self._slots = np.empty(0, np.uint32)
        self._tap: Any = None

    def set_wake_fd(self, fd: int) -> None:
        _lib.aclprof_aq_set_wake_fd(self._q, fd)

    def set_tap(self, tap: Any) -> None:
        """The request-bill tap (:class:`aclprof.binding.billtap.BillTap`, None: none) the
        queue's readers feed; kept referenced here for as long as the readers may feed it."""
        _lib.aclprof_aq_set_tap(self._q, _ffi.NULL if tap is None else tap.cdata)
        self._tap = tap

    def add_slot(self) -> int:
        """A new slot id (one per watched subscription)."""
        slot = int(_lib.aclprof_aq_add_slot(self._q))
        if slot < 0:
            raise MemoryError("AgentQueue.add_slot: out of memory or 65535 slots")
        return slot

    def push(self, slot: int, rows: np.ndarray, table: Any = None) -> None:
        """Append OP_DTYPE ``rows`` (decoded in Python) under ``slot``; ``table`` (the
        subscription's :class:`~aclprof.binding.opdecode.NameTable`, on its reader
        thread) has the names their ids index."""
        if len(rows) == 0:
            return
        if rows.dtype.itemsize != _ROW or not rows.flags.c_contiguous:
            _check_op_layout(rows.dtype)
            rows = np.ascontiguousarray(rows)
        if rows.dtype not in _checked:
            _check_op_layout(rows.dtype)
            _checked.add(rows.dtype)
        interner = _ffi.NULL if table is None else table._table
        if _lib.aclprof_aq_push(self._q, slot, interner, _ffi.from_buffer("uint8_t[]", rows), len(rows)) != 0:
            raise ValueError(f"AgentQueue.push: no slot {slot}")

    def mark(self) -> int:
        """A control item is queued now: the queue's tail (its place among the records),
        and no framing call passes it until :meth:`set_barrier` moves the barrier on."""
        return int(_lib.aclprof_aq_mark(self._q))

    def set_barrier(self, at: int | None) -> None:
        """Rows from sequence ``at`` on wait for Python (the oldest control item not yet
        handled); None: none waits."""
        _lib.aclprof_aq_set_barrier(self._q, _NO_LIMIT if at is None else max(0, at))

    def tail(self) -> int:
        """The sequence number the next appended row gets."""
        _lib.aclprof_aq_totals_get(self._q, self._totals)
        return int(self._totals.tail)

    def totals(self) -> tuple[int, int, int, int]:
        """``(records_in, dropped, held, head)`` as one snapshot."""
        t = self._totals
        _lib.aclprof_aq_totals_get(self._q, t)
        return int(t.records_in), int(t.dropped), int(t.tail - t.head), int(t.head)

    def take(self, max_rows: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Up to ``max_rows`` rows (those before sequence ``limit``): ``(rows as packed
        op rows (uint8), their slots, the new head)``. The arrays are reused by the next
        call: use them before."""
        need = max_rows * _ROW
        if len(self._rows) < need:
            self._rows = np.empty(need, np.uint8)
            self._slots = np.empty(max_rows, np.uint32)
        n = int(_lib.aclprof_aq_take(
            self._q, max_rows, _NO_LIMIT if limit is None else max(0, limit),
            _ffi.from_buffer("uint8_t[]", self._rows, require_writable=True),
            _ffi.from_buffer("uint32_t[]", self._slots, require_writable=True), self._head))
        return self._rows[:n * _ROW], self._slots[:n], int(self._head[0])

    def set_slot(self, slot: int, announced_gen: int, device: int, learn: bool) -> None:
        """The sender's view of ``slot`` (see ``aclprof_aq_frame``)."""
        if _lib.aclprof_aq_set_slot(self._q, slot, announced_gen, device, int(learn)) != 0:
            raise ValueError(f"AgentQueue.set_slot: no slot {slot}")

    def set_map(self, slot: int, gen: int, mapping: np.ndarray) -> None:
        """``slot``'s name map (uint32: the slot's id -> the connection's) for ``gen``."""
        if mapping.dtype != _U32 or not mapping.flags.c_contiguous:
            raise TypeError("AgentQueue.set_map: the mapping must be a contiguous uint32 array")
        ptr = _ffi.from_buffer("uint32_t[]", mapping) if len(mapping) else _ffi.NULL
        if _lib.aclprof_aq_set_map(self._q, slot, gen, ptr, len(mapping)) != 0:
            raise ValueError(f"AgentQueue.set_map: no slot {slot} (or out of memory)")

    def frame(self, gen: int, limit: int | None, max_rows: int, max_devices: int, out: np.ndarray,
              at: int) -> tuple[int, int, int, int, int]:
        """Write up to ``max_rows`` held rows (before ``limit``) as wire records at byte
        ``at`` of ``out``, in one C call without the GIL (``aclprof_aq_frame``).
        Returns ``(code, records written, head, slot, value)``: code FRAMED, or the
        NEED_WATCH / NEED_NAMES / DEVICE stop of ``slot`` (see ``_fast.h``)."""
        if at < 0 or at + max_rows * WIRE_RECORD_SIZE > len(out) or out.dtype != np.uint8:
            raise ValueError(f"AgentQueue.frame: no room for {max_rows} records at {at} in {len(out)} bytes")
        res = self._res
        code = int(_lib.aclprof_aq_frame(self._q, gen, _NO_LIMIT if limit is None else max(0, limit), max_rows,
                                         max_devices, _ffi.from_buffer("uint8_t[]", out, require_writable=True) + at,
                                         res))
        return code, int(res.records), int(res.head), int(res.slot), int(res.value)

    def names(self, slot: int, first: int, count: int) -> list[str]:
        """The slot's interned names ``first`` to ``first + count - 1`` (UTF-8, invalid
        bytes as backslash escapes), fewer if fewer are copied: one C call (and one lock)
        for the lot, one decode when they are ASCII (~0.05 us a name, not ~0.6)."""
        out: list[str] = []
        cap = min(1 << 20, max(1 << 12, 64 * count))
        buf = _ffi.new("char[]", cap)
        lens = _ffi.new("uint32_t[]", max(1, count))
        while len(out) < count:
            n = int(_lib.aclprof_aq_names(self._q, slot, first + len(out), count - len(out), buf, cap, lens))
            if n == 0:  # none copied past here, or the next one is longer than buf
                one = self.name(slot, first + len(out))
                if one is None:
                    break
                out.append(one.decode("utf-8", "backslashreplace"))
                continue
            sizes = _ffi.unpack(lens, n)
            raw = _ffi.buffer(buf, sum(sizes))[:]
            # ASCII (the usual case): characters are bytes, one decode for the lot
            at = 0
            if raw.isascii():
                text = raw.decode("ascii")
                for size in sizes:
                    out.append(text[at:at + size])
                    at += size
            else:
                for size in sizes:
                    out.append(raw[at:at + size].decode("utf-8", "backslashreplace"))
                    at += size
        return out

    def discard(self) -> int:
        """Drop every held row (counted); returns how many."""
        return int(_lib.aclprof_aq_discard(self._q))

    def arm(self, wake_at: int) -> bool:
        """False if ``wake_at`` rows are held; else True and the append reaching it wakes."""
        return bool(_lib.aclprof_aq_arm(self._q, wake_at))

    def disarm(self) -> None:
        _lib.aclprof_aq_disarm(self._q)

    def slot_counts(self, slot: int) -> Any:
        """The slot's ``aclprof_aq_slot_counts`` (a fresh cdata, read by field name)."""
        c = _ffi.new("aclprof_aq_slot_counts *")
        if _lib.aclprof_aq_slot_counts_get(self._q, slot, c) != 0:
            raise ValueError(f"AgentQueue.slot_counts: no slot {slot}")
        return c

    def name(self, slot: int, i: int) -> bytes | None:
        """The slot's interned name ``i`` as the library gave it, None if not copied."""
        length = _ffi.new("size_t *")
        p = _lib.aclprof_aq_name(self._q, slot, i, length)
        return None if p == _ffi.NULL else _ffi.unpack(p, length[0])


def window_end(last_ns: int, coalesce_ns: int) -> int:
    """When the coalescing window that begins with a frame sent at ``last_ns``
    (``time.monotonic_ns()``) ends: the first multiple of ``coalesce_ns`` at least half a
    window after it (``aclprof_aq_window_end``, which :class:`Pump` waits for), so that the
    agents of one host send in the same moment of each interval and the daemon handles their
    frames in one wake-up."""
    return int(_lib.aclprof_aq_window_end(last_ns, coalesce_ns))


class PumpResult(NamedTuple):
    """What one :meth:`Pump.run` did: why it returned (``code``: a PUMP_* code or a framing
    stop with its ``slot`` and ``value``), ``err`` (errno of PUMP_ERROR), the buffer's pending
    bytes and what they carry after it, and what the whole chunks it wrote carried."""

    code: int
    slot: int
    value: int
    err: int
    start: int
    end: int
    records: int
    loss: int
    frames: int
    sent_bytes: int
    sent_records: int
    sent_loss: int
    sent_frames: int


class Pump:
    """The agent's sender between Python's turns (``aclprof_aq_pump``): one call, GIL
    released, that waits for ``queue``'s rows, frames them into the connection's buffer and
    writes them to its socket, until Python is needed. Owns the pipe the queue wakes it
    through (its wake-ups are told apart from Python's); :meth:`close` closes it."""

    def __init__(self, queue: AgentQueue):
        self.queue = queue
        self.rows_r, self.rows_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._a = _ffi.new("aclprof_aq_pump_args *")
        self._io = _ffi.new("aclprof_aq_pump_io *")
        self._a.rows_r, self._a.rows_w = self.rows_r, self.rows_w
        #: records flowed at the last frame: the next call coalesces (kept between calls)
        self.busy = False
        #: that frame's time (``time.monotonic_ns()``, 0: none): the coalescing window runs
        #: from it, not from each call's start (kept between calls)
        self.last_ns = 0

    def run(self, buf: np.ndarray, pending: tuple[int, int, int, int, int], *, sock: int, py_fd: int, gen: int,
            coalesce_s: float, wake_rows: int, until: float, max_rows: int, max_devices: int) -> PumpResult:
        """Run until Python is needed. ``buf`` is the connection's buffer (uint8) and
        ``pending`` its ``(start, end, records, loss, frames)`` (no BATCH frame open);
        ``until`` is a ``time.monotonic()`` time."""
        if self.rows_r < 0:
            raise ValueError("Pump.run: the pump is closed")
        start, end, records, loss, frames = pending
        if buf.dtype != np.uint8 or not 0 <= start <= end <= len(buf):
            raise ValueError(f"Pump.run: pending bytes [{start}, {end}) outside a buffer of {len(buf)}")
        a, io = self._a, self._io
        a.gen, a.max_devices, a.max_rows = gen, max_devices, max_rows
        a.sock, a.py_fd = sock, py_fd
        a.coalesce_ns, a.wake_rows = int(coalesce_s * 1e9), max(1, wake_rows)
        a.until_ns = int(until * 1e9)
        view = _ffi.from_buffer("uint8_t[]", buf, require_writable=True)  # alive for the call
        io.buf = view
        io.cap, io.start, io.end = len(buf), start, end
        io.records, io.loss, io.frames = records, loss, frames
        io.busy, io.last_ns = int(self.busy), self.last_ns
        code = int(_lib.aclprof_aq_pump(self.queue._q, a, io))
        io.buf = _ffi.NULL  # the buffer may be replaced: no pointer to it outlives the call
        self.busy, self.last_ns = bool(io.busy), int(io.last_ns)
        return PumpResult(code, int(io.slot), int(io.value), int(io.err), int(io.start), int(io.end),
                          int(io.records), int(io.loss), int(io.frames), int(io.sent_bytes), int(io.sent_records),
                          int(io.sent_loss), int(io.sent_frames))

    def sent_now(self) -> tuple[int, int, int, int]:
        """``(records, loss, frames, bytes)`` the running (or last) :meth:`run` has sent so
        far and :meth:`clear_sent` has not taken: read while the call runs on another thread
        (each counter is stored whole), so counters stay current without the call returning
        to Python."""
        io = self._io
        return int(io.sent_records), int(io.sent_loss), int(io.sent_frames), int(io.sent_bytes)

    def clear_sent(self) -> None:
        """The last :meth:`run`'s sent counters are counted elsewhere now: :meth:`sent_now`
        says 0 until the next run sends (call with the lock :meth:`sent_now`'s readers hold,
        so nothing is counted twice or missed in between)."""
        io = self._io
        io.sent_records = io.sent_loss = io.sent_frames = io.sent_bytes = 0

    def close(self) -> None:
        """Close the pipe (idempotent); the queue must no longer be armed to it (it is
        disarmed before each call returns)."""
        for fd in (self.rows_r, self.rows_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.rows_r = self.rows_w = -1


class SlotNames:
    """A slot's interned names as a read-only sequence of str (decoded once, cached):
    the table a sender maps the slot's name ids through."""

    __slots__ = ("_queue", "_slot", "_cache")

    def __init__(self, queue: AgentQueue, slot: int):
        self._queue, self._slot = queue, slot
        self._cache: list[str] = []

    def __getitem__(self, i: int) -> str:
        self._fill(i + 1)
        return self._cache[i]

    def upto(self, stop: int) -> list[str]:
        """Names ``0`` to ``stop - 1`` (the cached list itself: do not change it)."""
        self._fill(stop)
        return self._cache

    def _fill(self, stop: int) -> None:
        """Decode names up to ``stop`` into the cache, fetched in one call; an id the
        queue holds no copy of is named "?"."""
        cache = self._cache
        if len(cache) >= stop:
            return
        cache.extend(self._queue.names(self._slot, len(cache), stop - len(cache)))
        cache.extend("?" for _ in range(stop - len(cache)))


class QueueSink:
    """Where a subscription in agent mode delivers: ``queue``'s ``slot``. The reader hands
    its pipe to :meth:`run` (all in C) once the decoder's layout check passed."""

    __slots__ = ("queue", "slot")

    def __init__(self, queue: AgentQueue, slot: int):
        self.queue, self.slot = queue, slot

    def push(self, rows: np.ndarray, table: Any) -> None:
        self.queue.push(self.slot, rows, table)

    def counts(self) -> Any:
        return self.queue.slot_counts(self.slot)

    def run(self, table: Any, fd: int, wake_fd: int, buffer: bytearray, filled: int, room: int,
            record_size: int, coalesce_ns: int, validate: bool, default_device: int,
            lag_factor: int, out: np.ndarray, counts: Any) -> int:
        """The reader loop (``aclprof_aq_run``), GIL released, until EOF or a wake-up with
        the pipe empty; ``table`` is the subscription's :class:`~aclprof.binding.opdecode.NameTable`.
        Returns the READ_* flags; ``counts.left`` is the partial record left in ``buffer``.

        Raises:
            OSError: the poll or read failed.
        """
        if not 0 <= filled < room <= len(buffer):
            raise ValueError(f"QueueSink.run: filled {filled}, room {room} of a {len(buffer)}-byte buffer")
        flags = _ffi.new("int *")
        n = int(_lib.aclprof_aq_run(
            self.queue._q, self.slot, table._table, fd, wake_fd,
            _ffi.from_buffer("uint8_t[]", buffer, require_writable=True), filled, room,
            record_size, coalesce_ns, int(validate), default_device, lag_factor,
            _ffi.from_buffer("uint8_t[]", out, require_writable=True), counts, flags))
        if n < 0:
            raise OSError(-n, f"aclprof_aq_run(fd={fd}): {os.strerror(-n)}")
        return int(flags[0])
