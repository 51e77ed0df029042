"""Helpers for the daemon tests (not a test module): raw wire clients, record batches, a
daemon in a thread and a daemon in a subprocess (readiness through sd_notify)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind, decode_json, encode_batch, encode_json, recv_frame
from aclprof.cli.launch import daemon_argv

REPO = Path(__file__).resolve().parent.parent


def short_tmpdir() -> str:
    """A short directory (Unix socket paths are limited to 107 bytes; pytest's are long)."""
    return tempfile.mkdtemp(prefix="acld-", dir="/tmp")


def make_records(n: int, *, model: int = 1, device: int = 0, types: tuple[int, ...] = (1, 2),
                 names: tuple[int, ...] = (3, 4), durations: Any = 1000, start: int | None = None) -> np.ndarray:
    """``n`` records cycling over (type, name) pairs; end = monotonic now (so lag is sane)."""
    r = np.zeros(n, RECORD_DTYPE)
    r["model_id"] = model
    r["device_id"] = device
    idx = np.arange(n) % len(types)
    r["op_type"] = np.asarray(types)[idx]
    r["op_name"] = np.asarray(names)[idx]
    r["duration"] = durations
    end = time.monotonic_ns() if start is None else start
    r["end"] = end
    r["start"] = r["end"] - r["duration"]
    r["thread_id"] = 7
    return r


class Client:
    """A blocking wire client (agent or control)."""

    def __init__(self, path: str, role: str = "control", *, pid: int | None = None, host: str = "testhost",
                 service: str | None = None, labels: dict | None = None, hello: bool = True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.reader = FrameReader()
        self.pending: list = []
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
        self.send_json(Kind.NAMES, {"names": {str(k): v for k, v in mapping.items()}})

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
                assert decode_json(payload) == {"records": len(out), "skipped": 0}
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
        except (socket.timeout, TimeoutError):
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


def agent(path: str, *, names: dict[int, str] | None = None, **kw: Any) -> Client:
    c = Client(path, "agent", **kw)
    c.names(names or {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1"})
    return c


def wait_until(pred, timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def status(path: str) -> dict:
    c = Client(path)
    try:
        return c.request(Kind.STATUS)
    finally:
        c.close()


class InProcess:
    """A daemon served on a thread of this process (fast tests)."""

    def __init__(self, **overrides: Any):
        from aclprofd import config
        from aclprofd.server import Daemon

        self.tmp = short_tmpdir()
        self.path = os.path.join(self.tmp, "d.sock")
        args = {"socket": self.path, "data_dir": os.path.join(self.tmp, "data"), "prometheus_port": "0",
                "flush_interval_s": "0.1"}
        args.update({k: str(v) for k, v in overrides.items()})
        self.settings = config.load(args, environ={})
        self.daemon = Daemon(self.settings)
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

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.thread.is_alive():
            self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Subprocess:
    """the installed ``aclprofd`` in a child process; started() waits for sd_notify READY=1."""

    def __init__(self, tmp: str, *args: str, env: dict | None = None, socket_path: str | None = None,
                 data_dir: str | None = None, prometheus_port: int = 0):
        self.tmp = tmp
        self.path = socket_path or os.path.join(tmp, "d.sock")
        self.data_dir = data_dir or os.path.join(tmp, "data")
        self.log = os.path.join(tmp, "daemon.log")
        self.notify_path = os.path.join(tmp, f"n{time.monotonic_ns() % 10**9}")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        e = dict(os.environ)
        e.pop("ACLPROF_SOCKET", None)
        e.update(env or {})
        e["NOTIFY_SOCKET"] = self.notify_path
        self.cmd = [*daemon_argv(), "--socket", self.path, "--data-dir", self.data_dir,
                    "--prometheus-port", str(prometheus_port), "--log-format", "json", "--log-file", self.log,
                    "--flush-interval", "0.2", *args]
        # cwd: not the checkout, whose unbuilt source tree `-m` would import first.
        self.proc = subprocess.Popen(self.cmd, env=e, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.notify.settimeout(timeout)
        try:
            msg = self.notify.recv(4096).decode()
        except (socket.timeout, TimeoutError):
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"daemon not ready; stderr: {err}") from None
        assert "READY=1" in msg, msg

    def log_lines(self) -> list[dict]:
        import json
        try:
            with open(self.log) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def terminate(self, sig: int = 15, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def close(self) -> None:
        # SIGTERM first: a daemon that exits normally writes its coverage data (subprocess
        # coverage in .ci/run); SIGKILL only if it does not stop.
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.notify.close()
        with contextlib.suppress(OSError):
            os.unlink(self.notify_path)


@contextlib.contextmanager
def running(tmp: str, *args: str, **kw: Any) -> Iterator[Subprocess]:
    d = Subprocess(tmp, *args, **kw)
    try:
        d.wait_ready()
        yield d
    finally:
        d.close()
