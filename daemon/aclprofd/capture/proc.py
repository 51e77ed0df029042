"""The capture worker's side of a capture writer child (``python -m aclprofd.capture.writer``,
whose docstring gives the exchange): start it, hand it the job, answer its request for room
(the store deletes old captures for it), read its result. Bounded in time (``timeout_s``,
then the child is killed and the capture counted as failed) and stoppable from another
thread (:meth:`ChildWriter.kill`: the daemon is stopping). A killed child's unfinished
``.<name>.tmp`` directory is removed here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from .writer import Aborted, Job, Outcome, job_to_json

__all__ = ["ChildWriter", "CaptureFailed", "TIMEOUT_S"]

TIMEOUT_S = 600.0  # a capture of capture_max_size (1 KiB per record estimated) takes far less
_STDERR_TAIL = 400


class CaptureFailed(Exception):
    """The child could not write the capture (the message says why)."""


class ChildWriter:
    """Runs capture writer children one at a time (the capture worker thread)."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._stopping = False
        self._timed_out = False

    def kill(self) -> None:
        """The daemon is stopping: end the running child now (any thread)."""
        with self._lock:
            self._stopping = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()

    def _expire(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._timed_out = True
                self._proc.kill()

    def run(self, job: Job, root: str, room: Callable[[int], tuple[str, int]]) -> tuple[dict[str, Any], Outcome]:
        """Write the capture; (capture.json document, outcome). Aborted when killed for a
        stop, CaptureFailed with the reason otherwise."""
        name = ""
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as err:
            with self._lock:
                if self._stopping:
                    raise Aborted
                self._timed_out = False
                # cwd "/": `-m` puts the cwd first on sys.path; the daemon's cwd may hold anything
                proc = self._proc = subprocess.Popen(
                    [sys.executable, "-m", "aclprofd.capture.writer", root], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=err, cwd="/", close_fds=True, text=True, encoding="utf-8",
                    start_new_session=True)  # a Ctrl-C to the daemon's terminal is the daemon's to handle
            timer = threading.Timer(self.timeout_s, self._expire)
            timer.daemon = True
            timer.start()
            result: dict[str, Any] | None = None
            try:
                assert proc.stdin is not None and proc.stdout is not None
                try:
                    proc.stdin.write(job_to_json(job) + "\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if line:
                        name, allowance = room(int(json.loads(line)["need"]))
                        proc.stdin.write(json.dumps({"name": name, "allowance": allowance}) + "\n")
                        proc.stdin.flush()
                        line = proc.stdout.readline()
                        result = json.loads(line) if line else None
                except (BrokenPipeError, ValueError, KeyError, TypeError):
                    result = None  # the child died or said nonsense: its exit status and stderr tell
                proc.stdin.close()
                rc = proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                for f in (proc.stdin, proc.stdout):
                    if f is not None:
                        f.close()
                with self._lock:
                    self._proc = None
            if result is not None and result.get("ok"):
                return result["doc"], Outcome(**result["outcome"])
            if name:
                shutil.rmtree(os.path.join(root, f".{name}.tmp"), ignore_errors=True)
            if self._stopping:
                raise Aborted
            if self._timed_out:
                raise CaptureFailed(f"the capture writer took more than {self.timeout_s:g} s and was killed")
            if result is not None:
                raise CaptureFailed(str(result.get("error")))
            err.seek(0)
            tail = err.read()[-_STDERR_TAIL:].strip().splitlines()
            raise CaptureFailed(f"the capture writer exited with status {rc}" + (f": {tail[-1]}" if tail else ""))
