"""The flight recorder: when the regression detector raises a new flag, or an agent reports an
op failure (issue 24, :meth:`CaptureService.failure`), keep the raw records of the seconds
around it as a capture (daemon/README.md "Flight recorder").

On the loop thread (:meth:`CaptureService.tick`, every turn, cheap): the detector's newest
view is compared with the last one seen; a flag (key and quantile) that the previous view
did not have was raised at that evaluation. Its key (service, model, op type) is rate-limited (one capture
per ``capture_min_interval``), and a capture is scheduled for ``[t - before, t + after]``.
Once ``t + after`` has passed, the loop flushes (what was received until then is in the
segment files), lists the segment files of that window and queues a :class:`Job`.

On the worker thread: each job is written into ``<data_dir>/captures/`` by a child process
(:mod:`aclprofd.capture.proc`, :mod:`aclprofd.capture.writer`: formatting is CPU work that
would take the GIL from the loop), while :class:`aclprofd.capture.store.CaptureStore` keeps
the bounds. The queue is bounded (a job that does not fit is dropped and counted); a failed
write (full disk, unwritable directory) is counted, logged, and removes its unfinished
directory; nothing here stops the daemon. The worker stops at :meth:`CaptureService.close`:
it finishes no further capture (what is pending or queued is counted as abandoned), and a
child writing one is killed.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from ..config import Settings
from ..detector.service import DetectorService
from ..storage import Storage
from .proc import CaptureFailed, ChildWriter
from .store import CaptureEntry, CaptureStore, NoRoom, capture_name, summary_of
from .writer import Aborted, Job

if TYPE_CHECKING:
    from ..detector.engine import DetectorView

__all__ = ["CaptureService", "CaptureHost", "QUEUE_MAX"]

_log = structlog.get_logger("aclprofd")
QUEUE_MAX = 4  # captures waiting for the worker; more are dropped (counted)
_JOIN_S = 5.0
_STATUS_ITEMS = 1000  # capture_max_count's upper bound: STATUS lists them all
_FAILURES_PER_CAPTURE = 64  # op failures one capture names (more are counted as rate limited)
_FAILURE_KEYS = 4096  # (service, op) pairs whose last failure capture is remembered

Key = tuple[str, str, str]


@dataclass
class _Pending:
    key: Key  # the first key flagged (the capture's name); ``flags`` holds every key's flags
    flags: tuple[dict[str, Any], ...]
    flag_ts: float
    since_ts: float
    until_ts: float
    failures: tuple[dict[str, Any], ...] = ()  # op failures that started or joined it (issue 24)


class _Bills(Protocol):
    """The request bills (:class:`aclprofd.bills.RequestBills`, issue 25)."""

    def hurt(self, service: str, model: str, op_type: str, since: float, until: float | None = None,
             top: int = ...) -> list[dict[str, Any]]: ...


#: request bills one capture.json holds at most (those its flags hurt most)
MAX_CAPTURE_BILLS = 16


class CaptureHost(Protocol):
    """What the flight recorder uses of the daemon (:class:`aclprofd.server.Daemon`)."""

    settings: Settings  # the capture_* settings (SIGHUP may change them)
    storage: Storage | None  # the segment files a capture reads

    @property
    def detection(self) -> DetectorService: ...
    @property
    def bills(self) -> _Bills: ...

    def flush(self) -> None:
        """Write the received records to the segment files."""


class CaptureService:
    """One daemon's flight recorder."""

    def __init__(self, host: CaptureHost) -> None:
        self.host = host
        self.store = CaptureStore(host.settings.data_dir)
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=QUEUE_MAX)
        self.pending: list[_Pending] = []
        self._last: dict[Key, float] = {}  # wall time of each key's last scheduled capture
        self._last_failure: dict[tuple[str, str], float] = {}  # (service, op): its last failure capture
        self.failures_joined = 0  # op failures added to a capture already scheduled for their service
        self.failures_rate_limited = 0  # op failures with no capture (one per (service, op) per interval)
        self._seen: DetectorView | None = None
        self._flagged: set[tuple[Any, ...]] = set()  # (service, model, op_type, quantile) flagged in _seen
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.busy = False  # the worker is writing one now
        self.child = ChildWriter()  # the process that formats and writes (off the loop's GIL)
        # counters (the worker and the loop write different ones; STATUS reads them)
        self.made = 0
        self.errors = 0
        self.last_error: str | None = None
        self.truncated = 0  # captures that were truncated to fit
        self.records_truncated = 0
        self.records_written = 0
        self.rate_limited = 0
        self.dropped = 0  # flags not captured: queue or pending list full
        self.abandoned = 0  # scheduled or queued when the daemon stopped

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="aclprofd-capture", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the worker (bounded wait): pending and queued captures are abandoned, a
        capture being written is killed (its unfinished directory removed)."""
        self._stopping.set()
        self.child.kill()
        self.abandoned += len(self.pending)
        self.pending.clear()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self.abandoned += 1
        if self._thread is None:
            return
        try:
            self._queue.put_nowait(None)
        except queue.Full:  # cannot be: drained above and only this thread puts
            pass
        self._thread.join(_JOIN_S)
        if self._thread.is_alive():
            _log.error("capture worker did not stop in time (a write hangs?); leaving it", wait_s=_JOIN_S)
        self._thread = None

    # ---- loop side ----------------------------------------------------------------------
    def tick(self) -> None:
        """Every loop turn: notice new flags, queue the captures whose window has passed."""
        view = self.host.detection.published
        if view is not self._seen:
            self._seen = view
            self._new_flags(view)
        if self.pending:
            now = time.time()
            due = [p for p in self.pending if now >= p.until_ts]
            if due:
                self.pending = [p for p in self.pending if now < p.until_ts]
                self.host.flush()  # the window's records are in the segment files from here
                for p in due:
                    self._submit(p)

    def _new_flags(self, view: DetectorView) -> None:
        s = self.host.settings
        raised: dict[Key, list[dict[str, Any]]] = {}
        now_flagged = set()
        for f in view.flags:
            fid = (f["service"], f["model"], f["op_type"], f.get("quantile"))
            now_flagged.add(fid)
            if fid not in self._flagged:  # not flagged in the previous view: raised now
                raised.setdefault(fid[:3], []).append(f)
        self._flagged = now_flagged
        if not s.capture_enabled:
            return  # (the set above stays current: enabling later captures only flags raised after)
        t = float(view.ts)
        if raised and self._last:
            # per-key state no longer needed (its interval is over): dropped, so that groups
            # that come and go (the detector ages out cells of gone agents) cannot grow it
            self._last = {k: v for k, v in self._last.items() if t - v < s.capture_min_interval_s}
        for key, flags in raised.items():
            last = self._last.get(key)
            if last is not None and t - last < s.capture_min_interval_s:
                self.rate_limited += 1
                _log.info("regression flagged; no capture (one per key per capture_min_interval)",
                          service=key[0], model=key[1], op_type=key[2], last_ts=last)
                continue
            # A capture holds every process and op type of its service: flags of one service
            # raised together (or while its capture still waits for its window) share it. Two
            # captures of the same records would each take the byte bound, and the second
            # would delete the first.
            joined = next((p for p in self.pending if p.key[0] == key[0] and t <= p.until_ts), None)
            if joined is not None:
                self._last[key] = t
                joined.flags += tuple(flags)
                _log.info("regression flagged; joins the capture scheduled for its service", service=key[0],
                          model=key[1], op_type=key[2], capture_op_type=joined.key[2], until_ts=joined.until_ts)
                continue
            if len(self.pending) >= s.capture_max_count:
                self.dropped += 1
                _log.warning("regression flagged; no capture (too many waiting)", service=key[0], op_type=key[2],
                             pending=len(self.pending))
                continue
            self._last[key] = t
            self.pending.append(_Pending(key, tuple(flags), t, t - s.capture_before_s, t + s.capture_after_s))
            _log.info("regression flagged; capture scheduled", service=key[0], model=key[1], op_type=key[2],
                      until_ts=t + s.capture_after_s)

    def failure(self, _conn: object, entry: dict[str, Any]) -> None:
        """An op failure (a :class:`aclprofd.failures.Failures` listener, loop thread): a capture
        of its service around it, the ops before it and its window after; at most one per
        (service, op) per ``capture_min_interval`` (a failure storm is one capture, the rest
        counted). A failure while a capture of its service waits for its window joins it."""
        s = self.host.settings
        if not s.capture_enabled:
            return
        t = time.time()  # the daemon's receive time: the clock of the records' ``ts``
        service = entry.get("service") or ""
        op = entry.get("op_name") or entry.get("op_type") or f"task {entry.get('task')}"
        failure = {**entry, "received_ts": t}
        joined = next((p for p in self.pending if p.key[0] == service and t <= p.until_ts), None)
        if joined is not None:
            if len(joined.failures) < _FAILURES_PER_CAPTURE:
                joined.failures += (failure,)
                self.failures_joined += 1
                return
        last = self._last_failure.get((service, op))
        if joined is not None or (last is not None and t - last < s.capture_min_interval_s):
            self.failures_rate_limited += 1
            return
        if len(self._last_failure) >= _FAILURE_KEYS:  # forget those whose interval is over
            self._last_failure = {k: v for k, v in self._last_failure.items() if t - v < s.capture_min_interval_s}
        if len(self.pending) >= s.capture_max_count or len(self._last_failure) >= _FAILURE_KEYS:
            self.dropped += 1
            _log.warning("op failure; no capture (too many waiting)", service=service, op=op,
                         pending=len(self.pending))
            return
        self._last_failure[(service, op)] = t
        key = (service, str(entry.get("model") or ""), str(entry.get("op_type") or op))
        self.pending.append(_Pending(key, (), t, t - s.capture_before_s, t + s.capture_after_s, (failure,)))
        _log.info("op failure; capture scheduled", service=service, op=op, until_ts=t + s.capture_after_s)

    def _submit(self, p: _Pending) -> None:
        storage = self.host.storage
        if storage is None:  # the daemon is closing: nothing to read from
            self.abandoned += 1
            return
        s = self.host.settings
        job = Job(p.key, p.flags, p.flag_ts, p.since_ts, p.until_ts,
                  tuple(storage.files(p.since_ts, p.until_ts)), s.capture_max_count, s.capture_max_bytes,
                  str(getattr(self.host.detection.detector, "host", "") or ""), p.failures, self._bills_of(p))
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.dropped += 1
            _log.warning("capture dropped: the writer is behind", service=p.key[0], op_type=p.key[2],
                         queued=QUEUE_MAX)

    def _bills_of(self, p: _Pending) -> tuple[dict[str, Any], ...]:
        """The request bills received in the capture's window that its flags (or its failed
        op) hurt most: per flagged (service, model, op type), the most device time in that
        type first; at most MAX_CAPTURE_BILLS, each once (issue 25)."""
        keys = sorted({(str(f["service"]), str(f["model"]), str(f["op_type"])) for f in p.flags} or {p.key})
        seen: set[tuple[Any, Any]] = set()
        out: list[dict[str, Any]] = []
        for service, model, op_type in keys:
            for b in self.host.bills.hurt(service, model, op_type, p.since_ts, p.until_ts):
                if (b["pid"], b["id"]) not in seen and len(out) < MAX_CAPTURE_BILLS:
                    seen.add((b["pid"], b["id"]))
                    out.append(b)
        return tuple(out)

    # ---- worker side --------------------------------------------------------------------
    def _work(self) -> None:
        try:
            self.store.scan()
        except OSError as exc:
            self._failed(f"cannot read {self.store.root}: {exc.strerror or exc}")
        except Exception as exc:  # a bug: counted and logged, the thread still serves captures
            self._failed(f"cannot list {self.store.root}: {type(exc).__name__}: {exc}", exc_info=True)
        for name, why in self.store.skipped[:20]:  # at most 20 lines; the count says the rest
            _log.warning("capture directory entry skipped", name=name, reason=why,
                         skipped=len(self.store.skipped))
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._stopping.is_set():
                self.abandoned += 1
                continue
            self.busy = True
            try:
                self._write(job)
            finally:
                self.busy = False

    def _write(self, job: Job) -> None:
        store = self.store

        def same_event(entry: CaptureEntry) -> bool:
            """A capture flagged within this one's window belongs to the same event: kept."""
            ts = entry.summary.get("flag_ts")
            return ts is not None and job.since_ts <= ts <= job.until_ts

        asked: list[int] = []

        def room(need: int) -> tuple[str, int]:
            asked.append(need)
            allowance = store.make_room(job.max_count, job.max_bytes, min(need, job.max_bytes), keep=same_event)
            keys = len({(f.get("service"), f.get("model"), f.get("op_type")) for f in job.flags})
            op_type = job.key[2] if keys <= 1 else f"{job.key[2]}-and-{keys - 1}-more"
            return store.unique_name(capture_name(job.flag_ts, job.key[0], op_type)), allowance

        started = time.monotonic()
        try:
            doc, out = self.child.run(job, store.root, room)
        except Aborted:
            self.abandoned += 1
            return
        except NoRoom as exc:
            self.dropped += 1
            _log.warning("capture not taken", reason=str(exc), service=job.key[0], op_type=job.key[2])
            return
        except CaptureFailed as exc:
            self._failed(str(exc), service=job.key[0], op_type=job.key[2])
            return
        except OSError as exc:  # starting the child (no memory, no processes left)
            self._failed(f"cannot start the capture writer: {exc.strerror or exc}", service=job.key[0],
                         op_type=job.key[2])
            return
        except Exception as exc:  # a bug: counted and logged with its traceback, never fatal
            self._failed(f"{type(exc).__name__}: {exc}", service=job.key[0], op_type=job.key[2], exc_info=True)
            return
        entry = store.add(out.name, summary_of(doc))
        store.enforce(job.max_count, job.max_bytes, keep=lambda e: e.name == out.name or same_event(e))
        self.made += 1
        self.records_written += out.written
        if out.truncated:
            self.truncated += 1
            self.records_truncated += out.truncated
        _log.info("capture written", path=os.path.join(store.root, out.name), records=out.written,
                  truncated=out.truncated, bytes=entry.bytes, estimated_bytes=asked[0] if asked else None,
                  flags=len(job.flags), processes=out.processes,
                  seconds=round(time.monotonic() - started, 3))

    def _failed(self, message: str, exc_info: bool = False, **kw: Any) -> None:
        self.errors += 1
        self.last_error = message
        _log.error("capture failed", error=message, errors=self.errors, exc_info=exc_info, **kw)

    # ---- views --------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The STATUS reply's ``captures`` object (items newest first)."""
        s = self.host.settings
        entries = self.store.published
        root = self.store.root
        items = [e.listing(root) for e in reversed(entries[-_STATUS_ITEMS:])]
        return {"enabled": s.capture_enabled, "dir": root, "count": len(entries),
                "bytes": sum(e.bytes for e in entries), "max_count": s.capture_max_count,
                "max_bytes": s.capture_max_bytes, "before_s": s.capture_before_s, "after_s": s.capture_after_s,
                "min_interval_s": s.capture_min_interval_s, "made_total": self.made, "errors_total": self.errors,
                "last_error": self.last_error, "truncated_total": self.truncated,
                "records_written_total": self.records_written, "records_truncated_total": self.records_truncated,
                "rate_limited_total": self.rate_limited, "dropped_total": self.dropped,
                "failures_joined_total": self.failures_joined,
                "failures_rate_limited_total": self.failures_rate_limited,
                "abandoned_total": self.abandoned, "evicted_total": self.store.evicted,
                "skipped_entries": len(self.store.skipped),
                "pending": len(self.pending), "queued": self._queue.qsize() + int(self.busy),
                "newest": items[0] if items else None, "items": items}
