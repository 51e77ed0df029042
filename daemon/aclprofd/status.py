"""The daemon's counters, their one immutable snapshot, its health problems and the
STATUS reply.

The loop owns :class:`Counters` (mutated on the loop thread only). :func:`take_snapshot`
copies them, with per-agent figures and storage and aggregate sizes, into one frozen
:class:`CountersSnapshot`; the loop publishes it (``Daemon.published``) every
``PUBLISH_S`` (the recent counters' history samples once a second) and whenever it answers
STATUS or begins a /metrics rendering. Both the STATUS reply and the Prometheus
collector (another thread) read only snapshots, so they show the same consistent numbers
and the collector never walks the loop's live containers.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import __version__
from .aggregate.aggregator import Aggregator
from .config import Settings
from .conn import Conn, Rate
from .counter_history import CounterHistory
from .replyfit import REPLY_BUDGET, Truncations, fair_shares, json_size, take
from .storage import Storage

__all__ = ["Counters", "AgentSnapshot", "CountersSnapshot", "Health", "take_snapshot", "status_reply",
           "PUBLISH_S", "SnapshotSource", "STATUS_FLAGS_BUDGET", "STATUS_CAPTURES_BUDGET"]

#: the loop publishes a new snapshot this often, and at each STATUS and /metrics rendering,
#: which so never read an older one: ten a second cost ~0.1-0.4 ms of loop CPU each, and
#: woke an idle loop as often (issue 21); the history (CounterHistory) samples once a second
PUBLISH_S = 1.0
_MAX_DROP_KEYS = 1000


@dataclass
class Counters:
    """Daemon-wide totals, mutated by the loop thread only."""

    records_total: int = 0
    steps_total: int = 0  # step keypoint records (also in records_total)
    dropped_total: int = 0
    protocol_errors: int = 0
    stream_skipped_total: int = 0
    rate: Rate = field(default_factory=Rate)
    drops_by_agent: dict[tuple[int, str], int] = field(default_factory=dict)
    #: records refused at ingest for impossible values, by reason (aclprofd.ingest)
    records_rejected: dict[str, int] = field(default_factory=dict)
    #: requests refused by the memory budget, by what they would have grown (aclprofd.server)
    memory_refused: dict[str, int] = field(default_factory=dict)
    #: what replies left out to fit their frame (aclprofd.replyfit)
    truncations: Truncations = field(default_factory=Truncations)

    def add_drops(self, pid: int, service: str, n: int) -> None:
        self.dropped_total += n
        key = (pid, service)
        self.drops_by_agent[key] = self.drops_by_agent.get(key, 0) + n
        if len(self.drops_by_agent) > _MAX_DROP_KEYS:  # bounded: forget the oldest agents
            self.drops_by_agent.pop(next(iter(self.drops_by_agent)))


@dataclass(frozen=True)
class AgentSnapshot:
    pid: int | None
    host: str
    service: str | None
    labels: dict[str, str]
    connected_s: float
    models: tuple[dict[str, Any], ...]
    records: int
    records_per_s: float
    dropped: int
    lag_ns: int | None
    steps: int
    #: trace pauses on this connection (aclprofd.trace.Gap.as_dict)
    trace: dict[str, Any] = field(default_factory=dict)
    #: uid, pid namespace, pid there, HELLO's pid (aclprofd.conn.Conn.identity)
    identity: dict[str, Any] = field(default_factory=dict)
    #: JSON bytes of host, service and labels, and of each model entry (aclprofd.replyfit):
    #: measured once (HELLO, WATCH), so that STATUS cuts without measuring again
    ident_bytes: int = 0
    model_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class CountersSnapshot:
    """Everything STATUS and /metrics report, copied at one instant on the loop thread."""

    taken_ts: float
    uptime_s: float
    records_total: int
    steps_total: int
    records_per_s: float
    dropped_total: int
    protocol_errors: int
    stream_skipped_total: int
    drops_by_agent: tuple[tuple[tuple[int, str], int], ...]
    agents: tuple[AgentSnapshot, ...]
    storage: dict[str, Any] | None
    aggregate_keys: int
    aggregate_cap: int
    aggregate_other_records: int
    aggregate_windows: tuple[str, ...]
    aggregate_since_ts: float
    problems: tuple[str, ...]
    records_rejected: tuple[tuple[str, int], ...] = ()
    memory_budget: int = 0
    memory_used: int = 0
    memory_refused: tuple[tuple[str, int], ...] = ()
    #: what the daemon holds itself (base, tables), the slack headroom, the clients' share
    memory_own: tuple[tuple[str, int], ...] = ()
    #: connections (aclprofd.transport): closed for a bug while serving them, refused or
    #: evicted by the connection limits, control clients closed for idling, failed accepts
    internal_errors: int = 0
    connections_refused: int = 0
    idle_closed: int = 0
    accept_errors: int = 0
    #: peers gone when the daemon wrote to them (closed before reading their replies)
    peer_gone: int = 0
    #: connections whose slice of a loop turn ended with frames left for the next turn
    #: (aclprofd.transport FRAMES_PER_TURN / SLICE_S), and those waiting now
    slices_cut: int = 0
    slices_pending: int = 0
    #: the loop's long turns by their longest step (aclprofd.stalls.LoopStalls.summary)
    loop_stalls: dict[str, Any] = field(default_factory=dict)
    #: the CPU slice the daemon asked of the kernel (aclprofd.cpuslice.SliceResult.as_dict)
    cpu_slice: dict[str, Any] = field(default_factory=dict)
    #: connections open now: all, control clients, not yet said HELLO
    open_connections: int = 0
    open_control: int = 0
    open_without_hello: int = 0
    #: op names/types cut to MAX_NAME_BYTES at ingest (aclprofd.ingest)
    names_truncated: int = 0
    #: on-demand traces (aclprofd.trace.Traces.summary)
    traces: dict[str, Any] = field(default_factory=dict)
    #: op failures agents reported (aclprofd.failures.Failures.summary)
    failures: dict[str, Any] = field(default_factory=dict)
    #: request bills agents sent (aclprofd.bills.RequestBills.summary; issue 25)
    request_bills: dict[str, Any] = field(default_factory=dict)
    #: the request device-time histogram's label sets and owners (RequestBills.prometheus_series)
    request_hist: tuple[Any, Any] = ((), ())
    #: the connection limits by reason (aclprofd.connlimits.REFUSAL_REASONS), agents closed
    #: for idling, agents open now and the most one uid holds
    connections_refused_by: tuple[tuple[str, int], ...] = ()
    agent_idle_closed: int = 0
    open_agents: int = 0
    agents_largest_uid: int = 0
    #: the shared tables' per-agent shares (aclprofd.shares): table -> figures
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the counters' growth per recent window (aclprofd.counter_history)
    recent: dict[str, dict[str, float]] = field(default_factory=dict)
    #: what replies left out to fit their frame, since the start (aclprofd.replyfit)
    replies_truncated: dict[str, Any] = field(default_factory=dict)
    #: the /metrics endpoint's figures (aclprofd.metrics.Metrics.stats; empty without it)
    metrics: dict[str, Any] = field(default_factory=dict)


class Health:
    """What makes the daemon unhealthy: recent agent losses, storage errors, key-cap overflow."""

    def __init__(self) -> None:
        self.recent_drops: collections.deque[tuple[float, int, str | None, int]] = collections.deque()
        self.other_seen = 0
        self.other_growth_ts = 0.0
        self.history: CounterHistory | None = None  # created at the first snapshot

    def recent(self, agg: Aggregator, started_mono: float, mono: float,
               counters: dict[str, int]) -> dict[str, dict[str, float]]:
        """STATUS ``recent``: the counters' growth over each aggregate window and the last
        minute (what ``aclprof top`` calls degraded), from one sample a second."""
        windows = {name: float(sec) for name, sec in zip(agg.window_names(), agg.windows)}
        windows.setdefault("1m", 60.0)
        if self.history is None:
            self.history = CounterHistory(started_mono, max(windows.values()))
        self.history.keep_s = max(windows.values())
        self.history.add(mono, counters)
        return self.history.recent(mono, windows.items(), counters)

    def drops(self, pid: int, service: str | None, n: int, now: float) -> None:
        self.recent_drops.append((now, pid, service, n))

    def other_records(self, other: int) -> None:
        """Called at every flush: notes when the '(other)' bucket grew."""
        if other > self.other_seen:
            self.other_seen, self.other_growth_ts = other, time.time()

    def problems(self, socket_problem: str | None, st: Storage | None, agg: Aggregator, now: float) -> list[str]:
        out: list[str] = []
        if socket_problem:
            out.append(socket_problem)
        if st is not None:
            if st.last_error and st.last_error_ts > now - 60:
                out.append(f"storage write failing: {st.last_error} ({st.records_lost} records not stored)")
            if st.dir_access.problem:  # a data dir wider than 0750 the daemon may not narrow (issue 19)
                out.append(st.dir_access.problem)
            # Reaching disk_cap is no problem: a bounded store is meant to sit at its cap
            # (storage.at_cap in STATUS says so).
        while self.recent_drops and self.recent_drops[0][0] < now - 60:
            self.recent_drops.popleft()
        per: dict[tuple[int, str | None], int] = {}
        for _, pid, service, n in self.recent_drops:
            per[(pid, service)] = per.get((pid, service), 0) + n
        for (pid, service), n in per.items():
            out.append(f"agent pid {pid} ({service or 'no service'}) reported {n} dropped records in the last minute")
        if self.other_growth_ts > now - 60:
            # '(other)' grows when the registry is full or when an agent (or its uid) holds
            # its share of keys (aclprofd.shares): say which, the fix differs
            why = (f"aggregate key cap ({agg.max_keys}) reached" if agg.nkeys - 1 >= agg.max_keys
                   else "an agent reached its share of aggregate keys (max_keys_per_agent, max_keys_per_uid; "
                        "STATUS tables.aggregate_keys)")
            out.append(f"{why}: {agg.other_records} records counted under '(other)'")
        return out


class _TraceStats(Protocol):
    def gap_of(self, conn_id: str) -> dict[str, Any]: ...
    def summary(self) -> dict[str, Any]: ...


class _FailureStats(Protocol):
    def summary(self) -> dict[str, Any]: ...


class _BillStats(Protocol):
    def summary(self) -> dict[str, Any]: ...
    def prometheus_series(self) -> tuple[Any, Any]: ...


class _IngestStats(Protocol):
    names_truncated: int


class _MemoryUse(Protocol):
    base: int
    tables_bytes: int
    def used(self) -> int: ...
    def slack(self) -> int: ...
    def share(self) -> int: ...
    def problem(self) -> str | None: ...


class _LimitStats(Protocol):
    @property
    def refused(self) -> int: ...
    @property
    def idle_closed(self) -> int: ...
    refused_by: dict[str, int]
    idle_closed_by: dict[str, int]
    def agent_counts(self) -> tuple[int, int]: ...


class _TableStats(Protocol):
    def table_stats(self) -> dict[str, int]: ...


class _TransportStats(Protocol):
    """The transport's counters and connections (:class:`aclprofd.transport.Transport`)."""

    internal_errors: int
    accept_errors: int
    peer_gone: int
    slices_cut: int

    @property
    def pending(self) -> Mapping[int, Any]: ...

    @property
    def limits(self) -> _LimitStats: ...

    @property
    def conns(self) -> Mapping[int, Conn]: ...
    @property
    def memory(self) -> _MemoryUse: ...
    def open_counts(self) -> tuple[int, int, int]: ...


