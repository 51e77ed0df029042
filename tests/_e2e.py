"""Helpers for the end-to-end tests (real daemon, agent processes, CLI subprocesses).

Not a test module. Sockets live under a short /tmp directory (AF_UNIX paths are limited to
107 bytes; pytest's tmp_path can be longer).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from aclprof.cli.client import Client, DaemonError
from aclprof.cli.launch import daemon_argv

TESTS = Path(__file__).resolve().parent
WORKER = str(TESTS / "_agent_worker.py")


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    e["ACLPROF_BACKEND"] = "mock"
    e["PYTHONUNBUFFERED"] = "1"
    e.update(extra)
    return e


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


class Daemon:
    """the installed ``aclprofd`` on a private socket and data directory."""

    def __init__(self, root: str | None = None, flush_interval: str = "0.1s"):
        self.root = root or tempfile.mkdtemp(prefix="aclp-")
        self.socket = os.path.join(self.root, "d.sock")
        self.data_dir = os.path.join(self.root, "data")
        self.log_path = os.path.join(self.root, "daemon.log")
        self.flush_interval = flush_interval
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> "Daemon":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*daemon_argv(), "--socket", self.socket, "--data-dir", self.data_dir,
             "--prometheus-port", "0", "--flush-interval", self.flush_interval, "--log-format", "json"],
            env=env(), stdout=log, stderr=log, cwd=self.root)
        log.close()

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log()}")
            try:
                with Client(self.socket, timeout=1.0) as c:
                    c.status()
                return True
            except DaemonError:
                return False

        wait_for(ready, timeout, 0.05, "the daemon to answer STATUS")
        return self

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def status(self) -> dict:
        with Client(self.socket, timeout=5.0) as c:
            return c.status()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else 0
        proc.send_signal(sig)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(5)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Worker:
    """tests/_agent_worker.py: one mock model + aclprof.agent, driven over stdin."""

    def __init__(self, socket: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, WORKER, "--socket", socket, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env())
        first = self._read()
        assert first.get("ready"), first
        self.pid = first["pid"]
        self.model = first["model"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise AssertionError(f"worker exited ({self.proc.poll()}): {err[-2000:]}")
        return json.loads(line)

    def cmd(self, text: str) -> dict:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run(self, n: int) -> int:
        return self.cmd(f"run {n}")["emitted"]

    def stats(self) -> dict:
        return self.cmd("stats")

    def stop(self, timeout: float = 5.0) -> dict:
        out = self.cmd(f"stop {timeout}")
        self.proc.wait(15)
        assert self.proc.returncode == 0, self.proc.stderr.read()
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


def cli(*args: str, timeout: float = 30.0, check: bool = False, **kw: Any) -> subprocess.CompletedProcess:
    """Run ``aclprof ARGS`` (as ``python -m aclprof``) and capture its output."""
    proc = subprocess.run([sys.executable, "-m", "aclprof", *args], env=env(), capture_output=True,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"aclprof {' '.join(args)} -> {proc.returncode}: {proc.stderr}")
    return proc
