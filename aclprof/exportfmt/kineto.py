r"""A Kineto-shaped Chrome trace of export records (``aclprof export --format kineto``): the
layout PyTorch's profiler writes, so Holistic Trace Analysis (PyPI
``holistictraceanalysis``) and other Kineto tools read our ops as GPU kernels.

Mapping (README "Trace exports"): an op is a kernel (``cat: "kernel"``) named by its **op
type** (a Kineto kernel name is the kernel function, shared by every launch; the op name,
an instance, is ``args.op_name``); ``pid`` is the device (Kineto's GPU process), ``tid``
and ``args.stream`` a stream per (process, model, lane of overlapping ops)
(:mod:`.tracks`; the records carry no stream id), ``args.device`` the device,
``args.correlation`` a unique id per op (there is no host launch to correlate with: none
is invented). Step keypoints are ``cat: "user_annotation"`` events named ``step`` on their
model's stream, without ``args.stream``: HTA takes every event with a stream for a kernel.
``distributedInfo.rank`` is 0: one file per host (written `"rank": 0`: HTA finds the rank by the
regex `"rank":\s+(\d+)`, a space required). Times are exact microseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from .chrome import json_string, meta_json, short_us
from .tracks import gather, lane_name

__all__ = ["write_kineto"]


def write_kineto(batches: Iterable[list[dict[str, Any]]], out: TextIO, generator: str = "aclprof export") -> int:
    """Export records as one Kineto-shaped trace; the count of records written."""
    g = gather(batches)
    out.write('{"schemaVersion":1,"distributedInfo":{"backend":"none","rank": 0,"world_size":1},'
              '"deviceProperties":[],"otherData":{"generator":%s},"traceEvents":[\n' % json.dumps(generator))
    streams: dict[tuple[int, int, int, int], int] = {}
    thread_names: list[tuple[int, int, str]] = []
    first = True
    correlation = 0
    memo: dict[str, str] = {}
    for pid, device, model, lane, slices in g.lanes():
        stream = streams.setdefault((pid, device, model, lane), len(streams) + 1)
        thread_names.append((device, stream, f"stream {stream}: {g.processes[pid]}, {lane_name(device, model, lane)}"))
        parts = []
        for s in slices:
            correlation += 1
            if s.keypoint:
                parts.append('{"ph":"X","cat":"user_annotation","name":"step","pid":%d,"tid":%d,"ts":%s,"dur":%s,'
                             '"args":{"device":%d,"model":%d}}'
                             % (device, stream, short_us(s.start), short_us(s.dur), device, model))
                continue
            parts.append('{"ph":"X","cat":"kernel","name":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":'
                         '{"device":%d,"stream":%d,"correlation":%d,"op_name":%s,"process":%d,"model":%d}}'
                         % (json_string(s.op_type, memo), device, stream, short_us(s.start), short_us(s.dur), device,
                            stream, correlation, json_string(s.name, memo), pid, model))
        if parts:
            out.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
    meta = []
    for device in sorted({d for (_, d, _, _) in streams}):
        meta.append({"name": "process_name", "ph": "M", "pid": device, "tid": 0, "args": {"name": f"device {device}"}})
    for device, stream, name in thread_names:
        meta.append({"name": "thread_name", "ph": "M", "pid": device, "tid": stream, "args": {"name": name}})
    if meta:
        out.write(("" if first else ",\n") + ",\n".join(meta_json(m) for m in meta))
    out.write("\n]}\n")
    return g.count
