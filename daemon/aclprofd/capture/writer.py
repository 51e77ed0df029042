"""Writing one flight-recorder capture, in a child process (``python -m
aclprofd.capture.writer``, started by :mod:`aclprofd.capture.proc` from the capture worker
thread): formatting a capture is seconds of pure Python for 100k+ records, which in a
thread of the daemon would take the GIL from the event loop (measured: STATUS p99 20 ms,
max 190 ms while a 200k-record capture was written); a child at a lower CPU priority on
the other core costs the loop nothing.

A :class:`Job` names the flagged key, the window ``[since_ts, until_ts]`` of receive
times, and the segment files that may hold it (taken on the loop, after a flush). The
child reads those files itself (``read_segment``; the loop's :class:`Storage` object is
never touched), keeps the records of the flagged service (every process and op type of it:
what ran around the slow op is what explains it; other services are left out, so the
byte budget is spent on the one that regressed), and writes into the capture directory:

- ``ascend/``: torch_npu's directories, one per process (:mod:`aclprof.exportfmt.ascend`);
- ``trace.json``: the Chrome trace (:mod:`aclprof.exportfmt.chrome`);
- ``trace.pftrace``: the same tracks as Perfetto's protobuf trace (:mod:`aclprof.exportfmt.perfetto`:
  exact ns), when PyPI ``perfetto`` is installed beside the daemon; otherwise
  ``capture.json`` ``files.perfetto`` is null and ``files.perfetto_missing`` says why (an op
  failure's instant event is in trace.json only);
- ``capture.json``: the flag (key, shift and its interval) or the op failure that started it
  (``trigger``), the window, record counts.

Bounds: each record's bytes in the three outputs are computed from its values
(:mod:`aclprofd.capture.size`: an upper bound within a few percent of the files); when the
sum passes what the capture may take, the records farthest in time from the flag are left
out (the capture stays centred on it) and ``capture.json`` says how many (``truncated``).
Records held in memory while reading are bounded the same way (``_HOLD``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclprof.exportfmt.ascend import AscendWriter, span_openers
from aclprof.exportfmt.chrome import TID_STRIDE, write_chrome_gathered
from aclprof.exportfmt.perfetto import MissingDependency, trace_class, write_perfetto_gathered
from aclprof.exportfmt.tracks import gather
from aclprof.protocol.safetext import safe
from aclprof.protocol.wire import HEADER, Kind

from ..atomicfile import DIR_MODE, FILE_MODE, create_file, private_dir
from ..records import NameJson, encode_frames, identity_head
from ..storage import read_segment
from .size import overhead, pftrace_names, record_costs, span_costs

__all__ = ["Job", "Outcome", "Aborted", "write_capture", "estimate", "job_to_json", "job_from_json", "main"]

_HOLD = 1.25  # records held while reading: at most this many times what the byte bound takes
_BATCH = 2048  # records per formatting batch (the stop flag is checked between batches)


@functools.cache
def pftrace_missing() -> str | None:
    """Why trace.pftrace cannot be written (PyPI perfetto missing), or None."""
    try:
        trace_class()
    except MissingDependency as exc:
        return str(exc)
    return None


class Aborted(Exception):
    """The daemon is stopping: the capture is left unfinished (and removed)."""


@dataclass(frozen=True)
class Job:
    """One capture to write (built on the loop thread)."""

    key: tuple[str, str, str]  # service, model, op_type
    flags: tuple[dict[str, Any], ...]  # the detector's flags of that key raised at one tick
    flag_ts: float
    since_ts: float
    until_ts: float
    files: tuple[tuple[str, int], ...]  # (segment path, size) to read
    max_count: int
    max_bytes: int
    host: str
    #: op failures (aclprofd.failures entries, plus ``received_ts``) this capture is about or
    #: that joined it: capture.json names them, trace.json shows each as an instant event
    failures: tuple[dict[str, Any], ...] = ()
    #: request bills (aclprofd.bills) the flags hurt most, with ``op_type``/``op_ns``: the
    #: flagged type's device time in each (issue 25); capture.json lists them whole
    requests: tuple[dict[str, Any], ...] = ()


@dataclass
class Outcome:
    """What writing a capture did (for the counters and the log)."""

    name: str = ""
    found: int = 0  # records of the service in the window
    written: int = 0
    truncated: int = 0  # left out to fit the byte bound
    processes: int = 0
    segments_gone: int = 0  # deleted by the storage caps before they were read
    read_problems: list[str] = field(default_factory=list)
    perfetto_missing: str | None = None  # why trace.pftrace was not written


@dataclass
class _Part:
    """Records of one stored chunk that belong to the capture."""

    host: str
    pid: int
    service: str | None
    names: dict[int, str]
    records: np.ndarray
    ts: np.ndarray
    base: np.ndarray  # bytes per record in the outputs, Overlap Analysis spans apart
    cost: np.ndarray  # base plus the spans the record opens (set by _spans)

    def keep(self, m: np.ndarray) -> None:
        self.records, self.ts, self.base, self.cost = self.records[m], self.ts[m], self.base[m], self.cost[m]


def _name_costs(names: dict[int, str]) -> Callable[[np.ndarray], np.ndarray]:
    """Bytes of one occurrence of each name id: its escaped JSON string, plus 2 (csv quotes)."""
    cache: dict[int, int] = {}

    def one(nid: int) -> int:
        c = cache.get(nid)
        if c is None:
            text = names.get(nid, f"#{nid}")
            c = cache[nid] = max(len(json.dumps(text)), len(json.dumps(safe(text)))) + 2
        return c

    def costs(ids: np.ndarray) -> np.ndarray:
        uniq, inv = np.unique(ids, return_inverse=True)
        return np.fromiter((one(int(i)) for i in uniq.tolist()), np.int64, len(uniq))[inv]
    return costs


def _collect(job: Job, stop: threading.Event, max_bytes: int, out: Outcome) -> list[_Part]:
    """The service's records in the window; in memory at most about ``_HOLD`` times what
    ``max_bytes`` takes at their estimated size (the farthest from the flag are dropped
    first, counted in ``out.truncated``)."""
    service = job.key[0]
    parts: list[_Part] = []
    held = held_bytes = 0
    for path, size in job.files:
        if stop.is_set():
            raise Aborted
        problems: list[str] = []
        try:
            for ch in read_segment(path, job.since_ts, job.until_ts, limit=size, problems=problems):
                if stop.is_set():
                    raise Aborted
                if (ch.meta.get("service") or "") == service:
                    part = _take(parts, ch, out)
                    held += len(part.records)
                    held_bytes += int(part.base.sum())
                    if held_bytes > _HOLD * max_bytes:  # bound memory: keep what fits, nearest the flag
                        held = _keep_nearest(parts, job.flag_ts, max(1, int(held * max_bytes / held_bytes)), out)
                        held_bytes = sum(int(p.base.sum()) for p in parts)
        except FileNotFoundError:
            out.segments_gone += 1  # deleted by the storage caps meanwhile
        out.read_problems += problems
    return parts


def _take(parts: list[_Part], ch: Any, out: Outcome) -> _Part:
    """Append a chunk's records with their estimated bytes."""
    meta = ch.meta
    pid = int(meta.get("pid", 0))
    base = record_costs(ch.records, pid, _name_costs(ch.names), pftrace=pftrace_missing() is None)
    part = _Part(str(meta.get("host", "")), pid, meta.get("service"), ch.names, ch.records, ch.ts, base, base)
    parts.append(part)
    out.found += len(ch.records)
    return part


