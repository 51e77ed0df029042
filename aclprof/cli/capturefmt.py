"""Text of the flight recorder's captures (the STATUS reply's ``captures`` object,
daemon/PROTOCOL.md), shared by ``aclprof captures`` and ``aclprof status``."""

from __future__ import annotations

import time
from typing import Any

from aclprof.cli.common import format_ns
from aclprof.cli.top.header import as_list, num
from aclprof.protocol.safetext import safe

__all__ = ["format_captures", "capture_line", "status_lines", "hurt_text"]


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.0f} B"


def _when(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def hurt_text(requests: Any) -> str:
    """The requests a flag hurt most (issue 25: STATUS ``detector.flags[].requests``, a
    capture's ``requests``): ``id (MatMul 2.10ms of 8.00ms)``, comma-separated."""
    if not isinstance(requests, list):
        return ""
    return ", ".join(safe(f"{r.get('id')} ({r.get('op_type')} {format_ns(r.get('op_ns'))} of "
                          f"{format_ns(r.get('wall_ns'))})") for r in requests if isinstance(r, dict))


def capture_line(item: dict[str, Any]) -> str:
    """One capture: when, the flagged key and shift with its interval, records, size, path."""
    shift = item.get("shift")
    what = f"{item.get('quantile') or '?'} x{num(shift):.2f} [{num(item.get('lower')):.2f}, " \
           f"{num(item.get('upper')):.2f}]" if isinstance(shift, (int, float)) else "shift ?"
    failure = item.get("failure")
    if item.get("trigger") == "failure" and isinstance(failure, dict):  # an op failure started it (issue 24)
        what = f"FAILED {failure.get('op_name') or '?'} dev {failure.get('device', '?')} " \
               f"{failure.get('code', '?')} {failure.get('code_name') or ''}".rstrip()
    records = item.get("records")
    rec = f"{records:,} records" if isinstance(records, int) else "unreadable capture.json"
    trunc = " TRUNCATED" if item.get("truncated") else ""
    hurt = hurt_text(item.get("requests"))
    return (f"{_when(item.get('flag_ts'))}  {item.get('service') or '-'} {item.get('op_type') or '?'} {what}, "
            f"{rec}{trunc}, {_size(num(item.get('bytes')))}: {item.get('path', '?')}"
            + (f"; requests hurt most: {hurt}" if hurt else ""))


def format_captures(cap: dict[str, Any]) -> str:
    """The STATUS ``captures`` object as ``aclprof captures`` prints it."""
    items = [i for i in as_list(cap.get("items")) if isinstance(i, dict)]
    lines = [f"captures: {len(items)} of at most {cap.get('max_count', '?')}, "
             f"{_size(num(cap.get('bytes')))} of {_size(num(cap.get('max_bytes')))} in {cap.get('dir', '?')}"
             f"{'' if cap.get('enabled', True) else ' (flight recorder disabled: capture_enabled = false)'}"]
    if not items:
        lines.append("  no captures yet: one is made when the regression detector raises a flag or an op fails")
    lines += ["  " + capture_line(i) for i in items]
    trouble = [f"{num(cap.get(k)):,.0f} {what}" for k, what in (
        ("errors_total", "failed"), ("dropped_total", "dropped (writer behind)"),
        ("rate_limited_total", "not taken (one per key per capture_min_interval)"),
        ("truncated_total", "truncated to fit"), ("evicted_total", "deleted for the bounds"))
        if cap.get(k)]
    if trouble:
        lines.append("  " + ", ".join(trouble))
    if cap.get("last_error"):
        lines.append(f"  last error: {cap['last_error']}")
    if cap.get("pending") or cap.get("queued"):
        lines.append(f"  in progress: {num(cap.get('pending')):.0f} waiting for their window, "
                     f"{num(cap.get('queued')):.0f} being written")
    return "\n".join(safe(line) for line in lines)  # peers' service and op names: escaped


def status_lines(cap: Any) -> list[str]:
    """What ``aclprof status`` shows of the flight recorder: the count and the newest (nothing
    before the first capture, failure or flag: the summary stays short)."""
    if not isinstance(cap, dict) or not any(num(cap.get(k)) for k in ("count", "errors_total", "pending", "queued")):
        return []
    newest = cap.get("newest")
    line = f"captures: {num(cap.get('count')):.0f}, {_size(num(cap.get('bytes')))} (aclprof captures)"
    if cap.get("errors_total"):
        line += f"; {num(cap.get('errors_total')):.0f} failed, last: {cap.get('last_error')}"
    out = [line]
    if isinstance(newest, dict):
        out.append("  newest: " + capture_line(newest))
    return out
