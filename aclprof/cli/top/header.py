"""The header of ``aclprof top`` (like nvtop's or py-spy top's): records/s coming in, the
processes, services and devices connected, the drops in the window and the daemon's health.

It is built from what the daemon already reports: the SNAPSHOT reply's ``summary`` (a
daemon with per-service keys: figures over the window) or else the STATUS reply (figures
now), and the growth over the window of the counters STATUS keeps since the daemon
started (agents' reported drops, records skipped for slow stream clients, protocol errors,
storage write errors, memory refusals): the daemon's own figures (STATUS ``recent``), so
that ``top --once`` and the live view say the same; with an older daemon, the difference
between this client's STATUS replies. The caller asks STATUS at most once per refresh
(:data:`STATUS_EVERY_S`), never per row.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from aclprof.protocol.safetext import safe

__all__ = ["Header", "STATUS_EVERY_S", "HEALTH_S", "window_seconds", "counters_of", "num", "as_list"]

#: the live view asks STATUS at most this often (seconds), however short its interval
STATUS_EVERY_S = 1.0
#: "degraded" looks at the faults counted over this many seconds, whatever the window
HEALTH_S = 60.0
HEALTH_WINDOW = "1m"  # its name in STATUS ``recent``
_KEEP_S = 3600.0  # samples older than this are dropped (the longest window we measure)
_MAX_SAMPLES = 4000
_WINDOW = re.compile(r"^([1-9][0-9]*)([smh])$")

#: counters kept since the daemon started, whose growth over the window the header shows:
#: (name, how to read it from a STATUS reply)
_COUNTERS = ("dropped_by_agents", "stream_skipped", "protocol_errors", "storage_write_errors",
             "storage_records_lost", "memory_refused", "internal_errors")


def window_seconds(window: str) -> float | None:
    """``"10s"`` -> 10.0, ``"1m"`` -> 60.0; None for ``all`` and anything else."""
    m = _WINDOW.match(window)
    if not m:
        return None
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


# A reply's fields are read through these: a daemon of another version (or something else
# on the socket) that sends other types gets 0/empty figures, never a traceback.
def num(v: Any) -> float:
    """A JSON number as a float (finite); 0.0 for anything else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf"):
        return float(v)
    return 0.0


def _int(v: Any) -> int:
    return int(num(v))


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def counters_of(st: dict[str, Any]) -> dict[str, int]:
    """The since-start counters of a STATUS reply the header watches (absent ones are 0)."""
    storage, memory, conns = _dict(st.get("storage")), _dict(st.get("memory")), _dict(st.get("connections"))
    refused = _dict(memory.get("refused"))
    return {"dropped_by_agents": _int(st.get("dropped_by_agents")), "stream_skipped": _int(st.get("stream_skipped")),
            "protocol_errors": _int(st.get("protocol_errors")),
            "storage_write_errors": _int(storage.get("write_errors")),
            "storage_records_lost": _int(storage.get("records_lost")),
            "memory_refused": sum(_int(v) for v in refused.values()),
            "internal_errors": _int(conns.get("internal_errors"))}


