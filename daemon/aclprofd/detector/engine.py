"""Live op-latency regression detection: per (service, model, op_type), the p50 and p99 of
the current window against a baseline, judged with :mod:`aclprof.protocol.quantshift`.

Why groups of (service, model, op_type) and not the aggregator's keys: a key also holds
the pid and the op name, so a service of 8 replicas running 300 named ops of 40 types has
2,400 keys but 40 groups. Fewer groups mean 60x more samples per judgement (narrower
intervals: a 10 % shift is seen within seconds at 10k calls/s) and 60x fewer chances of a
false alert, and an alert names what an operator acts on (a service's op type).

Once per second (:meth:`Detector.tick`, on the daemon's loop timer, never per batch) each
group's quantiles get a confidence interval in both windows; a quantile is flagged after
``persistence`` consecutive evaluations where the ratio's interval lies above 1 and the
estimate is at least ``min_effect`` higher, with at least ``min_count`` samples on both
sides. The hysteresis is asymmetric: a flag is cleared only after ``persistence``
consecutive *calm* evaluations, where the estimate fell below ``1 + CLEAR_FRACTION *
min_effect`` (or the group no longer has the samples to be judged). A lasting shift whose
estimate hovers near the threshold (or whose interval now and then touches 1) keeps its
flag instead of flapping, which a Prometheus ``for:`` clause needs. The baseline is the
trailing decayed histogram (:mod:`aclprofd.detector.state`) or a pinned saved one.

The Prometheus thread and STATUS read :attr:`Detector.published`, one immutable object
replaced at every tick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog

from aclprof.protocol import baselinefmt
from aclprof.protocol.quantshift import NBINS, QUANTILES, REGRESSION, Shift, judge, shifts

from .dispersion import WindowIndex, dispersions
from .state import Cell, CellStore, Group

__all__ = ["CLEAR_FRACTION", "Detector", "DetectorConfig", "DetectorView", "QNAMES"]

_log = structlog.get_logger("aclprofd")
QNAMES = {0.5: "p50", 0.99: "p99"}
_MAX_STATUS_FLAGS = 100
AGE_EVERY_S = 10.0  # cells of gone agents are looked for this often (a scan of the cells)
#: A flag clears only once the shift estimate is below 1 + CLEAR_FRACTION * min_effect (a
#: dead band of half the effect floor: with the defaults, raised at +5 %, cleared under +2.5 %).
CLEAR_FRACTION = 0.5


@dataclass(frozen=True)
class DetectorConfig:
    window_s: float = 30.0        # the current window
    trailing_s: float = 600.0     # the trailing baseline's decay time constant
    z: float = 4.0                # interval half-width in standard errors of the rank
    min_effect: float = 0.05      # the smallest shift flagged (5 %)
    min_count: int = 1000         # samples needed in each window
    persistence: int = 5          # consecutive evaluations to flag (and to clear)


@dataclass(frozen=True)
class DetectorView:
    """What the detector reported at its last tick (rows: evaluated groups only)."""

    ts: float = 0.0
    host: str = ""  # the daemon's host label (the Prometheus series carry it)
    baseline: str | None = None
    groups: int = 0
    rows: tuple[dict[str, Any], ...] = ()
    flagged_total: int = 0
    untracked: int = 0
    flags: tuple[dict[str, Any], ...] = field(default_factory=tuple)


class Detector:
    """The detector of one daemon (loop thread, except :attr:`published`)."""

    def __init__(self, identity: Callable[[int], Cell | None], config: DetectorConfig | None = None, *,
                 owner: Callable[[int], Hashable | None] | None = None, max_cells_per_owner: int | None = None,
                 max_cells_per_uid: int | None = None,
                 live_owners: Callable[[], Collection[Hashable]] | None = None,
                 table_idle_s: float = 600.0) -> None:
        self.config = config or DetectorConfig()
        self.store = CellStore(identity, self.config.window_s, self.config.trailing_s, owner=owner,
                               max_per_owner=max_cells_per_owner, max_per_uid=max_cells_per_uid)
        #: ageing out (CellStore.age_out), from tick: the owners with a live connection now,
        #: and how long a cell of a gone owner may go unfed (None: never aged out)
        self.live_owners = live_owners
        self.table_idle_s = table_idle_s
        self._next_age = 0.0
        self._age_all = False
        self.pinned_name: str | None = None
        self._pinned: dict[Group, np.ndarray] = {}
        self._pinned_rows = np.zeros((0, NBINS))
        nq = len(QUANTILES)
        self.streak = np.zeros((0, nq), np.int64)
        self.calm = np.zeros((0, nq), np.int64)
        self.flagged = np.zeros((0, nq), bool)
        self.since = np.zeros((0, nq), np.float64)
        self.flagged_total = 0
        self.host = ""
        self.published = DetectorView()

    def observe(self, hcodes: np.ndarray, hcount: np.ndarray) -> None:
        """The aggregator's per-batch histogram deltas (``Aggregator.observer``)."""
        self.store.observe(hcodes, hcount)

    # ---- baselines ------------------------------------------------------------------------
    def pin(self, name: str, doc: dict[str, Any]) -> None:
        """Judge against the saved baseline ``doc`` (ValueError if malformed) from now on."""
        cells, hists = baselinefmt.decode(doc)
        groups: dict[Group, np.ndarray] = {}
        for (service, model, op_type, _), h in zip(cells, hists):
            g = (service, model, op_type)
            groups[g] = groups[g] + h if g in groups else h.copy()
        self.pinned_name, self._pinned, self._pinned_rows = name, groups, np.zeros((0, NBINS))
        self._reset_states()

    def unpin(self) -> None:
        """Back to the trailing baseline."""
        self.pinned_name, self._pinned = None, {}
        self._reset_states()

    def forget_gone(self) -> None:
        """RESET: at the next tick, forget every cell whose agent is gone and that nothing
        fed within the window, without waiting for ``table_idle_s``."""
        self._age_all = True

    def _age_out(self, now: float) -> None:
        """Cells of gone agents out (after the roll: nothing of theirs is pending); the
        groups they emptied lose their flags and streaks (a reused slot starts afresh)."""
        due = self._age_all or not self._next_age - AGE_EVERY_S <= now < self._next_age  # (a clock stepped back: due)
        if self.live_owners is None or not due:
            return
        live = self.live_owners()
        self.store.age_out(now, 0.0 if self._age_all else self.table_idle_s, live.__contains__)
        self._age_all, self._next_age = False, now + AGE_EVERY_S
        freed = self.store.freed_groups
        if freed:
            idx = np.asarray([i for i in freed if i < len(self.streak)], np.int64)
            self.streak[idx] = 0
            self.calm[idx] = 0
            self.flagged[idx] = False
            self.since[idx] = 0.0
            self._pinned_rows = np.zeros((0, NBINS))  # rebuilt for the groups in their slots now
            freed.clear()

    def _reset_states(self) -> None:
        """A new baseline: flags and streaks start again (they were judged against the old one)."""
        self.streak[:] = 0
        self.calm[:] = 0
        self.flagged[:] = False

    def document(self, name: str, source: str, meta: dict[str, Any]) -> dict[str, Any]:
        """A baseline document of the detector's cells (``source``: current, trailing, recent)."""
        cells, hists = self.store.cell_hists(source)
        return baselinefmt.encode(name, cells, hists, {"source": source, **meta})

    # ---- evaluation -----------------------------------------------------------------------
    def tick(self, now: float) -> DetectorView:
        """Fold the last second in, judge every group, publish the result."""
        cfg = self.config
        self.store.roll(now)
        self._age_out(now)
        groups = self.store.groups
        g = len(groups)
        if g > len(self.streak):
            extra = g - len(self.streak)
            self.streak = np.vstack([self.streak, np.zeros((extra, len(QUANTILES)), np.int64)])
            self.calm = np.vstack([self.calm, np.zeros((extra, len(QUANTILES)), np.int64)])
            self.flagged = np.vstack([self.flagged, np.zeros((extra, len(QUANTILES)), bool)])
            self.since = np.vstack([self.since, np.zeros((extra, len(QUANTILES)))])
        # Only the groups that can be judged (samples on both sides) or hold a flag are
        # evaluated: a row's judgement reads that row only, and any other row's would be
        # "not regressed, calm" (streak and calm back to 0, no flag). 4096 groups of 322 bins
        # took 50-90 ms of CPU every second, 0.4 s of loop stall on a loaded host (issue 19),
        # when a handful of them had the samples.
        n_cur, n_base = self.store.group_counts()
        if self.pinned_name is not None:
            base_all = self._pinned_base(groups)
            n_base = base_all[:g].sum(axis=1)
        # (1 - 1e-9): a row sum and the cumulative sum the judgement reads may differ in the last bits
        judged = np.flatnonzero(((n_cur >= cfg.min_count) & (n_base >= cfg.min_count * (1 - 1e-9)))
                                | self.flagged[:g].any(axis=1))
        idle = np.ones(g, bool)
        idle[judged] = False
        self.streak[:g][idle] = 0
        self.calm[:g][idle] = 0
        cur, base = self.store.group_hists(judged)
        if self.pinned_name is not None:
            base = base_all[judged]
        rows: dict[int, dict[str, Any]] = {}
        cums = (np.cumsum(base, axis=1), np.cumsum(cur, axis=1))  # shared by both quantiles
        seconds = WindowIndex(self.store.window_seconds(), g)
        # the intervals widened by the window's overdispersion (detector_dispersion); every
        # quantile in one pass of each (the numpy calls, not the rows, were the tick's cost)
        phis = dispersions(seconds, cur, cums[1], QUANTILES, judged)
        judged_shifts = shifts(base, cur, QUANTILES, [cfg.z * np.sqrt(phi) for phi in phis], cums)
        for j, (q, phi, s) in enumerate(zip(QUANTILES, phis, judged_shifts)):
            verdict = judge(s, cfg.min_effect, cfg.min_count)
            valid = (np.isfinite(s.ratio) & (s.n_cur >= cfg.min_count) & (s.n_base >= cfg.min_count))
            self._advance(j, q, verdict == REGRESSION, _calm(s, cfg), now, groups, judged)
            shown = np.flatnonzero(valid | self.flagged[judged, j])
            # whole columns to Python floats at once, then per row only dict building
            cols = zip(judged[shown].tolist(), *(a[shown].tolist() for a in (
                s.ratio, s.lower, s.upper, s.cur, s.base, s.n_cur, s.n_base, phi,
                self.flagged[judged[shown], j], self.since[judged[shown], j])))
            for gi, ratio, lower, upper, c_ns, b_ns, n_cur, n_base, disp, flagged, since in cols:
                rows.setdefault(gi, {})[QNAMES[q]] = {
                    "shift": _num(ratio), "lower": _num(lower), "upper": _num(upper),
                    "cur_ns": _num(c_ns, 1), "base_ns": _num(b_ns, 1),
                    "n_cur": int(n_cur), "n_base": round(n_base, 1), "dispersion": round(disp, 2),
                    "flagged": flagged, "since_ts": since if flagged else None}
        out = []
        for i, r in sorted(rows.items()):
            if r:
                service, model, op_type = groups[i]
                out.append({"service": service, "model": model, "op_type": op_type, **r})
        flags = tuple(
            {"service": r["service"], "model": r["model"], "op_type": r["op_type"], "quantile": qn,
             **{k: r[qn][k] for k in ("shift", "lower", "upper", "since_ts")}}
            for r in out for qn in QNAMES.values() if qn in r and r[qn]["flagged"])
        self.published = DetectorView(now, self.host, self.pinned_name, len(self.store.group_index), tuple(out),
                                      self.flagged_total,
                                      self.store.untracked, flags)
        return self.published

    def _advance(self, j: int, q: float, regressed: np.ndarray, calm_now: np.ndarray, now: float,
                 groups: list[Group], judged: np.ndarray) -> None:
        """Persistence: flag after ``persistence`` regressed evaluations in a row, clear after
        as many calm ones in a row (``calm_now``: see :func:`_calm`; an evaluation in the dead
        band between calm and regressed keeps the flag and restarts the count). The arrays
        are of the groups ``judged`` (their slots, ascending)."""
        k = self.config.persistence
        flagged = self.flagged[judged, j]
        streak = np.where(regressed, self.streak[judged, j] + 1, 0)
        calm = np.where(flagged & calm_now, self.calm[judged, j] + 1, 0)
        raised = ~flagged & (streak >= k)
        cleared = flagged & (calm >= k)
        for i in judged[raised].tolist():
            _log.warning("op latency regression", service=groups[i][0], model=groups[i][1],
                         op_type=groups[i][2], quantile=QNAMES[q], baseline=self.pinned_name or "trailing")
        for i in judged[cleared].tolist():
            _log.info("op latency regression cleared", service=groups[i][0], model=groups[i][1],
                      op_type=groups[i][2], quantile=QNAMES[q])
        self.flagged_total += int(raised.sum())
        self.since[judged[raised], j] = now
        self.flagged[judged, j] = (flagged | raised) & ~cleared
        calm[cleared] = 0
        self.streak[judged, j] = streak
        self.calm[judged, j] = calm

    def _pinned_base(self, groups: list[Group]) -> np.ndarray:
        """The pinned histograms aligned to ``groups`` (zeros for a group it lacks)."""
        have = len(self._pinned_rows)
        if have < len(groups):
            extra = np.zeros((len(groups) - have, NBINS))
            for i, grp in enumerate(groups[have:]):
                h = self._pinned.get(grp)
                if h is not None:
                    extra[i] = h
            self._pinned_rows = np.vstack([self._pinned_rows, extra])
        return self._pinned_rows

    # ---- views ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The STATUS reply's ``detector`` object."""
        v, cfg = self.published, self.config
        return {"baseline": self.pinned_name or "trailing", "window_s": cfg.window_s, "trailing_s": cfg.trailing_s,
                "min_effect": cfg.min_effect, "min_count": cfg.min_count, "persistence": cfg.persistence,
                "z": cfg.z, "groups": v.groups, "evaluated": len(v.rows), "flagged_total": v.flagged_total,
                "untracked_records": v.untracked, "flags": list(v.flags[:_MAX_STATUS_FLAGS]),
                "flags_count": len(v.flags)}

    def annotate(self, reply: dict[str, Any], service: str | None = None) -> None:
        """Give SNAPSHOT rows grouped by type a ``shift_p99``: the largest current p99 ratio
        among the op type's groups (of ``service`` only, when the SNAPSHOT filtered by one;
        null when none was evaluated), ``regression``: whether one of them is flagged (p50
        or p99), and ``flagged``: per flagged quantile, the largest flagged shift (so that a
        screen shows the quantile that is flagged, not the p99 beside it)."""
        if reply.get("group_by") != "type":
            return
        worst: dict[str, float] = {}
        for r in self.published.rows:
            if service is not None and r["service"] != service:
                continue
            s = r.get("p99", {}).get("shift")
            if s is not None and s > worst.get(r["op_type"], -1.0):
                worst[r["op_type"]] = s
        flagged: dict[str, dict[str, float]] = {}  # op type -> quantile -> largest flagged shift
        for f in self.published.flags:
            if service is None or f.get("service") == service:
                per = flagged.setdefault(f["op_type"], {})
                if f["shift"] is not None and f["shift"] > per.get(f["quantile"], -1.0):
                    per[f["quantile"]] = f["shift"]
        for row in reply.get("rows", ()):
            row["shift_p99"] = worst.get(row.get("key"))
            row["regression"] = row.get("key") in flagged
            row["flagged"] = [{"quantile": q, "shift": s}
                              for q, s in sorted(flagged.get(row.get("key"), {}).items(), key=lambda qs: -qs[1])]


def _calm(s: Shift, cfg: DetectorConfig) -> np.ndarray:
    """Per row: the evidence for a flagged shift is gone. The estimate fell below
    ``1 + CLEAR_FRACTION * min_effect``, or the row can no longer be judged (too few samples
    on a side, or no ratio: a service that stopped). Not "not regressed": an estimate still
    above that, or an interval that just touches 1, is a lasting shift seen through noise."""
    tail = min(s.q, 1.0 - s.q)
    judgeable = ((s.n_base >= cfg.min_count) & (s.n_cur >= cfg.min_count)
                 & (s.n_base * tail >= 20) & (s.n_cur * tail >= 20) & np.isfinite(s.ratio))
    with np.errstate(invalid="ignore"):
        low = s.ratio < 1.0 + CLEAR_FRACTION * cfg.min_effect
    return ~judgeable | low


def _num(x: float, digits: int = 4) -> float | None:
    """A JSON-safe rounded float (NaN and infinities become null)."""
    return round(x, digits) if math.isfinite(x) else None