def _keep_nearest(parts: list[_Part], t: float, n: int, out: Outcome) -> int:
    """Keep the ``n`` records received nearest ``t`` (order within each part kept)."""
    dist = np.concatenate([np.abs(p.ts - t) for p in parts])
    if len(dist) <= n:
        return len(dist)
    cut = np.partition(dist, n - 1)[n - 1]
    ties = n - int((dist < cut).sum())  # records at exactly the cut distance that fit: the first ones
    kept = 0
    for p in parts:
        d = np.abs(p.ts - t)
        m = d < cut
        at = np.flatnonzero(d == cut)[:max(0, ties)]
        m[at] = True
        ties -= len(at)
        out.truncated += int(len(m) - m.sum())
        p.keep(m)
        kept += int(m.sum())
    parts[:] = [p for p in parts if len(p.records)]
    return kept


def _spans(parts: list[_Part]) -> None:
    """Charge each record the Overlap Analysis spans it opens, per process (its ops' union)."""
    procs: dict[tuple[str, int], list[_Part]] = {}
    for p in parts:
        procs.setdefault((p.host, p.pid), []).append(p)
    for group in procs.values():
        recs = np.concatenate([p.records for p in group])
        starts = recs["start"].astype(np.int64)
        opens = span_openers(starts, starts + recs["duration"].astype(np.int64))
        extra = span_costs(recs, opens)
        i = 0
        for p in group:
            p.cost = p.base + extra[i:i + len(p.records)]
            i += len(p.records)


