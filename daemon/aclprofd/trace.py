"""On-demand traces (``aclprof trace``, daemon/PROTOCOL.md "TRACE"): the daemon's side.

A control client sends TRACE; the daemon picks the connected agents of that service (or
pid), sends each a TRACE_START, gathers their TRACE_DONE replies and answers with one
TRACE_REPLY listing, per process, the ``PROF_*`` directories it produced, how long its
subscriptions were paused and what that pause cost (the gap), or its error. It never waits
on anyone: an agent that does not answer within ``duration + REPLY_GRACE_S`` (an agent too
old to know TRACE_START ignores it), or within ``trace_straggler_grace`` once every other
one has answered, or whose connection closes (the process died) is reported with that
error, and the reply goes out as soon as every process is accounted for. An agent that did
not answer is not asked again until it answers (it would hold every later trace); one
still busy in another trace is left out of a new one (reported), not a reason to refuse it.

Who is asked and which answers are believed (the service's owner; directories owned by the
replying uid): :mod:`aclprofd.trace_route`.

The gap: while an agent's subscriptions are paused, its ops never reach the daemon. Each
TRACE_DONE reports the pause; the daemon counts it per connection and in all
(``trace_pauses``, ``trace_paused_seconds``, ``trace_gap_records`` where the agent knows the
number, else ``trace_gap_unknown``), STATUS shows it, and STREAM clients get a
``{"kind": "gap", ...}`` line in their record stream so ``tail`` marks it.

The handlers register themselves in the ingest and control dispatch tables (TRACE_DONE
from agents, TRACE from control clients); TRACE needs an admin peer like every control
request but STATUS (:func:`aclprofd.authz.authorize`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import structlog

from aclprof.protocol import trace as proto
from aclprof.protocol.safetext import scrub, truncate
from aclprof.protocol.wire import Kind, ProtocolError, decode_json, encode_json, header

from .config import Settings
from .conn import Conn
from .fanout import Fanout
from .handshake import is_int
from .records import append_frame
from .replyfit import REPLY_BUDGET
from .status import Counters
from .trace_route import ServiceOwners, check_dirs, describe_owner, owner_key, peer_fields
from .transport import Outbox

__all__ = ["Traces", "Gap"]

_log = structlog.get_logger("aclprofd")
#: read at each request (not imported by value): tests shorten it to test "no reply"
REPLY_GRACE_S = proto.REPLY_GRACE_S
_MAX_DIRS = 64          # PROF_* directories one TRACE_DONE may list
_MAX_TEXT = 4096        # characters of a path or an error kept
_MAX_ACTIVE = 256       # traces running at once (each holds its client until it ends)
_MAX_EXCLUDED = 64      # agents listed as not asked in one TRACE_REPLY (all are counted)
#: a bound on every count a TRACE_DONE carries: sums of them stay exact int64s (Prometheus,
#: other readers) and convertible to float (a JSON integer of 400 digits would otherwise
#: make every STATUS raise)
_MAX_COUNT = (1 << 62) - 1
#: what one TRACE_DONE may report (issue 19: forged frames of 2**62 each pushed the sums
#: past int64, 9.2e22): a pause is at most a trace (300 s) plus the agent's own time, so a
#: day is far beyond any real one; ops in one pause at most 2**40
_MAX_PAUSE_NS = 86_400 * 10**9
_MAX_GAP_RECORDS = 1 << 40
_INT64_MAX = (1 << 63) - 1


@dataclass
class Gap:
    """What trace pauses cost on one agent connection (or in all)."""

    pauses: int = 0
    paused_ns: int = 0
    records: int = 0   # ops the agents counted in their pauses
    unknown: int = 0   # pauses whose op count the agent could not know

    def add(self, pause_ns: int, records: int | None) -> None:
        """One pause. The sums saturate at int64 (the daemon-wide one sums many agents'
        bounded, per-connection checked reports: :meth:`fits`)."""
        self.pauses += 1
        self.paused_ns = min(_INT64_MAX, self.paused_ns + pause_ns)
        if records is None:
            self.unknown += 1
        else:
            self.records = min(_INT64_MAX, self.records + records)

    def fits(self, pause_ns: int, records: int | None) -> bool:
        """Whether one more pause keeps this connection's sums exact int64s."""
        return self.paused_ns + pause_ns <= _INT64_MAX and self.records + (records or 0) <= _INT64_MAX

    def as_dict(self) -> dict[str, Any]:
        return {"trace_pauses": self.pauses, "trace_paused_seconds": round(self.paused_ns / 1e9, 6),
                "trace_gap_records": self.records, "trace_gap_unknown": self.unknown}


