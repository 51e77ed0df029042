"""Child processes and process state: clean environments, waiting, the ``aclprof`` CLI and
the agent worker as subprocesses, open fds and ``aclprof-*`` threads."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["REPO", "TESTS", "WORKER", "env", "clean_env", "short_tmpdir", "wait_for", "cli", "Worker",
           "open_fds", "aclprof_threads", "free_port", "PtyOutput", "in_pty", "screen_lines"]

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
WORKER = str(TESTS / "helpers" / "agent_worker.py")


def env(**extra: str) -> dict[str, str]:
    """The environment of the e2e children: none of our variables, the mock backend, unbuffered."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    e["ACLPROF_BACKEND"] = "mock"
    e["PYTHONUNBUFFERED"] = "1"
    e.update(extra)
    return e


def clean_env(**overrides: str | None) -> dict[str, str]:
    """os.environ without any variable that steers the loader or the mock, plus overrides
    (a value of None removes the variable)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ASCEND_"))}
    for key, value in overrides.items():
        if value is None:
            e.pop(key, None)
        else:
            e[key] = value
    return e


def short_tmpdir(prefix: str = "acld-") -> str:
    """A short directory (Unix socket paths are limited to 107 bytes; pytest's are long)."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.01, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something true (returned), or fail the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def cli(*args: str, timeout: float = 30.0, check: bool = False, **kw: Any) -> subprocess.CompletedProcess:
    """Run ``aclprof ARGS`` (as ``python -m aclprof``) and capture its output."""
    proc = subprocess.run([sys.executable, "-m", "aclprof", *args], env=env(), capture_output=True,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"aclprof {' '.join(args)} -> {proc.returncode}: {proc.stderr}")
    return proc


class Worker:
    """tests/helpers/agent_worker.py: one mock model + aclprof.agent, driven over stdin."""

    def __init__(self, socket: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, WORKER, "--socket", socket, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env())
        first = self._read()
        assert first.get("ready"), first
        self.pid = first["pid"]
        self.model = first["model"]

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
            raise AssertionError(f"worker exited ({self.proc.poll()}): {err[-2000:]}")
        return json.loads(line)

    def cmd(self, text: str) -> dict:
        assert self.proc.stdin is not None
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
        assert self.proc.returncode == 0, self.proc.stderr.read() if self.proc.stderr else ""
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


def open_fds() -> set[int]:
    """The file descriptors this process has open."""
    return {int(n) for n in os.listdir("/proc/self/fd")}


def aclprof_threads() -> list[threading.Thread]:
    """The threads aclprof started (named ``aclprof-*``) that are still running."""
    return [t for t in threading.enumerate() if t.name.startswith("aclprof-")]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PtyOutput:
    """What a program on a pseudo-terminal wrote, read as the test waits for it."""

    def __init__(self, master: int):
        self.master = master
        self.seen = b""

    def drain(self, timeout: float = 0.05) -> bytes:
        """Whatever arrives within ``timeout`` seconds (added to :attr:`seen` and returned)."""
        got = b""
        while select.select([self.master], [], [], timeout)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                break
            if not data:
                break
            got += data
            timeout = 0
        self.seen += got
        return got

    def read_until(self, pattern: bytes, timeout: float = 15.0, *, regex: bool = False,
                   new_only: bool = False) -> None:
        """Read until ``pattern`` (a substring, or a regex with ``regex``) is in the output (in
        what arrives from now on, with ``new_only``); AssertionError with the tail of the
        output after ``timeout`` seconds."""
        start = len(self.seen) if new_only else 0
        deadline = time.monotonic() + timeout

        def found() -> bool:
            tail = self.seen[start:]
            return re.search(pattern, tail) is not None if regex else pattern in tail

        while not found():
            assert time.monotonic() < deadline, f"{pattern!r} not shown; got {self.seen[-2000:]!r}"
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:
                    break


@contextmanager
def in_pty(*args: str, columns: int = 80, lines: int = 30) -> Iterator[tuple[subprocess.Popen, PtyOutput, int]]:
    """``aclprof ARGS`` on a pseudo-terminal ``columns`` x ``lines`` (the window size a
    terminal reports, and $COLUMNS/$LINES as a terminal's shell sets them); yields the
    process, its output and the terminal's master fd (to type keys); killed at the end."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "aclprof", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env(TERM="xterm", COLUMNS=str(columns), LINES=str(lines)), start_new_session=True)
    os.close(slave)
    try:
        yield proc, PtyOutput(master), master
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)


_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def screen_lines(raw: bytes) -> list[str]:
    """What a terminal showed, as the lines a program wrote: terminal escapes removed, split at
    line feeds and carriage returns (each piece starts at column 0, so none may be wider
    than the terminal)."""
    text = _ESCAPES.sub(b"", raw).decode("utf-8", "replace").replace("\r\n", "\n")
    return [piece for line in text.split("\n") for piece in line.split("\r")]