class _StallStats(Protocol):
    def summary(self) -> dict[str, Any]: ...


class SnapshotSource(Protocol):
    """What :func:`take_snapshot` reads: the daemon (:class:`aclprofd.server.Daemon`)."""

    counters: Counters
    health: Health
    settings: Settings
    storage: Storage | None
    started_mono: float

    @property
    def stalls(self) -> _StallStats: ...
    @property
    def transport(self) -> _TransportStats: ...
    @property
    def aggregator(self) -> Aggregator: ...
    @property
    def traces(self) -> _TraceStats: ...
    @property
    def ingest(self) -> _IngestStats: ...
    @property
    def failures(self) -> _FailureStats: ...
    @property
    def bills(self) -> _BillStats: ...
    @property
    def detection(self) -> _TableStats: ...
    @property
    def socket_problem(self) -> str | None: ...
    @property
    def cpu_slice(self) -> Mapping[str, Any]: ...


def _memory_own(m: _MemoryUse) -> tuple[tuple[str, int], ...]:
    """STATUS "memory": what the daemon holds itself, the slack, and what clients may hold
    (daemon/README.md "Memory budget"; the tables as of their last walk: aclprofd.memory.TABLES_EVERY_S)."""
    return (("base_bytes", m.base), ("tables_bytes", m.tables_bytes), ("slack_bytes", m.slack()),
            ("clients_share_bytes", m.share()))


