"""The Chrome trace (Trace Event Format; opens in Perfetto and chrome://tracing) of export
records: ``aclprof export --format chrome`` and the daemon's flight recorder write it.

One complete event (``ph: "X"``, ``ts``/``dur`` in microseconds of the library's clock) per
record; one process per inference process (``pid``), one thread per device and model
(``tid = device * TID_STRIDE + model``), named by metadata events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TextIO

__all__ = ["TID_STRIDE", "write_chrome"]

TID_STRIDE = 100000


def write_chrome(batches: Iterable[list[dict[str, Any]]], out: TextIO, generator: str = "aclprof export",
                 extra: Callable[[], list[dict[str, Any]]] | None = None) -> int:
    """Export records (daemon/PROTOCOL.md "record" objects) as one Trace Event Format file;
    the count of records written. Names are JSON-escaped as given (json.dumps is ASCII).
    ``extra``: called once the records are written, more trace events to add (the flight
    recorder's op failures: instant events placed by the records it saw)."""
    out.write('{"displayTimeUnit":"ns","otherData":{"generator":%s,' % json.dumps(generator) +
              '"clock":"the ACL library\'s op timestamps (the device clock; CLOCK_MONOTONIC on the mock)"},'
              '"traceEvents":[\n')
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    first = True
    n = 0
    for records in batches:
        parts = []
        for r in records:
            pid = int(r.get("pid", 0))
            device, model = int(r.get("device", 0)), int(r.get("model", 0))
            tid = device * TID_STRIDE + model
            if pid not in processes:
                service = r.get("service") or "process"
                processes[pid] = f"{service} (pid {pid}) @{r.get('host', '?')}"
            if (pid, tid) not in threads:
                threads[(pid, tid)] = f"device {device} / model {model}"
            start = int(r.get("start", 0))
            dur = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
            step = r.get("kind") == "keypoint"  # CANN's step keypoint record: show the step
            parts.append(json.dumps({
                "name": "step" if step else r.get("op_name", "?"),
                "cat": "step" if step else r.get("op_type", "?"), "ph": "X",
                "ts": start / 1e3, "dur": dur / 1e3, "pid": pid, "tid": tid,
                "args": {"op_type": r.get("op_type"), "flag": r.get("flag"), "thread_id": r.get("thread_id"),
                         "received_ts": r.get("ts")}}, separators=(",", ":")))
        if parts:
            out.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
        n += len(records)
    events = extra() if extra is not None else []
    if events:
        out.write(("" if first else ",\n") + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
        first = False
    meta = []
    for pid, name in processes.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
    for (pid, tid), name in threads.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    if meta:
        out.write(("" if first else ",\n") + ",\n".join(json.dumps(m, separators=(",", ":")) for m in meta))
    out.write("\n]}\n")
    return n
