"""The agent's sender thread: connect (with backoff), move buffered records to the daemon,
and stop within a bounded time whatever the daemon does.

Its loop: connect when disconnected (0.1 s doubling to ``backoff_max``); take a chunk of
items from the buffer,
convert it into frames (WATCH/UNWATCH/NAMES/BATCH) and write it with non-blocking sends;
wait for room while a chunk is partly written; otherwise sleep until records arrive. In
agent mode, connected and not stopping, that last step is the C loop instead
(:meth:`Sender._serve`): waiting, framing and writing the queue's records without the GIL
until Python is needed (a control item, new names, the daemon's frames, a heartbeat or a
request bill due). The subscriptions' own drop counters are read where a count is needed
(a LOSS frame, a warning; ``agent.stats`` reads them itself), not polled.
Stopping: after ``request_stop`` it flushes until the buffer is empty and a final LOSS is
written, or the deadline passes, or no daemon answers; the thread never blocks longer than
one poll (50 ms) or one connection attempt (``connect_timeout``) at a time, so
``stop()`` returns in ``timeout`` + that.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any

import numpy as np

from aclprof._log import get_logger
from aclprof.agent.billfeed import BillFeeder
from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.agent.items import Batch, Unwatch, Watch
from aclprof.agent.watched import Watched
from aclprof.api.records import OP_DTYPE
from aclprof.binding.agentpath import (
    DEVICE,
    FRAMED,
    NEED_NAMES,
    NEED_WATCH,
    PUMP_INCOMING,
    PUMP_PYTHON,
    convert,
    window_end,
)
from aclprof.binding.lowlevel import MAX_DEVICES
from aclprof.protocol import wire
from aclprof.protocol.paths import permission_hint

__all__ = ["Sender", "MAX_FRAME_RECORDS"]

_log = get_logger("aclprof.agent")

MAX_FRAME_RECORDS = 1 << 15       # records per chunk taken from the buffer (1.8 MiB)
_BACKOFF_MIN = 0.1
_IDLE_CHECK_S = 0.2               # not in the C loop, nothing buffered: look again this often
_COALESCE_S = 0.1                 # while records flow: a send each this long, on the host's
                                  # grid of it (agentpath.window_end: a host's agents send
                                  # together, one wake-up of the daemon for their frames; each
                                  # wake-up costs the daemon ~0.5-1 ms of CPU after its loop
                                  # slept: 100 ms is ~10 a second) ...
_LIVE_COALESCE_S = 0.05           # ... or this while the daemon says someone watches (LIVE:
                                  # `aclprof tail` shows a record ~61 ms after its op, p99;
                                  # 25 ms: ~36 ms, but a median 0.72 us of host CPU per op
                                  # at 100 k ops/s against 0.63 at 50 ms, 10 ms 1.6 us:
                                  # each frame's fixed cost in the daemon, issue 21)
_WAKE_RECORDS = 8192              # ... or until this many records are buffered
# An unreachable daemon is a WARNING (ops must learn that records are being lost; at INFO
# it went unseen while 29,200 records were dropped), but rate-limited: the first after
# _WARN_AFTER s without a daemon (a restart takes ~1 s), or at once when records are being
# dropped; then at most one each _WARN_EVERY s, with the records dropped meanwhile.
_WARN_AFTER = 10.0
_WARN_EVERY = 60.0
#: with nothing to send this long, a heartbeat goes out (daemon/PROTOCOL.md "Heartbeat"):
#: the daemon closes agent connections that stay silent for its agent_idle_timeout
HEARTBEAT_S = wire.AGENT_HEARTBEAT_S
_HEARTBEAT = {"dropped": 0, "reason": "heartbeat"}
_OP_FAILURE_PROTOCOL = 3  # the daemon protocol that knows OP_FAILURE frames (issue 24)
_REQUEST_BILL_PROTOCOL = 4  # ... and REQUEST_BILL frames (issue 25)
# names mapped per GIL hold when a stop of the C framing call needs them: 32 hold it ~100 us
# on a 2-core VM (128 held it ~380 us, and a model's 1000 names in 8 such holds slowed the
# service's first steps after a connection by 0.3 ms on average, up to 7 ms:
# tests/bench/bench_agent_overhead.py) ...
_NAMES_STEP = 32
_NAMES_PAUSE_S = 0.0001  # ... with a sleep between holds: a thread waiting for the GIL gets it


class Sender:
    """The thread, and the stop request it obeys. ``watched`` is the agent's model table
    (guarded by the buffer's lock)."""

    def __init__(self, buffer: RecordBuffer, conn: Connection, watched: dict[int, Watched], *,
                 backoff_max: float):
        self.buffer = buffer
        self.conn = conn
        self.watched = watched
        self.backoff_max = backoff_max
        self.stopping = False       # under buffer.lock
        self._flush_deadline = 0.0  # under buffer.lock; 0 until the stop's flush begins
        self._pumped = 0            # records moved by the last _pump
        self.failures_unsent = 0    # OP_FAILURE frames held back from a daemon older than protocol 3
        self.bills_unsent = 0       # REQUEST_BILL frames held back from a daemon older than protocol 4
        self.bill_feeder: BillFeeder | None = None  # request attribution (set before start)
        self._bills_finished = False
        self.bills_failed = False  # request attribution raised: bills turned off (logged)
        # The unreachable-daemon warnings (sender thread only): since when no daemon, the
        # loss total then, and when the last warning went out with the loss total then.
        self._down_since: float | None = None
        self._down_lost = 0
        self._warned_at: float | None = None
        self._warned_lost = 0
        # the heartbeat (sender thread only): frames_sent when last seen, and since when
        self._hb_frames = -1
        self._hb_at = 0.0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="aclprof-agent", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def request_stop(self, flush_timeout: float) -> None:
        """Flush for at most ``flush_timeout`` s from now, then exit (``stopping`` must
        already be set, before the subscriptions were closed)."""
        with self.buffer.lock:
            self._flush_deadline = time.monotonic() + flush_timeout
        self.buffer.wake()

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # never let the thread die silently with records in hand
            _log.exception("the aclprof agent's sender failed; records are dropped from now on")
            with self.buffer.lock:
                self.stopping = True
        finally:
            self._finish()
            self.stopped.set()

    def _loop(self) -> None:
        conn, buffer = self.conn, self.buffer
        backoff = _BACKOFF_MIN
        next_attempt = 0.0
        while True:
            now = time.monotonic()
            with buffer.lock:
                stopping = self.stopping
                deadline = self._flush_deadline
            flushing = stopping and deadline > 0
            if flushing and now >= deadline:
                return
            if self.bill_feeder is not None:
                self._feed_bills(now, flushing)
            if conn.sock is None:
                if now >= next_attempt or flushing:
                    if self._connect():
                        backoff = _BACKOFF_MIN
                        self._note_reachable()
                    else:
                        self._note_unreachable()
                        next_attempt = time.monotonic() + backoff
                        backoff = min(backoff * 2, self.backoff_max)
                        if flushing:
                            return  # no daemon: nothing more can be flushed
                if conn.sock is None:
                    self._sleep(max(0.0, next_attempt - time.monotonic()))
                    continue
            # agent mode, connected and not stopping: the C loop frames the queue's records
            # and writes the pending bytes; Python's pass only sends the control items in
            # their place (with the records before each)
            serving = buffer.pump is not None and not stopping and conn.sock is not None
            if not self._pump(drain=not serving):
                continue  # connection lost; loop reconnects
            if conn.out and not serving:
                conn.wait_writable(buffer.wake_r)
                continue
            if flushing and buffer.empty():
                if self._send_loss() and not conn.out and buffer.empty():
                    return
                continue
            if not self._pumped:
                self._heartbeat(now)
            if serving:  # the steady state runs in C without the GIL until Python is needed
                self._serve(now)
                continue
            # While records flow, gather them for _COALESCE_S between sends (fewer, larger
            # frames and wake-ups: less GIL and CPU taken from the service), for
            # _LIVE_COALESCE_S while a STREAM client watches; when idle, sleep until the
            # first record arrives.
            busy = self._pumped > 0
            if not buffer.arm(_WAKE_RECORDS if busy else 1, now_if_items=stopping or not busy):
                continue
            if busy:  # until the window on the host's grid ends, as the C loop waits
                now_ns = int(now * 1e9)
                coalesce = int((_LIVE_COALESCE_S if conn.live else _COALESCE_S) * 1e9)
                self._sleep(max(0, window_end(now_ns, coalesce) - time.monotonic_ns()) / 1e9)
            else:
                self._sleep(_IDLE_CHECK_S)

    def _feed_bills(self, now: float, flushing: bool) -> None:
        """Request attribution's turn (nothing until a request is marked). A failure there
        turns request bills off for this agent, said at ERROR, and never stops the records."""
        feeder = self.bill_feeder
        assert feeder is not None
        try:
            if flushing and not self._bills_finished:
                self._bills_finished = True  # the readers are closed: bill what they read
                feeder.finish()
            else:
                feeder.pump(now)
        except Exception:
            _log.exception("request bills failed in the aclprof agent; they are off from now on (op records "
                           "still stream)")
            self.bill_feeder = None
            self.bills_failed = True

    def _heartbeat(self, now: float) -> None:
        """Nothing was sent for HEARTBEAT_S on this connection: send a heartbeat, a LOSS of
        0 records (every daemon accepts it and ignores it; a new frame kind would make a
        daemon of the previous version close the connection as a protocol error)."""
        conn = self.conn
        if conn.frames_sent != self._hb_frames:
            self._hb_frames, self._hb_at = conn.frames_sent, now
        elif now - self._hb_at >= HEARTBEAT_S:
            conn.queue_json(wire.Kind.LOSS, _HEARTBEAT)
            conn.flush()  # the loop waits for room if the socket is full
            self._hb_at = now

    def _connect(self) -> bool:
        """Connect, then WATCH every live model and LOSS for what was lost meanwhile."""
        if not self.conn.connect():
            return False
        self._hb_frames, self._hb_at = self.conn.frames_sent, time.monotonic()
        with self.buffer.lock:
            watched = list(self.watched.values())
        for w in watched:
            if w.live:
                self.conn.announce(w)
        self._send_loss()
        return True

    def _note_unreachable(self) -> None:
        """After a failed attempt: warn when the daemon has stayed away (rate-limited)."""
        now = time.monotonic()
        self.poll_subscription_drops()
        lost = self.buffer.lost_total()
        if self._down_since is None:
            self._down_since, self._down_lost = now, lost
        denied = self.conn.last_denied  # a missing group: no restart will fix it, say so at once
        refused = self.conn.last_refused  # a limit of the daemon's: it said which, say so at once
        if self._warned_at is None:
            if not denied and not refused and now - self._down_since < _WARN_AFTER and lost == self._down_lost:
                return
            dropped = lost - self._down_lost
        elif now - self._warned_at >= _WARN_EVERY:
            dropped = lost - self._warned_lost
        else:
            return
        with self.buffer.lock:
            buffered = self.buffer.buffered
        if denied:
            hint = permission_hint(self.conn.socket_path, "this service's user", "then restart this service")
            message = (f"aclprof daemon socket: permission denied; {hint}. "
                       "Records are buffered, the oldest dropped when the buffer is full")
        elif refused:
            message = ("the aclprof daemon refused this agent (see error); retrying with backoff, records are "
                       "buffered, the oldest dropped when the buffer is full")
        else:
            message = ("aclprof daemon unreachable; records are buffered, the oldest dropped when the "
                       "buffer is full (start aclprofd, or check ACLPROF_SOCKET)")
        _log.warning(
            message,
            socket=self.conn.socket_path, error=self.conn.last_error,
            unreachable_s=round(now - self._down_since, 1), dropped_since_last_warning=dropped,
            dropped_total=lost, buffered=buffered, attempts=self.conn.connect_failures)
        self._warned_at, self._warned_lost = now, lost

    def _note_reachable(self) -> None:
        """Connected: if the absence was warned about, say that it ended and what it cost."""
        if self._warned_at is not None and self._down_since is not None:
            _log.warning("aclprof daemon reachable again; the loss is reported to it (LOSS)",
                         socket=self.conn.socket_path,
                         unreachable_s=round(time.monotonic() - self._down_since, 1),
                         dropped_while_unreachable=self.buffer.lost_total() - self._down_lost)
        self._down_since = self._warned_at = None

    def _sleep(self, timeout: float) -> None:
        """Until woken (records, stop), the daemon speaks or hangs up, or ``timeout``."""
        poller = select.poll()
        poller.register(self.buffer.wake_r, select.POLLIN)
        sock = self.conn.sock
        if sock is not None:
            poller.register(sock, select.POLLIN)  # EOF or ERROR/GOODBYE from the daemon
        events = poller.poll(int(timeout * 1000) + 1)
        self.buffer.disarm()
        for fd, _ in events:
            if fd == self.buffer.wake_r:
                self.buffer.drain_wake()
            elif sock is not None and fd == sock.fileno():
                self.conn.check_incoming()

    def _send_loss(self) -> bool:
        """LOSS for everything lost since the last one, the subscriptions' drops read now;
        False if the connection broke."""
        self.poll_subscription_drops()
        return self.conn.send_loss()

    def poll_subscription_drops(self) -> None:
        """Fold the live subscriptions' own drop counters into the buffer's
        ``dropped_subscription``: before each LOSS and warning (the C loop never returns to
        Python just for them: each return takes the GIL from the service)."""
        with self.buffer.lock:
            watched = [w for w in self.watched.values() if w.live and w.sub is not None]
        for w in watched:
            dropped = w.sub.dropped
            if dropped != w.sub_dropped_seen:
                with self.buffer.lock:
                    self.buffer.dropped_subscription += dropped - w.sub_dropped_seen
                    w.sub_dropped_seen = dropped

    def _pump(self, drain: bool = True) -> bool:
        """Move a chunk of buffered items into frames and write them. False if the
        connection broke. A partly written chunk is finished before the next is built.
        ``drain``: the C queue's records after the last control item too (not when the C
        loop is about to take them)."""
        self._pumped = 0
        conn = self.conn
        if conn.out:  # the C loop, when it serves, writes them itself
            return conn.flush() if drain else True
        items, self._pumped = self.buffer.take(MAX_FRAME_RECORDS)
        native = self.buffer.native
        if not items and native is None:
            return True
        budget = MAX_FRAME_RECORDS  # records taken from the C queue in this pump
        out, gen = conn.out, conn.gen
        i, count = 0, len(items)
        while i < count:
            item = items[i]
            if native is not None and not isinstance(item, Batch) and item.seq:
                # the C queue's records queued before this control item go first
                moved, reached = self._drain_native(item.seq, budget)
                budget -= moved
                if not reached:  # the chunk is full: the rest waits for the next pump
                    self._pumped -= self.buffer.put_back(items[i:])
                    break
            i += 1
            if isinstance(item, Batch):
                # The subscription delivers many small batches (a few dozen records per
                # pipe read): the run of consecutive batches of one model is converted
                # as one, so the GIL-holding work per wake-up does not grow with them.
                w = item.watched
                parts = [item.data]
                last = item
                while i < count and isinstance(nxt := items[i], Batch) and nxt.watched is w:
                    parts.append(nxt.data)
                    last = nxt
                    i += 1
                # the subscription's name table only grows: its newest state maps them all
                self._send_records(w, parts, last.names)
            elif isinstance(item, Watch):
                w = item.watched
                if w.announced != gen and w.live:
                    conn.announce(w)
            elif isinstance(item, Unwatch):
                w = item.watched
                if w.announced == gen:
                    conn.queue_json(wire.Kind.UNWATCH, {"model_id": w.model_id})
                    # the model watched again meanwhile (a trace's resume, unwatch + watch)
                    # was announced at connect: announced again, after this UNWATCH
                    with self.buffer.lock:
                        for other in self.watched.values():
                            if other is not w and other.model_id == w.model_id:
                                other.announced = -1
            elif item.kind == wire.Kind.OP_FAILURE and conn.daemon_protocol < _OP_FAILURE_PROTOCOL:
                # an older daemon would close the connection on this kind: counted, not sent
                self.failures_unsent += 1
            elif item.kind == wire.Kind.REQUEST_BILL and conn.daemon_protocol < _REQUEST_BILL_PROTOCOL:
                self.bills_unsent += 1
            else:  # a control frame in order with the records (TRACE_DONE, OP_FAILURE)
                conn.queue_json(item.kind, item.payload)
        else:
            if native is not None and budget > 0 and drain:
                self._drain_native(None, budget)
        out.end_batch()
        return conn.flush()

    def _serve(self, now: float) -> None:
        """Agent mode, the steady state: one C call (:meth:`Connection.pump`) waits for the
        queue's rows, frames and writes them without the GIL, and returns only for Python's
        work: control items or a stop (the wake pipe), the daemon speaking, a framing stop
        (WATCH, NAMES, a device), a heartbeat's time or a request bill's."""
        conn, buffer = self.conn, self.buffer
        pump = buffer.pump
        assert pump is not None
        if self._pumped:  # Python just framed records: the next frame coalesces from now
            pump.busy = True  # (else the loop's own state: idle after a window with none)
            pump.last_ns = int(now * 1e9)
        # The earliest a heartbeat can be due: frames sent meanwhile (by the C loop) move the
        # heartbeat's clock when the call returns (_heartbeat), so while records flow the
        # thread takes the GIL once per HEARTBEAT_S. (It returned every 0.2 s to poll drop
        # counters, five GIL takes a second on the service's host; issue 21.)
        until = max(self._hb_at + HEARTBEAT_S, now + _IDLE_CHECK_S)
        feeder = self.bill_feeder
        if feeder is not None:
            until = min(until, feeder.next_due(now))
        r = conn.pump(pump, py_fd=buffer.wake_r, coalesce_s=_LIVE_COALESCE_S if conn.live else _COALESCE_S,
                      wake_rows=_WAKE_RECORDS, until=until, max_rows=MAX_FRAME_RECORDS, max_devices=MAX_DEVICES)
        if r.code == PUMP_PYTHON:
            buffer.drain_wake()
        elif r.code == PUMP_INCOMING:
            conn.check_incoming()
        elif r.code in (NEED_WATCH, NEED_NAMES, DEVICE):
            self._on_stop(r.code, r.slot, r.value)
        # PUMP_TIMEOUT: the loop does its periodic work; PUMP_ERROR: the connection is closed

    def _drain_native(self, limit: int | None, budget: int) -> tuple[int, bool]:
        """Agent mode: move up to ``budget`` records of the C queue (those before sequence
        ``limit``) into the open BATCH frame, one C call (no GIL) per run; Python only
        where the call stops for it (a WATCH, new NAMES, a learned device). Returns
        ``(records moved, whether everything before limit is taken)``."""
        native = self.buffer.native
        assert native is not None
        conn = self.conn
        out, gen = conn.out, conn.gen
        moved, head = 0, 0
        while True:
            at = out.reserve_records(budget - moved)
            code, n, head, slot, value = native.frame(gen, limit, budget - moved, MAX_DEVICES, out.buf, at)
            if n:
                out.commit_records(n)
                moved += n
            if code == FRAMED or moved >= budget:
                break
            self._on_stop(code, slot, value)
        self._pumped += moved
        return moved, limit is None or head >= limit

    def _on_stop(self, code: int, slot: int, value: int) -> None:
        """Python's part where framing stopped for it: announce the slot's model (WATCH),
        map and send its new names (NAMES), or take the device its records name."""
        conn, native, gen = self.conn, self.buffer.native, self.conn.gen
        assert native is not None
        w = self.buffer.slots.get(slot)
        if w is None:
            raise RuntimeError(f"aclprof agent: records of an unknown queue slot {slot} (a bug)")
        if code == NEED_WATCH:
            if w.announced == gen:
                w.announced = gen  # announced by Python already (at connect): tell the queue
            else:
                conn.announce(w)
        elif code == NEED_NAMES:
            # the slot's names so far, not only up to this row's: one NAMES frame for a
            # model's table, and its records after it in a few large BATCH frames
            known = int(native.slot_counts(slot).names)
            self._names_run(w, slot, max(value, known - 1))
        elif code == DEVICE:
            with self.buffer.lock:  # the trace thread reads the device under it
                old, w.device, w.device_from = w.device, value, "records"
            _log.info("the watched model's device learned from its records", model_id=w.model_id,
                      device=value, was=old)
            w.announced = -1
            conn.announce(w)

    def _names_run(self, w: Watched, slot: int, top: int) -> None:
        """Map ``w``'s names up to id ``top`` on this connection, _NAMES_STEP names per GIL
        hold with a real sleep between holds (the C calls between stops give the GIL away for
        microseconds only, and this thread would take it straight back), then frame them all
        in as few NAMES frames as they fit and give the C queue the new map. A NAMES frame per
        slice, as before, cut the records between them into a small BATCH frame each: ~30
        pairs per connection for a model of 1000 names, each small frame a new key's slow path
        in the daemon; under a CPU hog that burst made the service's steps 60-110 ms after a
        connection its slowest (issue 21, tests/bench/bench_agent_overhead.py)."""
        conn, native = self.conn, self.buffer.native
        assert native is not None
        mapping = conn.names.mapping(w)
        at = 0 if mapping is None else len(mapping)
        pieces = [self._names_slice(w, min(top, at + _NAMES_STEP - 1))]
        at += _NAMES_STEP
        while at <= top:
            time.sleep(_NAMES_PAUSE_S)
            pieces.append(self._names_slice(w, min(top, at + _NAMES_STEP - 1)))
            at += _NAMES_STEP
        for frame in wire.encode_name_pieces(pieces):
            conn.out.append(frame)
        native.set_map(slot, conn.gen, w.name_map)

    def _names_slice(self, w: Watched, top: int) -> tuple[int, list[str], str]:
        """One GIL hold of :meth:`_names_run`: map ``w``'s names up to id ``top`` and build
        their NAMES JSON (at most _NAMES_STEP names; the benchmark times it, the GIL hold
        per acquisition, issue 21)."""
        first, new_names = self.conn.names.extend_run(w, top, w.native_names)
        return first, new_names, wire.name_run_json(first, new_names)

    def _send_records(self, w: Watched, parts: list[Any], table: Any) -> None:
        """Append ``w``'s batches ``parts`` to the open BATCH frame (WATCH and NAMES first
        if this connection needs them)."""
        conn = self.conn
        out, names = conn.out, conn.names
        parts = [p for p in parts if len(p)]
        if not parts:
            return
        if len(parts) == 1:
            data = parts[0]
        else:
            if any(p.dtype is not OP_DTYPE and p.dtype != OP_DTYPE for p in parts):
                raise TypeError("aclprof agent: a batch is not of aclprof.api.records.OP_DTYPE")
            # joined as bytes, by bytes.join over the arrays' buffers: numpy's concatenate
            # copies a structured dtype field by field (~20x slower), and a uint8 view per
            # part cost ~0.5 us each (143 parts of 35 records: 72 us of GIL, now 6 us)
            bufs: list[Any] = [p if p.flags.c_contiguous else np.ascontiguousarray(p) for p in parts]
            data = np.frombuffer(b"".join(bufs), OP_DTYPE)
        if w.device_from in ("unknown", "thread"):
            self._learn_device(w, data)
        if w.announced != conn.gen:
            conn.announce(w)
        # Consecutive batches share one BATCH frame, converted in place by one C call that
        # runs without the GIL (issue 12: the service's step thread must not wait behind
        # the sender's numpy work to return from its step).
        n = len(data)
        at = out.reserve_records(n)
        top = convert(out.buf, at, data, names.mapping(w))
        if top >= 0:  # names this connection has no id for yet
            first, new_names = names.extend_run(w, top, table)
            # NAMES frames (a large table in several) go before the first record using them
            for frame in wire.encode_name_run(first, new_names):
                conn.out.append(frame)
            at = out.reserve_records(n)
            if convert(out.buf, at, data, names.mapping(w)) >= 0:
                raise RuntimeError("aclprof agent: a name id is still unmapped after "
                                   "NameMap.extend (a bug)")
        out.commit_records(n)

    def _learn_device(self, w: Watched, data: Any) -> None:
        """A model watched without ``device=``: a record whose ``devId`` is not 0 names its
        device (0 is CANN's "not filled", which the decoder replaced by the subscription's
        device: only another value is news). The daemon gets WATCH again, before these
        records, so STATUS and traces use it."""
        ids = data["device_id"]
        ids = ids[ids < MAX_DEVICES]  # not the C API's "no id" (-1 as u32) or garbage
        top = int(ids.max()) if len(ids) else 0
        if top == 0 or top == w.device:
            return
        with self.buffer.lock:  # the trace thread reads the device under it
            old, w.device, w.device_from = w.device, top, "records"
        w.announced = -1
        _log.info("the watched model's device learned from its records", model_id=w.model_id, device=top,
                  was=old)

    def _finish(self) -> None:
        """At thread exit: whatever is still buffered or unsent is lost (counted); report
        it if the daemon is still there, and close."""
        conn = self.conn
        leftover = self.buffer.discard_all()
        if leftover:
            # counted either way; said, because a stop that gives up on an absent or slow
            # daemon otherwise loses a whole run of records without a line above INFO
            _log.warning("the aclprof agent stopped with records it could not send; counted as dropped "
                         "(reported in a LOSS frame when connected; an absent daemon never learns of them)",
                         dropped=leftover, connected=conn.sock is not None, socket=conn.socket_path,
                         error=conn.last_error)
        if conn.sock is not None:
            if conn.out:
                # Bytes of a half-written frame cannot be followed by another frame: close.
                conn.disconnect("stopping with a frame half written")
            else:
                self._send_loss()
                deadline = time.monotonic() + 0.5
                while conn.out and conn.sock is not None and time.monotonic() < deadline:
                    conn.wait_writable(self.buffer.wake_r)
                if conn.out:
                    conn.disconnect("stopping")
        conn.close()