def estimate(parts: list[_Part]) -> int:
    """Bytes the capture of ``parts`` takes at most (records, processes, op types, fixed)."""
    return _overhead(parts) + sum(int(p.cost.sum()) for p in parts)


def _overhead(parts: list[_Part]) -> int:
    procs = {(p.host, p.pid) for p in parts}
    types = {(p.host, p.pid, int(x)) for p in parts for x in np.unique(p.records["op_type"]).tolist()}
    threads = {(p.host, p.pid, int(x)) for p in parts  # (device, model): named by metadata events
               for x in np.unique(p.records["device_id"].astype(np.int64) << 32 | p.records["model_id"]).tolist()}
    names: set[str] = set()
    if pftrace_missing() is None:
        for p in parts:
            for col in ("op_name", "op_type"):
                names.update(p.names.get(int(i), f"#{i}") for i in np.unique(p.records[col]).tolist())
    return overhead(len(procs), len(types), len(threads)) + pftrace_names(names)


def _fit(parts: list[_Part], t: float, allowance: int, out: Outcome) -> None:
    """Leave out the records farthest from ``t`` until the estimate fits ``allowance``."""
    room = allowance - _overhead(parts)
    if sum(int(p.cost.sum()) for p in parts) <= room:
        return
    dist = np.concatenate([np.abs(p.ts - t) for p in parts])
    cost = np.concatenate([p.cost for p in parts])
    order = np.argsort(dist, kind="stable")
    fits = np.cumsum(cost[order]) <= max(0, room)
    keep = np.zeros(len(dist), bool)
    keep[order[fits]] = True
    start = 0
    for p in parts:
        m = keep[start:start + len(p.records)]
        start += len(p.records)
        out.truncated += int(len(m) - m.sum())
        p.keep(m)
    parts[:] = [p for p in parts if len(p.records)]


def _batches(parts: list[_Part], stop: threading.Event) -> Iterator[list[dict[str, Any]]]:
    """The kept records as export records (daemon/PROTOCOL.md "record"), in batches."""
    for p in parts:
        nj, head = NameJson(p.names), identity_head(p.host, p.pid, p.service)
        for i in range(0, len(p.records), _BATCH):
            if stop.is_set():
                raise Aborted
            # the daemon's own record encoder (the text EXPORT sends), then back to objects
            frames = encode_frames(p.records[i:i + _BATCH], p.ts[i:i + _BATCH], head, nj, Kind.EXPORT_RECORDS)
            yield _frame_records(frames)


def _frame_records(frames: bytes) -> list[dict[str, Any]]:
    """The record objects of concatenated JSON Lines frames (header, then the lines)."""
    out: list[dict[str, Any]] = []
    pos = 0
    while pos < len(frames):
        length = HEADER.unpack_from(frames, pos)[-1]
        pos += HEADER.size
        out.extend(json.loads(line) for line in frames[pos:pos + length].splitlines())
        pos += length
    return out


