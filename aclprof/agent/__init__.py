"""The in-process agent: stream the op records of this process's models to the host daemon.

    import aclprof.agent as agent
    agent.start(service="resnet50", labels={"team": "vision"})
    agent.watch(model_id)             # aclprof.subscribe(model_id) + streaming
    ...
    agent.stop()                      # flush (bounded), close subscriptions, join

It never slows or breaks the service it runs in:

- No Python per batch (issue 21): each subscription's reader thread enters one compiled
  call (:class:`aclprof.binding.agentpath.QueueSink`) that waits for the pipe, reads,
  checks, decodes and names the records and appends them to the agent's bounded record
  queue in C, until EOF, without the GIL (only the first batch, which the layout check
  decodes in Python, is pushed from Python, its names left to the queue). When the queue
  holds more than ``buffer_records`` records the *oldest* are dropped and counted: the
  newest are kept.
- One sender thread moves the queued records into wire frames (``aclprof.protocol.wire``)
  and writes them, in its steady state inside one compiled call without the GIL
  (:class:`aclprof.binding.agentpath.Pump`, ``aclprof_aq_pump``: it waits for records,
  coalescing them, frames them with the name ids remapped to connection-scoped ids and the
  keypoint flag folded in, and makes non-blocking sends, waiting for room when the socket
  is full). It returns to Python only where Python is needed: a control item to send in
  its place among the records (WATCH, UNWATCH, TRACE_DONE, OP_FAILURE, REQUEST_BILL: the
  queue holds the records queued after one until Python has sent it), NAMES frames for new
  names, a device learned from the records, the daemon's frames, a heartbeat due (after
  ``HEARTBEAT_S`` with nothing sent) or a request bill due. It does not return to publish
  counters: ``stats()`` reads what the loop has sent so far, and the subscriptions' drop
  counters, as they are. A slow daemon fills the queue, never the service's
  threads.
- The GIL (the service's step thread needs it to return from ``aclmdlExecute``,
  and waits behind any other thread holding it, longer when the holder is descheduled on a
  busy host): the readers never take it while records flow, and the sender once per
  ``HEARTBEAT_S`` (10 s) while they do (~40 times a second, on every frame, before the C
  loop; 5 times a second, for counters, before its counters were read live).
  The agent never changes the interpreter's switch interval or any other global setting.
- With no daemon (not started yet, restarting, gone) the agent keeps the newest records
  up to the bound, counts what it drops, and reconnects with exponential backoff
  (0.1 s doubling to 5 s). Each (re)connection sends HELLO, WATCH for every live model,
  then a LOSS frame with everything lost since the last LOSS that got through, then the
  buffered batches (with the NAMES they need). Starting with no daemon is not an error,
  but a daemon that stays away is a WARNING (after 10 s, or at once when records are being
  dropped; then at most once a minute with the records dropped meanwhile), and its return
  after one is another.

Accounting: every record the library delivered for a watched model is either written to
the daemon's socket or counted in a LOSS frame (the subscription's own drops included), so
``records emitted = records received by the daemon + sum of LOSS.dropped``. A daemon that
stops gracefully (SIGTERM, SIGINT, a restart) first reads what its agents wrote, then sends
each a GOODBYE frame with the number of records (and of LOSS-reported drops) it received on
that connection: the agent counts what it wrote beyond that as lost (``dropped_unread``)
and reports it, with any LOSS the daemon did not read, on its next connection. Only a
daemon that *crashes* (``kill -9``) can lose records uncounted: what sat in the kernel's
socket buffer (at most one buffer, ~200 KB) plus what the daemon had not flushed to disk.

The parts: :mod:`~aclprof.agent.buffer` (the control items, the C record queue and the
loss counters),
:mod:`~aclprof.agent.connection` (handshake, non-blocking writes, GOODBYE accounting),
:mod:`~aclprof.agent.frames` (the reusable outgoing frame buffer),
:mod:`~aclprof.agent.names` (name ids and the record conversion),
:mod:`~aclprof.agent.sender` (the thread), :mod:`~aclprof.agent.watched` (one model);
this module is the public API.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aclprof._log import get_logger
from aclprof.agent.billfeed import BillFeeder
from aclprof.agent.billsend import BillReporter
from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.agent.failures import FailureReporter
from aclprof.agent.items import Unwatch, Watch
from aclprof.agent.sender import Sender
from aclprof.agent.trace import Tracer
from aclprof.agent.watched import Watched
from aclprof.protocol import wire
from aclprof.protocol.paths import resolve_socket_path

if TYPE_CHECKING:
    from aclprof.agent.bills import Bill, BillBook

__all__ = ["start", "watch", "unwatch", "report_bills", "stop", "stats", "running", "Agent", "AgentStats",
           "DEFAULT_BUFFER_RECORDS"]

_log = get_logger(__name__)

DEFAULT_BUFFER_RECORDS = 1 << 17  # ~7 MiB of OP_DTYPE records
_BACKOFF_MAX = 5.0


@dataclass(frozen=True)
class AgentStats:
    """Counters of the agent (read at any time).

    ``records_in`` counts records the subscriptions delivered to the agent; each of them
    is eventually ``records_sent``, ``dropped_buffer`` (buffer full / daemon absent /
    unsent at stop), ``dropped_unread`` (written to a connection, but the daemon's GOODBYE
    said it stopped without reading them) or still ``buffered``. ``dropped_subscription``
    is what the subscriptions themselves dropped. ``loss_reported`` is the sum of the
    ``dropped`` fields of LOSS frames written (less those a GOODBYE said were not read);
    ``loss_pending`` what no LOSS has carried yet. ``goodbyes`` counts GOODBYE frames;
    ``frames_sent`` and ``bytes_sent`` what was written (frames: whole ones).
    """

    socket_path: str
    connected: bool
    connections: int
    connect_failures: int
    records_in: int
    records_sent: int
    buffered: int
    dropped_buffer: int
    dropped_subscription: int
    loss_reported: int
    loss_pending: int
    frames_sent: int
    bytes_sent: int
    models: tuple[int, ...]
    dropped_unread: int = 0
    goodbyes: int = 0
    #: op failures (``start(failures=True)``): seen, queued as OP_FAILURE frames, dropped
    #: (more than ``failures.MAX_PENDING`` waiting, the watch's own queue full, or still
    #: buffered when the agent stopped: never sent), and held back because the daemon
    #: predates OP_FAILURE (protocol < 3)
    failures_seen: int = 0
    failures_queued: int = 0
    failures_dropped: int = 0
    failures_unsent: int = 0
    #: request bills (issue 25): queued as REQUEST_BILL frames, dropped (more than
    #: ``billsend.MAX_PENDING`` waiting), held back from a daemon older than protocol 4
    bills_queued: int = 0
    bills_dropped: int = 0
    bills_unsent: int = 0
    #: request attribution in agent mode (issue 25; 0 until a request is marked): ops the C
    #: tap kept for it, ops it dropped (full between two feeds), ops billed to a request and
    #: ops no window (or several) held, counted by reason in the book's stats
    bill_ops_tapped: int = 0
    bill_ops_dropped: int = 0
    bill_ops_attributed: int = 0
    bill_ops_unattributed: int = 0
    #: requests still open when the agent stopped (bills of the ended ones are sent at stop)
    bills_unfinished_at_stop: int = 0
    #: request attribution raised (a bug, logged at ERROR): bills are off, records still stream
    bills_failed: bool = False

    @property
    def dropped(self) -> int:
        return self.dropped_buffer + self.dropped_subscription + self.dropped_unread


class Agent:
    """The agent: its buffer, its connection and its sender thread. Use the module functions."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *,
                 service: str | None = None, labels: Mapping[str, str] | None = None,
                 buffer_records: int = DEFAULT_BUFFER_RECORDS, connect_timeout: float = 1.0,
                 backoff_max: float = _BACKOFF_MAX, trace_dir: str | os.PathLike[str] | None = None,
                 failures: bool = False):
        import numpy as np  # noqa: F401  (the agent needs it; fail here, not on the thread)

        self.socket_path = resolve_socket_path(socket_path)
        self.service = service
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.buffer_records = int(buffer_records)
        self.backoff_max = float(backoff_max)
        self._buffer = RecordBuffer(buffer_records, native=True)
        self._lock = self._buffer.lock  # one lock: the buffer, the counters, the models
        self._watched: dict[int, Watched] = {}
        self._conn = Connection(self.socket_path, self._buffer, service=service, labels=self.labels,
                                connect_timeout=connect_timeout)
        self._sender = Sender(self._buffer, self._conn, self._watched, backoff_max=backoff_max)
        # aclprof trace: TRACE_START from the daemon
        self._tracer = Tracer(self._buffer, trace_dir, pause=self._pause_for_trace, resume=self._resume_after_trace)
        self._conn.on_trace_start = self._tracer.on_start
        # op failures (issue 24): attached before the sender starts, detached at stop
        self._failures = FailureReporter(self._buffer) if failures else None
        self._bills = BillReporter(self._buffer)  # request bills (issue 25)
        # ... fed from the C queue's tap by the sender thread once a request is marked
        self._bill_feeder = self._sender.bill_feeder = BillFeeder(self._buffer, self._bills)
        self._sender.start()

    # -- service-facing API --------------------------------------------------------------------
    def watch(self, model_id: int, labels: Mapping[str, str] | None = None,
              device: int | None = None) -> None:
        """Subscribe ``model_id`` and stream its records (see :func:`watch`). During an
        ``aclprof trace`` session (no subscription may start then: 148047) the model is
        subscribed when the trace ends."""
        from aclprof.api.subscription import resolve_device, subscribe

        model_id = int(model_id)
        if device is not None:
            device, device_from = resolve_device(device), "argument"
        else:
            device = _thread_device()
            device_from = "unknown" if device is None else "thread"
        w = Watched(model_id, device, {str(k): str(v) for k, v in (labels or {}).items()}, device_from)
        buffer = self._buffer
        sink = buffer.sink(w)  # the model's slot in the C queue its reader fills
        with self._lock:
            if self._sender.stopping:
                raise RuntimeError("the aclprof agent is stopping")
            if model_id in self._watched and self._watched[model_id].live:
                raise ValueError(f"model {model_id} is already watched")
            tracer = self._tracer
            if tracer.pausing:
                # a trace's session runs (no subscription may start: 148047): done at its end
                if model_id in tracer.paused or model_id in tracer.deferred:
                    raise ValueError(f"model {model_id} is already watched (paused for a trace)")
                tracer.deferred[model_id] = (device, dict(w.labels))
                return
            self._watched[model_id] = w
            # The WATCH item goes in before the subscription can deliver anything.
            item = Watch(w, buffer.seq())
            buffer.items.append(item)

        try:
            # the reader appends to the C queue without the GIL: no Python per batch
            w.sub = subscribe(model_id, device=device, sink=sink)
            # A service's own aclprof.subscribe() of this model then names the agent.
            w.sub.holder = (
                f"The aclprof agent holds this model's subscription (aclprof.agent.watch({model_id})); "
                f"read its records from the daemon (aclprof tail), or call "
                f"aclprof.agent.unwatch({model_id}) first")
        except BaseException:
            with self._lock:
                w.live = False
                self._watched.pop(model_id, None)
                buffer.remove_item(item)
            raise
        buffer.wake()

    def unwatch(self, model_id: int, timeout: float = 5.0) -> None:
        """Close ``model_id``'s subscription (its last records are streamed)."""
        with self._lock:
            w = self._watched.get(int(model_id))
            if w is None or not w.live:
                tracer = self._tracer
                if tracer.paused.pop(int(model_id), None) or tracer.deferred.pop(int(model_id), None):
                    return  # paused for a trace: it is not resumed
                raise ValueError(f"model {model_id} is not watched")
        self._close_watched(w, timeout)

    def _close_watched(self, w: Watched, timeout: float) -> None:
        try:
            w.sub.close(timeout)  # the library flushes; the callback enqueues the rest
        except Exception as exc:
            _log.warning("closing the subscription failed", model_id=w.model_id, error=str(exc))
        buffer = self._buffer
        with self._lock:
            w.live = False
            dropped = w.sub.dropped
            buffer.dropped_subscription += dropped - w.sub_dropped_seen
            w.sub_dropped_seen = dropped
            buffer.items.append(Unwatch(w, buffer.seq()))
            if self._watched.get(w.model_id) is w:
                del self._watched[w.model_id]
        # the sender's C loop returns for the UNWATCH now (a trace's pause, a stop), not at its
        # next heartbeat
        buffer.wake()

    # -- traces (aclprof.agent.trace) ----------------------------------------------------------
    def _pause_for_trace(self, tracer: Tracer) -> dict[int, tuple[int | None, dict[str, str]]]:
        """Close every subscription (their records are streamed) for a trace's session;
        the models to resume, ``{model_id: (device, labels)}``."""
        with self._lock:
            if self._sender.stopping:
                raise RuntimeError("the aclprof agent is stopping")
            tracer.pausing = True
            watched = [w for w in self._watched.values() if w.live]
            tracer.paused = {w.model_id: (w.device, dict(w.labels)) for w in watched}
            tracer.deferred = {}
        for w in watched:
            self._close_watched(w, 5.0)
        with self._lock:
            return dict(tracer.paused)

    def _resume_after_trace(self, tracer: Tracer) -> list[str]:
        """Subscribe again the paused models (less those unwatched meanwhile) and the
        ones watch()ed during the trace; one error text per model that failed."""
        with self._lock:
            todo = {**tracer.paused, **tracer.deferred}
            tracer.pausing = False
            tracer.paused, tracer.deferred = {}, {}
            stopping = self._sender.stopping
        if stopping:
            return []  # stop() closes everything anyway
        errors = []
        for model_id, (device, labels) in todo.items():
            try:
                self.watch(model_id, labels=labels, device=device)
            except Exception as exc:
                _log.warning("resubscribing after a trace failed", model_id=model_id, error=str(exc))
                errors.append(f"model {model_id} could not be subscribed again: {exc}")
        return errors

    # -- stats ------------------------------------------------------------------------------
    def stats(self) -> AgentStats:
        """The counters now (see :class:`AgentStats`)."""
        b, c = self._buffer, self._conn
        with self._lock:
            records_in, dropped_buffer, buffered = b.totals()
            dropped_unread = b.dropped_unread
            models = tuple(sorted(m for m, w in self._watched.items() if w.live))
            sub_dropped = b.dropped_subscription + sum(
                (w.sub.dropped - w.sub_dropped_seen) for w in self._watched.values()
                if w.live and w.sub is not None)
            # what the sender's C loop has sent since it last returned to Python (it does not
            # return just to publish counters: each return takes the GIL from the service)
            live = b.pump.sent_now() if b.pump is not None else (0, 0, 0, 0)
            records_sent, loss_reported = c.records_sent + live[0], c.loss_reported + live[1]
            frames_sent, bytes_sent = c.frames_sent + live[2], c.bytes_sent + live[3]
        total_lost = dropped_buffer + sub_dropped + dropped_unread
        return AgentStats(
            socket_path=self.socket_path, connected=c.sock is not None,
            connections=c.connections, connect_failures=c.connect_failures,
            records_in=records_in, records_sent=records_sent, buffered=buffered,
            dropped_buffer=dropped_buffer, dropped_subscription=sub_dropped,
            loss_reported=loss_reported,
            loss_pending=max(0, total_lost - loss_reported),
            frames_sent=frames_sent, bytes_sent=bytes_sent, models=models,
            dropped_unread=dropped_unread, goodbyes=c.goodbyes, bills_queued=self._bills.queued,
            bills_dropped=self._bills.dropped, bills_unsent=self._sender.bills_unsent, **self._failure_stats(),
            bills_failed=self._sender.bills_failed, **self._bill_feed_stats())

    def _bill_feed_stats(self) -> dict[str, int]:
        s = self._bill_feeder.stats()
        return {"bill_ops_tapped": s["bill_ops_tapped"], "bill_ops_dropped": s["bill_ops_dropped"],
                "bill_ops_attributed": s.get("bill_ops_attributed", 0),
                "bill_ops_unattributed": s.get("bill_ops_unattributed", 0),
                "bills_unfinished_at_stop": s.get("bills_unfinished_at_stop", 0)}

    @property
    def bill_book(self) -> BillBook | None:
        """The book the agent attributes ops in (None until a request was marked): its
        ``stats`` say why ops went unattributed. Read-only use: the sender thread owns it."""
        return self._bill_feeder.book

    def report_bills(self, bills: Iterable[Bill]) -> None:
        """Send request bills (:class:`aclprof.agent.bills.Bill`, from a
        :class:`~aclprof.agent.bills.BillBook`) to the daemon as REQUEST_BILL frames."""
        self._bills.submit(bills)

    def _failure_stats(self) -> dict[str, int]:
        r = self._failures
        if r is None:
            return {}
        unsent_at_stop = self._buffer.frames_discarded.get(wire.Kind.OP_FAILURE, 0)
        seen, queued, dropped = r.counts()
        return {"failures_seen": seen, "failures_queued": queued,
                "failures_dropped": dropped + r.watch_dropped + unsent_at_stop,
                "failures_unsent": self._sender.failures_unsent}

    # -- stop --------------------------------------------------------------------------------
    def stop(self, timeout: float = 5.0) -> AgentStats:
        """Close every subscription (their records are buffered), send what can be sent
        within ``timeout`` seconds (unsent records are counted as dropped), join."""
        sender = self._sender
        with self._lock:
            already = sender.stopping
            sender.stopping = True
        self._tracer.cancel(min(timeout, 5.0) + 5.0)  # its session stops; nothing is resumed
        if self._failures is not None:
            self._failures.close(min(timeout, 5.0))  # before the flush: queued failures go with it
        with self._lock:
            watched = [w for w in self._watched.values() if w.live]
        if not already:
            for w in watched:
                self._close_watched(w, min(timeout, 5.0))
            sender.request_stop(timeout)
        self._buffer.wake()
        sender.thread.join(timeout + 2.0)
        if sender.thread.is_alive():
            _log.error("the aclprof agent's sender thread did not stop")
        else:
            self._buffer.close()
        return self.stats()


