"""Daemons for the tests: a raw wire client (agent or control role), the daemon served on a
thread of the test process (:class:`InProcess`, fast), and the installed ``aclprofd`` as a
child process (:class:`Daemon`, ready when it says so through sd_notify). Both expose the
socket path as ``.socket``.

Logs never reach pytest's output: a child daemon logs into its own files (``log_path``,
``out_path``); an in-process daemon's loggers are pointed at :data:`DAEMON_LOGS`, which
writes them into the running test's log file (``tests/conftest.py`` names it per test and
shows it with a failure). Before, an in-process daemon logged through structlog's default
configuration to whatever ``sys.stdout`` was, and between two tests (pytest's capture
suspended) that was the terminal: ``connection closed`` lines appeared between the dots."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aclprof.cli.client import Client as ControlClient
from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import FrameReader, Kind, decode_json, encode_batch, encode_json, encode_names, recv_frame

from .procs import env, short_tmpdir

__all__ = ["Client", "agent", "status", "InProcess", "Daemon", "running", "DaemonLogs", "DAEMON_LOGS"]


class Client:
    """A blocking wire client (agent or control)."""

    def __init__(self, path: str, role: str = "control", *, pid: int | None = None, host: str = "testhost",
                 service: str | None = None, labels: dict | None = None, hello: bool = True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.reader = FrameReader()
        self.pending: list = []
        self.lost: list[dict] = []  # END's storage loss periods of the last export
        self.pid = os.getpid() if pid is None else pid
        if hello:
            self.send_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": self.pid, "host": host,
                                        "service": service, "labels": labels or {}})
            kind, payload = self.recv()
            assert kind == Kind.WELCOME, (kind, payload)
            self.welcome = decode_json(payload)

    def send_json(self, kind: Kind, obj: Any) -> None:
        self.sock.sendall(encode_json(kind, obj))

    def send_batch(self, records: np.ndarray) -> None:
        self.sock.sendall(encode_batch(records))

    def names(self, mapping: dict[int, str]) -> None:
        """Define names as an agent does: a large table in several NAMES frames."""
        for frame in encode_names(mapping):
            self.sock.sendall(frame)

    def recv(self) -> tuple[Kind, bytes]:
        frame = recv_frame(self.sock, self.reader, self.pending)
        if frame is None:
            raise EOFError("daemon closed the connection")
        return frame

    def request(self, kind: Kind, obj: Any | None = None) -> dict:
        self.send_json(kind, obj or {})
        k, payload = self.recv()
        assert k == Kind(kind + 1), (k, payload)
        return decode_json(payload)

    def export(self, **req: Any) -> list[dict]:
        self.send_json(Kind.EXPORT, {"since_ts": None, "until_ts": None, "filter": {}, **req})
        out: list[dict] = []
        while True:
            k, payload = self.recv()
            if k == Kind.END:
                end = decode_json(payload)
                self.lost = end.pop("lost", [])  # storage loss periods of the window (a full disk)
                assert end == {"records": len(out), "skipped": 0}
                return out
            assert k == Kind.EXPORT_RECORDS
            out += [json.loads(line) for line in bytes(payload).splitlines()]

    def stream_frames(self) -> tuple[list[dict], int, Kind]:
        """The next STREAM frame: (records, skipped, kind); END gives its counts' skipped."""
        k, payload = self.recv()
        if k == Kind.STREAM_RECORDS:
            data = bytes(payload)
            assert data.endswith(b"\n")
            return [json.loads(line) for line in data.splitlines()], 0, k
        if k == Kind.STREAM_SKIPPED:
            return [], decode_json(payload)["skipped"], k
        assert k == Kind.END, k
        return [], 0, k

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Read until EOF (True) or timeout (False); frames on the way are discarded."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


