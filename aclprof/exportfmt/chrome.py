"""The Chrome trace (Trace Event Format; opens in Perfetto and chrome://tracing) of export
records: ``aclprof export --format chrome`` and the daemon's flight recorder write it.

One complete event (``ph: "X"``, ``ts``/``dur`` in microseconds of the library's clock,
written exactly: three decimals) per record; one process per inference process (``pid``),
one thread per device and model (``tid = device * TID_STRIDE + model``), named by metadata
events; a step keypoint is a ``step`` slice on its model's thread, so the ops of the step
nest under it. Ops that overlap without nesting go on extra threads of their model
(:mod:`aclprof.exportfmt.tracks`, ``tid + k * LANE_STRIDE``): a viewer drops the rest.

Perfetto reads JSON times as doubles: they are exact there up to 2^52 ns (52 days of the
device clock), off by a few ns beyond. ``--format perfetto`` (:mod:`.perfetto`) is exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from .tracks import gather, lane_name

__all__ = ["LANE_STRIDE", "TID_STRIDE", "format_us", "write_chrome"]

TID_STRIDE = 100000
#: tid offset of a model's extra threads (lane k: tid + k * LANE_STRIDE)
LANE_STRIDE = 10**12


def format_us(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals (``1234567`` -> ``"1234.567"``):
    no float rounding of large device timestamps."""
    if ns >= 0:
        return f"{ns // 1000}.{ns % 1000:03d}"
    return "-" + format_us(-ns)


def _us(ns: int) -> str:
    """:func:`format_us` without trailing zeros (a JSON number as short as json.dumps writes
    it: ``10``, ``2000.5``), for the trace's ``ts`` and ``dur`` (ns >= 0)."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}".rstrip("0") if r else str(q)


def write_chrome(batches: Iterable[list[dict[str, Any]]], out: TextIO, generator: str = "aclprof export") -> int:
    """Export records (daemon/PROTOCOL.md "record" objects) as one Trace Event Format file;
    the count of records written. Names are JSON-escaped as given (json.dumps is ASCII)."""
    g = gather(batches)
    out.write('{"displayTimeUnit":"ns","otherData":{"generator":%s,' % json.dumps(generator) +
              '"clock":"the ACL library\'s op timestamps (the device clock; CLOCK_MONOTONIC on the mock)"},'
              '"traceEvents":[\n')
    first = True
    threads: list[tuple[int, int, str]] = []
    dumps = json.dumps
    for pid, device, model, lane, slices in g.lanes():
        tid = device * TID_STRIDE + model + lane * LANE_STRIDE
        threads.append((pid, tid, lane_name(device, model, lane)))
        head = ',"ph":"X","ts":'
        tail = ',"pid":%d,"tid":%d,"args":' % (pid, tid)
        parts = []
        for s in slices:
            parts.append('{"name":' + ('"step"' if s.keypoint else dumps(s.name)) + ',"cat":' +
                         ('"step"' if s.keypoint else dumps(s.op_type)) + head + _us(s.start) + ',"dur":' +
                         _us(s.dur) + tail +
                         dumps({"op_type": s.op_type, "flag": s.flag, "thread_id": s.thread_id,
                                "received_ts": s.received_ts}, separators=(",", ":")) + "}")
        if parts:
            out.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
    meta = []
    for pid, name in g.processes.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
    for pid, tid, name in threads:
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    if meta:
        out.write(("" if first else ",\n") + ",\n".join(json.dumps(m, separators=(",", ":")) for m in meta))
    out.write("\n]}\n")
    return g.count