_agent: Agent | None = None
_agent_lock = threading.Lock()


def start(socket_path: str | os.PathLike[str] | None = None, *, service: str | None = None,
          labels: Mapping[str, str] | None = None, buffer_records: int | None = None,
          backoff_max: float | None = None, trace_dir: str | os.PathLike[str] | None = None,
          failures: bool | None = None) -> Agent:
    """Start the agent, or return the running one.

    A second ``start()`` returns the running agent when every argument it passes (those
    not None) matches it; one that differs raises ValueError naming the differing
    arguments: they would otherwise be silently ignored (stop() first to change them).

    Args:
        socket_path: the daemon's socket (default: ``ACLPROF_SOCKET``, else
            ``$XDG_RUNTIME_DIR/aclprof/aclprofd.sock``, else ``/run/aclprof/aclprofd.sock``).
        service: a service name shown by ``aclprof status`` and used in filters.
        labels: free-form ``str -> str`` labels of this process.
        buffer_records: the most records kept while the daemon is slow or absent
            (default :data:`DEFAULT_BUFFER_RECORDS`).
        backoff_max: the longest wait between two connection attempts (they start at
            0.1 s and double; default 5 s).
        trace_dir: where ``aclprof trace`` sessions write (a fresh private directory
            per trace in it; default the temporary directory, ``$TMPDIR`` or ``/tmp``).
        failures: report this process's AI Core exceptions to the daemon (OP_FAILURE
            frames; :func:`aclprof.watch_failures` underneath, beside any exception
            callback of the application's own). Default off.

    The daemon does not need to be running: the agent connects when it appears.
    """
    global _agent
    with _agent_lock:
        if _agent is not None:
            _check_same(_agent, socket_path, service, labels, buffer_records, backoff_max)
            if failures is not None and failures != (_agent._failures is not None):
                raise ValueError(f"aclprof.agent.start(): an agent is already running with failures="
                                 f"{_agent._failures is not None}; call aclprof.agent.stop() first to change it")
            if trace_dir is not None and os.fspath(trace_dir) != _agent._tracer.trace_dir:
                raise ValueError(f"aclprof.agent.start(): an agent is already running with trace_dir="
                                 f"{_agent._tracer.trace_dir!r}; call aclprof.agent.stop() first to change it")
            return _agent
        _agent = Agent(socket_path, service=service, labels=labels,
                       buffer_records=DEFAULT_BUFFER_RECORDS if buffer_records is None else buffer_records,
                       backoff_max=_BACKOFF_MAX if backoff_max is None else backoff_max, trace_dir=trace_dir,
                       failures=bool(failures))
        return _agent


