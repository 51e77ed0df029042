"""Operator subscription: ``aclprof.subscribe(model_id)`` and its background reader.

A :class:`Subscription` owns everything one ``aclprofModelSubscribe`` needs: a pipe, a
stable C ``int`` holding the write end (the library keeps a pointer to it, reads it for
every record, and at unsubscribe, or later when the close is deferred, closes the fd and
writes -1 into it), the subscribe config, and one reader thread.

The reader reads large chunks (a multiple of the record size), keeps partial records for
the next read, and decodes each chunk in two passes: a compiled loop (``aclprof.binding._fast``)
checks every signature and fetches every name and type exactly once through the library
(which frees the library's table entry), calling the getters on one-record slices so the
cost stays linear; numpy then decodes the numeric fields of the whole chunk at once.

Delivery is either to callbacks (run on the reader thread; an exception is logged and
counted and never stops the reader) or to a bounded queue read by iterating the
subscription (records) or :meth:`Subscription.batches` (numpy batches). Nothing is lost
uncounted: at any moment ``records_read == delivered + dropped + queued``.

Closing unsubscribes (the library flushes and closes the write end, or the binding closes
it when the library defers that), drains the pipe to EOF, joins the thread and releases the pipe and config, from any thread, a callback
included, at interpreter exit, and after a library failure.
"""

from __future__ import annotations

import atexit
import collections
import fcntl
import itertools
import os
import select
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from aclprof.binding import lowlevel
from aclprof._log import get_logger
from aclprof.binding.enums import AicoreMetrics
from aclprof.binding.errors import AclprofError, InvalidModelIdError, InvalidParamError, InvalidProfilingConfigError, UnsupportedError
from aclprof.api.records import KEYPOINT_NAME, KEYPOINT_TYPE, OP_DTYPE, OpBatch, OpRecord, raw_dtype

__all__ = ["subscribe", "Subscription", "SubscriptionStats", "ON_FULL_POLICIES", "resolve_device",
           "DeferredResubscribeError"]

_log = get_logger(__name__)

ON_FULL_POLICIES = ("drop_oldest", "drop_newest", "block")
_STATUS_CORRUPT, _STATUS_NO_TYPE, _STATUS_NO_NAME = 1, 2, 4
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BYTES = 1 << 20  # a larger pipe lets the library's writer run ahead of the reader
_MAX_NAMES = 1 << 20  # interned names per subscription; beyond it names read "?" (counted)
_TIME_UNITS = {"ns": 1, "us": 1000}
LAG_CLOCKS = ("calibrated", "host")


@dataclass(frozen=True)
class SubscriptionStats:
    """Counters of one subscription; read at any time without waiting on the reader.

    ``records_read == delivered + dropped + queued`` holds whenever the reader is between
    batches (always once the subscription is closed); a snapshot taken while it handles a
    batch may lag by that batch. ``names_missing`` counts delivered records whose name or
    type the library could not return, ``names_overflowed`` those whose name did not fit the
    subscription's interned table (1 M distinct strings); both read ``"?"``.

    ``reader_lag_ns`` is how far behind the reader is: now minus the newest record end
    seen, with ``lag_clock`` telling how that end was put on the host's clock:

    - ``"calibrated"`` (the default): record times are the device's counter, which need
      not line up with the host's ``CLOCK_MONOTONIC`` (audit row 11), so the reader
      estimates the offset as the smallest (host arrival time - record end) seen so far
      and reports lag beyond that best case. Never negative; 0 means "as fresh as the
      fastest delivery seen", not "no delay".
    - ``"host"``: the caller said the clocks agree (``lag_clock="host"``): plain
      ``monotonic_ns() - end``.
    - ``None``: no record with a time yet (or ``time_info=False``): ``reader_lag_ns`` is
      None too.

    ``keypoints`` counts delivered-or-queued step keypoint records (``kind ==
    "keypoint"``); they are also in every other count.

    ``layout_mismatch`` is true when the first record decoded by offset disagreed with the
    library's getters (an unknown ``ProfOpDesc`` layout of the same size); the rest of the
    subscription is then decoded through the getters, counted in
    ``records_decoded_by_getters`` (also used for a record size the binding does not know).
    """

    bytes_read: int
    records_read: int
    records_decoded: int
    delivered: int
    queued: int
    dropped_queue_full: int
    dropped_corrupt: int
    dropped_callback_error: int
    dropped_decode_error: int
    callback_errors: int
    names_missing: int
    names_overflowed: int
    truncated_bytes: int
    reader_lag_ns: int | None
    lag_clock: str | None = None
    keypoints: int = 0
    layout_mismatch: bool = False
    records_decoded_by_getters: int = 0

    @property
    def dropped(self) -> int:
        return (self.dropped_queue_full + self.dropped_corrupt + self.dropped_callback_error
                + self.dropped_decode_error)