def take_snapshot(d: SnapshotSource) -> CountersSnapshot:
    """One consistent copy of the daemon's counters (call on the loop thread)."""
    now, mono = time.time(), time.monotonic()
    c, agg, t = d.counters, d.aggregator, d.transport
    storage: dict[str, Any] | None = None
    if d.storage is not None:
        storage = d.storage.stats()
        storage["corrupt_chunks"] = d.storage.corrupt_chunks
    counters = {"dropped_by_agents": c.dropped_total, "stream_skipped": c.stream_skipped_total,
                "protocol_errors": c.protocol_errors,
                "storage_write_errors": int((storage or {}).get("write_errors", 0)),
                "storage_records_lost": int((storage or {}).get("records_lost", 0)),
                "memory_refused": sum(c.memory_refused.values()), "internal_errors": t.internal_errors}
    agents = tuple(AgentSnapshot(a.pid, a.host, a.service, dict(a.labels), round(mono - a.connected, 3),
                                 tuple(dict(m) for m in a.models.values()), a.records, a.rate.per_s(now),
                                 a.dropped, a.lag_ns, a.steps, d.traces.gap_of(a.id), a.identity(),
                                 _ident_bytes(a), tuple(a.model_bytes.get(m, 0) for m in a.models))
                   for a in t.conns.values() if a.role == "agent")
    open_all, open_control, open_anon = t.open_counts()
    open_agents, agents_largest_uid = t.limits.agent_counts()
    tables = {"aggregate_keys": {"cap": agg.max_keys, "in_use": agg.nkeys - 1, **agg.keys.shares.stats(),
                                 "evicted": agg.aged_out, "evicted_records": agg.aged_out_records},
              "detector_cells": d.detection.table_stats()}
    return CountersSnapshot(
        taken_ts=now, uptime_s=round(mono - d.started_mono, 3), records_total=c.records_total,
        steps_total=c.steps_total,
        records_per_s=c.rate.per_s(now), dropped_total=c.dropped_total, protocol_errors=c.protocol_errors,
        stream_skipped_total=c.stream_skipped_total, drops_by_agent=tuple(c.drops_by_agent.items()),
        agents=agents, storage=storage, aggregate_keys=agg.nkeys - 1,
        aggregate_cap=agg.max_keys, aggregate_other_records=agg.other_records,
        aggregate_windows=(*agg.window_names(), "all"), aggregate_since_ts=agg.reset_ts,
        problems=tuple(d.health.problems(d.socket_problem, d.storage, agg, now))
        + tuple(p for p in (t.memory.problem(),) if p),
        records_rejected=tuple(sorted(c.records_rejected.items())),
        memory_budget=d.settings.memory_budget_bytes, memory_used=t.memory.used(), memory_own=_memory_own(t.memory),
        memory_refused=tuple(sorted(c.memory_refused.items())),
        internal_errors=t.internal_errors, connections_refused=t.limits.refused,
        idle_closed=t.limits.idle_closed,
        accept_errors=t.accept_errors, peer_gone=t.peer_gone, open_connections=open_all,
        slices_cut=t.slices_cut, slices_pending=len(t.pending), loop_stalls=d.stalls.summary(),
        cpu_slice=dict(d.cpu_slice),
        open_control=open_control, open_without_hello=open_anon, names_truncated=d.ingest.names_truncated,
        traces=d.traces.summary(), failures=d.failures.summary(), request_bills=d.bills.summary(),
        request_hist=d.bills.prometheus_series(),
        recent=d.health.recent(agg, d.started_mono, mono, counters),
        connections_refused_by=tuple(sorted(t.limits.refused_by.items())),
        agent_idle_closed=t.limits.idle_closed_by["agent"], open_agents=open_agents,
        agents_largest_uid=agents_largest_uid, tables=tables,
        replies_truncated=c.truncations.as_dict(), metrics=_metrics_stats(d))


