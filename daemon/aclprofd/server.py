"""The daemon's event loop: one thread, one ``selectors`` loop, non-blocking Unix sockets.

:class:`Daemon` owns the sockets and the lifecycle: accept, read (frames to the dispatch
tables of :mod:`aclprofd.ingest` and :mod:`aclprofd.control`), write, the flush timer,
signals and reload, and the graceful stop. The rest lives in the modules it composes
(see the package docstring).

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
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from aclprof.protocol.safetext import scrub
from aclprof.protocol.wire import Kind, ProtocolError, decode_json, encode_json

from .aggregate import Aggregator
from .capture import CaptureService
from .config import Settings, changed
from .conn import Conn, OutQueue
from .control import Control
from .detector_control import DetectorService
from .fanout import Fanout
from .handshake import PROTOCOL_VERSION, hello
from .ingest import Ingest
from .persist import AGGREGATES_FILE, Persistence, malloc_trim
from .sockets import DaemonError, bind_socket, sd_notify, socket_is_ours
from .status import PUBLISH_S, Counters, CountersSnapshot, Health, take_snapshot
from .storage import Storage
from .trace import Traces
from .transport import Transport

__all__ = ["Daemon", "DaemonError", "serve", "sd_notify", "PROTOCOL_VERSION", "AGGREGATES_FILE"]

_log = structlog.get_logger("aclprofd")

_HELLO_TIMEOUT_S = 10.0         # a connection that has not said HELLO by then is closed
_TRIM_EVERY_S = 10.0            # hand freed heap pages back to the kernel this often
DRAIN_S = 1.0                   # at a graceful stop, read what agents wrote for at most this long
_REPLY_CAP = 64 << 20           # queued bytes per connection, at most (and at most a quarter of the budget)
_UNREAD_REPLIES = 1 << 20       # reply bytes queued while the socket is full: the client does not read
_TRIM_AFTER = 1 << 20           # a connection that held more than this: trim the heap at the next flush


class Memory:
    """The daemon's one memory budget (``memory_budget``, daemon/README.md "Memory budget"):
    what clients make it hold — queued outgoing bytes of every connection (replies, stream
    and export frames), name tables, received records not yet stored, partial frames —
    is summed on demand from the connections (at most 4096), never tracked incrementally
    (nothing to get out of step). A request that would pass the budget, or one client's
    share of it, is refused and counted by what it would have grown (``refused``)."""

    def __init__(self, daemon: Daemon):
        self.d = daemon

    @property
    def budget(self) -> int:
        return self.d.settings.memory_budget_bytes

    def used(self) -> int:
        return sum(len(c.out) + c.names_bytes + c.pending_bytes + c.reader.buffered
                   for c in self.d.conns.values())

    def fits(self, more: int) -> bool:
        return self.used() + more <= self.budget

    def reply_cap(self) -> int:
        """Bytes one connection may have queued (replies, stream and export frames)."""
        return min(_REPLY_CAP, self.budget // 4)

    def names_share(self) -> int:
        """Bytes one connection's name table may be charged."""
        return self.budget // 8

    def refuse(self, what: str) -> None:
        r = self.d.counters.memory_refused
        r[what] = r.get(what, 0) + 1


