"""Operator subscription: ``aclprof.subscribe(model_id)`` and its background reader.

A :class:`Subscription` owns everything one ``aclprofModelSubscribe`` needs: a pipe, a
stable C ``int`` holding the write end (the library keeps a pointer to it, reads it for
every record, and at unsubscribe, or later when the close is deferred, closes the fd and
writes -1 into it), the subscribe config, and one reader thread.

The package, by seam:

- :mod:`.decoder`: pipe bytes -> :class:`OpBatch` (layout check, getter fallback, names);
- :mod:`.reader`: the reader thread (read loop, EOF, discard-until-EOF, callbacks);
- :mod:`.queue`: the bounded queue with its drop policies and exact counts;
- :mod:`.stats`: :class:`SubscriptionStats` and the reader-lag clock;
- :mod:`.lifetime`: fd cells the library may still hold, the per-device config rule;
- :mod:`.closing`: the close path (unsubscribe helper thread, timeouts, release), the
  base class of :class:`Subscription`;
- here: :class:`Subscription` (subscribe, consume) and :func:`subscribe`.

Delivery is either to callbacks (run on the reader thread; an exception is logged and
counted and never stops the reader) or to a bounded queue read by iterating the
subscription (records) or :meth:`Subscription.batches` (numpy batches). Nothing is lost
uncounted: at any moment ``records_read == delivered + dropped + queued``.

Closing unsubscribes (the library flushes and closes the write end, or the binding closes
it when the library defers that), drains the pipe to EOF, joins the thread and releases
the pipe and config, from any thread, a callback included, at interpreter exit, and after
a library failure. The unsubscribe runs on a helper thread and close() keeps its timeout;
the pipe's fds are released only once the reader has exited (a reader stuck in a callback
keeps them, so it can never read a file that reused their numbers).

In a forked child the parent's subscriptions read as closed (no reader, not the child's
to unsubscribe); the child subscribes anew.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from collections.abc import Callable, Iterator
from typing import Any

from aclprof._log import get_logger
from aclprof.api.records import OpBatch, OpRecord
from aclprof.api.subscription.closing import Closing
from aclprof.api.subscription.decoder import Decoder
from aclprof.api.subscription.lifetime import (
    DeferredResubscribeError,
    _check_not_deferred,
    _closing_in_background,
    _device_configs,
    _forget_replaced_cell,
    _live,
    _orphaned_cells,
    _unsubscribe_threads,
)
from aclprof.api.subscription.queue import ON_FULL_POLICIES, BatchQueue
from aclprof.api.subscription.reader import Reader
from aclprof.api.subscription.stats import LAG_CLOCKS, TIME_UNITS, LagClock, SubscriptionStats
from aclprof.binding import lowlevel
from aclprof.binding.enums import AicoreMetrics
from aclprof.binding.errors import InvalidProfilingConfigError, RepeatSubscribeError

__all__ = ["subscribe", "Subscription", "SubscriptionStats", "ON_FULL_POLICIES", "resolve_device",
           "DeferredResubscribeError", "LAG_CLOCKS"]

_log = get_logger(__name__)

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BYTES = 1 << 20  # a larger pipe lets the library's writer run ahead of the reader


def resolve_device(device: int | None) -> int:
    """The device a subscription is keyed on: ``device``, else this thread's current
    device (``aclrtGetDevice``), else 0 (CANN's default device)."""
    if device is not None:
        return lowlevel._int(device, "device", 0, lowlevel.MAX_DEVICES - 1)
    try:
        return lowlevel.rt_get_device()
    except Exception:  # no device set on this thread
        return 0


class Subscription(Closing):
    """A subscribed model and its reader thread. Create with :func:`aclprof.subscribe`."""

    def __init__(self, model_id: int, *, callback: Callable[[OpRecord], Any] | None = None,
                 batch_callback: Callable[[OpBatch], Any] | None = None,
                 queue_size: int = 65536, on_full: str = "drop_oldest", time_info: bool = True,
                 device: int | None = None, read_records: int = 4096, validate: bool = True,
                 time_unit: str = "ns", lag_clock: str = "calibrated", sink: Any = None):
        lowlevel._u32(model_id, "model_id")
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable")
        if batch_callback is not None and not callable(batch_callback):
            raise TypeError("batch_callback must be callable")
        if sink is not None and (callback is not None or batch_callback is not None):
            raise ValueError("subscribe(): sink= (the agent's record queue) excludes callback= and batch_callback=")
        if sink is not None and not all(hasattr(sink, m) for m in ("run", "push", "counts")):
            raise TypeError(f"subscribe(): sink must be an aclprof.binding.agentpath.QueueSink, got {sink!r}")
        if on_full not in ON_FULL_POLICIES:
            raise ValueError(f"on_full must be one of {ON_FULL_POLICIES}, got {on_full!r}")
        lowlevel._int(queue_size, "queue_size", 1, 1 << 31)
        lowlevel._int(read_records, "read_records", 1, 1 << 20)
        if time_unit not in TIME_UNITS:
            raise ValueError(f"time_unit must be 'ns' or 'us', got {time_unit!r}")
        if lag_clock not in LAG_CLOCKS:
            raise ValueError(f"lag_clock must be one of {LAG_CLOCKS}, got {lag_clock!r}")
        if not isinstance(time_info, bool):
            raise TypeError("time_info must be a bool")
        self.model_id = int(model_id)
        self.device = resolve_device(device)
        self._queue = BatchQueue(int(queue_size), on_full)
        self._init_close_state()

        _check_not_deferred(self.model_id, self.device)
        record_size = lowlevel.get_op_desc_size()
        self._decoder = Decoder(record_size, validate=validate, default_device=self.device,
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
        subscribing = False
        try:
            _device_configs.claim(self.device, time_info, int(AicoreMetrics.NONE))
            self._claimed = True
            self._config = lowlevel.create_subscribe_config(time_info, AicoreMetrics.NONE, self._cell)
            subscribing = True
            lowlevel.model_subscribe(self.model_id, self._config)
            _forget_replaced_cell(self.model_id)
        except BaseException as exc:
            self._close_write_end()  # -1 in the cell: a library that kept it drops the records
            if subscribing and isinstance(exc, InvalidProfilingConfigError):
                # CANN refuses a config that differs from another subscription's (another
                # component of the process subscribed with other metrics) AFTER it started an
                # idle device and kept the model subscribed with this int* (fidelity audit 3,
                # R4): the cell must outlive this object, as the library reads it for every
                # record and writes -1 into it when it closes that half subscription.
                _orphaned_cells.append(self._cell)
            self._release()
            if isinstance(exc, RepeatSubscribeError):
                holder = _holder_of(self.model_id)
                if holder is not None:
                    raise RepeatSubscribeError(exc.code, exc.function, exc.detail, hint=holder) from exc
            raise
        self._reader = Reader(self.model_id, self._read_fd, self._wake_r, self._decoder, self._queue,
                              LagClock(time_unit, lag_clock), callback=callback,
                              batch_callback=batch_callback, sink=sink, on_exit=self._on_reader_exit)
        self._thread = self._reader.thread
        self._exits_pending = 1
        self._reader.start()
        _live.add(self)

    #: Who holds this subscription, when not the caller's own code (the agent sets it): a
    #: repeated subscribe of the model says so instead of only "already subscribed".
    holder: str | None = None

    # -- consumer side ----------------------------------------------------------------------
    def get_batch(self, timeout: float | None = None) -> OpBatch | None:
        """The next queued batch; None after ``timeout`` or once closed and drained."""
        if self._reader.has_callbacks:
            raise RuntimeError("this subscription delivers to callbacks; it has no queue to read")
        return self._queue.get(timeout)

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
        """An atomic snapshot of the counters (see :class:`SubscriptionStats`): taken under
        the one lock the reader publishes its counts and the queue moves records under."""
        r, q = self._reader, self._queue
        r.sync_lag()
        with r.stats_lock:
            c = r.counts()
            delivered, queued, dropped_full = q.delivered, q.queued, q.dropped_full
        lag, lag_clock = r.lag.lag()
        return SubscriptionStats(
            bytes_read=r.live_bytes(),  # live: progress, outside the identity
            records_read=c.records_read,
            records_decoded=c.records_decoded,
            delivered=c.delivered + delivered,
            queued=queued,
            dropped_queue_full=dropped_full,
            dropped_corrupt=c.corrupt,
            dropped_callback_error=c.dropped_callback,
            dropped_decode_error=c.failed,
            callback_errors=c.callback_errors,
            names_missing=c.names_missing,
            names_overflowed=c.names_overflowed,
            truncated_bytes=c.truncated,
            reader_lag_ns=lag,
            lag_clock=lag_clock,
            keypoints=c.keypoints,
            layout_mismatch=c.layout_mismatch,
            records_decoded_by_getters=c.by_getters,
            reader_stuck=self._reader_stuck(),
            names_cut=c.names_cut,
        )

    @property
    def dropped(self) -> int:
        """``stats.dropped`` alone (records dropped for any reason), without the rest of the
        snapshot: the agent reads it before each LOSS frame and in each ``stats()``, and the
        whole snapshot took ~140 us of GIL each time."""
        r = self._reader
        with r.stats_lock:
            return self._queue.dropped_full + r.dropped()

    @property
    def names(self) -> list[str]:
        """The interned op name/type table that batches index into."""
        return self._decoder.names

    @property
    def closed(self) -> bool:
        return self._closed


    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
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


def subscribe(model_id: int, *, callback: Callable[[OpRecord], Any] | None = None,
              batch_callback: Callable[[OpBatch], Any] | None = None, queue_size: int = 65536,
              on_full: str = "drop_oldest", time_info: bool = True, device: int | None = None,
              read_records: int = 4096, validate: bool = True, time_unit: str = "ns",
              lag_clock: str = "calibrated", sink: Any = None) -> Subscription:
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
        sink: for :mod:`aclprof.agent` (an :class:`aclprof.binding.agentpath.QueueSink`):
            the records go to the agent's C queue, read, decoded and appended in C without
            taking the GIL per batch; no callbacks, no queue.

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
                        time_unit=time_unit, lag_clock=lag_clock, sink=sink)


def _holder_of(model_id: int) -> str | None:
    """The ``holder`` note of a live subscription of ``model_id``, if one has one."""
    for sub in list(_live):
        holder: str | None = sub.holder
        if sub.model_id == model_id and holder is not None:
            return holder
    return None


def _forget_after_fork() -> None:
    """In a forked child the parent's subscriptions have no reader (threads do not survive
    fork) and are the parent's: the child must not unsubscribe them at exit nor wait for
    their readers. Their objects read as closed and released; the child's copies of their
    read end and wake pipe are closed (the parent's stay open). The library's own state in
    the child is its business (the mock forgets its writer; see mock_acl/src/control.c)."""
    for sub in list(_live) + list(_closing_in_background):
        sub._forget_in_child()
    _live.clear()
    _closing_in_background.clear()
    _unsubscribe_threads.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _close_all_at_exit() -> None:
    for sub in list(_live):
        try:
            sub.close(timeout=1.0)
        except Exception as exc:
            _log.warning("closing a subscription at exit failed", error=str(exc))
    for sub in list(_closing_in_background):  # closed from a callback: let them finish
        sub._await_release(timeout=5.0)
    for thread in list(_unsubscribe_threads):
        thread.join(timeout=5.0)