def agent(path: str, *, names: dict[int, str] | None = None, **kw: Any) -> Client:
    """An agent connection that has sent its HELLO and a NAMES table."""
    c = Client(path, "agent", **kw)
    c.names(names or {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1"})
    return c


def traced_agents(path: str, n: int, service: str = "svc") -> tuple[list[Client], Client, list[int]]:
    """``n`` agents of ``service`` and a control client that asked for a short TRACE of it:
    the agents (each past its TRACE_START), the client (its TRACE_REPLY to come once every
    agent sent :func:`trace_done`) and each agent's trace id."""
    agents = [agent(path, service=service) for _ in range(n)]
    c = Client(path)
    c.send_json(Kind.TRACE, {"service": service, "duration_s": 0.1})
    tids = []
    for a in agents:
        while True:
            kind, payload = a.recv()
            if kind == Kind.TRACE_START:
                break
        tids.append(json.loads(bytes(payload))["trace_id"])
    return agents, c, tids


def trace_done(a: Client, tid: int, dirs: list[str]) -> None:
    """An agent's TRACE_DONE for trace ``tid``: its PROF directories, nothing else to say."""
    a.send_json(Kind.TRACE_DONE, {"trace_id": tid, "dirs": dirs, "pause_ns": 0, "session_ns": 0,
                                  "paused_ts": None, "resumed_ts": None, "models": [], "gap_records": None,
                                  "error": None})


def status(path: str) -> dict:
    """One STATUS request on a fresh control connection."""
    c = Client(path)
    try:
        return c.request(Kind.STATUS)
    finally:
        c.close()


class DaemonLogs:
    """Where in-process daemons log: one file at a time (:meth:`route`), opened on the first
    line, appended to; a file-like object for structlog's ``WriteLogger``. Lines logged
    after a test ended (a connection closed late) land in that test's file, never on the
    terminal; with no route (outside pytest) they go to the process's stderr, as the real
    daemon's do."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: str | None = None
        self._file: Any = None
        self.lines = 0  # written since the last route(): a test's log is shown only if it has lines
        self.children: list[Daemon] = []  # child daemons running now (their own log files)

    def route(self, path: str | os.PathLike[str] | None) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._path = None if path is None else os.fspath(path)
            self.lines = 0

    @property
    def path(self) -> str | None:
        return self._path

    def write(self, text: str) -> None:
        with self._lock:
            if self._path is None:
                sys.__stderr__.write(text)
                return
            if self._file is None:
                self._file = open(self._path, "a", encoding="utf-8")  # kept open: one file per test
            self._file.write(text)
            self._file.flush()  # read back by a failing test's report at once
            self.lines += text.count("\n")

    def flush(self) -> None:
        pass  # every write is flushed

    def sections(self) -> list[tuple[str, str]]:
        """(title, text) of every log a failing test's report shows: this test's in-process
        daemon lines, and the end of each running child daemon's log."""
        out = []
        text = self.text()
        if text:
            out.append((f"daemon log ({self._path})", text[-20_000:]))
        for d in list(self.children):
            tail = d.log_tail()
            if tail:
                out.append((f"child daemon log ({d.log_path}, end)", tail))
        return out

    def text(self) -> str:
        """This route's lines so far ("" if none)."""
        with self._lock:
            path, lines = self._path, self.lines
        if path is None or not lines:
            return ""
        with contextlib.suppress(OSError):
            return Path(path).read_text(errors="replace")
        return ""


DAEMON_LOGS = DaemonLogs()
_routed_modules: set[str] = set()


def _route_inprocess_daemon_logs() -> None:
    """Point the ``_log`` of every loaded ``aclprofd`` module at :data:`DAEMON_LOGS` (JSON
    lines). Module attributes, not ``structlog.configure``: configuring structlog would also
    switch aclprof's own (library) loggers from stdlib logging to structlog for the rest of
    the session, which other tests observe."""
    import structlog

    logger = structlog.wrap_logger(
        structlog.WriteLogger(DAEMON_LOGS),  # type: ignore[arg-type]
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=True)
    for name, module in list(sys.modules.items()):
        if name.startswith("aclprofd.") and name not in _routed_modules and hasattr(module, "_log"):
            module._log = logger  # type: ignore[attr-defined]
            _routed_modules.add(name)


class InProcess:
    """A daemon served on a thread of this process (fast tests); it logs into
    :data:`DAEMON_LOGS` (the running test's log file)."""

    def __init__(self, **overrides: Any):
        from aclprofd import config
        from aclprofd.server import Daemon

        _route_inprocess_daemon_logs()
        self.tmp = short_tmpdir()
        self.socket = os.path.join(self.tmp, "d.sock")
        args = {"socket": self.socket, "data_dir": os.path.join(self.tmp, "data"), "prometheus_port": "0",
                "flush_interval_s": "0.1"}
        args.update({k: str(v) for k, v in overrides.items()})
        self.settings = config.load(args, environ={})
        # it shares this process: the test's resident size is not the daemon's base (its tables still
        # count; the budget's arithmetic against a real RSS is tested on subprocess daemons)
        self.daemon = Daemon(self.settings, rss=lambda: 0)
        self.daemon.start()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.daemon.ready.wait(5)

    def _run(self) -> None:
        try:
            self.daemon.run(self.stop_event)
        finally:
            self.daemon.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.daemon.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.thread.is_alive():
            self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Daemon:
    """The installed ``aclprofd`` in a child process, on the socket and data directory under
    ``root`` (a new short temporary directory by default, removed by :meth:`cleanup`).

    ``args`` come after the defaults (``--flush-interval`` included), so they override them.
    Its log is JSON in ``log_path``; its stdout and stderr go to ``out_path``.
    """

    def __init__(self, root: str | None = None, *args: str, env: dict[str, str] | None = None,
                 socket_path: str | None = None, data_dir: str | None = None, prometheus_port: int = 0,
                 flush_interval: str = "0.1s"):
        self._own_root = root is None
        self.root = root or short_tmpdir("aclp-")
        self.socket = socket_path or os.path.join(self.root, "d.sock")
        self.data_dir = data_dir or os.path.join(self.root, "data")
        self.log_path = os.path.join(self.root, "daemon.log")
        self.out_path = os.path.join(self.root, "daemon.out")
        self.env = env or {}
        self.cmd = [*daemon_argv(), "--socket", self.socket, "--data-dir", self.data_dir,
                    "--prometheus-port", str(prometheus_port), "--log-format", "json", "--log-file", self.log_path,
                    "--flush-interval", flush_interval, *args]
        self.proc: subprocess.Popen | None = None
        self._notify: socket.socket | None = None
        self._notify_path = ""

    def start(self, timeout: float = 20.0) -> Daemon:
        """Start it and wait for READY=1; fails the test at once if it exits first."""
        self._notify_path = os.path.join(self.root, f"n{time.monotonic_ns() % 10**9}")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(self._notify_path)
        self._notify.settimeout(0.05)
        with open(self.out_path, "ab") as out:
            # cwd: not the checkout, whose unbuilt source tree `-m` would import first.
            self.proc = subprocess.Popen(self.cmd, env=env(**self.env, NOTIFY_SOCKET=self._notify_path),
                                         cwd=self.root, stdout=out, stderr=out)
        if self not in DAEMON_LOGS.children:
            DAEMON_LOGS.children.append(self)  # a failing test shows the end of its log
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._notify.recv(4096).decode()
            except TimeoutError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log_tail()}") from None
                if time.monotonic() > deadline:
                    self.proc.kill()
                    self.proc.wait(10)
                    raise AssertionError(f"daemon not ready after {timeout}s: {self.log_tail()}") from None
                continue
            assert "READY=1" in msg, msg
            return self

    def log_lines(self) -> list[dict]:
        """Its log so far, one dict per line."""
        try:
            with open(self.log_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def log_tail(self) -> str:
        """The end of its log and of its output, for failure messages."""
        text = ""
        for path in (self.log_path, self.out_path):
            with contextlib.suppress(OSError):
                text += Path(path).read_text(errors="replace")[-3000:]
        return text

    def status(self) -> dict:
        """STATUS through the CLI's control client."""
        with ControlClient(self.socket, timeout=5.0) as c:
            return c.status()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` (if it still runs) and return its exit status; SIGKILL after ``timeout``.
        SIGTERM by default: a daemon that exits normally writes its coverage data."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def cleanup(self) -> None:
        """Stop it, release the readiness socket, remove ``root`` if this object made it."""
        self.stop()
        if self in DAEMON_LOGS.children:
            DAEMON_LOGS.children.remove(self)
        if self._notify is not None:
            self._notify.close()
            self._notify = None
            with contextlib.suppress(OSError):
                os.unlink(self._notify_path)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running(root: str, *args: str, flush_interval: str = "0.2", **kw: Any) -> Iterator[Daemon]:
    """A started :class:`Daemon` under ``root`` (flush interval 0.2 s), cleaned up on exit."""
    d = Daemon(root, *args, flush_interval=flush_interval, **kw)
    try:
        d.start()
        yield d
    finally:
        d.cleanup()


def fake_control_daemon(replies: dict) -> tuple[str, Any]:
    """A control 'daemon' answering each request kind with ``replies[kind]`` (a JSON object),
    for any number of connections; returns (socket path, stop)."""
    from aclprof.protocol import wire

    path = os.path.join(short_tmpdir("aclp-"), "fake.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)

    def serve_one(c):
        reader, pending = wire.FrameReader(), []
        try:
            wire.recv_frame(c, reader, pending)  # HELLO
            c.sendall(wire.encode_json(Kind.WELCOME, {"version": "9", "protocol": 2, "pid": 1, "started_ts": 0.0}))
            while (frame := wire.recv_frame(c, reader, pending)) is not None:
                kind = frame[0]
                c.sendall(wire.encode_json(Kind(kind + 1), replies[kind]))
        except OSError:
            pass
        finally:
            c.close()

    def serve():
        try:
            while True:
                c, _ = srv.accept()
                threading.Thread(target=serve_one, args=(c,), daemon=True).start()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    return path, srv.close


def count_loop_turns(monkeypatch: Any, d: InProcess, turn: list[int]) -> None:
    """``turn[0]`` counts ``d``'s event-loop turns from now on (a turn begins at each select),
    so a test can say in which turn something happened."""
    sel = d.daemon.transport.sel
    real_select = sel.select

    def select(timeout: float | None = None) -> Any:
        turn[0] += 1
        return real_select(timeout)

    monkeypatch.setattr(sel, "select", select)


def bare_transport(got: list[tuple[Kind, memoryview]], errors: list[Any] | None = None) -> Any:
    """An ``aclprofd.transport.Transport`` alone (no daemon): each frame it hands on is
    appended to ``got`` as ``(kind, payload)``; each connection closed for a protocol error
    to ``errors``."""
    from aclprofd.transport import Transport

    def protocol_error(conn: Any) -> None:
        if errors is not None:
            errors.append(conn)

    return Transport(lambda c, k, p: got.append((k, p)) and None, on_close=lambda c: None,
                     on_protocol_error=protocol_error, memory_budget=64 << 20, memory_refused={})