def _check_same(agent: Agent, socket_path: str | os.PathLike[str] | None, service: str | None,
                labels: Mapping[str, str] | None, buffer_records: int | None,
                backoff_max: float | None) -> None:
    """Raise ValueError naming each given argument that differs from the running agent's."""
    differ = []
    if socket_path is not None and resolve_socket_path(socket_path) != agent.socket_path:
        differ.append(f"socket_path={resolve_socket_path(socket_path)!r} (running: {agent.socket_path!r})")
    if service is not None and service != agent.service:
        differ.append(f"service={service!r} (running: {agent.service!r})")
    if labels is not None and {str(k): str(v) for k, v in labels.items()} != agent.labels:
        differ.append(f"labels={dict(labels)!r} (running: {agent.labels!r})")
    if buffer_records is not None and int(buffer_records) != agent.buffer_records:
        differ.append(f"buffer_records={buffer_records!r} (running: {agent.buffer_records!r})")
    if backoff_max is not None and float(backoff_max) != agent.backoff_max:
        differ.append(f"backoff_max={backoff_max!r} (running: {agent.backoff_max!r})")
    if differ:
        raise ValueError(
            "aclprof.agent.start(): an agent is already running with other arguments: "
            + "; ".join(differ) + ". Call aclprof.agent.stop() first to restart it with these")


