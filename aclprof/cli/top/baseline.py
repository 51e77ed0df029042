"""The view-local reset of ``aclprof top`` (key ``r``): a baseline of the daemon's
since-start (``all``) rows, taken once per grouping, that the screen subtracts.

The daemon's aggregates are shared by every user and persisted, so ``top`` never changes
them (``aclprof reset`` is the explicit admin command). What subtraction can give exactly
is the count and total (and so the average and the share of time) since the key press;
min, max and quantiles of the records since then cannot be derived from two histograms'
summaries, so the since-reset rows show them as "—" (the help text says so).
"""

from __future__ import annotations

import time
from typing import Any

from aclprof.cli.top.header import as_list, num

__all__ = ["Baseline", "SINCE_RESET", "IDENTITY_FIELDS"]

#: the pseudo-window of a view showing what came since its baseline
SINCE_RESET = "since r"
#: row fields that name a group (copied as they are; the figures are subtracted)
IDENTITY_FIELDS = ("key", "service", "pid", "device", "model", "model_id", "op_type", "op_name", "host")


class Baseline:
    """The ``all`` rows at one instant, per grouping, for one filter."""

    def __init__(self, filt: dict[str, Any], rows: dict[str, dict[str, dict[str, Any]]],
                 taken_ts: float, taken_mono: float):
        self.filter = dict(filt)
        self.rows = rows  # group -> key -> row
        self.taken_ts, self.taken_mono = taken_ts, taken_mono

    @classmethod
    def take(cls, client: Any, groups: tuple[str, ...], filt: dict[str, Any]) -> Baseline:
        """One SNAPSHOT of window ``all`` per grouping (a key press: a few requests, once)."""
        rows: dict[str, dict[str, dict[str, Any]]] = {}
        for group in groups:
            snap = client.snapshot("all", group, filt)
            rows[group] = {str(r.get("key")): r for r in as_list(snap.get("rows")) if isinstance(r, dict)}
        return cls(filt, rows, time.time(), time.monotonic())

    def covers(self, group: str, filt: dict[str, Any]) -> bool:
        return group in self.rows and filt == self.filter

    def at(self) -> str:
        """When it was taken, as HH:MM:SS (local time)."""
        return time.strftime("%H:%M:%S", time.localtime(self.taken_ts))

    def label(self) -> str:
        return f"{SINCE_RESET} at {self.at()}"

    def subtract(self, snap: dict[str, Any], group: str) -> dict[str, Any] | None:
        """``snap`` (window ``all``) minus the baseline: a snapshot of what came since; None if
        the daemon's aggregates went back (an admin reset them), when nothing is derivable."""
        base = self.rows.get(group, {})
        out: list[dict[str, Any]] = []
        for r in as_list(snap.get("rows")):
            if not isinstance(r, dict):
                continue
            b = base.get(str(r.get("key")), {})
            count = int(num(r.get("count"))) - int(num(b.get("count")))
            total = int(num(r.get("total_ns"))) - int(num(b.get("total_ns")))
            if count < 0 or total < 0:
                return None
            if count == 0:
                continue
            row = {k: r[k] for k in IDENTITY_FIELDS if k in r}
            # min/max/quantiles of the new records are not derivable: None shows as "—"
            row.update(count=count, total_ns=total, mean_ns=total / count, min_ns=None, max_ns=None,
                       p50_ns=None, p90_ns=None, p99_ns=None)
            out.append(row)
        grand = sum(r["total_ns"] for r in out)
        for row in out:
            row["pct_time"] = 100.0 * row["total_ns"] / grand if grand else 0.0
        return {**{k: v for k, v in snap.items() if k not in ("rows", "summary")},
                "window": self.label(), "total_ns": grand, "rows": out}