class Header:
    """STATUS replies over time, and the header lines they give with a snapshot."""

    def __init__(self) -> None:
        self.samples: collections.deque[tuple[float, dict[str, int]]] = collections.deque(maxlen=_MAX_SAMPLES)
        self.status: dict[str, Any] | None = None
        self.error: str | None = None  # why the last STATUS failed
        self.last_status_at = float("-inf")

    def due(self, now: float) -> bool:
        """Time for another STATUS (at most every STATUS_EVERY_S)."""
        return now - self.last_status_at >= STATUS_EVERY_S

    def add(self, st: dict[str, Any], now: float) -> None:
        """A STATUS reply taken at ``now`` (time.monotonic())."""
        self.status, self.error, self.last_status_at = st, None, now
        self.samples.append((now, counters_of(st)))
        while self.samples and self.samples[0][0] < now - _KEEP_S:
            self.samples.popleft()

    def failed(self, message: str, now: float) -> None:
        self.error, self.last_status_at = message, now

    def growth(self, seconds: float | None) -> tuple[dict[str, int], float | None]:
        """The counters' growth over the last ``seconds`` (None: since the daemon started), and
        the span it covers (None when it is since the start: one sample, or window ``all``)."""
        if not self.samples:
            return {k: 0 for k in _COUNTERS}, None
        now, newest = self.samples[-1]
        if seconds is None or len(self.samples) < 2:
            return dict(newest), None
        base_t, base = self.samples[0]
        for t, c in self.samples:  # the oldest sample inside the window
            if t >= now - seconds - 0.05:
                base_t, base = t, c
                break
        if now - base_t <= 0:
            return dict(newest), None
        # a daemon restarted in between: its counters began again (never show negatives)
        return {k: max(0, newest[k] - base.get(k, 0)) for k in _COUNTERS}, now - base_t

    def window_growth(self, seconds: float | None, window: str) -> tuple[dict[str, int], float | None]:
        """The counters' growth over ``window`` (``seconds`` long; None: since the daemon
        started): the daemon's own figures (STATUS ``recent``, the same for every client,
        whenever it connected: ``top --once`` and the live view agree), else, from an older
        daemon or for a window it does not keep (since r), this client's STATUS samples."""
        recent = _dict(_dict((self.status or {}).get("recent")).get(window))
        if seconds is not None and recent and self.status is not None:
            return {k: _int(recent.get(k)) for k in _COUNTERS}, num(recent.get("span_s"))
        return self.growth(seconds)

    def render(self, snap: dict[str, Any], window_s: float | None, window_label: str) -> Any:
        """The header as a rich Text (every dynamic string escaped, never markup)."""
        from rich.text import Text

        text = Text()
        st = self.status or {}
        summary = snap.get("summary") if isinstance(snap.get("summary"), dict) else None
        agents = [a for a in as_list(st.get("agents")) if isinstance(a, dict)]
        if summary is not None:  # the daemon's figures over the window
            rate = num(summary.get("records_per_s"))
            procs, services = _int(summary.get("processes")), _int(summary.get("services"))
            devices = [d for d in as_list(summary.get("devices")) if isinstance(d, int)][:64]
            where = f"in {window_label}"
        else:  # STATUS: who is connected now
            rate = num(st.get("records_per_s"))
            procs = len(agents)
            services = len({str(a.get("service")) for a in agents if a.get("service")})
            devices = sorted({int(m["device"]) for a in agents for m in as_list(a.get("models"))
                              if isinstance(m, dict) and isinstance(m.get("device"), int)})[:64]
            where = "connected"
        text.append(f"in {rate:,.0f} rec/s", style="bold")
        text.append(f" · {procs} process{'es' if procs != 1 else ''}, {services} service"
                    f"{'s' if services != 1 else ''} {where}")
        text.append(" · devices " + (",".join(str(d) for d in devices) if devices else "-"))
        grown, span = self.window_growth(window_s, window_label)
        drops = grown["dropped_by_agents"] + grown["stream_skipped"]
        when = "since daemon start" if span is None else (
            window_label if window_label.startswith("since") else f"in {window_label}")
        text.append(f"\ndrops {when}: ")
        text.append(f"{drops:,}", style="bold red" if drops else None)
        text.append(f" (agents {grown['dropped_by_agents']:,}, slow streams {grown['stream_skipped']:,}) · ")
        text.append_text(self._health(st, *self.window_growth(HEALTH_S, HEALTH_WINDOW)))
        return text

    def _health(self, st: dict[str, Any], grown: dict[str, int], span: float | None) -> Any:
        from rich.text import Text

        if self.error is not None and self.status is None:
            return Text(safe(f"daemon: no STATUS ({self.error})"), style="red")
        version = safe(f"aclprofd {st.get('version', '?')} pid {st.get('pid', '?')}, "
                       f"up {_uptime(num(st.get('uptime_s')))}: ")
        problems = [str(p)[:500] for p in as_list(st.get("problems"))]
        if not st.get("healthy", True):
            more = f" (+{len(problems) - 1} more: aclprof status)" if len(problems) > 1 else ""
            return Text(version) + Text(safe(f"UNHEALTHY: {problems[0] if problems else '?'}{more}"),
                                        style="bold red")
        # "degraded": healthy by the daemon's rules, but faults rose in the last HEALTH_S
        reasons = [f"{what} +{grown[k]:,}" for k, what in (
            ("protocol_errors", "protocol errors"), ("storage_write_errors", "storage write errors"),
            ("storage_records_lost", "records not stored"), ("memory_refused", "memory refusals"),
            ("internal_errors", "internal errors")) if grown[k]] if span is not None else []
        if self.error is not None:
            reasons.insert(0, f"last STATUS failed: {self.error}")
        if reasons:
            return Text(version) + Text(safe("degraded: " + ", ".join(reasons)), style="bold yellow")
        return Text(version) + Text("ok", style="green")


def _uptime(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