def _require() -> Agent:
    agent = _agent
    if agent is None:
        raise RuntimeError("the aclprof agent is not started; call aclprof.agent.start() first")
    return agent


def watch(model_id: int, labels: Mapping[str, str] | None = None, device: int | None = None) -> None:
    """Subscribe ``model_id`` and stream its op records to the daemon.

    ``device``: the device the model was loaded on. CANN has no call that tells a model's
    device, so without it the agent takes the calling thread's current device
    (``aclrtGetDevice``: a model loads on the device of the context that loaded it; right
    when this thread loaded it), and else reports the device as unknown. Either way a
    record whose ``devId`` names another device (CANN leaves ``devId`` 0 on its main path;
    the mock fills it) corrects it, and the daemon is told (WATCH again). The device shows
    in ``aclprof status`` and decides which device an ``aclprof trace`` profiles and counts
    the paused ops on: pass it when this thread did not load the model."""
    _require().watch(model_id, labels=labels, device=device)


def _thread_device() -> int | None:
    """The calling thread's current device (``aclrtGetDevice``), None when it has none."""
    from aclprof.binding import lowlevel
    from aclprof.binding.errors import AclError

    try:
        return lowlevel.rt_get_device()
    except AclError:  # no context on this thread: the device is not known here
        return None


def report_bills(bills: Iterable[Bill]) -> None:
    """Send request bills to the daemon (see :meth:`Agent.report_bills`)."""
    _require().report_bills(bills)