def _failures_reply(f: dict[str, Any], top: int = 20) -> dict[str, Any]:
    """STATUS's "failures": the totals, the ``top`` largest counts and the last failures."""
    if not f:
        return {}
    by_key = sorted(f.get("by_key", []), key=lambda row: -row[-1])[:top]
    keys = ("service", "device", "model", "op_type", "code", "count")
    return {**{k: v for k, v in f.items() if k != "by_key"},
            "by_key": [dict(zip(keys, row)) for row in by_key]}


def _metrics_stats(d: SnapshotSource) -> dict[str, Any]:
    m = getattr(d, "metrics", None)  # None without the endpoint (prometheus_port = 0)
    return m.stats() if m is not None else {}


def _ident_bytes(conn: Conn) -> int:
    """JSON bytes of an agent's host, service, labels and identity (HELLO's pid is the
    peer's number): fixed at HELLO, measured once."""
    if conn.ident_bytes < 0:
        conn.ident_bytes = json_size({"host": conn.host, "service": conn.service, "labels": conn.labels,
                                      **conn.identity()})
    return conn.ident_bytes


#: STATUS's shares of REPLY_BUDGET: the agents (their labels and models), the problems (they
#: quote services), and what :mod:`aclprofd.control` adds: detector flags and captures
STATUS_AGENTS_BUDGET = REPLY_BUDGET * 2 // 3
STATUS_PROBLEMS_BUDGET = REPLY_BUDGET // 12
STATUS_FLAGS_BUDGET = REPLY_BUDGET // 12
STATUS_CAPTURES_BUDGET = REPLY_BUDGET // 6
#: one agent's entry at most (host, service, labels and its models): 4096 models with short
#: labels take ~300 kB; beyond it its models are cut (``models_truncated``)
STATUS_AGENT_MAX = 512 << 10
#: an agent entry's bytes besides its strings (numbers and key names: ~400) rounded up
_AGENT_FIXED = 1024