class _DeviceConfigs:
    """All models on one device must share one subscribe config (reference 3.3)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_device: dict[int, tuple[bool, int, int]] = {}  # device -> (time_info, metrics, users)

    def claim(self, device: int, time_info: bool, metrics: int) -> None:
        with self._lock:
            current = self._by_device.get(device)
            if current is None:
                self._by_device[device] = (time_info, metrics, 1)
                return
            if current[:2] != (time_info, metrics):
                raise InvalidProfilingConfigError(
                    100010, "aclprofModelSubscribe",
                    f"device {device} already has subscriptions with time_info={current[0]}; "
                    f"all models on one device must share one config, got time_info={time_info}")
            self._by_device[device] = (time_info, metrics, current[2] + 1)

    def release(self, device: int) -> None:
        with self._lock:
            time_info, metrics, users = self._by_device[device]
            if users == 1:
                del self._by_device[device]
            else:
                self._by_device[device] = (time_info, metrics, users - 1)


_device_configs = _DeviceConfigs()
_live: "weakref.WeakSet[Subscription]" = weakref.WeakSet()
_orphaned_cells: list[lowlevel.FdCell] = []  # cells the library may still write -1 into

# Cells whose close the library deferred (audit row 1, note D1). When a model's device loses
# its last subscription while another device still has one, CANN's ProfStopAclSubscribe
# only queues the device (CloseSubscribeFdIfHostId) and keeps the int*; the fd is closed
# and -1 written through that pointer when the process's last subscription ends
# (CloseSubscribeFd(devId)). Until then the cell must stay allocated, or the library reads
# freed memory and may close() whatever number it finds there. Each cell leaves this list
# once it reads -1: the library erased its entry before writing that, so it can no longer
# touch the cell. Growth is bounded: one cell (4 bytes) per subscription unsubscribed since
# the process last had no subscription at all, since the last unsubscribe clears them all.
_deferred_lock = threading.Lock()
_deferred_cells: list[lowlevel.FdCell] = []
_deferred_by_model: dict[int, lowlevel.FdCell] = {}  # model id -> its newest deferred cell
# Markers written into deferred cells: distinct values <= -2, so that (a) the library's
# per-record lookup (GetSubscribeFdForModel, fd < 0) drops anything still addressed to the
# closed pipe, (b) its deferred close can tell our cells apart (CloseSubscribeFd skips a
# pointer whose value another entry holds, so equal values would leave a cell unreleased)
# and (c) the -1 it writes at the end is distinguishable from our mark.
_deferred_marks = itertools.count(2)
_unsubscribe_threads: list[threading.Thread] = []  # started by closes from callbacks
_closing_in_background: "set[Subscription]" = set()  # closed from a callback, not yet released


class _Decoder:
    """Turns pipe bytes into :class:`OpBatch` objects. Owned by one thread at a time.

    Feed it chunks of any size; it keeps a partial record for the next chunk. It never
    raises on bad bytes: corrupt records are counted and skipped.
    """

    def __init__(self, record_size: int, *, validate: bool = True, default_device: int = 0,
                 max_records: int = 4096):
        from aclprof.binding._fast import ffi, lib

        self._ffi, self._lib = ffi, lib
        self.record_size = record_size
        self.validate = validate
        self.default_device = default_device
        self._raw = raw_dtype(record_size)
        self.capacity = max_records
        self.buffer = bytearray(record_size * (max_records + 1))
        self.filled = 0
        self._type_ids = np.empty(max_records, np.uint32)
        self._name_ids = np.empty(max_records, np.uint32)
        self._status = np.empty(max_records, np.uint8)
        interner = lib.aclprof_interner_new(_MAX_NAMES)
        if interner == ffi.NULL:
            raise MemoryError("could not allocate the op name table")
        self._interner = ffi.gc(interner, lib.aclprof_interner_free)
        self.names: list[str] = []
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

    def _decode(self, count: int) -> OpBatch:
        size = self.record_size
        self.records_read += count
        if not self._layout_checked and self._raw is not None:
            self._check_layout(count)
        if self._raw is None:
            return self._decode_with_getters(count)
        ffi, lib = self._ffi, self._lib
        status = self._status[:count]
        good = lib.aclprof_decode_names(
            self._interner, ffi.from_buffer("uint8_t[]", self.buffer), count, size,
            int(self.validate), ffi.from_buffer("uint32_t[]", self._type_ids),
            ffi.from_buffer("uint32_t[]", self._name_ids), ffi.from_buffer("uint8_t[]", self._status))
        self._sync_names()
        raw = np.frombuffer(self.buffer, dtype=self._raw, count=count)
        out = np.empty(good, OP_DTYPE)
        if good == count:
            keep = slice(None)
        else:
            keep = (status & _STATUS_CORRUPT) == 0
            self.corrupt += count - good
        kept_status = status[keep]
        self.names_missing += int(np.count_nonzero(kept_status & (_STATUS_NO_TYPE | _STATUS_NO_NAME)))
        out["model_id"] = raw["modelId"][keep]
        out["op_name"] = self._name_ids[:count][keep]
        out["op_type"] = self._type_ids[:count][keep]
        out["flag"] = raw["flag"][keep]
        out["thread_id"] = raw["threadId"][keep]
        if "devId" in raw.dtype.names:
            # 0 is CANN's "not filled" (ConstructAndUploadData never sets it): use ours.
            dev = raw["devId"][keep]
            out["device_id"] = np.where(dev == 0, self.default_device, dev)
        else:
            out["device_id"] = self.default_device
        out["start"] = raw["start"][keep]
        out["end"] = raw["end"][keep]
        out["duration"] = raw["duration"][keep]
        out["execution_time"] = raw["executionTime"][keep]
        self._mark_keypoints(out)
        self.records_decoded += good
        return OpBatch(out, self.names)

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
        ffi, lib, size = self._ffi, self._lib, self.record_size
        raw = np.frombuffer(self.buffer, dtype=self._raw, count=count)
        for i in range(count):
            rec = bytes(self.buffer[i * size:(i + 1) * size])
            if lib.aclprof_signature(ffi.from_buffer("uint8_t[]", rec), size) != raw["signature"][i]:
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
            rows.append((lowlevel.get_model_id(rec, 0), self._intern_py(op_name),
                         self._intern_py(type_name), self._flag(rec), 0, self.default_device,
                         *lowlevel.get_op_times(rec, 0), 0, False))
        self.records_decoded += len(rows)
        self.by_getters += len(rows)
        out = np.array(rows, dtype=OP_DTYPE)
        self._mark_keypoints(out)
        return OpBatch(out, self.names)

    @staticmethod
    def _flag(rec: bytes) -> int:
        try:
            return lowlevel.get_op_flag(rec, 0)
        except UnsupportedError:  # older CANN: no aclprofGetOpFlag
            return 0

    def _intern_py(self, data: bytes) -> int:
        text = data.decode("utf-8", "backslashreplace")
        try:
            return self.names.index(text)
        except ValueError:
            self._append_name(text)
            return len(self.names) - 1

    def _append_name(self, text: str) -> None:
        if text == KEYPOINT_NAME:
            self._kp_name = len(self.names)
        elif text == KEYPOINT_TYPE:
            self._kp_type = len(self.names)
        self.names.append(text)

    def _sync_names(self) -> None:
        lib, ffi = self._lib, self._ffi
        size = lib.aclprof_interner_size(self._interner)
        if size > len(self.names):
            length = ffi.new("size_t *")
            for i in range(len(self.names), size):
                ptr = lib.aclprof_interner_entry(self._interner, i, length)
                self._append_name(ffi.unpack(ptr, length[0]).decode("utf-8", "backslashreplace"))

    @property
    def names_overflowed(self) -> int:
        return int(self._lib.aclprof_interner_overflows(self._interner))


def resolve_device(device: int | None) -> int:
    """The device a subscription is keyed on: ``device``, else this thread's current
    device (``aclrtGetDevice``), else 0 (CANN's default device)."""
    if device is not None:
        return lowlevel._int(device, "device", 0, lowlevel.MAX_DEVICES - 1)
    try:
        return lowlevel.rt_get_device()
    except Exception:  # no device set on this thread
        return 0


class Subscription:
    """A subscribed model and its reader thread. Create with :func:`aclprof.subscribe`."""

    def __init__(self, model_id: int, *, callback: Callable[[OpRecord], Any] | None = None,
                 batch_callback: Callable[[OpBatch], Any] | None = None,
                 queue_size: int = 65536, on_full: str = "drop_oldest", time_info: bool = True,
                 device: int | None = None, read_records: int = 4096, validate: bool = True,
                 time_unit: str = "ns", lag_clock: str = "calibrated"):
        lowlevel._u32(model_id, "model_id")
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable")
        if batch_callback is not None and not callable(batch_callback):
            raise TypeError("batch_callback must be callable")
        if on_full not in ON_FULL_POLICIES:
            raise ValueError(f"on_full must be one of {ON_FULL_POLICIES}, got {on_full!r}")
        lowlevel._int(queue_size, "queue_size", 1, 1 << 31)
        lowlevel._int(read_records, "read_records", 1, 1 << 20)
        if time_unit not in _TIME_UNITS:
            raise ValueError(f"time_unit must be 'ns' or 'us', got {time_unit!r}")
        if lag_clock not in LAG_CLOCKS:
            raise ValueError(f"lag_clock must be one of {LAG_CLOCKS}, got {lag_clock!r}")
        if not isinstance(time_info, bool):
            raise TypeError("time_info must be a bool")
        self.model_id = int(model_id)
        self._callback = callback
        self._batch_callback = batch_callback
        self._queue_size = int(queue_size)
        self._on_full = on_full
        self._time_factor = _TIME_UNITS[time_unit]
        self._lag_clock = lag_clock
        self.device = resolve_device(device)

        # Counters: written by the reader thread only, read by anyone (ints are atomic).
        self._bytes_read = 0
        self._delivered = 0
        self._dropped_full = 0
        self._dropped_callback = 0
        self._callback_errors = 0
        self._truncated = 0
        # (newest record end in host ns units, min(host arrival - end)): one tuple so that
        # stats never pairs a new end with an old offset (that could make the lag negative).
        self._clock: tuple[int, int] | None = None

        self._queue: collections.deque[OpBatch] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._reader_done = False
        self._release_on_reader_exit = False
        self._unsub_thread: threading.Thread | None = None
        self._background_close: threading.Event | None = None  # set once released
        self._released = False

        _check_not_deferred(self.model_id, self.device)
        record_size = lowlevel.get_op_desc_size()
        self._decoder = _Decoder(record_size, validate=validate, default_device=self.device,
                                 max_records=read_records)
        self._read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass  # capped by /proc/sys/fs/pipe-max-size: the default size still works
        self._cell = lowlevel.FdCell(write_fd)
        self._config: lowlevel.SubscribeConfig | None = None
        self._claimed = False
        try:
            _device_configs.claim(self.device, time_info, int(AicoreMetrics.NONE))
            self._claimed = True
            self._config = lowlevel.create_subscribe_config(time_info, AicoreMetrics.NONE, self._cell)
            lowlevel.model_subscribe(self.model_id, self._config)
            _forget_replaced_cell(self.model_id)
        except BaseException:
            self._close_write_end()
            self._release()
            raise
        self._thread = threading.Thread(target=self._run, name=f"aclprof-reader-{self.model_id}",
                                        daemon=True)
        self._thread.start()
        _live.add(self)

    # -- reader thread ---------------------------------------------------------------------
    def _run(self) -> None:
        decoder = self._decoder
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if self._wake_r in ready and self._read_fd not in ready:
                    _log.warning("subscription reader stopped before EOF", model_id=self.model_id)
                    break
                try:
                    n = os.readv(self._read_fd, [decoder.free_space()])
                except InterruptedError:
                    continue
                arrival = time.monotonic_ns()
                if n == 0:
                    self._truncated += decoder.filled
                    decoder.filled = 0
                    break
                self._bytes_read += n
                try:
                    batch = decoder.commit(n)
                except Exception:  # a bug must not lose the rest of the stream
                    _log.exception("op record decoding failed", model_id=self.model_id)
                    continue
                if batch is not None and len(batch):
                    self._note_times(batch, arrival)
                    self._deliver(batch)
        except Exception:
            _log.exception("subscription reader failed; discarding the rest (counted)",
                           model_id=self.model_id)
            self._discard_until_eof()
        finally:
            with self._cond:
                self._reader_done = True
                self._cond.notify_all()
            if self._release_on_reader_exit:
                self._release()
                _closing_in_background.discard(self)
                self._background_close.set()

    def _note_times(self, batch: OpBatch, arrival: int) -> None:
        """Calibrates the device clock against the host's (see :class:`SubscriptionStats`):
        a batch arrived at ``arrival``, so every record in it ended at least
        ``arrival - end`` before on the host clock; the smallest such gap is the offset
        estimate (clock difference plus the fastest delivery)."""
        end = int(batch.data["end"].max()) * self._time_factor
        if end == 0:
            return  # time_info off: no times to compare
        clock = self._clock
        if clock is None:
            self._clock = (end, arrival - end)
        else:
            self._clock = (max(clock[0], end), min(clock[1], arrival - end))

    def _discard_until_eof(self) -> None:
        """After a reader failure, keep the pipe flowing (the library's flush at unsubscribe
        waits for it) and count what is thrown away as dropped by decode error."""
        decoder = self._decoder
        size = decoder.record_size
        pending = decoder.filled
        decoder.filled = 0
        buffer = bytearray(1 << 16)
        while True:
            try:
                n = os.readv(self._read_fd, [buffer])
            except InterruptedError:
                continue
            except OSError:
                break
            if n == 0:
                break
            self._bytes_read += n
            pending += n
            whole, pending = divmod(pending, size)
            decoder.records_read += whole
            decoder.failed += whole
        self._truncated += pending

    def _deliver(self, batch: OpBatch) -> None:
        if self._batch_callback is not None or self._callback is not None:
            self._run_callbacks(batch)
            return
        with self._cond:
            n = len(batch)
            cap = self._queue_size
            if self._on_full == "block":
                while self._queued + n > cap and self._queued and not self._closing:
                    self._cond.wait(0.5)
            elif self._queued + n > cap:
                if self._on_full == "drop_newest":
                    keep = max(cap - self._queued, 0)
                    self._dropped_full += n - keep
                    if keep == 0:
                        return
                    batch = OpBatch(batch.data[:keep], batch.names)
                    n = keep
                else:  # drop_oldest
                    if n >= cap:
                        self._dropped_full += n - cap + self._queued
                        self._queue.clear()
                        self._queued = 0
                        batch = OpBatch(batch.data[n - cap:], batch.names)
                        n = cap
                    while self._queued + n > cap:
                        oldest = self._queue[0]
                        excess = self._queued + n - cap
                        if len(oldest) <= excess:
                            self._queue.popleft()
                            self._queued -= len(oldest)
                            self._dropped_full += len(oldest)
                        else:
                            self._queue[0] = OpBatch(oldest.data[excess:], oldest.names)
                            self._queued -= excess
                            self._dropped_full += excess
            self._queue.append(batch)
            self._queued += n
            self._cond.notify_all()

    def _run_callbacks(self, batch: OpBatch) -> None:
        if self._batch_callback is not None:
            try:
                self._batch_callback(batch)
            except BaseException:  # SystemExit too: it must not end the reader thread
                self._callback_errors += 1
                self._dropped_callback += len(batch)
                _log.exception("batch_callback raised; records counted as dropped",
                               model_id=self.model_id, records=len(batch))
                return
            if self._callback is None:
                self._delivered += len(batch)
                return
        callback = self._callback
        delivered = 0
        for record in batch.records():
            try:
                callback(record)
                delivered += 1
            except BaseException:  # SystemExit too: it must not end the reader thread
                self._callback_errors += 1
                self._dropped_callback += 1
                _log.exception("callback raised; record counted as dropped", model_id=self.model_id)
        self._delivered += delivered

    # -- consumer side ----------------------------------------------------------------------
    def get_batch(self, timeout: float | None = None) -> OpBatch | None:
        """The next queued batch; None after ``timeout`` or once closed and drained."""
        if self._callback is not None or self._batch_callback is not None:
            raise RuntimeError("this subscription delivers to callbacks; it has no queue to read")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue:
                if self._reader_done:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining if remaining is not None else 0.5)
            batch = self._queue.popleft()
            self._queued -= len(batch)
            self._delivered += len(batch)
            self._cond.notify_all()
            return batch

    def batches(self, timeout: float | None = None) -> Iterator[OpBatch]:
        """Yield queued batches until the subscription is closed and drained (or a wait
        for the next batch exceeds ``timeout``)."""
        while True:
            batch = self.get_batch(timeout)
            if batch is None:
                return
            yield batch

    def __iter__(self) -> Iterator[OpRecord]:
        """Yield records until the subscription is closed and drained."""
        for batch in self.batches():
            yield from batch.records()

    # -- stats -------------------------------------------------------------------------------
    @property
    def stats(self) -> SubscriptionStats:
        d = self._decoder
        lag = lag_clock = None
        clock = self._clock
        if clock is not None:
            newest_end, offset = clock
            lag_clock = self._lag_clock
            if lag_clock == "host":
                lag = time.monotonic_ns() - newest_end
            else:
                lag = time.monotonic_ns() - newest_end - offset
        return SubscriptionStats(
            bytes_read=self._bytes_read,
            records_read=d.records_read,
            records_decoded=d.records_decoded,
            delivered=self._delivered,
            queued=self._queued,
            dropped_queue_full=self._dropped_full,
            dropped_corrupt=d.corrupt,
            dropped_callback_error=self._dropped_callback,
            dropped_decode_error=d.failed,
            callback_errors=self._callback_errors,
            names_missing=d.names_missing,
            names_overflowed=d.names_overflowed,
            truncated_bytes=self._truncated,
            reader_lag_ns=lag,
            lag_clock=lag_clock,
            keypoints=d.keypoints,
            layout_mismatch=d.layout_mismatch,
            records_decoded_by_getters=d.by_getters,
        )

    @property
    def names(self) -> list[str]:
        """The interned op name/type table that batches index into."""
        return self._decoder.names

    @property
    def closed(self) -> bool:
        return self._closed

    # -- shutdown ---------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Unsubscribe, drain the pipe to EOF, join the reader and release everything.

        Idempotent and callable from any thread, a callback of this subscription included
        (then the reader finishes the release itself once it reaches EOF; a later close()
        from another thread, and interpreter exit, wait for that). Every record the
        library emitted before the unsubscribe is delivered (or counted as dropped).

        Raises:
            AclError: the unsubscribe failed; the subscription is released all the same.
        """
        in_reader = threading.current_thread() is self._thread
        with self._close_lock:
            already = self._closed
            self._closed = True
            if not already and in_reader:
                self._background_close = threading.Event()
        if already:
            # A close started from a callback finishes in the background: wait for it
            # (unless this is the reader itself, which must go on draining).
            self._await_background_close(timeout)
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        _live.discard(self)
        if in_reader:
            # From a callback: the reader must keep draining while the library flushes
            # (a full pipe would block the flush), so unsubscribe on a helper thread and
            # let the reader release everything when it reaches EOF.
            self._release_on_reader_exit = True
            self._unsub_thread = threading.Thread(target=self._unsubscribe,
                                                  name="aclprof-unsubscribe", daemon=True)
            _closing_in_background.add(self)
            # Kept until exit joins them: the reader may finish (and leave
            # _closing_in_background) a moment before this thread does.
            _unsubscribe_threads[:] = [t for t in _unsubscribe_threads if t.is_alive()]
            _unsubscribe_threads.append(self._unsub_thread)
            self._unsub_thread.start()
            return
        error = self._unsubscribe()
        self._join(timeout)
        self._release()
        if error is not None:
            raise error

    def _await_background_close(self, timeout: float) -> None:
        done = self._background_close
        if done is None or threading.current_thread() in (self._thread, self._unsub_thread):
            return
        done.wait(timeout)  # the reader reached EOF and released everything
        self._thread.join(timeout)
        helper = self._unsub_thread
        if helper is not None and helper.ident is not None:  # started
            helper.join(timeout)

    def _unsubscribe(self) -> BaseException | None:
        """Unsubscribe; returns the failure, if any.

        On success the library either closed the write end and wrote -1 into the cell, or
        deferred that (the model's device lost its last subscription while other devices
        still have some): see :meth:`_take_over_deferred_fd`. On failure the library may
        still own the subscription and write to that fd, so it is *not* closed (a reused fd
        number would receive the library's records): the reader is woken instead, and the
        cell and the config are kept alive for as long as the process lives.
        """
        try:
            lowlevel.model_unsubscribe(self.model_id)
        except InvalidModelIdError as exc:
            if self._cell.value == -1:
                # The library had already unsubscribed the model (unloaded, or reset) and
                # closed the pipe: nothing was lost, the reader sees EOF.
                return None
            return self._unsubscribe_failed(exc)
        except BaseException as exc:
            return self._unsubscribe_failed(exc)
        self._take_over_deferred_fd()
        return None

    def _take_over_deferred_fd(self) -> None:
        """After a successful unsubscribe: end the stream now even if the library deferred
        the close, and keep the cell alive for as long as the library holds its pointer.

        Why closing here is safe. CANN's ProfStopAclSubscribe (prof_acl_mgr.cpp L3415-3462)
        returns only after stopping the device whose count reached 0 (CommandHandleProfStop,
        StopReporters, the task stop) and, in its own one-device path, closes the fd right
        after that same stop (CloseSubscribeFd(devId), L2759-2786): the library itself
        treats "unsubscribe returned" as "every record of the model is in the pipe". So
        the records are already in the pipe and the reader still gets them before EOF.
        Should the library write anything later for this model, PipeTransport::SendBuffer
        reads the fd through our cell for every buffer (GetSubscribeFdForModel) and drops
        it on a negative value, so it cannot land in a reused fd number. The mark goes in
        before close() so that window stays shut. The library's deferred close then calls
        close(mark), which fails harmlessly with EBADF (it logs an error), and writes -1,
        after which the cell is released (see _deferred_cells). The alternative, leaving
        the fd to the library, would make every reader wait until the process's last
        unsubscribe and hold one open fd per deferred subscription.
        """
        fd = self._cell.value
        if fd < 0:
            # Closed by the library, -1 written: it no longer holds this pointer. If this
            # was the process's last subscription, earlier deferred cells got -1 too.
            _sweep_deferred_cells()
            return
        with _deferred_lock:
            self._cell._set(-next(_deferred_marks))
            _deferred_cells.append(self._cell)
            _deferred_by_model[self.model_id] = self._cell
            _sweep_deferred_cells_locked()
        try:
            os.close(fd)
        except OSError:
            pass

    def _unsubscribe_failed(self, exc: BaseException) -> BaseException:
        _orphaned_cells.append(self._cell)
        _log.warning("unsubscribe failed; the pipe stays with the library", model_id=self.model_id,
                     error=str(exc))
        self._wake_reader()
        return exc

    def _wake_reader(self) -> None:
        """Make the reader stop once the pipe holds nothing more (no EOF will come)."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # already woken (the pipe is non-blocking) or released

    def _close_write_end(self) -> None:
        """Subscribe failed (the library kept no pointer): close the write end ourselves."""
        fd = self._cell.value
        if fd >= 0:
            self._cell._set(-1)
            try:
                os.close(fd)
            except OSError:
                pass

    def _join(self, timeout: float) -> None:
        thread = self._thread
        thread.join(timeout)
        if thread.is_alive():
            # EOF did not come (a forked child holding the write end?): wake the reader.
            self._wake_reader()
            thread.join(1.0)
            if thread.is_alive():
                _log.error("subscription reader did not stop (blocked in a callback?)",
                           model_id=self.model_id)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        for fd in (self._read_fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._config is not None and not any(c is self._cell for c in _orphaned_cells):
            try:
                self._config.close()
            except Exception as exc:
                _log.warning("destroying the subscribe config failed", error=str(exc))
        if self._claimed:
            _device_configs.release(self.device)
            self._claimed = False

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as close_error:
            _log.warning("closing the subscription failed after an exception", error=str(close_error))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<aclprof.Subscription model={self.model_id} device={self.device} {state}>"


def _sweep_deferred_cells_locked() -> None:
    _deferred_cells[:] = [cell for cell in _deferred_cells if cell.value != -1]
    for model_id in [m for m, cell in _deferred_by_model.items() if cell.value == -1]:
        del _deferred_by_model[model_id]


def _check_not_deferred(model_id: int, device: int) -> None:
    """Refuse a subscription that CANN would accept but never feed (audit row 1).

    While the model's previous subscription waits for its deferred close, CANN still has
    its entry (key: the model id, ``subscribed=false``, our old cell). If the device has no
    subscription, ``StartDeviceSubscribeTask`` restarts it and its ``subscribeInfos_.insert``
    keeps that old entry (prof_acl_mgr.cpp L1738-1742): aclprofModelSubscribe succeeds, but
    the records go to the old cell (dropped: it holds our mark) and the unsubscribe fails
    with 100011, which also keeps every other device's fd open. If the device does have a
    subscription, ``UpdateSubscribeInfo`` takes the new fd and all is well. Only this
    binding's own subscriptions are visible here, so the check is conservative.
    """
    with _deferred_lock:
        _sweep_deferred_cells_locked()
        pending = model_id in _deferred_by_model
    if pending and not any(sub.device == device for sub in list(_live)):
        raise DeferredResubscribeError(
            f"aclprofModelSubscribe (not called): model {model_id} was unsubscribed while "
            f"device {device} had no other subscription and other devices still had some; "
            f"CANN keeps that old subscription until the last subscription of the process "
            f"ends, and would send this new one's records to the old, closed pipe and fail "
            f"to unsubscribe it (100011). Close the subscriptions on the other devices first, "
            f"or subscribe another model on device {device} before this one.")


def _forget_replaced_cell(model_id: int) -> None:
    """The model was subscribed again (past :func:`_check_not_deferred`, so its device was
    busy): CANN's UpdateSubscribeInfo replaced the old entry's int* with the new one, so it
    will never touch, nor close, the old cell again."""
    with _deferred_lock:
        old = _deferred_by_model.pop(model_id, None)
        if old is not None:
            _deferred_cells[:] = [cell for cell in _deferred_cells if cell is not old]


class DeferredResubscribeError(AclprofError, RuntimeError):
    """A model cannot be subscribed again yet: its previous subscription's close is
    deferred by the library and it would receive nothing (see :func:`subscribe`)."""


def _sweep_deferred_cells() -> None:
    """Forget the deferred cells into which the library has written -1 (it is done)."""
    with _deferred_lock:
        _sweep_deferred_cells_locked()


def subscribe(model_id: int, *, callback: Callable[[OpRecord], Any] | None = None,
              batch_callback: Callable[[OpBatch], Any] | None = None, queue_size: int = 65536,
              on_full: str = "drop_oldest", time_info: bool = True, device: int | None = None,
              read_records: int = 4096, validate: bool = True, time_unit: str = "ns",
              lag_clock: str = "calibrated") -> Subscription:
    """Subscribe to the op records of a loaded model and start reading them.

    Args:
        model_id: from ``aclmdlLoadFromFile`` (or :func:`aclprof.mock.load_model`).
        callback: called with each :class:`OpRecord` on the reader thread.
        batch_callback: called with each :class:`OpBatch` on the reader thread.
            With either callback the records go to the callbacks and there is no queue.
        queue_size: the most records kept for iteration (bounded memory).
        on_full: ``"drop_oldest"``, ``"drop_newest"`` (both count what they drop) or
            ``"block"`` (the reader waits; the library's own queue then fills up).
        time_info: the ``timeInfoSwitch`` of the subscribe config.
        device: the model's device (default: the thread's current device, else 0); all
            models on one device must share one config. Records whose ``devId`` the
            library left 0 ("unknown", CANN's main path) and 72-byte records (no
            ``devId``) report this device.
        read_records: records per read (the read size is this times the record size).
        validate: check each record's CRC-32C signature (cheap; corrupt ones are counted).
        time_unit: the unit of the library's timestamps (``"ns"`` or ``"us"``), for lag.
        lag_clock: ``"calibrated"`` (default: record times are the device's clock, the
            offset to the host's is estimated) or ``"host"`` (the caller knows the record
            times are the host's ``CLOCK_MONOTONIC``); see :class:`SubscriptionStats`.

    Besides ops, the pipe can carry CANN's step keypoint records (``kind == "keypoint"``);
    filter them with ``batch.data[~batch.data["keypoint"]]`` or ``record.kind == "op"``.

    Closing a subscription whose device has no other subscription while other devices
    still have some makes the library defer its fd close until the process's last
    unsubscribe (the binding still ends the stream at once). Until then that model cannot
    be subscribed again on an otherwise idle device.

    Raises:
        DeferredResubscribeError: that case; nothing was changed.
        AclError: the library refused the subscription.
    """
    return Subscription(model_id, callback=callback, batch_callback=batch_callback,
                        queue_size=queue_size, on_full=on_full, time_info=time_info,
                        device=device, read_records=read_records, validate=validate,
                        time_unit=time_unit, lag_clock=lag_clock)


@atexit.register
def _close_all_at_exit() -> None:
    for sub in list(_live):
        try:
            sub.close(timeout=1.0)
        except Exception as exc:
            _log.warning("closing a subscription at exit failed", error=str(exc))
    for sub in list(_closing_in_background):  # closed from a callback: let them finish
        sub._await_background_close(timeout=5.0)
    for thread in list(_unsubscribe_threads):
        thread.join(timeout=5.0)
