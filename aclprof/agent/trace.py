"""The agent's side of an on-demand trace (``aclprof trace``; daemon/PROTOCOL.md "TRACE").

On a TRACE_START from the daemon, a thread of its own (never the sender's, never the
service's) runs one ``aclprof.Profiler`` session for the requested time and answers
TRACE_DONE with the ``PROF_*`` directories it produced.

CANN refuses API profiling while a model subscription is active in the same process
(148047 ACL_ERROR_PROF_API_CONFLICT: Init/Start/Stop/Finalize may not run between
Subscribe and UnSubscribe), so the agent first closes its subscriptions (their last
records are streamed: the daemon sees UNWATCH), runs the session, then subscribes the
same models on the same devices again (WATCH). Every path resumes them, a failed session
included. The session profiles the paused models' devices (as the agent knows them:
``agent.watch(device=)``, the watching thread's device, or the records' ``devId``). The ops
executed meanwhile never reach the daemon: TRACE_DONE reports the pause (``pause_ns``,
wall-clock ``paused_ts``/``resumed_ts``, the paused ``models``) and, where it can be known,
``gap_records``: the ops of those models the session collected (the mock writes them into
its session files, ``device_*/mock_ops.json``; on CANN the session's data files are binary
and the count is reported as unknown, null; unknown too when a paused model's device is,
since its device was not profiled). It is a lower bound: the
ops run in the ``pause_ns - session_ns`` outside the session (closing the subscriptions
before aclprofInit, subscribing again after aclprofFinalize: milliseconds) are not in it.

One trace at a time: a TRACE_START while one runs is answered at once with an error.
``watch()`` calls during a trace are carried out when it ends; ``unwatch()`` of a paused
model takes it off the list to resume.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aclprof._log import get_logger
from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.items import JsonFrame
from aclprof.protocol import trace as proto
from aclprof.protocol import wire

__all__ = ["Tracer", "gap_records_of"]

_log = get_logger("aclprof.agent")
#: the mock's per-device count of the ops a session collected (mock_acl/README.md)
_MOCK_OPS_FILE = "mock_ops.json"


def gap_records_of(dirs: list[Path], models: set[int]) -> int | None:
    """Ops of ``models`` the sessions in ``dirs`` collected, from the mock's
    ``device_*/mock_ops.json`` files; None when no such file exists (a real CANN
    session writes binary data the agent does not read)."""
    total, found = 0, False
    for d in dirs:
        for f in sorted(d.glob(f"device_*/{_MOCK_OPS_FILE}")):
            try:
                by_model = json.loads(f.read_text()).get("opsByModel", {})
            except (OSError, ValueError, AttributeError):
                return None  # unreadable: unknown, not zero
            found = True
            total += sum(int(n) for m, n in by_model.items() if int(m) in models)
    return total if found else None


class Tracer:
    """The agent's trace runner: at most one session at a time."""

    def __init__(self, buffer: RecordBuffer, trace_dir: str | os.PathLike[str] | None, *,
                 pause: Callable[[Tracer], dict[int, tuple[int | None, dict[str, str]]]],
                 resume: Callable[[Tracer], list[str]]):
        # the agent's buffer (its lock is the agent's one lock) and the agent's two steps
        # around a session: given, so that this module needs nothing of the agent itself
        self.buffer = buffer
        self._pause, self._resume = pause, resume
        self.trace_dir = None if trace_dir is None else os.fspath(trace_dir)
        self.thread: threading.Thread | None = None
        self.trace_id: int | None = None
        self._cancel = threading.Event()
        # under the buffer's lock while a trace runs: paused model -> (device, labels), and the
        # watch() calls made meanwhile
        self.paused: dict[int, tuple[int | None, dict[str, str]]] = {}
        self.deferred: dict[int, tuple[int | None, dict[str, str]]] = {}
        self.pausing = False

    # -- called on the sender thread (Connection.receive): cheap, never blocks -----------------
    def on_start(self, obj: dict[str, Any]) -> None:
        tid = obj.get("trace_id")
        if isinstance(tid, bool) or not isinstance(tid, int):
            _log.warning("TRACE_START without an integer trace_id; ignored")
            return
        try:
            _, _, duration, types = proto.check_request({"pid": os.getpid(), "duration_s": obj.get("duration_s"),
                                                         "data_types": obj.get("data_types")})
        except proto.TraceRequestError as exc:
            self.reply({"trace_id": tid, "error": f"bad TRACE_START: {exc}"})
            return
        with self.buffer.lock:
            if self.thread is not None and self.thread.is_alive():
                busy = self.trace_id
            else:
                busy = None
                self.trace_id = tid
                self._cancel.clear()
                self.thread = threading.Thread(target=self._run, args=(tid, duration, types),
                                               name="aclprof-trace", daemon=True)
                self.thread.start()
        if busy is not None:
            self.reply({"trace_id": tid, "error": f"this process is already tracing (trace {busy})"})

    def reply(self, obj: dict[str, Any]) -> None:
        """Queue TRACE_DONE behind the records already buffered (in order, on whichever
        connection is up when the sender gets to it)."""
        full = {"dirs": [], "pause_ns": 0, "session_ns": 0, "paused_ts": None, "resumed_ts": None, "models": [],
                "gap_records": None, "error": None, **obj}
        buffer = self.buffer
        with buffer.lock:
            buffer.items.append(JsonFrame(wire.Kind.TRACE_DONE, full, buffer.seq()))
        buffer.wake()

    # -- the trace thread ----------------------------------------------------------------------
    def _run(self, tid: int, duration: float, types: tuple[str, ...]) -> None:
        from aclprof.api.session import Profiler
        from aclprof.binding.enums import DataType

        result: dict[str, Any] = {"trace_id": tid}
        errors: list[str] = []
        models: dict[int, tuple[int | None, dict[str, str]]] = {}
        dirs: list[Path] = []
        paused_at = session_ns = 0
        paused_ts = 0.0
        out = None
        try:
            mask = DataType(0)
            for name in types:
                mask |= DataType[name]
            # the gap begins as the first subscription closes (what came before is streamed)
            paused_at, paused_ts = time.monotonic_ns(), time.time()
            models = self._pause(self)
            unknown = sorted(m for m, (dev, _) in models.items() if dev is None)
            if unknown:
                _log.warning("aclprof trace: the device of watched models is unknown; their ops during the "
                             "pause are not counted (pass device= to aclprof.agent.watch)", models=unknown)
            # the models' devices; device 0 (CANN's default) when none is known, for the API data
            devices = sorted({dev for dev, _ in models.values() if dev is not None}) or [0]
            out = tempfile.mkdtemp(prefix=f"aclprof-trace-{tid}-", dir=self.trace_dir)
            prof = Profiler(out, devices=devices, data_types=mask)
            try:
                prof.start()
                started = time.monotonic_ns()
                self._cancel.wait(duration)
                session_ns = time.monotonic_ns() - started
            finally:
                try:
                    prof.stop()
                finally:
                    dirs = prof.result_dirs
        except Exception as exc:
            errors.append(f"profiling session failed: {type(exc).__name__}: {exc}")
        finally:
            # every path resumes what was paused (and the watch() calls made meanwhile); the
            # gap ends once the subscriptions are back
            errors += self._resume(self)
            resumed_at = time.monotonic_ns()
        if out is not None and not dirs:
            try:
                os.rmdir(out)  # a session that wrote nothing leaves no empty directory behind
            except OSError:
                pass
        if models:
            result["pause_ns"] = max(0, resumed_at - paused_at) if paused_at else 0
            result["paused_ts"], result["resumed_ts"] = paused_ts, time.time()
            result["models"] = sorted(models)
            result["session_ns"] = session_ns
            known = all(dev is not None for dev, _ in models.values())
            result["gap_records"] = gap_records_of(dirs, set(models)) if paused_at and known else None
        result["dirs"] = [str(d) for d in dirs]
        if self._cancel.is_set() and not errors:
            errors.append("the agent stopped before the trace's end; the session was stopped early")
        if errors:
            result["error"] = "; ".join(errors)
        _log.info("trace done", trace=tid, dirs=result["dirs"], pause_ns=result.get("pause_ns", 0),
                  error=result.get("error"))
        self.reply(result)

    def cancel(self, timeout: float) -> None:
        """Agent stop: end the session now and wait (bounded) for the thread."""
        self._cancel.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                _log.error("the aclprof trace thread did not stop", timeout=timeout)