@dataclass
class _Part:
    """One process's share of a trace."""

    agent: Conn
    result: dict[str, Any] | None = None


@dataclass
class _Trace:
    id: int
    client: Conn | None
    service: str | None
    pid: int | None
    duration_s: float
    data_types: tuple[str, ...]
    deadline: float
    started: float = 0.0        # monotonic
    last_answer: float = 0.0    # monotonic time of the latest part settled
    parts: dict[str, _Part] = field(default_factory=dict)
    excluded: list[dict[str, Any]] = field(default_factory=list)  # agents matched but not asked


class TraceHost(Protocol):
    """What traces read of the daemon's changing state (:class:`aclprofd.server.Daemon`)."""

    settings: Settings  # ``stream_buffer``, the gap line's bound; ``trace_straggler_grace`` (SIGHUP)
    counters: Counters  # truncations: processes a TRACE_REPLY left out to fit its frame




class Traces:
    """The traces of one daemon (loop thread only). The daemon routes TRACE_DONE from
    agents (:attr:`agent_handlers`) and TRACE from control clients (:attr:`control_handlers`)
    here."""

    def __init__(self, host: TraceHost, outbox: Outbox, fanout: Fanout,
                 keep_waiting: Callable[[Conn, float], None]):
        #: ``keep_waiting(conn, now)``: ``conn`` waits for a reply, it is not idle
        #: (:meth:`aclprofd.connlimits.ConnLimits.requested`)
        self.host, self.outbox, self.fanout, self.keep_waiting = host, outbox, fanout, keep_waiting
        self._next_id = 1
        self.active: dict[int, _Trace] = {}
        self._by_agent: dict[str, int] = {}  # agent conn id -> the trace it runs
        self._gaps: dict[str, Gap] = {}      # agent conn id -> its pauses so far
        self.total = Gap()
        self.requested = 0
        self.refused = 0
        self.failed = 0     # processes that answered with an error, died or did not answer
        self.gap_lines_skipped = 0  # gap lines not queued for a STREAM client that does not read
        self.owners = ServiceOwners()
        self._silent: dict[str, int] = {}  # agent conn id -> the trace it did not answer
        self.impostors_excluded = 0  # agents announcing a service they do not own, not asked
        self.silent_excluded = 0     # agents not asked because they did not answer an earlier trace
        self.busy_excluded = 0       # agents not asked because another trace holds them
        self.stragglers_cut = 0      # parts ended by trace_straggler_grace
        self.dirs_refused = 0        # TRACE_DONE dirs not believed (trace_route.check_dirs)
        self._stopping = False
        self.agent_handlers = {Kind.TRACE_DONE: self.done}
        self.control_handlers = {Kind.TRACE: self.request}

    # ---- TRACE (control) ------------------------------------------------------------------
    def request(self, conn: Conn, req: dict[str, Any]) -> None:
        try:
            service, pid, duration, types = proto.check_request(req)
        except proto.TraceRequestError as exc:
            self._refuse(conn, str(exc))
            return
        matched = [c for c in self.outbox.conns.values() if c.role == "agent" and not c.closed
                   and (service is None or c.service == service) and (pid is None or c.pid == pid)]
        agents, excluded = self._select(matched, service, pid)
        if not matched:
            connected = sorted({f"{c.service or '-'} (pid {c.pid})" for c in self.outbox.conns.values()
                                if c.role == "agent" and not c.closed})
            what = " ".join(x for x in (f"service {service!r}" if service is not None else "",
                                        f"pid {pid}" if pid is not None else "") if x)
            self._refuse(conn, f"no connected agent matches {what}; connected: "
                               f"{', '.join(connected[:20]) if connected else 'none'}")
            return
        if not agents:
            reasons = "; ".join(f"pid {x['pid']} ({x['service'] or '-'}): {x['reason']}" for x in excluded[:5])
            self._refuse(conn, f"no process can be traced now: {reasons}")
            return
        if len(self.active) >= _MAX_ACTIVE:
            self._refuse(conn, f"{_MAX_ACTIVE} traces are running; retry when one ends")
            return
        tid, self._next_id = self._next_id, self._next_id + 1
        now = time.monotonic()
        t = _Trace(tid, conn, service, pid, duration, types, now + duration + REPLY_GRACE_S, now, now,
                   excluded=excluded)
        self.active[tid] = t
        self.requested += 1
        start = encode_json(Kind.TRACE_START, {"trace_id": tid, "duration_s": duration, "data_types": list(types)})
        for a in agents:
            t.parts[a.id] = _Part(a)
            self._by_agent[a.id] = tid
            self.outbox.queue(a, start)
        _log.info("trace started", trace=tid, service=service, pid=pid, duration_s=duration,
                  data_types=list(types), processes=[a.pid for a in agents], by_pid=conn.pid,
                  excluded=[(x["pid"], x["reason"]) for x in excluded[:20]])

    def _select(self, matched: list[Conn], service: str | None,
                pid: int | None) -> tuple[list[Conn], list[dict[str, Any]]]:
        """(the agents to ask, the others with why) among ``matched``: by service, only its
        owner's agents (a pid is the kernel's: no owner needed); never one that did not
        answer an earlier trace, nor one another trace holds."""
        asked: list[Conn] = []
        excluded: list[dict[str, Any]] = []
        owner = self.owners.owner(service) if service is not None and pid is None else None
        for c in matched:
            why = None
            if service is not None and pid is None and owner_key(c) != owner:
                self.impostors_excluded += 1
                why = (f"announces service {service!r} but is {describe_owner(owner_key(c))}, not its owner "
                       + (f"({describe_owner(owner)}, which announced it first)" if owner else "(none)")
                       + "; trace it by --pid if it is yours")
                self.outbox.limiter.log("warning", "trace: agent of another user announces the service",
                                        service=service, pid=c.pid, uid=owner_key(c)[0],
                                        owner_uid=owner[0] if owner else None)
            elif c.id in self._silent:
                self.silent_excluded += 1
                why = f"did not answer trace {self._silent[c.id]}; not asked again until it answers"
            elif c.id in self._by_agent:
                self.busy_excluded += 1
                running = self.active[self._by_agent[c.id]]
                left = max(0.0, running.deadline - REPLY_GRACE_S - time.monotonic())
                why = (f"already tracing (trace {running.id}, about {left:.1f} s left); one trace per process "
                       f"at a time")
            if why is None:
                asked.append(c)
            else:
                excluded.append({**peer_fields(c), "reason": why})
        return asked, excluded

    def _refuse(self, conn: Conn, message: str) -> None:
        self.refused += 1
        self.outbox.limiter.log("info", "trace refused", reason=message, by_pid=conn.pid)
        self.outbox.queue(conn, encode_json(Kind.TRACE_REPLY, {"ok": False, "error": message, "processes": []}))

    # ---- TRACE_DONE (agent) ---------------------------------------------------------------
    def done(self, conn: Conn, payload: memoryview) -> Iterator[None] | None:
        obj = decode_json(payload)
        tid, pause_ns, gap = obj.get("trace_id"), obj.get("pause_ns", 0), obj.get("gap_records")
        session_ns = obj.get("session_ns", 0)
        dirs, error, models = obj.get("dirs", []), obj.get("error"), obj.get("models", [])
        if not _count(tid) or not _count(pause_ns, _MAX_PAUSE_NS) or not _count(session_ns, _MAX_PAUSE_NS) \
                or not (gap is None or _count(gap, _MAX_GAP_RECORDS)):
            raise ProtocolError(f"TRACE_DONE needs an integer trace_id in [0, {_MAX_COUNT}], pause_ns and session_ns "
                                f"in [0, {_MAX_PAUSE_NS}] (a day), and gap_records in [0, {_MAX_GAP_RECORDS}] or null")
        if not isinstance(dirs, list) or len(dirs) > _MAX_DIRS or not all(isinstance(x, str) for x in dirs):
            raise ProtocolError(f"TRACE_DONE dirs must be a list of at most {_MAX_DIRS} strings")
        if error is not None and not isinstance(error, str):
            raise ProtocolError("TRACE_DONE error must be a string or null")
        if not isinstance(models, list) or not all(_count(m, 0xFFFFFFFF) for m in models[:_MAX_DIRS]):
            raise ProtocolError("TRACE_DONE models must be a list of model ids (u32)")
        if pause_ns and not self._gaps.get(conn.id, Gap()).fits(pause_ns, gap):
            raise ProtocolError("TRACE_DONE: this connection's trace pauses would pass an int64 in all")
        self._silent.pop(conn.id, None)  # it answers: ask it again
        result = {**peer_fields(conn), "dirs": [truncate(scrub(x), _MAX_TEXT) for x in dirs], "dirs_refused": [],
                  "pause_ns": pause_ns, "session_ns": session_ns,
                  "paused_ts": _num(obj.get("paused_ts")), "resumed_ts": _num(obj.get("resumed_ts")),
                  "models": models[:_MAX_DIRS], "gap_records": gap,
                  "error": None if error is None else truncate(scrub(error), _MAX_TEXT)}
        if pause_ns:
            # counted whether or not the trace is still waiting (a reply after a timeout or
            # on a new connection after a reconnect still describes a real pause)
            self._gaps.setdefault(conn.id, Gap()).add(pause_ns, gap)
            self.total.add(pause_ns, gap)
            self._mark_gap(conn, result)
        t = self.active.get(tid)
        part = t.parts.get(conn.id) if t is not None else None
        if t is None or part is None or part.result is not None:
            self.outbox.limiter.log("info", "late or unknown TRACE_DONE", trace=tid, pid=conn.pid, pause_ns=pause_ns)
            return None
        # checked only for a reply that is awaited: a flood of TRACE_DONE costs no file system calls
        result["dirs"], refused = check_dirs(result["dirs"], tid, owner_key(conn)[0])
        if refused:
            result["dirs_refused"] = refused
            self.dirs_refused += len(refused)
            self.outbox.limiter.log("warning", "trace: directories not believed", trace=tid, pid=conn.pid,
                                    uid=owner_key(conn)[0], refused=refused[:4])
        return self._settle(t, part, result)  # the reply's steps if this answer was the last

    def _mark_gap(self, src: Conn, result: dict[str, Any]) -> None:
        """A ``{"kind": "gap"}`` line for every STREAM client whose filter takes ``src``,
        after the records it already has pending (they came before the pause ended)."""
        fan = self.fanout
        if not fan.streaming:
            return
        fan.pump_streams()
        line = json.dumps({"ts": round(time.time(), 6), "host": src.host, "pid": src.pid or 0, "service": src.service,
                           "kind": "gap", "reason": "trace", "pause_ns": result["pause_ns"],
                           "session_ns": result["session_ns"],
                           "paused_ts": result["paused_ts"], "resumed_ts": result["resumed_ts"],
                           "models": result["models"], "gap_records": result["gap_records"]},
                          separators=(",", ":")).encode() + b"\n"
        limit = self.host.settings.stream_buffer_bytes
        for c in list(self.outbox.conns.values()):
            flt = c.stream
            if flt is None or c.closed or not flt.source_matches(src.host, src.pid or 0, src.service):
                continue
            if len(c.out) > limit:
                # a client that does not read: no line (STATUS still counts the pause), so
                # an agent flooding TRACE_DONE cannot grow its buffer past the stream's bound
                self.gap_lines_skipped += 1
                continue
            append_frame(c.out, Kind.STREAM_RECORDS, line)
            self.outbox.send(c)

    # ---- endings --------------------------------------------------------------------------
    def _settle(self, t: _Trace, part: _Part, result: dict[str, Any]) -> Iterator[None] | None:
        """``part`` has its result; once every part has one, the trace ends: the steps that
        build its reply are returned (a TRACE_DONE handler gives them to the transport, which
        runs them over loop turns) or, for the other callers, run at once (:meth:`_finish`)."""
        part.result = result
        t.last_answer = time.monotonic()
        if result.get("error"):
            self.failed += 1
        if self._by_agent.get(part.agent.id) == t.id:
            del self._by_agent[part.agent.id]
        if all(p.result is not None for p in t.parts.values()):
            return self._reply_steps(t)
        return None

    def _finish(self, t: _Trace, steps: Iterator[None] | None) -> None:
        """Run the reply's ``steps`` (from :meth:`_settle`) now, if any."""
        for _ in steps or ():
            pass

    def _reply_steps(self, t: _Trace) -> Iterator[None]:
        """End ``t``: TRACE_REPLY to its client, a step per process encoded. Each process may
        list 64 paths of 4096 characters (six-fold in JSON escapes): the list is cut to the
        reply budget, the cut said and counted (aclprofd.replyfit). Each process is encoded
        once and the frame joined from those texts in one piece: measuring the list and
        encoding the reply again was two encodings of up to 16 MB, ~105 ms of the loop's CPU
        at the TRACE_DONE that completed the trace, and the reply was held four times over
        (texts, payload str, payload bytes, frame) (issue 19)."""
        self.active.pop(t.id, None)
        processes = sorted((p.result for p in t.parts.values() if p.result is not None),
                           key=lambda r: (str(r.get("service")), r.get("pid") or 0))
        ok = all(not r.get("error") for r in processes)
        _log.info("trace finished", trace=t.id, ok=ok, processes=len(processes),
                  errors=[r["error"] for r in processes if r.get("error")], excluded=len(t.excluded))
        if t.client is None or t.client.closed:
            return
        texts: list[bytes] = []
        used = 2  # the brackets
        for r in processes:
            text = json.dumps(r, separators=(",", ":")).encode()  # ASCII (JSON escapes)
            if used + len(text) + (1 if texts else 0) > REPLY_BUDGET:
                break
            texts.append(text)
            used += len(text) + (1 if len(texts) > 1 else 0)
            yield  # the next process on the next step (another loop turn if the slice is over)
        reply = {"ok": ok, "error": None if ok else "some processes did not trace (see processes[].error)",
                 "trace_id": t.id, "service": t.service, "pid": t.pid, "duration_s": t.duration_s,
                 "data_types": list(t.data_types),
                 "excluded": t.excluded[:_MAX_EXCLUDED], "excluded_total": len(t.excluded)}
        self.host.counters.truncations.note(reply, "trace", {"processes": len(processes) - len(texts)})
        parts = [json.dumps(reply, separators=(",", ":"))[:-1].encode() + b',"processes":[']
        for i, text in enumerate(texts):
            if i:
                parts.append(b",")
            parts.append(text)
        parts.append(b"]}")
        parts.insert(0, header(Kind.TRACE_REPLY, sum(map(len, parts))))
        frame = b"".join(parts)  # the one copy of the reply
        del parts, texts
        if t.client is not None and not t.client.closed:  # it may have gone during the steps
            self.outbox.queue(t.client, frame)

    def closed(self, conn: Conn) -> None:
        """``conn`` is closing (the loop's close hook): an agent's part ends with an error
        now (its process died or hung up), a client's traces run on without a reader."""
        self._gaps.pop(conn.id, None)
        self._silent.pop(conn.id, None)
        self.owners.closed(conn)
        tid = self._by_agent.pop(conn.id, None)
        if tid is not None and tid in self.active:
            t = self.active[tid]
            part = t.parts.get(conn.id)
            if part is not None and part.result is None:
                why = ("the daemon stopped before this process answered (its session ends as planned; "
                       "look for its PROF_* directory under the agent's trace_dir)") if self._stopping else (
                    "the process's connection closed during the trace (it exited or was killed?); its PROF_* "
                    "directory, if any, is incomplete")
                self._finish(t, self._settle(t, part, self._failed(conn, why)))
        for t in self.active.values():
            if t.client is conn:
                t.client = None

    def stopping(self) -> None:
        """The daemon stops (before it reads its agents' last frames and closes them): a
        TRACE_DONE among those frames still counts; a process that has not answered by
        its close is reported as cut off by the stop (its agent resumes its subscriptions
        all the same), and every waiting client gets its reply before the daemon exits."""
        self._stopping = True

    def tick(self, now: float) -> None:
        """From the loop: time out agents that did not answer; keep waiting clients from
        being closed as idle (they wait for the reply, not idling)."""
        if not self.active:
            return
        grace = self.host.settings.trace_straggler_grace_s
        for t in list(self.active.values()):
            if t.client is not None:
                self.keep_waiting(t.client, now)
            waiting = [p for p in t.parts.values() if p.result is None]
            # a straggler: every other process answered; it gets ``grace`` past the later of
            # the last answer and the session's end, not the whole REPLY_GRACE_S
            straggler = len(waiting) < len(t.parts) and \
                now >= max(t.last_answer, t.started + t.duration_s) + grace
            if now < t.deadline and not straggler:
                continue
            for part in waiting:
                self._silent[part.agent.id] = t.id
                if now < t.deadline:
                    self.stragglers_cut += 1
                    why = (f"no reply {grace:g} s after every other process answered (hung, or an agent that "
                           f"never answers?); not asked again until it answers")
                else:
                    why = (f"no reply within {t.duration_s + REPLY_GRACE_S:g} s (agent too old to know "
                           f"TRACE_START, or hung?)")
                self._finish(t, self._settle(t, part, self._failed(part.agent, why)))

    @staticmethod
    def _failed(agent: Conn, error: str) -> dict[str, Any]:
        return {**peer_fields(agent), "dirs": [], "dirs_refused": [], "pause_ns": None,
                "session_ns": None,
                "paused_ts": None, "resumed_ts": None, "models": [], "gap_records": None, "error": error}

    # ---- status ---------------------------------------------------------------------------
    def gap_of(self, conn_id: str) -> dict[str, Any]:
        return (self._gaps.get(conn_id) or Gap()).as_dict()

    def summary(self) -> dict[str, Any]:
        return {"requested": self.requested, "refused": self.refused, "running": len(self.active),
                "failed_processes": self.failed, "gap_lines_skipped": self.gap_lines_skipped,
                "impostors_excluded": self.impostors_excluded, "silent_excluded": self.silent_excluded,
                "busy_excluded": self.busy_excluded, "stragglers_cut": self.stragglers_cut,
                "dirs_refused": self.dirs_refused,
                **self.total.as_dict()}


def _count(v: Any, top: int = _MAX_COUNT) -> TypeGuard[int]:
    return is_int(v) and 0 <= v <= top


def _num(v: Any) -> float | None:
    # the range first: math.isfinite of a 400-digit integer raises OverflowError
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and -1e18 < v < 1e18 and math.isfinite(v)
    return float(v) if ok else None