class Daemon(Transport):
    """The daemon: listening socket, connections, and the parts it composes.

    Construct, then :meth:`start` (binds the socket: raises DaemonError if it cannot),
    then :meth:`run` until :meth:`stop` or a signal; :meth:`close` always.
    """

    def __init__(self, settings: Settings, *, reload: Callable[[], Settings] | None = None):
        super().__init__()
        self.settings = settings
        self.max_control, self.control_idle_s = settings.max_control_connections, settings.control_idle_timeout_s
        self._reload = reload
        self.started_ts = time.time()
        self.started_mono = time.monotonic()
        self._socket_ino: int | None = None
        #: why our socket file is gone and not recreated (a STATUS problem until it is back)
        self.socket_problem: str | None = None
        self.aggregator = Aggregator(settings.max_keys, settings.windows)
        self.storage: Storage | None = None
        self.metrics: Any = None
        self.counters = Counters()
        self.health = Health()
        self.memory = Memory(self)
        self.persist = Persistence(self)
        self.fanout = Fanout(self)
        self.ingest = Ingest(self)
        self.detection = DetectorService(self)  # observes the aggregator; Control serves its requests
        self.captures = CaptureService(self)  # the flight recorder: captures around new flags
        self.control = Control(self)
        self.traces = Traces(self)  # registers TRACE and TRACE_DONE in the two tables above
        self.published: CountersSnapshot = take_snapshot(self)  # what /metrics reads
        self._published_mono = 0.0
        self._next_trim = 0.0
        self._stop = threading.Event()
        self._reload_requested = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.ready = threading.Event()

    @property
    def records_total(self) -> int:
        return self.counters.records_total

    def publish(self) -> CountersSnapshot:
        """Take a counters snapshot and publish it for /metrics (loop thread)."""
        self.published = snap = take_snapshot(self)
        self._published_mono = time.monotonic()
        return snap

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Open storage, bind the socket, start metrics. DaemonError if impossible."""
        s = self.settings
        try:
            self.storage = Storage(s.data_dir, s.segment_bytes, s.disk_bytes, s.max_age_s)
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
            self.listener = bind_socket(s.socket, s.socket_group)
        except DaemonError:
            self.storage.close()  # releases the data dir's lock: a retry in this process may take it
            self.storage = None
            raise
        self._socket_ino = os.stat(s.socket).st_ino
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.publish()
        if s.prometheus_port:
            from .metrics import Metrics
            try:
                self.metrics = Metrics(self, s.prometheus_host, s.prometheus_port, s.prometheus_op_name,
                                       s.prometheus_host_label)
            except OSError as exc:
                self.close()
                raise DaemonError(f"cannot serve Prometheus metrics on {s.prometheus_host}:{s.prometheus_port}: "
                                  f"{exc.strerror or exc}") from None
        self.captures.start()  # last: a failed start leaves no worker thread behind
        _log.info("listening", socket=s.socket, data_dir=s.data_dir, pid=os.getpid(),
                  prometheus=f"{s.prometheus_host}:{s.prometheus_port}" if s.prometheus_port else None)

    def stop(self) -> None:
        """Ask :meth:`run` to flush and return (any thread; signal-safe)."""
        self._stop.set()
        self._wake()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def run(self, stop_event: threading.Event | None = None, *, signals: bool = False) -> None:
        """Serve until :meth:`stop`, ``stop_event`` or (with ``signals``) SIGTERM/SIGINT."""
        old_handlers: dict[int, Any] = {}
        old_wakeup = None
        if signals:
            def on_stop(signum: int, frame: Any) -> None:
                self._stop.set()

            def on_hup(signum: int, frame: Any) -> None:
                self._reload_requested = True
            for sig, h in ((signal.SIGTERM, on_stop), (signal.SIGINT, on_stop), (signal.SIGHUP, on_hup)):
                old_handlers[sig] = signal.signal(sig, h)
            old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self.ready.set()
        sd_notify("READY=1\nSTATUS=listening")
        flush_every = self.settings.flush_interval_s
        next_flush = time.monotonic() + flush_every
        try:
            while not self._stop.is_set() and not (stop_event is not None and stop_event.is_set()):
                now = time.monotonic()
                timeout = 0.0 if self.fanout.exporting else max(
                    0.0, min(next_flush - now, 0.1 if stop_event is not None else 1.0,
                             self._published_mono + PUBLISH_S - now, self.detection.due(now)))
                self._turn(timeout)
                if self._reload_requested:
                    self._reload_requested = False
                    self._do_reload()
                    flush_every = self.settings.flush_interval_s
                now = time.monotonic()
                self.traces.tick(now)  # trace replies that timed out
                if now >= next_flush:
                    self.flush()
                    next_flush = time.monotonic() + flush_every
                if now >= self._published_mono + PUBLISH_S:
                    self.publish()
                self.detection.tick(now)
                self.captures.tick()
        finally:
            sd_notify("STOPPING=1")
            self._stop_listening()
            self.traces.stopping()  # the agents' closes below answer waiting TRACE clients
            self._goodbye_agents()  # flushes
            self.fanout.end_all()
            self.publish()
            if signals:
                for signum, old in old_handlers.items():
                    signal.signal(signum, old)
                signal.set_wakeup_fd(old_wakeup if old_wakeup is not None else -1)

    def _turn(self, timeout: float) -> None:
        """One select and everything it makes ready, then the stream and export pumps."""
        for key, mask in self.sel.select(self.accept_timeout(timeout)):
            data = key.data
            if data == "listen":
                self._accept()
            elif data == "wake":
                try:
                    while self._wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            else:
                conn: Conn = data
                if mask & selectors.EVENT_READ and not conn.closed:
                    self._read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self.send(conn)
        self.fanout.pump_streams()
        self.fanout.pump_exports()

    def close(self) -> None:
        """Close every connection, the storage, metrics, and remove our socket file."""
        self.captures.close()
        self._stop_listening()
        for conn in list(self.conns.values()):
            self._close(conn, "daemon stopping")
        if self.storage is not None:
            self.storage.close()
            self.persist.save_aggregates()
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()
        _log.info("stopped", records_total=self.counters.records_total)

    def _stop_listening(self) -> None:
        """Accept no more connections; remove the socket file if it is still ours."""
        if self.listener is None:
            return
        try:
            self.sel.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        self.listener = None
        try:
            # only if the path is still ours (another daemon may have replaced a stale one)
            if os.stat(self.settings.socket).st_ino == self._socket_ino:
                os.unlink(self.settings.socket)
        except OSError:
            pass

    def _check_socket(self) -> None:
        """At every flush: if our socket file was removed or replaced, listen again on a new
        one (new agents and the CLI could not reach us otherwise); connected clients keep
        their connections. A failure is logged and tried again at the next flush."""
        if self.listener is None or socket_is_ours(self.settings.socket, self._socket_ino):
            return
        try:
            new = bind_socket(self.settings.socket, self.settings.socket_group)
        except DaemonError as exc:
            if self.socket_problem is None:  # logged once; STATUS says so until it is back
                _log.error("socket file was removed or replaced and cannot be recreated",
                           socket=self.settings.socket, error=str(exc))
            # new agents and CLI commands cannot connect: unhealthy for whoever is still connected
            self.socket_problem = (f"socket file {self.settings.socket} was removed or replaced and cannot be "
                                   f"recreated: {exc}; new clients cannot connect (retried every flush)")
            return
        self.socket_problem = None
        self.sel.unregister(self.listener)
        self.listener.close()
        self.listener = new
        self._socket_ino = os.stat(self.settings.socket).st_ino
        self.sel.register(new, selectors.EVENT_READ, "listen")
        _log.warning("socket file was removed; listening again", socket=self.settings.socket)

    def _goodbye_agents(self) -> None:
        """Graceful stop: read what every agent already wrote (until EAGAIN; at most
        ``DRAIN_S`` in all, an agent writing faster than we read stops the drain, not the
        daemon), store everything, then tell each agent with GOODBYE exactly how many
        records and LOSS-reported drops this connection delivered. The agent counts what it
        wrote beyond that as lost, so a stop or restart loses nothing uncounted."""
        deadline = time.monotonic() + DRAIN_S
        agents = [c for c in self.conns.values() if c.role == "agent" and not c.closed]
        for conn in agents:
            self._receive(conn, budget=None, deadline=deadline)
        self.flush()  # GOODBYE acknowledges records that are in the segment file
        for conn in agents:
            if not conn.closed:
                # best effort, never blocking: the agent reads nothing else after WELCOME,
                # so its receive buffer has room
                self._send_last(conn, encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped}))
                self._close(conn, "daemon stopping")

    def _do_reload(self) -> None:
        from . import logsetup
        from .config import OPTIONS
        logsetup.reopen()
        if self._reload is None:
            _log.info("reopened logs")
            return
        try:
            new = self._reload()
        except Exception as exc:  # a bad config file must not kill a running daemon
            _log.error("config reload failed; keeping the running settings", error=str(exc))
            return
        live, restart = changed(self.settings, new)
        live_fields = {o.field: getattr(new, o.field) for o in OPTIONS if o.live}
        self.settings = applied = replace(self.settings, **live_fields)
        if self.storage is not None:
            self.storage.segment_bytes = applied.segment_bytes
            self.storage.disk_bytes = applied.disk_bytes
            self.storage.max_age_s = applied.max_age_s
        if self.metrics is not None:
            self.metrics.by_name = applied.prometheus_op_name
        self.max_control, self.control_idle_s = applied.max_control_connections, applied.control_idle_timeout_s
        self.detection.reload(applied)
        logsetup.configure(applied.log_level, applied.log_format, applied.log_file)
        _log.info("config reloaded", changed=live, needs_restart=restart)

    def _handle(self, conn: Conn, kind: Kind, payload: memoryview) -> None:
        """One frame: HELLO first, then the dispatch table of the connection's role."""
        if conn.role is None:
            if kind != Kind.HELLO:
                raise ProtocolError(f"expected HELLO, got {kind.name}")
            welcome = hello(conn, decode_json(payload), self.started_ts)
            # lone surrogates would make every UTF-8 writer of these (CLI, /metrics) raise
            conn.host = scrub(conn.host)
            conn.service = None if conn.service is None else scrub(conn.service)
            conn.labels = {scrub(k): scrub(v) for k, v in conn.labels.items()}
            if conn.keysrc is not None:
                conn.keysrc.host, conn.keysrc.service = conn.host, conn.service
            self.queue(conn, welcome)
            self.admitted(conn)  # the connection limits per role (aclprofd.transport)
            if conn.role == "agent" and not conn.closed:
                self.fanout.agent_admitted(conn)  # LIVE, if a STREAM client watches
        elif conn.role == "agent":
            handler = self.ingest.handlers.get(kind)
            if handler is None:
                raise ProtocolError(f"{kind.name} is not allowed from an agent")
            handler(conn, payload)
        else:
            self.control.handle(conn, kind, payload)

    def queue(self, conn: Conn, frame: bytes) -> None:
        """Queue a reply and send what the socket takes. A client that does not read its
        replies (any role: STREAM and EXPORT connections too) is closed once its queue passes
        its share of the memory budget, or once the budget as a whole is spent; counted."""
        if conn.out:
            # The socket is full and another reply comes: a CLI reads each reply before its
            # next request, so these bytes count as unread. Without this limit a client
            # pipelining tiny requests makes the loop compute thousands of replies per turn
            # (a stall for everyone), and its stream buffer would hide them from the cap.
            conn.unread_replies += len(frame)
        conn.out += frame
        n = len(conn.out)
        cap = self.memory.reply_cap()
        if n > len(frame) and (n > cap or conn.unread_replies > _UNREAD_REPLIES
                               or not self.memory.fits(0)):  # one reply alone always goes
            self.memory.refuse("replies")
            conn.out.clear()
            self._close(conn, f"client does not read its replies ({n} bytes queued, {conn.unread_replies} of them "
                              f"replies; at most {_UNREAD_REPLIES} bytes of unread replies and {cap} bytes in all, "
                              f"memory_budget {self.memory.budget} bytes)", level="warning")
            return
        self.send(conn)

    def send(self, conn: Conn) -> None:
        super().send(conn)
        if not conn.out:
            conn.unread_replies = 0

    def _on_close(self, conn: Conn) -> None:
        self.fanout.closed(conn)
        self.traces.closed(conn)
        if conn.role == "agent":
            self.persist.store(conn)
        if conn.names_bytes + len(conn.out) > _TRIM_AFTER:
            # what it held is garbage now: give the pages back at the next flush, not in 10 s
            self._next_trim = 0.0
        # drop what the closed connection holds now, whoever still refers to the object
        conn.names, conn.names_order, conn.names_json, conn.names_bytes = {}, [], {}, 0
        conn.out = OutQueue()

    def _on_protocol_error(self, conn: Conn) -> None:
        self.counters.protocol_errors += 1

    def flush(self) -> None:
        """Write every connection's received records to the current segment and flush; close
        connections that never said HELLO; save the aggregates; trim the heap now and then."""
        if self.storage is None:
            return
        mono = time.monotonic()
        for conn in list(self.conns.values()):
            if conn.role == "agent":
                self.persist.store(conn)
            elif conn.role is None and mono - conn.connected > _HELLO_TIMEOUT_S:
                self._fail(conn, f"no HELLO within {_HELLO_TIMEOUT_S:g} s")
        self.reap_idle(mono)
        self.storage.flush()
        self.persist.save_aggregates()
        self._check_socket()
        if mono >= self._next_trim:
            self._next_trim = mono + _TRIM_EVERY_S
            malloc_trim()
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
