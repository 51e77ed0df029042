"""The cells of ``aclprof top``'s table whose meaning needs care: a quantile never above the
row's max (marked "≤" when it is the max), the regression detector's Shift (the quantile
that is flagged, never the p99 beside it), and :data:`RESOLUTION`, what each number is
worth (``aclprof top --help``, the help key, the README)."""

from __future__ import annotations

from typing import Any

from aclprof.cli.common import format_ns
from aclprof.cli.top.header import as_list, num
from aclprof.protocol.quantshift import BINS_PER_OCTAVE
from aclprof.protocol.safetext import safe

__all__ = ["RESOLUTION", "shift_cell", "quantile_cell", "stat_cell"]

#: how exact each number of top is (the daemon's aggregates: aclprofd.aggregate.quantiles;
#: the bin rule: aclprof.protocol.quantshift)
_BIN_PCT = 100 * (2 ** (1 / BINS_PER_OCTAVE) - 1)  # a bin's width
_MID_PCT = 100 * (2 ** (1 / (2 * BINS_PER_OCTAVE)) - 1)  # the farthest a bin's middle is from its values
RESOLUTION = (f"numbers: Count, Total, Avg and Max are exact (the daemon's sums and extremes); p50 and p99 "
              f"come from log-scale bins 2**(1/{BINS_PER_OCTAVE}) wide ({_BIN_PCT:.0f} %), shown as the bin's "
              f"middle: at most {_MID_PCT:.1f} % off; a quantile whose bin lies past the row's max is shown as "
              "the max, marked '≤' (it can be no more); Shift: the regression detector's flagged quantile, "
              "else p99, against its baseline; Fail: the op failures (AI Core exceptions) of the row since the "
              "daemon started, whatever the window")


def shift_cell(row: dict[str, Any]) -> Any:
    """The Shift cell: the quantile the regression detector flags (``p50 +42.7% REGRESSION``,
    red) or, when none is flagged, the current p99 against the detector's baseline
    (``p99 +0.9%``); "—" before it can judge."""
    from rich.text import Text

    flagged = [f for f in as_list(row.get("flagged")) if isinstance(f, dict) and _is_num(f.get("shift"))]
    if flagged:
        flagged.sort(key=lambda f: -f["shift"])
        text = ", ".join(f"{safe(f.get('quantile', '?'))} {_pct(f['shift'])}" for f in flagged)
        return Text(text + " REGRESSION", style="bold red")
    ratio = row.get("shift_p99")
    p99 = f"p99 {_pct(ratio)}" if _is_num(ratio) else None
    if row.get("regression") is True:  # a daemon that does not say which quantile (before "flagged")
        return Text((p99 + ", " if p99 else "") + "REGRESSION (p50 or p99: aclprof status)", style="bold red")
    return Text(p99 or "—")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _pct(ratio: Any) -> str:
    return f"{100.0 * (ratio - 1.0):+.1f}%"


def quantile_cell(ns: Any, max_ns: Any) -> str:
    """A quantile cell: "—" where the view cannot know it (since r); never above the row's
    max: a quantile whose bin's middle lies past the largest record (which the daemon
    clamps to the max, or any source that did not) is shown as the max, marked "≤" (the
    quantile is at most that, and nothing closer is known)."""
    if ns is None:
        return "—"
    if _is_num(max_ns) and max_ns > 0 and num(ns) >= max_ns:
        return "≤" + format_ns(num(max_ns))
    return format_ns(num(ns))


def stat_cell(ns: Any) -> str:
    """A min/max cell: "—" where the view cannot know it (since r)."""
    return "—" if ns is None else format_ns(num(ns))
