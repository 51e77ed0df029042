"""The daemon's event loop: one thread, one ``selectors`` loop, non-blocking Unix sockets.

- Agents (role ``agent``) send HELLO, WATCH/UNWATCH, NAMES, BATCH and LOSS; batches are
  aggregated (vectorised, :mod:`aclprofd.aggregate`), fanned out to STREAM clients and queued
  for the segment files (:mod:`aclprofd.storage`), written every ``flush_interval_s``.
- Control clients (role ``control``) send STATUS, SNAPSHOT, STREAM, EXPORT and RESET.
- A frame that breaks daemon/PROTOCOL.md closes that connection only, after an ERROR
  frame when the socket accepts it, with a log line naming the reason and the peer's pid.
- Nothing waits on a client: every socket is non-blocking; STREAM clients have a bounded
  outgoing buffer (records beyond it are skipped and counted); EXPORT is produced a chunk
  at a time, only while the client's buffer is small, interleaved with ingestion.
- A graceful stop loses nothing uncounted: the daemon stops accepting, reads what every
  agent already wrote (until EAGAIN, within ``_DRAIN_S``), stores it, and tells each agent
  with GOODBYE how many records (and LOSS-reported drops) it read on that connection; the
  agent counts the rest as lost. Since-start aggregates are saved to the data dir at every
  flush and at stop, and loaded at start (daemon/README.md).

:func:`serve` runs a daemon until a stop event is set (tests, embedding); ``aclprofd``
(daemon/main.py) runs :meth:`Daemon.run` with signal handling and sd_notify.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import socket
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator

import numpy as np
import structlog

from aclprof.wire import (FLAG_KEYPOINT, FrameReader, Kind, ProtocolError, decode_batch, decode_json,
                          encode, encode_json)

from . import __version__
from .aggregate import Aggregator, KeySource
from .config import Settings, changed
from .filters import Filter, NameMatcher
from .sockets import DaemonError, bind_socket, sd_notify
from .storage import Storage

__all__ = ["Daemon", "DaemonError", "serve", "sd_notify", "PROTOCOL_VERSION"]

PROTOCOL_VERSION = 1
_log = structlog.get_logger("aclprofd")

_AGENT_KINDS = frozenset({Kind.WATCH, Kind.UNWATCH, Kind.NAMES, Kind.BATCH, Kind.LOSS})
_CONTROL_KINDS = frozenset({Kind.STATUS, Kind.SNAPSHOT, Kind.STREAM, Kind.EXPORT, Kind.RESET})
_RECV = 1 << 20                 # bytes per recv()
_READ_BUDGET = 8 << 20          # bytes read from one connection before serving the others
_CONTROL_OUT_CAP = 64 << 20     # a control client that stops reading its replies is closed
_EXPORT_OUT_LOW = 2 << 20       # produce more EXPORT frames only below this many buffered bytes
_EXPORT_SLICE_S = 0.02          # at most this long per loop turn on EXPORT encoding
_FRAME_RECORDS = 2048           # records per STREAM_RECORDS / EXPORT_RECORDS frame
_EST_RECORD_JSON = 220          # bytes per record in JSON, to decide skipping before encoding
_MAX_CONNECTIONS = 4096
_HELLO_MAX = 64 << 10           # bytes buffered before HELLO
_HELLO_TIMEOUT_S = 10.0         # a connection that has not said HELLO by then is closed
_STORE_PENDING_MAX = 4 << 20    # write a connection's records before the tick beyond this many bytes
_TRIM_EVERY_S = 10.0            # hand freed heap pages back to the kernel this often
_DRAIN_S = 1.0                  # at a graceful stop, read what agents wrote for at most this long
AGGREGATES_FILE = "aggregates.npz"


class _Rate:
    """Events per second over the last ``span`` whole seconds (one counter per second)."""

    __slots__ = ("span", "_slots")

    def __init__(self, span: int = 10):
        self.span = span
        self._slots: collections.deque[list[int]] = collections.deque()

    def add(self, n: int, now: float) -> None:
        sec = int(now)
        if self._slots and self._slots[-1][0] == sec:
            self._slots[-1][1] += n
        else:
            self._slots.append([sec, n])
            while self._slots[0][0] <= sec - self.span - 1:
                self._slots.popleft()

    def per_s(self, now: float) -> float:
        sec = int(now)
        total = sum(n for s, n in self._slots if sec - self.span <= s < sec)
        return total / self.span


class _Conn:
    """One client connection (agent or control)."""

    def __init__(self, sock: socket.socket, conn_id: str):
        self.sock = sock
        self.id = conn_id
        self.reader = FrameReader()
        self.out = bytearray()
        self.role: str | None = None
        self.pid: int | None = None
        self.host = ""
        self.service: str | None = None
        self.labels: dict[str, str] = {}
        self.connected = time.monotonic()
        self.closed = False
        self.want_write = False
        # agents
        self.names: dict[int, str] = {}
        self.names_order: list[tuple[int, str]] = []
        self.names_json: dict[int, str] = {}
        self.models: dict[int, dict[str, Any]] = {}
        self.records = 0
        self.dropped = 0
        self.rate = _Rate()
        self.lag_ns: int | None = None
        self.clock_offsets: dict[int, int] = {}  # device -> min(receive - op end), ns
        self.steps = 0  # step keypoint records received
        self.pending_store: list[tuple[float, bytes]] = []
        self.pending_bytes = 0
        self.keysrc: KeySource | None = None
        # control: STREAM and EXPORT
        self.stream: Filter | None = None
        self.stream_pending: list[tuple[_Conn, float, np.ndarray]] = []
        self.stream_pending_n = 0
        self.stream_skipped = 0
        self.matchers: dict[str, NameMatcher] = {}
        self.export: Iterator[bytes] | None = None

    def describe(self) -> dict[str, Any]:
        return {"conn": self.id, "role": self.role, "pid": self.pid, "service": self.service}


def _encode_records(records: np.ndarray, ts: np.ndarray | float, host: str, pid: int,
                    service: str | None, names_json: Callable[[int], str]) -> list[str]:
    """Records as JSON object strings (daemon/PROTOCOL.md "record"), one format string per
    record: the per-record cost of STREAM and EXPORT, paid only for records a client gets."""
    head = '"host":%s,"pid":%d,"service":%s,' % (json.dumps(host), pid, json.dumps(service))
    fmt = ('{"ts":%.6f,' + head.replace("%", "%%") + '"device":%d,"model":%d,"op_type":%s,"op_name":%s,'
           '"start":%d,"end":%d,"duration_ns":%d,"flag":%d,"thread_id":%d,"kind":"%s"}')
    n = len(records)
    tsl = [float(ts)] * n if not isinstance(ts, np.ndarray) else ts.tolist()
    types = [names_json(t) for t in records["op_type"].tolist()]
    names = [names_json(t) for t in records["op_name"].tolist()]
    flags = records["flag"]
    keypoint = (flags & np.uint32(FLAG_KEYPOINT)) != 0
    kinds = ["keypoint" if k else "op" for k in keypoint.tolist()]
    return [fmt % row for row in zip(tsl, records["device_id"].tolist(), records["model_id"].tolist(),
                                     types, names, records["start"].tolist(), records["end"].tolist(),
                                     records["duration"].tolist(),
                                     (flags & np.uint32(~FLAG_KEYPOINT & 0xFFFFFFFF)).tolist(),
                                     records["thread_id"].tolist(), kinds)]


def _note_lag(conn: _Conn, recs: np.ndarray) -> None:
    """Op times are the device's counter, not this host's clock (audit row 11): the lag is
    the receive time minus the newest op end, beyond the smallest such gap seen for that
    device on this connection (the clock offset plus the fastest delivery). Never
    negative; None until a batch with times arrived."""
    now = time.monotonic_ns()
    dev = recs["device_id"]
    groups = [int(dev[0])] if (dev == dev[0]).all() else np.unique(dev).tolist()
    lag = None
    for d in groups:
        ends = recs["end"] if len(groups) == 1 else recs["end"][dev == d]
        end = int(ends.max())
        if end == 0:
            continue  # no times (timeInfo off)
        gap = now - end
        off = min(conn.clock_offsets.get(d, gap), gap)
        conn.clock_offsets[d] = off
        lag = max(lag or 0, gap - off)
    if lag is not None:
        conn.lag_ns = lag


class Daemon:
    """The daemon: listening socket, connections, aggregates, storage, metrics.

    Construct, then :meth:`start` (binds the socket: raises DaemonError if it cannot),
    then :meth:`run` until :meth:`stop` or a signal; :meth:`close` always.
    """

    def __init__(self, settings: Settings, *, reload: Callable[[], Settings] | None = None):
        self.settings = settings
        self._reload = reload
        self.started_ts = time.time()
        self._started_mono = time.monotonic()
        self._id_base = f"{time.time_ns():x}-{os.getpid()}"
        self._seq = 0
        self.sel = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self._socket_ino: int | None = None
        self.conns: dict[int, _Conn] = {}
        self.aggregator = Aggregator(settings.max_keys, settings.windows)
        self.storage: Storage | None = None
        self.metrics: Any = None
        self.records_total = 0
        self.steps_total = 0  # step keypoint records (also in records_total)
        self.dropped_total = 0
        self.protocol_errors = 0
        self.stream_skipped_total = 0
        self.rate = _Rate()
        self.drops_by_agent: dict[tuple[int, str], int] = {}
        self._recent_drops: collections.deque[tuple[float, int, str | None, int]] = collections.deque()
        self._other_seen = 0
        self._other_growth_ts = 0.0
        self._next_trim = 0.0
        self._stop = threading.Event()
        self._reload_requested = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.ready = threading.Event()

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Open storage, bind the socket, start metrics. DaemonError if impossible."""
        s = self.settings
        try:
            self.storage = Storage(s.data_dir, s.segment_bytes, s.disk_bytes, s.max_age_s)
        except OSError as exc:
            raise DaemonError(f"cannot use data dir {s.data_dir}: {exc.strerror or exc}") from None
        self._load_aggregates()
        self.listener = bind_socket(s.socket, s.socket_group)
        self._socket_ino = os.stat(s.socket).st_ino
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        if s.prometheus_port:
            from .metrics import Metrics
            try:
                self.metrics = Metrics(self, s.prometheus_host, s.prometheus_port, s.prometheus_op_name)
            except OSError as exc:
                self.close()
                raise DaemonError(f"cannot serve Prometheus metrics on {s.prometheus_host}:{s.prometheus_port}: "
                                  f"{exc.strerror or exc}") from None
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
            def on_stop(signum, frame):
                self._stop.set()
            def on_hup(signum, frame):
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
                busy = any(c.export is not None and len(c.out) < _EXPORT_OUT_LOW for c in self.conns.values())
                timeout = 0.0 if busy else max(0.0, min(next_flush - now, 0.1 if stop_event is not None else 1.0))
                for key, mask in self.sel.select(timeout):
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
                        conn: _Conn = data
                        if mask & selectors.EVENT_READ and not conn.closed:
                            self._read(conn)
                        if mask & selectors.EVENT_WRITE and not conn.closed:
                            self._send(conn)
                self._pump_streams()
                self._pump_exports()
                if self._reload_requested:
                    self._reload_requested = False
                    self._do_reload()
                    flush_every = self.settings.flush_interval_s
                if time.monotonic() >= next_flush:
                    self.flush()
                    next_flush = time.monotonic() + flush_every
        finally:
            sd_notify("STOPPING=1")
            self._stop_listening()
            self._goodbye_agents()  # flushes
            if signals:
                for sig, h in old_handlers.items():
                    signal.signal(sig, h)
                signal.set_wakeup_fd(old_wakeup if old_wakeup is not None else -1)

    def close(self) -> None:
        """Close every connection, the storage, metrics, and remove our socket file."""
        self._stop_listening()
        for conn in list(self.conns.values()):
            self._close(conn, "daemon stopping")
        if self.storage is not None:
            self.storage.close()
            self._save_aggregates()
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()
        _log.info("stopped", records_total=self.records_total)

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

    def _goodbye_agents(self) -> None:
        """Graceful stop: read what every agent already wrote (until EAGAIN; at most
        ``_DRAIN_S`` in all, an agent writing faster than we read stops the drain, not the
        daemon), store everything, then tell each agent with GOODBYE exactly how many
        records and LOSS-reported drops this connection delivered. The agent counts what it
        wrote beyond that as lost, so a stop or restart loses nothing uncounted."""
        deadline = time.monotonic() + _DRAIN_S
        agents = [c for c in self.conns.values() if c.role == "agent" and not c.closed]
        for conn in agents:
            self._drain(conn, deadline)
        self.flush()  # GOODBYE acknowledges records that are in the segment file
        for conn in agents:
            if not conn.closed:
                self._say_goodbye(conn)
                self._close(conn, "daemon stopping")

    def _drain(self, conn: _Conn, deadline: float) -> None:
        """Read what the peer already sent (until EAGAIN or the deadline), for GOODBYE."""
        self._receive(conn, budget=None, deadline=deadline)

    def _say_goodbye(self, conn: _Conn) -> None:
        """Best effort, never blocking: the agent reads nothing else after WELCOME, so
        its receive buffer has room."""
        frame = encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped})
        try:
            conn.sock.send(bytes(conn.out) + frame)
        except OSError:
            pass
        conn.out.clear()

    def _do_reload(self) -> None:
        from . import logsetup
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
        applied = self.settings
        from .config import OPTIONS
        live_fields = {o.field: getattr(new, o.field) for o in OPTIONS if o.live}
        applied = replace(applied, **live_fields)
        self.settings = applied
        if self.storage is not None:
            self.storage.segment_bytes = applied.segment_bytes
            self.storage.disk_bytes = applied.disk_bytes
            self.storage.max_age_s = applied.max_age_s
        if self.metrics is not None:
            self.metrics.by_name = applied.prometheus_op_name
        logsetup.configure(applied.log_level, applied.log_format, applied.log_file)
        _log.info("config reloaded", changed=live, needs_restart=restart)

    # ---- sockets ------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: log, keep serving the others
                _log.error("accept failed", error=str(exc))
                return
            if len(self.conns) >= _MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            self._seq += 1
            conn = _Conn(sock, f"{self._id_base}-{self._seq}")
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        """The selector says ``conn`` is readable."""
        self._receive(conn, budget=_READ_BUDGET)

    def _receive(self, conn: _Conn, budget: int | None, deadline: float | None = None) -> None:
        """Receive and handle until EAGAIN, EOF, a closed connection, ``budget`` bytes (so one
        busy agent cannot starve the others; None: no limit) or ``deadline``."""
        while not conn.closed and (budget is None or budget > 0) and (
                deadline is None or time.monotonic() < deadline):
            try:
                data = conn.sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(conn, f"receive failed: {exc}", level="info")
                return
            if not data:
                self._close(conn, None)
                return
            if budget is not None:
                budget -= len(data)
            if not self._feed(conn, data):
                return

    def _feed(self, conn: _Conn, data: bytes) -> bool:
        """Handle the frames ``data`` completes; False once the connection is closed."""
        try:
            for kind, payload in conn.reader.feed(data):
                self._handle(conn, kind, payload)
                if conn.closed:
                    return False
        except ProtocolError as exc:
            self._fail(conn, str(exc))
            return False
        except Exception as exc:  # a bug must cost one connection, never the daemon
            _log.exception("internal error handling a frame", pid=conn.pid)
            self._fail(conn, f"internal error: {type(exc).__name__}")
            return False
        if conn.role is None and conn.reader.buffered > _HELLO_MAX:
            # an anonymous peer may not make the daemon buffer 16 MiB frames
            self._fail(conn, f"HELLO larger than {_HELLO_MAX} bytes")
            return False
        return True

    def _send(self, conn: _Conn) -> None:
        if conn.out:
            try:
                n = conn.sock.send(conn.out)
                del conn.out[:n]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                self._close(conn, f"send failed: {exc}", level="info")
                return
        want = bool(conn.out)
        if want != conn.want_write:
            conn.want_write = want
            self.sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0), conn)

    def _queue(self, conn: _Conn, frame: bytes) -> None:
        conn.out += frame
        if conn.role == "control" and conn.stream is None and conn.export is None and len(conn.out) > _CONTROL_OUT_CAP:
            self._close(conn, "control client does not read its replies")
            return
        self._send(conn)

    def _fail(self, conn: _Conn, reason: str) -> None:
        """A protocol error: ERROR frame (best effort), close, log with the peer's pid.
        An agent also gets GOODBYE: what it sent after the bad frame is counted as lost."""
        self.protocol_errors += 1
        frames = encode_json(Kind.ERROR, {"message": reason})
        if conn.role == "agent":
            frames += encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped})
        try:
            conn.sock.send(bytes(conn.out) + frames)
        except OSError:
            pass
        conn.out.clear()
        self._close(conn, reason, level="warning")

    def _close(self, conn: _Conn, reason: str | None, level: str = "info") -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.conns.pop(conn.sock.fileno(), None)
        conn.sock.close()
        if conn.role == "agent":
            self._store(conn)
        if conn.role is not None or reason:
            getattr(_log, level)("connection closed", reason=reason or "peer closed",
                                 role=conn.role, pid=conn.pid, service=conn.service,
                                 records=conn.records if conn.role == "agent" else None)

    # ---- frames -------------------------------------------------------------------------
    def _handle(self, conn: _Conn, kind: Kind, payload: bytes) -> None:
        if conn.role is None:
            if kind != Kind.HELLO:
                raise ProtocolError(f"expected HELLO, got {kind.name}")
            self._hello(conn, decode_json(payload))
            return
        if conn.role == "agent":
            if kind not in _AGENT_KINDS:
                raise ProtocolError(f"{kind.name} is not allowed from an agent")
            if kind == Kind.BATCH:
                self._batch(conn, payload)
            elif kind == Kind.NAMES:
                self._names(conn, decode_json(payload))
            elif kind == Kind.LOSS:
                self._loss(conn, decode_json(payload))
            elif kind == Kind.WATCH:
                obj = decode_json(payload)
                mid, dev = obj.get("model_id"), obj.get("device", 0)
                labels = obj.get("labels") or {}
                if not _is_int(mid) or not _is_int(dev) or not _is_labels(labels):
                    raise ProtocolError("WATCH needs an integer model_id and device and string labels")
                conn.models[mid] = {"model_id": mid, "device": dev, "labels": labels}
                _log.info("model watched", pid=conn.pid, service=conn.service, model_id=mid, device=dev)
            elif kind == Kind.UNWATCH:
                mid = decode_json(payload).get("model_id")
                if not _is_int(mid):
                    raise ProtocolError("UNWATCH needs an integer model_id")
                conn.models.pop(mid, None)
            return
        if kind not in _CONTROL_KINDS:
            raise ProtocolError(f"{kind.name} is not allowed from a control client")
        req = decode_json(payload)
        if kind == Kind.STATUS:
            self._queue(conn, encode_json(Kind.STATUS_REPLY, self.status()))
        elif kind == Kind.SNAPSHOT:
            window = req.get("window", "all")
            group_by = req.get("group_by", "type")
            flt = Filter.parse(req.get("filter"))
            try:
                reply = self.aggregator.snapshot(window, group_by, flt)
            except (ValueError, TypeError) as exc:
                raise ProtocolError(str(exc)) from None
            self._queue(conn, encode_json(Kind.SNAPSHOT_REPLY, reply))
        elif kind == Kind.STREAM:
            conn.stream = Filter.parse(req.get("filter"))
            conn.matchers = {}
            _log.info("stream started", pid=conn.pid)
        elif kind == Kind.EXPORT:
            since, until = req.get("since_ts"), req.get("until_ts")
            for v in (since, until):
                if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                    raise ProtocolError("since_ts/until_ts must be numbers or null")
            flt = Filter.parse(req.get("filter"))
            if conn.export is not None:
                raise ProtocolError("an EXPORT is already running on this connection")
            self.flush()  # include what was received until now
            conn.export = self._export(since, until, flt)
        elif kind == Kind.RESET:
            self.aggregator.reset()
            self._save_aggregates()  # a restart must not bring the old figures back
            _log.info("aggregates reset", by_pid=conn.pid)
            self._queue(conn, encode_json(Kind.RESET_REPLY, {}))

    def _hello(self, conn: _Conn, obj: dict[str, Any]) -> None:
        role, pid, host = obj.get("role"), obj.get("pid"), obj.get("host", "")
        service, labels = obj.get("service"), obj.get("labels") or {}
        if role not in ("agent", "control"):
            raise ProtocolError(f"HELLO role must be 'agent' or 'control', not {role!r}")
        if not _is_int(pid) or not isinstance(host, str):
            raise ProtocolError("HELLO needs an integer pid and a string host")
        if service is not None and not isinstance(service, str) or not _is_labels(labels):
            raise ProtocolError("HELLO service must be a string or null, labels an object of strings")
        conn.role, conn.pid, conn.host, conn.service, conn.labels = role, pid, host, service, labels
        if role == "agent":
            conn.keysrc = KeySource(host, pid, service)
        self._queue(conn, encode_json(Kind.WELCOME, {"version": __version__, "protocol": PROTOCOL_VERSION,
                                                     "pid": os.getpid(), "started_ts": self.started_ts}))
        _log.info("connected", role=role, pid=pid, host=host, service=service)

    def _names(self, conn: _Conn, obj: dict[str, Any]) -> None:
        names = obj.get("names")
        if not isinstance(names, dict):
            raise ProtocolError("NAMES needs an object of names")
        for k, v in names.items():
            try:
                nid = int(k)
            except ValueError:
                raise ProtocolError(f"name id {k!r} is not an integer") from None
            if not isinstance(v, str) or not 0 <= nid <= 0xFFFFFFFF:
                raise ProtocolError(f"name id {k!r} must be a u32 and name a string")
            old = conn.names.get(nid)
            if old is None:
                conn.names[nid] = v
                conn.names_order.append((nid, v))
            elif old != v:
                raise ProtocolError(f"name id {nid} redefined")

    def _name_json(self, conn: _Conn) -> Callable[[int], str]:
        cache, names = conn.names_json, conn.names
        def get(nid: int) -> str:
            s = cache.get(nid)
            if s is None:
                s = cache[nid] = json.dumps(names.get(nid, f"#{nid}"))
            return s
        return get

    def _loss(self, conn: _Conn, obj: dict[str, Any]) -> None:
        n = obj.get("dropped")
        if not _is_int(n) or n < 0:
            raise ProtocolError("LOSS needs a non-negative integer dropped")
        if n == 0:
            return
        conn.dropped += n
        self.dropped_total += n
        key = (conn.pid or 0, conn.service or "")
        self.drops_by_agent[key] = self.drops_by_agent.get(key, 0) + n
        if len(self.drops_by_agent) > 1000:  # bounded: forget the oldest agents
            self.drops_by_agent.pop(next(iter(self.drops_by_agent)))
        now = time.time()
        self._recent_drops.append((now, conn.pid or 0, conn.service, n))
        _log.info("agent reported loss", pid=conn.pid, service=conn.service, dropped=n, reason=obj.get("reason"))

    def _batch(self, conn: _Conn, payload: bytes) -> None:
        recs = decode_batch(payload)
        n = len(recs)
        if n == 0:
            return
        now = time.time()
        try:
            self.aggregator.ingest(conn.keysrc, recs, conn.names, now)
        except KeyError as exc:
            raise ProtocolError(f"batch uses name id {exc.args[0]} that was never defined") from None
        conn.records += n
        conn.rate.add(n, now)
        self.records_total += n
        self.rate.add(n, now)
        steps = int(np.count_nonzero(recs["flag"] & np.uint32(FLAG_KEYPOINT)))
        conn.steps += steps
        self.steps_total += steps
        _note_lag(conn, recs)
        conn.pending_store.append((now, payload))
        conn.pending_bytes += len(payload)
        if conn.pending_bytes >= _STORE_PENDING_MAX:
            # bounded memory at any rate: a fast agent's records go out before the tick
            self._store(conn)
        for c in self.conns.values():
            if c.stream is not None and not c.closed:
                self._offer(c, conn, recs, now)

    def _offer(self, client: _Conn, src: _Conn, recs: np.ndarray, now: float) -> None:
        flt = client.stream
        assert flt is not None
        if not flt.source_matches(src.host, src.pid or 0, src.service):
            return
        matcher = client.matchers.setdefault(src.id, NameMatcher())
        m = flt.mask(recs, matcher, src.names)
        sel = recs if m is None else recs[m]
        k = len(sel)
        if not k:
            return
        if len(client.out) + (client.stream_pending_n + k) * _EST_RECORD_JSON > self.settings.stream_buffer_bytes:
            client.stream_skipped += k
            self.stream_skipped_total += k
            return
        client.stream_pending.append((src, now, sel))
        client.stream_pending_n += k

    def _pump_streams(self) -> None:
        for c in list(self.conns.values()):
            if c.stream is None or c.closed or not (c.stream_pending or (c.stream_skipped and not c.out)):
                continue
            items: list[str] = []
            for src, ts, recs in c.stream_pending:
                items += _encode_records(recs, ts, src.host, src.pid or 0, src.service, self._name_json(src))
            c.stream_pending.clear()
            c.stream_pending_n = 0
            skipped, c.stream_skipped = c.stream_skipped, 0
            for i in range(0, max(len(items), 1), _FRAME_RECORDS):
                body = ('{"records":[' + ",".join(items[i:i + _FRAME_RECORDS]) + '],"skipped":%d}'
                        % (skipped if i == 0 else 0))
                c.out += encode(Kind.STREAM_RECORDS, body.encode())
            self._send(c)

    def _pump_exports(self) -> None:
        deadline = time.monotonic() + _EXPORT_SLICE_S
        for c in list(self.conns.values()):
            while c.export is not None and not c.closed and len(c.out) < _EXPORT_OUT_LOW:
                frame = next(c.export, None)
                if frame is None:
                    c.export = None
                    break
                c.out += frame
                if time.monotonic() > deadline:
                    break
            if c.out and not c.closed:
                self._send(c)

    def _export(self, since: float | None, until: float | None, flt: Filter) -> Iterator[bytes]:
        count = 0
        matchers: dict[int, tuple[dict, NameMatcher]] = {}
        assert self.storage is not None
        for chunk in self.storage.read(since, until):
            meta = chunk.meta
            host, pid, service = meta.get("host", ""), int(meta.get("pid", 0)), meta.get("service")
            if not flt.source_matches(host, pid, service):
                continue
            ent = matchers.get(id(chunk.names))
            if ent is None or ent[0] is not chunk.names:
                ent = matchers[id(chunk.names)] = (chunk.names, NameMatcher())
            m = flt.mask(chunk.records, ent[1], chunk.names)
            recs, ts = (chunk.records, chunk.ts) if m is None else (chunk.records[m], chunk.ts[m])
            if not len(recs):
                continue
            names = chunk.names
            cache: dict[int, str] = {}
            def nj(i: int, names=names, cache=cache) -> str:
                s = cache.get(i)
                if s is None:
                    s = cache[i] = json.dumps(names.get(i, f"#{i}"))
                return s
            for i in range(0, len(recs), _FRAME_RECORDS):
                items = _encode_records(recs[i:i + _FRAME_RECORDS], ts[i:i + _FRAME_RECORDS], host, pid, service, nj)
                count += len(items)
                yield encode(Kind.EXPORT_RECORDS, ('{"records":[' + ",".join(items) + "]}").encode())
        yield encode_json(Kind.EXPORT_END, {"count": count})

    # ---- storage ------------------------------------------------------------------------
    def _store(self, conn: _Conn) -> None:
        if conn.pending_store and self.storage is not None:
            ident = {"host": conn.host, "pid": conn.pid, "service": conn.service, "labels": conn.labels}
            self.storage.write(conn.id, ident, conn.names_order, conn.pending_store)
            conn.pending_store = []
            conn.pending_bytes = 0

    def flush(self) -> None:
        """Write every connection's received records to the current segment and flush."""
        if self.storage is None:
            return
        mono = time.monotonic()
        for conn in list(self.conns.values()):
            if conn.role == "agent":
                self._store(conn)
            elif conn.role is None and mono - conn.connected > _HELLO_TIMEOUT_S:
                self._fail(conn, f"no HELLO within {_HELLO_TIMEOUT_S:g} s")
        self.storage.flush()
        self._save_aggregates()
        if mono >= self._next_trim:
            self._next_trim = mono + _TRIM_EVERY_S
            _malloc_trim()
        other = self.aggregator.other_records
        if other > self._other_seen:
            self._other_seen, self._other_growth_ts = other, time.time()

    def _aggregates_path(self) -> str:
        return os.path.join(self.settings.data_dir, AGGREGATES_FILE)

    def _load_aggregates(self) -> None:
        """Continue the since-start aggregates of the previous daemon (a missing file is a
        first start; an unreadable one is logged and set aside, never fatal)."""
        path = self._aggregates_path()
        try:
            info = self.aggregator.load(path)
        except FileNotFoundError:
            return
        except Exception as exc:  # any bad file (zip, JSON, layout) must not stop the start
            _log.warning("cannot load the saved aggregates; starting from zero", path=path, error=str(exc))
            try:
                os.replace(path, path + ".bad")
            except OSError:
                pass
            return
        self._other_seen = self.aggregator.other_records  # old "(other)" records are no new problem
        _log.info("aggregates restored", path=path, **info)

    def _save_aggregates(self) -> None:
        """Write the since-start aggregates if they changed since the last save (atomic:
        temp file, fsync, rename). A failure is logged and counted like a storage error."""
        if not self.aggregator.dirty:
            return
        try:
            self.aggregator.save(self._aggregates_path())
        except OSError as exc:
            if self.storage is not None:
                self.storage.failed(exc)
            _log.error("cannot save the aggregates", error=str(exc))

    # ---- status -------------------------------------------------------------------------
    def problems(self, now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        out: list[str] = []
        st = self.storage
        if st is not None:
            if st.last_error and st.last_error_ts > now - 60:
                out.append(f"storage write failing: {st.last_error} ({st.records_lost} records not stored)")
            # Reaching disk_cap is no problem: a bounded store is meant to sit at its cap
            # (storage.at_cap in STATUS says so).
        while self._recent_drops and self._recent_drops[0][0] < now - 60:
            self._recent_drops.popleft()
        per: dict[tuple[int, str | None], int] = {}
        for _, pid, service, n in self._recent_drops:
            per[(pid, service)] = per.get((pid, service), 0) + n
        for (pid, service), n in per.items():
            out.append(f"agent pid {pid} ({service or 'no service'}) reported {n} dropped records in the last minute")
        if self._other_growth_ts > now - 60:
            out.append(f"aggregate key cap ({self.aggregator.max_keys}) reached: "
                       f"{self.aggregator.other_records} records counted under '(other)'")
        return out

    def status(self) -> dict[str, Any]:
        now = time.time()
        mono = time.monotonic()
        problems = self.problems(now)
        agents = []
        for c in self.conns.values():
            if c.role != "agent":
                continue
            agents.append({"pid": c.pid, "host": c.host, "service": c.service, "labels": c.labels,
                           "connected_s": round(mono - c.connected, 3), "models": list(c.models.values()),
                           "records": c.records, "records_per_s": c.rate.per_s(now), "dropped": c.dropped,
                           "lag_ns": c.lag_ns, "steps": c.steps})
        agg = self.aggregator
        return {"version": __version__, "pid": os.getpid(), "uptime_s": round(mono - self._started_mono, 3),
                "healthy": not problems, "problems": problems, "records_total": self.records_total,
                "records_per_s": self.rate.per_s(now), "dropped_by_agents": self.dropped_total,
                "agents": agents,
                "storage": self.storage.stats() if self.storage else None,
                "aggregates": {"keys": agg.nkeys - 1, "cap": agg.max_keys, "other_bucket_records": agg.other_records,
                               "windows": agg.window_names() + ["all"], "since_ts": agg.reset_ts},
                "steps_total": self.steps_total,
                "stream_skipped": self.stream_skipped_total, "protocol_errors": self.protocol_errors,
                "socket": self.settings.socket}


def _load_malloc_trim() -> Callable[[], None]:
    # Frames of ~230 KB arriving thousands of times a second leave glibc's heap holes that
    # it keeps (RSS creeps at saturation although Python-level memory is flat);
    # malloc_trim(0) returns them. No-op where there is no glibc.
    try:
        import ctypes
        trim = ctypes.CDLL("libc.so.6").malloc_trim
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0) and None


_malloc_trim = _load_malloc_trim()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_labels(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


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
