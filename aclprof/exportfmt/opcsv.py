"""``aclprof export --format csv``: op statistics, one row per (service, process, device,
model, op type), in :data:`CSV_COLUMNS` (our own table, not msprof's ``op_statistic.csv``:
that one is :mod:`aclprof.exportfmt.ascend`'s). Durations in microseconds, three decimals;
``Ratio(%)`` is the share of the device's total op time.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, TextIO

from aclprof.protocol.safetext import safe

from .tally import tally

__all__ = ["CSV_COLUMNS", "write_csv"]

CSV_COLUMNS = ["Service", "PID", "Device_id", "Model Name", "OP Type", "Core Type", "Count", "Total Time(us)",
               "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"]


def write_csv(batches: Iterable[list[dict[str, Any]]], out: TextIO) -> int:
    """Op statistics per (service, pid, device, model, op type) as CSV_COLUMNS; the count
    of records read (step keypoints are read but not counted in any row)."""
    groups: dict[tuple[str, int, int, int, str], list[int]] = {}  # -> [count, total, min, max]
    n = 0
    for records in batches:
        for r in records:
            if r.get("kind") == "keypoint":
                continue  # a step boundary, not an op: it would swamp the op statistics
            d = int(r.get("duration_ns", 0))
            # peers' strings, and csv usually lands on a terminal: escaped (also lone surrogates)
            key = (safe(r.get("service") or ""), int(r.get("pid", 0)), int(r.get("device", 0)),
                   int(r.get("model", 0)), safe(r.get("op_type", "?")))
            tally(groups, key, d)
        n += len(records)
    device_total: dict[int, int] = {}
    for (_, _, device, _, _), g in groups.items():
        device_total[device] = device_total.get(device, 0) + g[1]
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for (service, pid, device, model, op_type), g in sorted(
            groups.items(), key=lambda kv: (kv[0][2], -kv[1][1], kv[0])):
        count, total, lo, hi = g
        w.writerow([service, pid, device, model, op_type, "N/A", count, f"{total / 1e3:.3f}", f"{lo / 1e3:.3f}",
                    f"{total / count / 1e3:.3f}", f"{hi / 1e3:.3f}",
                    f"{100.0 * total / (device_total[device] or 1):.2f}"])
    return n