def _agents(agents: tuple[AgentSnapshot, ...], cut: dict[str, int]) -> list[dict[str, Any]]:
    """STATUS ``agents``, cut to STATUS_AGENTS_BUDGET: each agent gets a max-min fair share
    of the bytes, at most STATUS_AGENT_MAX (its host, service, labels and models as
    measured at HELLO and WATCH), so
    an agent with huge labels loses its own models first (``models_truncated`` in its
    entry) and cannot push the others out; an agent whose identity alone does not fit its
    share is left out (``cut["agents"]``)."""
    needs = [_AGENT_FIXED + a.ident_bytes + sum(a.model_bytes) + len(a.model_bytes) for a in agents]
    # at most STATUS_AGENT_MAX each: every STATUS costs the loop what it holds (an 8 MB reply
    # ~100 ms), so one agent's labels must not make each one large
    shares = fair_shares([min(n, STATUS_AGENT_MAX) for n in needs], STATUS_AGENTS_BUDGET)
    out: list[dict[str, Any]] = []
    for a, share, need in zip(agents, shares, needs):
        base = _AGENT_FIXED + a.ident_bytes
        if share < base:
            cut["agents"] = cut.get("agents", 0) + 1
            continue
        models = list(a.models)
        entry: dict[str, Any] = {}
        if share < need:
            room, keep = share - base, 0
            for nb in a.model_bytes:
                if nb + 1 > room:
                    break
                room -= nb + 1
                keep += 1
            entry["models_truncated"] = len(models) - keep
            cut["models"] = cut.get("models", 0) + len(models) - keep
            models = models[:keep]
        out.append({"pid": a.pid, "host": a.host, "service": a.service, "labels": a.labels,
                    "connected_s": a.connected_s, "models": models, "records": a.records,
                    "records_per_s": a.records_per_s, "dropped": a.dropped, "lag_ns": a.lag_ns,
                    "steps": a.steps, **a.trace, **a.identity, **entry})
    return out


