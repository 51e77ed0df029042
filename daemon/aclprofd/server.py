"""The daemon's event loop: one thread, one ``selectors`` loop, non-blocking Unix sockets.

:class:`Daemon` owns the sockets and the lifecycle: accept, read (frames to the dispatch
tables of :mod:`aclprofd.ingest` and :mod:`aclprofd.control`), write, the flush timer,
when to reload, and the graceful stop. The rest lives in the modules it composes (see the
package docstring): among them the memory budget (:mod:`aclprofd.memory`), the socket
file (:mod:`aclprofd.socketfile`), SIGHUP and signal handlers (:mod:`aclprofd.reload`).

- A frame that breaks daemon/PROTOCOL.md closes that connection only, after an ERROR
  frame when the socket accepts it, with a log line naming the reason and the peer's pid.
- Nothing waits on a client: every socket is non-blocking (:mod:`aclprofd.fanout`).
- A graceful stop loses nothing uncounted: the daemon stops accepting, reads what every
  agent already wrote (until EAGAIN, within ``DRAIN_S``), stores it, and tells each agent
  with GOODBYE how many records (and LOSS-reported drops) it read on that connection; the
  agent counts the rest as lost. STREAM clients get END.

:func:`serve` runs a daemon until a stop event is set (tests, embedding); ``aclprofd``
(:mod:`aclprofd.main`) runs :meth:`Daemon.run` with signal handling and sd_notify.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from typing import Any

import numpy.ma  # noqa: F401  (numpy 2.4's np.unique imports it at its first call: 30-40 ms at start, not in a loop turn)
import structlog

from aclprof.protocol.wire import Kind, ProtocolError

from .aggregate.aggregator import Aggregator
from .bills import RequestBills
from .capture.recorder import CaptureService
from .config import Settings
from .conn import Conn, OutQueue
from .control import Control
from .detector.service import DetectorService
from .failures import Failures
from .fanout import Fanout
from .handshake import PROTOCOL_VERSION, admit
from .ingest import Ingest
from .loopjobs import run_slice
from .memory import array_bytes
from .persist import AGGREGATES_FILE, Persistence
from .reload import apply_reload, signal_handlers
from .socketfile import SocketFile
from .sockets import DaemonError, Waker, sd_notify
from .stalls import LoopStalls
from .status import PUBLISH_S, Counters, CountersSnapshot, Health, take_snapshot
from .storage import Storage
from .trace import Traces
from .transport import Transport, goodbye_frame

__all__ = ["Daemon", "DaemonError", "serve", "sd_notify", "PROTOCOL_VERSION", "AGGREGATES_FILE"]

_log = structlog.get_logger("aclprofd")

_HELLO_TIMEOUT_S = 10.0         # a connection that has not said HELLO by then is closed
KEY_AGE_EVERY_S = 10.0          # aggregate keys of gone agents are looked for this often (at a flush)
DRAIN_S = 1.0                   # at a graceful stop, read what agents wrote for at most this long


class Daemon:
    """The daemon: the event loop and the parts it composes, its :class:`Transport` among them
    (:attr:`transport`: the listening socket and the connections).

    Construct, then :meth:`start` (binds the socket: raises DaemonError if it cannot),
    then :meth:`run` until :meth:`stop` or a signal; :meth:`close` always.
    """

    def __init__(self, settings: Settings, *, reload: Callable[[], Settings] | None = None,
                 rss: Callable[[], int] | None = None):
        self.settings = settings
        self._reload = reload
        self.started_ts = time.time()
        self.started_mono = time.monotonic()
        self.storage: Storage | None = None
        self.metrics: Any = None
        self.counters = Counters()
        self.health = Health()
        self.stalls = LoopStalls()  # what made the long turns long (STATUS loop.stalls)
        #: the CPU slice asked of the kernel (STATUS loop.cpu_slice): set by aclprofd.main, the
        #: process's entry point; an embedded daemon (serve) leaves its host's scheduling alone
        self.cpu_slice: dict[str, Any] = {"requested_us": 0, "applied_us": None, "threads": 0,
                                          "error": "not the daemon's own process"}
        # The parts, each given what it uses: explicit collaborators (the transport is the
        # Outbox they answer clients through), or, for the daemon's changing state (settings
        # and storage, replaced by a reload or a start), the daemon seen through the part's
        # own small Protocol that names what it reads. None of them imports this module.
        self.transport = t = Transport(self._handle, on_close=self._on_close,
                                       on_protocol_error=self._on_protocol_error,
                                       memory_budget=settings.memory_budget_bytes,
                                       memory_refused=self.counters.memory_refused,
                                       max_control=settings.max_control_connections,
                                       control_idle_s=settings.control_idle_timeout_s,
                                       agent_idle_s=settings.agent_idle_timeout_s,
                                       max_agents_per_uid=settings.max_agent_connections_per_uid)
        self.memory = t.memory
        if rss is not None:  # a daemon sharing its process (the tests' in-process ones)
            self.memory.rss = rss
        self.socket_file = SocketFile(t, settings.socket, settings.socket_group)
        self.aggregator = Aggregator(settings.max_keys, settings.windows,
                                     max_keys_per_agent=settings.max_keys_per_agent,
                                     max_keys_per_uid=settings.max_keys_per_uid)
        self.aggregator.prom_by_name = settings.prometheus_op_name
        self._next_key_age = 0.0
        self.persist = Persistence(self, self.aggregator, self.health, settings.data_dir)
        self.fanout = Fanout(self, t, self.counters, self.memory)
        self.ingest = Ingest(self.counters, self.health, self.aggregator, self.persist, self.fanout, self.memory,
                             t.limiter)
        # observes the aggregator; Control serves its requests
        self.detection = DetectorService(settings, self.aggregator, t.queue, live_owners=self._agent_owners,
                                         truncations=self.counters.truncations)
        self.captures = CaptureService(self)  # the flight recorder: captures around new flags
        self.control = Control(self, t)
        self.traces = Traces(self, t, self.fanout, t.limits.requested)
        self.ingest.handlers.update(self.traces.agent_handlers)  # TRACE_DONE
        self.failures = Failures(self.aggregator.keys, t.limiter, host=self, fanout=self.fanout, outbox=t)
        self.ingest.handlers.update(self.failures.agent_handlers)  # OP_FAILURE (protocol 3)
        self.failures.listeners.append(self.captures.failure)  # a capture around each failure
        self.bills = RequestBills(t, fanout=self.fanout)
        self.ingest.handlers.update(self.bills.agent_handlers)  # REQUEST_BILL (protocol 4)
        self.control.handlers.update(self.bills.control_handlers)  # REQUESTS
        self.control.handlers.update(self.traces.control_handlers)  # TRACE
        # what the daemon holds itself comes off the budget first (aclprofd.memory)
        self.memory.tables.extend([lambda: array_bytes(self.aggregator),
                                   lambda: array_bytes(self.detection.detector)])
        self.memory.capacities.extend([lambda: self.aggregator.keys.capacity,
                                       lambda: self.detection.detector.store.cap])
        self.published: CountersSnapshot = take_snapshot(self)  # what /metrics reads
        self._next_publish = 0.0  # monotonic time the loop's next periodic publish is due
        self._stop = threading.Event()
        self._reload_requested = False
        self._waker = Waker()
        self.ready = threading.Event()
        self._last_kind = ""
        self._flushing: Iterator[None] | None = None  # the timer's flush, in steps over loop turns

    @property
    def socket_problem(self) -> str | None:
        """Why our socket file is gone and not recreated (a STATUS problem until it is back)."""
        return self.socket_file.problem

    @property
    def records_total(self) -> int:
        return self.counters.records_total

    @property
    def conns(self) -> Mapping[int, Conn]:
        """The open connections by file descriptor (the transport's)."""
        return self.transport.conns

    def _agent_owners(self) -> set[object]:
        """The owners (aclprofd.shares) of the agents connected now: their table entries stay."""
        return {c.keysrc.owner for c in self.transport.conns.values() if c.keysrc is not None and not c.closed}

    def publish(self) -> CountersSnapshot:
        """Take a counters snapshot and publish it for /metrics (loop thread)."""
        self.published = snap = take_snapshot(self)
        return snap

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Open storage, bind the socket, start metrics. DaemonError if impossible."""
        s = self.settings
        try:
            self.storage = Storage(s.data_dir, s.segment_bytes, s.disk_bytes, s.max_age_s,
                                   encode=s.segment_format == "compact")
        except OSError as exc:
            raise DaemonError(f"cannot use data dir {s.data_dir}: {exc.strerror or exc}") from None
        self.persist.load_aggregates()
        try:
            self.detection.start()
        except DaemonError:
            self.storage.close()
            self.storage = None
            raise
        try:
            self.socket_file.listen()
        except DaemonError:
            self.storage.close()  # releases the data dir's lock: a retry in this process may take it
            self.storage = None
            raise
        self.transport.sel.register(self._waker.reader, selectors.EVENT_READ, "wake")
        self.publish()
        if s.prometheus_port:
            from .metrics import Metrics
            try:
                self.metrics = Metrics(self, s, self._waker.wake)
            except (OSError, ValueError) as exc:  # ValueError: aclprofd.metrics_access.AccessError
                self.close()
                raise DaemonError(f"cannot serve Prometheus metrics on {s.prometheus_host}:{s.prometheus_port}: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
        self.captures.start()  # last: a failed start leaves no worker thread behind
        try:
            self.memory.start()  # the base: the daemon up, its aggregates loaded
        except ValueError as exc:
            self.close()
            raise DaemonError(str(exc)) from None
        _log.info("listening", socket=s.socket, data_dir=s.data_dir, pid=os.getpid(),
                  prometheus=f"{s.prometheus_host}:{s.prometheus_port}" if s.prometheus_port else None)

    def stop(self) -> None:
        """Ask :meth:`run` to flush and return (any thread; signal-safe)."""
        self._stop.set()
        self._waker.wake()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._waker.wake()

    def _on_hup(self) -> None:
        self._reload_requested = True  # the signal's wakeup fd byte wakes the loop

    def run(self, stop_event: threading.Event | None = None, *, signals: bool = False) -> None:
        """Serve until :meth:`stop`, ``stop_event`` or (with ``signals``) SIGTERM/SIGINT."""
        with signal_handlers(self._stop.set, self._on_hup, self._waker.write_fd) if signals else nullcontext():
            self._serve(stop_event)

    def _serve(self, stop_event: threading.Event | None) -> None:
        """The loop until a stop, then the graceful stop (drain, GOODBYE, END)."""
        self.stalls.watch_gc()
        self.ready.set()
        sd_notify("READY=1\nSTATUS=listening")
        flush_every = self.settings.flush_interval_s
        next_flush = time.monotonic() + flush_every
        try:
            while not self._stop.is_set() and not (stop_event is not None and stop_event.is_set()):
                now = time.monotonic()
                # frames left from a slice (aclprofd.transport): no sleep, the selector would
                # not wake for bytes already read
                rendering = self.metrics is not None and self.metrics.jobs.pending  # /metrics, in slices
                busy = self.fanout.exporting or self.transport.pending or rendering or self._flushing is not None
                timeout = 0.0 if busy else max(
                    0.0, min(next_flush - now, 0.1 if stop_event is not None else 1.0,
                             self._next_publish - now, self.detection.due(now)))
                self._turn(timeout)
                st = self.stalls
                if self._reload_requested:
                    self._reload_requested = False
                    with st.timed("reload"):
                        apply_reload(self, self._reload)
                    flush_every = self.settings.flush_interval_s
                now = time.monotonic()
                # a step is timed only when it has work (two clock reads and a timer each,
                # five idle steps a turn at ~100 turns a second: issue 21); an idle one's
                # few microseconds are the turn's unexplained time
                if self.traces.active:
                    with st.timed("traces"):
                        self.traces.tick(now)  # trace replies that timed out
                if now >= next_flush:
                    self._flushing = self.flush_steps()  # (one not ended: its rest is in this one)
                    next_flush = now + flush_every
                if self._flushing is not None:
                    with st.timed("flush"):
                        if run_slice(self._flushing):
                            self._flushing = None
                if now >= self._next_publish:
                    with st.timed("publish"):
                        self.publish()
                    # due a whole PUBLISH_S after this snapshot (the history's samples are a
                    # second apart at least); STATUS and /metrics publish between, due or not
                    self._next_publish = time.monotonic() + PUBLISH_S
                if self.detection.due(now) == 0:  # seconds to its next evaluation
                    with st.timed("detector"):
                        self.detection.tick(now)
                with st.timed("captures"):
                    self.captures.tick()
                st.end()
        finally:
            self.stalls.unwatch_gc()
            self.stalls.close()
            sd_notify("STOPPING=1")
            self.socket_file.stop_listening()
            self.traces.stopping()  # the agents' closes below answer waiting TRACE clients
            self._goodbye_agents()  # flushes
            self.fanout.end_all()
            self.publish()

    def _turn(self, timeout: float) -> None:
        """One select and everything it makes ready, then the stream and export pumps."""
        t, st = self.transport, self.stalls
        events = t.sel.select(t.accept_timeout(timeout))
        st.begin()
        for key, mask in events:
            data = key.data
            if data == "listen":
                with st.timed("accept"):
                    t.accept()
            elif data == "wake":
                self._waker.drain()
            else:
                conn: Conn = data
                t0 = time.perf_counter()
                self._last_kind = ""
                if mask & selectors.EVENT_READ and not conn.closed:
                    t.read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    t.send(conn)
                st.ended(f"{conn.role or 'new'} {self._last_kind or 'send'}", t0)
        # the connections whose frames wait from an earlier turn (timed only when some do:
        # with none, the call only starts the next turn)
        with st.timed("pending slices") if t.pending else nullcontext():
            t.serve_pending()
        with st.timed("streams"):
            self.fanout.pump_streams()
        if self.fanout.exports_running:
            with st.timed("exports"):
                self.fanout.pump_exports()
        if self.metrics is not None:
            with st.timed("metrics render"):
                self.metrics.jobs.pump()  # a slice of a /metrics rendering (aclprofd.loopjobs)

    def close(self) -> None:
        """Close every connection, the storage, metrics, and remove our socket file."""
        self.captures.close()
        self.socket_file.stop_listening()
        t = self.transport
        for conn in list(t.conns.values()):
            t.close_conn(conn, "daemon stopping")
        if self.storage is not None:
            self.storage.close()
            self.persist.save_aggregates(wait=True)  # on disk before the daemon is gone
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        t.sel.close()
        self._waker.close()
        _log.info("stopped", records_total=self.counters.records_total)

    def _goodbye_agents(self) -> None:
        """Graceful stop: read what every agent already wrote (until EAGAIN; at most
        ``DRAIN_S`` in all, an agent writing faster than we read stops the drain, not the
        daemon), store everything, then tell each agent with GOODBYE exactly how many
        records and LOSS-reported drops this connection delivered. The agent counts what it
        wrote beyond that as lost, so a stop or restart loses nothing uncounted."""
        t = self.transport
        deadline = time.monotonic() + DRAIN_S
        agents = [c for c in t.conns.values() if c.role == "agent" and not c.closed]
        for conn in agents:
            t.receive(conn, budget=None, deadline=deadline)
        self.flush()  # GOODBYE acknowledges records that are in the segment file
        for conn in agents:
            if not conn.closed:
                # best effort, never blocking: the agent reads nothing else after WELCOME,
                # so its receive buffer has room
                t.send_last(conn, goodbye_frame(conn))
                t.close_conn(conn, "daemon stopping")

    def _handle(self, conn: Conn, kind: Kind, payload: memoryview) -> Iterator[None] | None:
        """One frame: HELLO first, then the dispatch table of the connection's role. An agent
        frame whose handling is cut into steps returns them (the transport runs them)."""
        self._last_kind = kind.name  # the stall attribution's name of this turn's step
        if conn.role is None:
            if kind != Kind.HELLO:
                raise ProtocolError(f"expected HELLO, got {kind.name}")
            welcome = admit(conn, payload, self.started_ts)
            refusal = self.transport.limits.refusal(conn)  # the agents' share, per uid (aclprofd.connlimits)
            if refusal is not None:
                # before WELCOME: the agent's handshake fails with this reason and it backs off
                self.transport.fail(conn, refusal, quiet=True, protocol_error=False)
                return None
            self.transport.queue(conn, welcome)
            if conn.closed:  # the peer left before WELCOME could be written: it is gone
                return None
            self.transport.limits.admitted(conn)  # the connection limits per role (aclprofd.connlimits)
            if conn.role == "agent" and not conn.closed:
                self.fanout.agent_admitted(conn)  # LIVE, if a STREAM client watches
                self.traces.owners.admitted(conn)  # the first to announce a service owns it (aclprofd.trace_route)
        elif conn.role == "agent":
            handler = self.ingest.handlers.get(kind)
            if handler is None:
                raise ProtocolError(f"{kind.name} is not allowed from an agent")
            return handler(conn, payload)
        else:
            return self.control.handle(conn, kind, payload)  # a SNAPSHOT's reply: in steps
        return None

    def _on_close(self, conn: Conn) -> None:
        self.fanout.closed(conn)
        self.traces.closed(conn)
        self.failures.closed(conn)
        if conn.role == "agent":
            self.persist.store(conn)
        self.memory.released(conn.names_bytes + len(conn.out))
        # drop what the closed connection holds now, whoever still refers to the object
        conn.names, conn.names_order, conn.names_json, conn.names_bytes = {}, [], {}, 0
        conn.out = OutQueue()

    def _age_keys(self, mono: float) -> None:
        """Every ``KEY_AGE_EVERY_S``: the aggregate keys of gone agents that nothing fed for
        ``aggregate_idle_timeout`` leave (aclprofd.aggregate.aggregator.Aggregator.age_out)."""
        if mono < self._next_key_age:
            return
        self._next_key_age = mono + KEY_AGE_EVERY_S
        live = self._agent_owners()
        sources = [c.keysrc for c in self.transport.conns.values() if c.keysrc is not None and not c.closed]
        gone = self.aggregator.age_out(time.time(), self.settings.aggregate_idle_timeout_s, live.__contains__,
                                       sources)
        if gone:
            _log.info("aggregate keys aged out", keys=gone, idle_timeout_s=self.settings.aggregate_idle_timeout_s)

    def _on_protocol_error(self, conn: Conn) -> None:
        if not conn.refused:  # a refused request is logged by authz.authorize, not counted
            self.counters.protocol_errors += 1

    def flush(self) -> None:
        """The whole flush now (an EXPORT includes what was received until it; the stop)."""
        self._flushing = None  # a stepped one under way: this one does all it had left
        for _ in self.flush_steps():
            pass

    def flush_steps(self) -> Iterator[None]:
        """Write every connection's received records to the current segment, one agent a
        step (up to STORE_PENDING_MAX bytes each: aclprofd.ingest), then, a step each, close
        connections that never said HELLO, apply the storage caps, save the aggregates, trim
        the heap now and then. The loop's flush timer runs them a slice per turn
        (aclprofd.loopjobs.run_slice): a flush of 4 agents at 125 k records/s was 30-60 ms of
        the loop's CPU in one turn, and several times that of wall at load 4 (issue 19)."""
        mono = time.monotonic()
        t = self.transport
        for conn in list(t.conns.values()):
            if conn.role == "agent":
                if conn.pending_store and not conn.closed:
                    self.persist.store(conn)
                    yield
            elif conn.role is None and not conn.closed and mono - conn.connected > _HELLO_TIMEOUT_S:
                t.fail(conn, f"no HELLO within {_HELLO_TIMEOUT_S:g} s")
        t.limits.reap_idle(mono)
        self._age_keys(mono)
        yield
        if self.storage is None:
            return
        self.storage.flush()
        yield
        self.persist.save_aggregates()
        self.socket_file.check()
        yield
        self.memory.trim_if_due(mono)
        self.memory.refresh_if_due(mono)
        self.health.other_records(self.aggregator.other_records)


def serve(settings: Settings, stop_event: threading.Event, *,
          ready: threading.Event | None = None) -> Daemon:
    """Run a daemon on this thread until ``stop_event`` is set (no signal handlers); for
    tests and embedding. ``ready`` is set once the socket accepts connections. Returns the
    (closed) daemon, whose counters can still be read."""
    d = Daemon(settings)
    d.start()
    try:
        if ready is not None:
            ready.set()
        d.run(stop_event)
    finally:
        d.close()
    return d
