"""What ``aclprof export`` says when the daemon failed to store records of the window.

The daemon's ``END`` carries ``lost``: the periods whose records a failed segment write
(a full disk, an I/O error) lost, per sender, with how many and the error. An export of
such a window is incomplete, and "no records matched" would be a false all-clear: the
command names each period and exits 1 (``EXIT_ERROR``, as ``aclprof status`` does for an
unhealthy daemon; 2 stays usage errors and an unreachable daemon). What was stored is still
written.
"""

from __future__ import annotations

import time
from typing import Any

from aclprof.cli.common import EXIT_ERROR, CliError
from aclprof.protocol.safetext import safe

__all__ = ["lost_error", "has_record_filters", "MAX_PERIODS_SHOWN"]

MAX_PERIODS_SHOWN = 10


def _when(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ts)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def has_record_filters(args: Any) -> bool:
    """Whether the export's filters select by record (not only by sender)."""
    return any(getattr(args, k, None) is not None for k in ("model", "device", "type", "name")) \
        or bool(getattr(args, "min_duration", None))


def lost_error(lost: list[dict[str, Any]], exported: int, *, record_filters: bool) -> CliError | None:
    """The error to exit with when ``lost`` (END's loss periods) is not empty, else None.
    ``record_filters``: the export had filters the daemon cannot apply to records it never
    stored (op type or name, device, model, duration), so the counts are of all op types."""
    if not lost:
        return None
    total = sum(_int(p.get("records")) for p in lost)
    lines = [f"the export is incomplete: {total:,} records of this window were lost to a storage failure "
             f"in the daemon (its disk was full or failing) and cannot be exported"
             + ("" if not exported else f"; the {exported:,} stored records were exported")]
    for p in lost[:MAX_PERIODS_SHOWN]:
        who = f"service {safe(str(p.get('service')))}" if p.get("service") else "no service"
        lines.append(f"  {_int(p.get('records')):,} records from pid {_int(p.get('pid'))} ({who}) received "
                     f"{_when(p.get('since_ts'))} to {_when(p.get('until_ts'))}: {safe(str(p.get('error', '?')))}")
    if len(lost) > MAX_PERIODS_SHOWN:
        lines.append(f"  ... and {len(lost) - MAX_PERIODS_SHOWN} more periods")
    if record_filters:
        lines.append("  (counts of every op type: the filters cannot be applied to records that were never stored)")
    lines.append("  see the daemon's log ('storage write failing') and `aclprof status`")
    return CliError("\n".join(lines), EXIT_ERROR)