def status_reply(s: CountersSnapshot, socket_path: str, cut: dict[str, int] | None = None) -> dict[str, Any]:
    """The STATUS_REPLY object (daemon/PROTOCOL.md) of a snapshot; its peer-chosen parts
    (agents, problems) cut to their shares of the reply budget, what was left out added to
    ``cut`` (the caller marks the reply and counts it: :class:`aclprofd.replyfit.Truncations`)."""
    cut = {} if cut is None else cut
    problems, cut["problems"], _ = take(s.problems, STATUS_PROBLEMS_BUDGET)
    return {"version": __version__, "pid": os.getpid(), "uptime_s": s.uptime_s,
            "healthy": not s.problems, "problems": problems, "records_total": s.records_total,
            "records_per_s": s.records_per_s, "dropped_by_agents": s.dropped_total,
            "agents": _agents(s.agents, cut),
            "storage": s.storage,
            "aggregates": {"keys": s.aggregate_keys, "cap": s.aggregate_cap,
                           "other_bucket_records": s.aggregate_other_records,
                           "windows": list(s.aggregate_windows), "since_ts": s.aggregate_since_ts},
            "steps_total": s.steps_total,
            "stream_skipped": s.stream_skipped_total, "protocol_errors": s.protocol_errors,
            "records_rejected": dict(s.records_rejected),
            "memory": {"budget_bytes": s.memory_budget, "used_bytes": s.memory_used, **dict(s.memory_own),
                       "refused": dict(s.memory_refused)},
            "connections": {"refused": s.connections_refused, "idle_closed": s.idle_closed,
                            "accept_errors": s.accept_errors, "internal_errors": s.internal_errors,
                            "peer_gone": s.peer_gone, "open": s.open_connections, "control": s.open_control,
                            "without_hello": s.open_without_hello,
                            "refused_by": dict(s.connections_refused_by), "agent_idle_closed": s.agent_idle_closed,
                            "agents": s.open_agents, "agents_largest_uid": s.agents_largest_uid},
            "tables": {k: dict(v) for k, v in s.tables.items()},
            "names_truncated": s.names_truncated,
            "loop": {"slices_cut": s.slices_cut, "slices_pending": s.slices_pending, "stalls": s.loop_stalls,
                     "cpu_slice": dict(s.cpu_slice)},
            "traces": dict(s.traces), "failures": _failures_reply(s.failures),
            "request_bills": dict(s.request_bills),
            "recent": {k: dict(v) for k, v in s.recent.items()},
            "replies_truncated": s.replies_truncated, "socket": socket_path}