def unwatch(model_id: int) -> None:
    """Stop streaming ``model_id`` (its subscription is closed; its records are flushed)."""
    _require().unwatch(model_id)


def stats() -> AgentStats:
    """The running (or last stopped) agent's counters."""
    agent = _agent if _agent is not None else _last
    if agent is None:
        raise RuntimeError("the aclprof agent was never started")
    return agent.stats()


def running() -> bool:
    """Whether an agent is running (started and not stopped)."""
    return _agent is not None


_last: Agent | None = None


def stop(timeout: float = 5.0) -> AgentStats | None:
    """Flush (at most ``timeout`` seconds), close every subscription, join the sender.
    Returns the final counters (None if the agent was not running)."""
    global _agent, _last
    with _agent_lock:
        agent, _agent = _agent, None
    if agent is None:
        return None
    _last = agent
    return agent.stop(timeout)


def _forget_after_fork() -> None:
    """In a forked child the sender thread and the subscriptions do not exist: forget the
    parent's agent (the child may start its own, with a fresh buffer, locks, wake pipe and
    sender: :func:`start`) instead of waiting on it at exit.

    The child's copies of the parent's connection and wake pipe are closed, never shut
    down (that would end the parent's connection): a child must not keep the parent's
    daemon connection open after the parent closes it, nor hold fds it will never use.
    """
    global _agent, _agent_lock
    parent, _agent = _agent, None
    _agent_lock = threading.Lock()
    if parent is None:
        return
    parent._sender.stopping = True  # its thread does not exist here; nothing may wait on it
    sock, parent._conn.sock = parent._conn.sock, None
    if sock is not None:
        try:
            sock.close()  # this process's copy only; no shutdown()
        except OSError:
            pass
    parent._buffer.close(in_child=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _stop_at_exit() -> None:
    try:
        stop(timeout=2.0)
    except Exception as exc:  # pragma: no cover - best effort at exit
        _log.warning("stopping the aclprof agent at exit failed", error=str(exc))