def write_capture(job: Job, root: str, room: Callable[[int], tuple[str, int]], stop: threading.Event,
                  out: Outcome) -> dict[str, Any]:
    """Read the job's records, ask ``room(estimated bytes)`` for the capture's name and the
    bytes it may take (the store deletes old captures to make room), write ``root/name``
    (built as ``root/.name.tmp``, renamed when complete); returns its capture.json document.
    OSError and :class:`Aborted` propagate after the unfinished directory is removed."""
    parts = _collect(job, stop, job.max_bytes, out)
    _spans(parts)
    name, allowance = room(estimate(parts))
    out.name = name
    for _ in range(3):  # leaving records out can split a busy interval (one more span): fit again
        _fit(parts, job.flag_ts, allowance, out)
        _spans(parts)
        if estimate(parts) <= allowance:
            break
    private_dir(root)
    staging = os.path.join(root, f".{name}.tmp")
    os.mkdir(staging, DIR_MODE)
    try:
        os.mkdir(os.path.join(staging, "ascend"), DIR_MODE)
        fd = os.open(os.path.join(staging, "ascend"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            window = {"since_ts": job.since_ts, "until_ts": job.until_ts, "filter": {"service": job.key[0]}}
            ascend = AscendWriter(fd, window=window)
            try:
                marks = _FailureMarks(job.failures)

                def both() -> Iterator[list[dict[str, Any]]]:
                    for batch in _batches(parts, stop):
                        ascend.add(batch)
                        marks.see(batch)
                        yield batch
                with open(create_file(os.path.join(staging, "trace.json")), "w", encoding="utf-8", newline="") as f:
                    g = gather(both())
                    out.written = write_chrome_gathered(g, f, generator="aclprofd flight recorder",
                                                        extra=marks.events)
                ascend.finish()
                out.perfetto_missing = pftrace_missing()
                if out.perfetto_missing is None:
                    with open(create_file(os.path.join(staging, "trace.pftrace")), "wb") as fb:
                        write_perfetto_gathered(g, fb)
                del g
            finally:
                ascend.close()
            out.processes = ascend.processes
        finally:
            os.close(fd)
        doc = _document(job, name, out)
        with open(create_file(os.path.join(staging, "capture.json")), "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        _narrow(staging)
        os.rename(staging, os.path.join(root, name))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return doc


class _FailureMarks:
    """Where each op failure goes in trace.json. A failure has only host (wall) time, the
    records the device's clock; so it is put at the end of the last op of its process and
    device (and model, when known) that the daemon received before the failure: the op it
    followed in the agent's stream (the failed op itself has no record, as in CANN). With no
    such op, after the last op of its process in the capture; with none, at the trace's end."""

    def __init__(self, failures: tuple[dict[str, Any], ...]):
        self.failures = failures
        # per failure: (received ts, end ns, tid) of the best op so far, and of any op of its pid
        self.best: list[tuple[float, int, int] | None] = [None] * len(failures)
        self.any: list[tuple[int, int] | None] = [None] * len(failures)
        self.last_end = 0

    def see(self, batch: list[dict[str, Any]]) -> None:
        if not self.failures:
            return
        for r in batch:
            end, ts = int(r.get("end", 0)), r.get("ts")
            self.last_end = max(self.last_end, end)
            for i, f in enumerate(self.failures):
                if r.get("pid") != f.get("pid"):
                    continue
                tid = int(r.get("device", 0)) * TID_STRIDE + int(r.get("model", 0))
                a = self.any[i]
                if a is None or end > a[0]:
                    self.any[i] = (end, tid)
                if r.get("device") != f.get("device") or (f.get("model_id") is not None
                                                          and r.get("model") != f.get("model_id")):
                    continue
                if not isinstance(ts, (int, float)) or ts > float(f.get("received_ts", 0.0)):
                    continue
                b = self.best[i]
                if b is None or (ts, end) > (b[0], b[1]):
                    self.best[i] = (ts, end, tid)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for i, f in enumerate(self.failures):
            b, a = self.best[i], self.any[i]
            if b is not None:
                end, tid, placed = b[1], b[2], "after the last op of its process and device received before it"
            elif a is not None:
                end, tid, placed = a[0], a[1], "after the last op of its process in this capture"
            else:
                end, tid, placed = self.last_end, int(f.get("device", 0)) * TID_STRIDE, "no op of its process here"
            name = f.get("op_name")
            out.append({"name": f"FAILED {name if name is not None else 'task ' + str(f.get('task'))}",
                        "cat": "op_failure", "ph": "i", "s": "t", "ts": end / 1e3, "pid": f.get("pid", 0),
                        "tid": tid,
                        "args": {k: f.get(k) for k in ("op_type", "model", "device", "stream", "task", "thread",
                                                       "code", "code_name", "inputs", "outputs", "ts")}
                        | {"placed": placed}})
        return out


def _narrow(top: str) -> None:
    """Directories 0750, files 0640 under ``top`` whatever the umask (README "Flight recorder":
    the ascend writer, shared with ``aclprof export``, creates them as the umask says)."""
    os.chmod(top, DIR_MODE)
    for here, dirs, files in os.walk(top):
        for d in dirs:
            os.chmod(os.path.join(here, d), DIR_MODE, follow_symlinks=False)
        for f in files:
            os.chmod(os.path.join(here, f), FILE_MODE, follow_symlinks=False)


# ---- the child process --------------------------------------------------------------------
# stdin: the job (one JSON line), later the room ({"name", "allowance"} or {"abort": true});
# stdout: {"need": bytes} once the records are read, then the result
# ({"ok": true, "doc", "outcome"} or {"ok": false, "error"}). Exit status 0 or 1.

def job_to_json(job: Job) -> str:
    return json.dumps(dataclasses.asdict(job), separators=(",", ":"))


def job_from_json(text: str) -> Job:
    d = json.loads(text)
    return Job(key=tuple(d["key"]), flags=tuple(d["flags"]), flag_ts=float(d["flag_ts"]),
               since_ts=float(d["since_ts"]), until_ts=float(d["until_ts"]),
               files=tuple((str(p), int(n)) for p, n in d["files"]), max_count=int(d["max_count"]),
               max_bytes=int(d["max_bytes"]), host=str(d["host"]), failures=tuple(d.get("failures") or ()),
               requests=tuple(d.get("requests") or ()))


def main() -> int:
    """The child: one capture, as the module docstring's exchange says."""
    try:
        os.nice(10)  # the daemon's loop first when both want a core
    except OSError:
        pass
    os.umask(0o027)  # records are as private as the segment files (0640): group-readable at most
    job = job_from_json(sys.stdin.readline())
    out = Outcome()

    def room(need: int) -> tuple[str, int]:
        print(json.dumps({"need": need}), flush=True)
        answer = json.loads(sys.stdin.readline() or '{"abort": true}')
        if answer.get("abort"):
            raise Aborted
        return str(answer["name"]), int(answer["allowance"])

    try:
        doc = write_capture(job, sys.argv[1], room, threading.Event(), out)
    except Aborted:
        return 1
    except OSError as exc:
        print(json.dumps({"ok": False, "error": f"{exc.filename or sys.argv[1]}: {exc.strerror or exc}",
                          "name": out.name}), flush=True)
        return 1
    print(json.dumps({"ok": True, "doc": doc, "outcome": dataclasses.asdict(out)}), flush=True)
    return 0


def _document(job: Job, name: str, out: Outcome) -> dict[str, Any]:
    """capture.json: what was flagged (or failed), the window, the counts."""
    first = job.flags[0] if job.flags else {}
    return {
        "name": name, "generator": "aclprofd flight recorder", "host": job.host, "created_ts": time.time(),
        # what started the capture: a regression flag, or an op failure (issue 24)
        "trigger": "failure" if job.failures and job.failures[0].get("received_ts") == job.flag_ts else "regression",
        "flag": {"service": job.key[0], "model": job.key[1], "op_type": job.key[2],
                 "quantile": first.get("quantile"), "shift": first.get("shift"), "lower": first.get("lower"),
                 "upper": first.get("upper"), "since_ts": job.flag_ts},
        "flags": [dict(f) for f in job.flags],  # every quantile of the key flagged at that evaluation
        # the op failures of this capture (the first started it when trigger is "failure")
        "failure": dict(job.failures[0]) if job.failures else None,
        "failures": [dict(f) for f in job.failures],
        # the request bills of the window the flagged op types cost most (issue 25), those
        # with the most device time in a flagged type first
        "requests": [dict(b) for b in job.requests],
        "window": {"since_ts": job.since_ts, "until_ts": job.until_ts, "before_s": job.flag_ts - job.since_ts,
                   "after_s": job.until_ts - job.flag_ts, "clock": "the daemon's receive time (Unix seconds)",
                   "selection": "every process and op type of the flagged service"},
        "records": {"found": out.found, "written": out.written, "truncated": out.truncated,
                    "processes": out.processes, "segments_gone": out.segments_gone,
                    "read_problems": out.read_problems[:10]},
        "truncated": out.truncated > 0,
        "files": {"ascend": "ascend/ (one <host>_<pid>_<time>_ascend_pt directory per process)",
                  "chrome": "trace.json", "perfetto": None if out.perfetto_missing else "trace.pftrace",
                  "perfetto_missing": out.perfetto_missing},
    }


if __name__ == "__main__":
    sys.exit(main())
