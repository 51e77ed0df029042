"""The reader thread of a subscription: pipe -> decoder -> callbacks or queue, until EOF.

Waits for, reads (a multiple of the record size, letting a trickle of records gather for
up to :data:`COALESCE_NS`) and decodes in C with the GIL released, and takes the GIL
only to deliver each batch to the callbacks (on this thread; an exception is logged and
counted and never stops the reader) or to the :class:`~.queue.BatchQueue`. It stops at
EOF (the library, or the binding, closed the write end) or when woken with the pipe
empty (an unsubscribe that failed: no EOF will come).

Agent mode (``sink=``, issue 21): once the first batch passed the layout check, the whole
loop, delivery included, is one C call (:meth:`.decoder.Decoder.run_sink`) that appends the
rows to the agent's record queue and returns at EOF: no GIL per batch; the counters of
those records are the sink's slot's, added in :meth:`Reader.counts`.

The counters are published as one snapshot (:meth:`Reader.counts`) under the queue's lock,
the lock the consumer's :meth:`~.queue.BatchQueue.get` also holds: a batch's records enter
``records_read`` in the same step as they enter ``delivered``, ``dropped`` or ``queued``, so
the identity holds in every :attr:`~aclprof.Subscription.stats` snapshot (read field by
field, 40 % of samples taken while records flowed would break it). A batch the reader
holds (being decoded, or in a callback) is in none of the counts until it is delivered.

Failure paths, each counted so that ``records_read == delivered + dropped + queued``:

- the decoder raises on a chunk: that chunk's records are ``dropped_decode_error`` and
  reading goes on with the next chunk (a bug must not lose the rest of the stream);
- anything else raises (delivery, the lag clock): the batch in hand is counted as
  ``dropped_decode_error``, and so is everything read after it, as the reader drains the
  pipe to EOF without decoding (:meth:`Reader._discard_until_eof`): the library's flush at
  unsubscribe needs the pipe to keep flowing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from aclprof._log import get_logger
from aclprof.api.records import OpBatch, OpRecord
from aclprof.api.subscription.decoder import Decoder
from aclprof.api.subscription.queue import BatchQueue
from aclprof.api.subscription.stats import LagClock
from aclprof.binding.opdecode import READ_EOF, READ_WOKEN

__all__ = ["Reader", "COALESCE_NS", "AGENT_COALESCE_NS"]

#: After a small read, how long the reader lets records gather before it takes the GIL to
#: deliver them (issue 12). At 100 k records/s that is ~200 records per batch and ~500
#: GIL acquisitions a second instead of one per write of the library; it adds at most
#: this much to the reader's lag. A read of half the buffer or more is delivered at once,
#: so throughput is not capped by it.
COALESCE_NS = 2_000_000

#: The same for a subscription of the agent (issue 21): its batches go to the agent's queue
#: in C, never to Python, and the agent's sender takes them only every 50-100 ms, so
#: gathering longer delays nothing the daemon sees by more than this (a tenth of the `tail`
#: p99 goal of 100 ms) and saves the wake-ups: on a 2-core VM each timed sleep costs the
#: reader ~30-50 us of CPU, so 2 ms cost ~2.5 % of a core at any rate and 10 ms ~0.5 %. The
#: pipe (1 MiB, ~13 ms at 1 M records/s) still holds what arrives meanwhile, and a read of
#: half the buffer or more never waits.
AGENT_COALESCE_NS = 10_000_000

_log = get_logger("aclprof.api.subscription")

#: A callback that raises is logged with its traceback the first time only; after that at
#: most one line per this many seconds with the count since the last one (and one more when
#: the reader ends). A callback failing on every record must not flood the service's stderr
#: (issue 10: 5,000 failing records wrote 40,000 lines); the counters stay exact.
CALLBACK_ERROR_LOG_EVERY = 60.0


class ReaderCounts(NamedTuple):
    """The reader's and the decoder's counters at one moment (see :meth:`Reader.counts`)."""

    bytes_read: int = 0
    records_read: int = 0
    records_decoded: int = 0
    delivered: int = 0  # to callbacks
    dropped_callback: int = 0
    callback_errors: int = 0
    corrupt: int = 0
    failed: int = 0
    names_missing: int = 0
    names_overflowed: int = 0
    truncated: int = 0
    keypoints: int = 0
    layout_mismatch: bool = False
    by_getters: int = 0
    names_cut: int = 0


class Reader:
    """One subscription's reader thread and the counters only it writes.

    Counters are plain ints written by the reader thread only; others read them through
    :meth:`counts`, a snapshot the reader publishes under ``stats_lock`` (the queue's lock)
    each time its counts are consistent. ``on_exit`` runs on the reader thread after the
    queue is told the reader finished (the subscription's release, if it was closed).
    """

    def __init__(self, model_id: int, read_fd: int, wake_fd: int, decoder: Decoder,
                 queue: BatchQueue, lag: LagClock, *,
                 callback: Callable[[OpRecord], Any] | None = None,
                 batch_callback: Callable[[OpBatch], Any] | None = None,
                 sink: Any = None, on_exit: Callable[[], None] | None = None):
        self.model_id = model_id
        self._read_fd = read_fd
        self._wake_fd = wake_fd
        self.decoder = decoder
        self.queue = queue
        self.lag = lag
        self._callback = callback
        self._batch_callback = batch_callback
        #: agent mode (issue 21): an aclprof.binding.agentpath.QueueSink the records go to,
        #: from C once the layout is checked (no Python per batch); its slot counts them
        self._sink = sink
        decoder.names_in_python = sink is None  # agent mode: the queue holds the names
        self.on_exit = on_exit
        self.coalesce_ns = AGENT_COALESCE_NS if sink is not None else COALESCE_NS
        self.bytes_read = 0
        self.truncated = 0
        self.delivered = 0  # to callbacks; the queue counts its own
        self.dropped_callback = 0
        self.callback_errors = 0
        # The callback-error log's rate limit (reader thread only): errors already logged
        # (or summarised), when the last line went out, the latest exception.
        self._errors_logged = 0
        self._errors_logged_at = 0.0
        self._last_error = ""
        # One lock for the reader's and the queue's counters (an RLock: put() runs under it).
        self.stats_lock = queue.cond
        self._published = ReaderCounts()
        self.thread = threading.Thread(target=self._run, name=f"aclprof-reader-{model_id}",
                                       daemon=True)

    @property
    def has_callbacks(self) -> bool:
        return self._callback is not None or self._batch_callback is not None or self._sink is not None

    @property
    def callback_name(self) -> str:
        """The callback's name, for messages about it."""
        cb: Any = self._batch_callback if self._batch_callback is not None else self._callback
        if cb is None and self._sink is not None:
            return "(the aclprof agent's record queue)"
        if cb is None:
            return "(no callback: queue)"
        return f"{getattr(cb, '__module__', '?')}.{getattr(cb, '__qualname__', repr(cb))}"

    def start(self) -> None:
        self.thread.start()

    def counts(self) -> ReaderCounts:
        """The last published counters; call with ``stats_lock`` held to pair them with
        the queue's. In agent mode the sink's slot adds what the C loop read and
        delivered (one snapshot of its own, consistent by itself)."""
        published = self._published
        if self._sink is None:
            return published
        c = self._sink.counts()
        return published._replace(
            bytes_read=published.bytes_read + c.bytes_read,
            records_read=published.records_read + c.records_read,
            records_decoded=published.records_decoded + c.delivered,
            delivered=published.delivered + c.delivered,
            corrupt=published.corrupt + c.corrupt,
            names_missing=published.names_missing + c.missing_names,
            keypoints=published.keypoints + c.keypoints,
            names_cut=self.decoder.names_cut)  # the C loop's interner: live

    def dropped(self) -> int:
        """What :meth:`counts` says was dropped by the reader (corrupt, callback errors, decode
        failures), without building the rest; call with ``stats_lock`` held."""
        p = self._published
        corrupt = p.corrupt if self._sink is None else p.corrupt + self._sink.counts().corrupt
        return corrupt + p.dropped_callback + p.failed

    def live_bytes(self) -> int:
        """Bytes read so far (live progress, outside the identity)."""
        if self._sink is None:
            return self.bytes_read
        return self.bytes_read + int(self._sink.counts().bytes_read)

    def sync_lag(self) -> None:
        """Agent mode: fold the C loop's lag clock into :attr:`lag`."""
        if self._sink is None:
            return
        c = self._sink.counts()
        if c.lag_end:
            self.lag.merge(int(c.lag_end), int(c.lag_offset))

    def _publish_locked(self) -> None:
        d = self.decoder
        self._published = ReaderCounts(
            self.bytes_read, d.records_read, d.records_decoded, self.delivered,
            self.dropped_callback, self.callback_errors, d.corrupt, d.failed, d.names_missing,
            d.names_overflowed, self.truncated, d.keypoints, d.layout_mismatch, d.by_getters,
            d.names_cut)

    def _publish(self) -> None:
        with self.stats_lock:
            self._publish_locked()

    def _run(self) -> None:
        decoder = self.decoder
        batch: OpBatch | None = None  # decoded and not yet delivered
        try:
            while True:
                if self._sink is not None and decoder.native_ready:
                    # Agent mode: everything up to EOF in one C call, no GIL per batch.
                    flags = decoder.run_sink(self._sink, self._read_fd, self._wake_fd, self.coalesce_ns,
                                             self.lag.factor)
                    if flags & READ_WOKEN:
                        _log.warning("subscription reader stopped before EOF", model_id=self.model_id)
                        break
                    self.truncated += decoder.filled
                    decoder.filled = 0
                    break
                # Waiting, reading and decoding run in C with the GIL released, in one call
                # (read); Python holds the GIL only to wrap and deliver the batch (finish).
                n, flags = decoder.read(self._read_fd, self._wake_fd, self.coalesce_ns)
                if flags & READ_WOKEN:
                    _log.warning("subscription reader stopped before EOF", model_id=self.model_id)
                    break
                arrival = time.monotonic_ns()
                if n:
                    self.bytes_read += n
                    try:
                        batch = decoder.finish()
                    except Exception:  # counted by the decoder; go on with the next chunk
                        _log.exception("op record decoding failed", model_id=self.model_id)
                        batch = None
                    if batch is not None and len(batch):
                        self.lag.note_end(decoder.max_end, arrival)
                        self._deliver(batch)
                    batch = None
                if flags & READ_EOF:
                    self.truncated += decoder.filled
                    decoder.filled = 0
                    break
                self._publish()
        except Exception:
            _log.exception("subscription reader failed; discarding the rest (counted)",
                           model_id=self.model_id)
            if batch is not None:
                decoder.failed += len(batch)  # decoded, never delivered: not lost uncounted
            self._discard_until_eof()
        finally:
            self._summarise_callback_errors()
            self._publish()
            self.queue.reader_finished()
            if self.on_exit is not None:
                self.on_exit()

    def _discard_until_eof(self) -> None:
        """After a reader failure, keep the pipe flowing (the library's flush at unsubscribe
        waits for it) and count what is thrown away as dropped by decode error."""
        decoder = self.decoder
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
            self.bytes_read += n
            pending += n
            whole, pending = divmod(pending, size)
            decoder.records_read += whole
            decoder.failed += whole
            self._publish()
        self.truncated += pending

    def _deliver(self, batch: OpBatch) -> None:
        if self.has_callbacks:
            self._run_callbacks(batch)
        else:
            with self.stats_lock:  # queued and counted read in one step
                self.queue.put(batch)
                self._publish_locked()

    def _run_callbacks(self, batch: OpBatch) -> None:
        if self._sink is not None:  # agent mode, before the C loop takes over (layout check)
            with self.stats_lock:
                self._sink.push(batch.data, self.decoder.table)
                self.delivered += len(batch)
            return
        if self._batch_callback is not None:
            try:
                self._batch_callback(batch)
            except BaseException as exc:  # SystemExit too: it must not end the reader thread
                self.callback_errors += 1
                self.dropped_callback += len(batch)
                self._callback_failed(exc, "batch_callback", len(batch))
                return
            if self._callback is None:
                self.delivered += len(batch)
                return
        callback = self._callback
        assert callback is not None
        delivered = 0
        for record in batch.records():
            try:
                callback(record)
                delivered += 1
            except BaseException as exc:  # SystemExit too: it must not end the reader thread
                self.callback_errors += 1
                self.dropped_callback += 1
                self._callback_failed(exc, "callback", 1)
        self.delivered += delivered

    def _callback_failed(self, exc: BaseException, which: str, records: int) -> None:
        """Log a callback's exception: the first with its traceback, then rate-limited
        counts (``callback_errors`` and ``dropped_callback`` are already counted)."""
        self._last_error = f"{type(exc).__name__}: {exc}"
        if self.callback_errors == 1:
            self._errors_logged, self._errors_logged_at = 1, time.monotonic()
            _log.exception(
                f"{which} raised; records counted as dropped (later errors: one summary line "
                f"each {CALLBACK_ERROR_LOG_EVERY:g} s, totals in Subscription.stats)",
                model_id=self.model_id, callback=self.callback_name, records=records)
        elif time.monotonic() - self._errors_logged_at >= CALLBACK_ERROR_LOG_EVERY:
            self._summarise_callback_errors()

    def _summarise_callback_errors(self) -> None:
        """One line for the callback errors not logged yet (none: nothing)."""
        new = self.callback_errors - self._errors_logged
        if new <= 0:
            return
        self._errors_logged, self._errors_logged_at = self.callback_errors, time.monotonic()
        _log.error("subscription callback kept raising; records counted as dropped",
                   model_id=self.model_id, callback=self.callback_name, errors_since_last=new,
                   errors_total=self.callback_errors, dropped_total=self.dropped_callback,
                   last_error=self._last_error)
