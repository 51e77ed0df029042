"""/metrics rendering at the series budget's limits: time, size and peak Python memory.

    python tests/bench/bench_metrics_render.py [--sets 16000] [--label-bytes 250]

An aggregator is filled with ``--sets`` op duration label sets (31 series each), each from
its own WATCH relabel (model labels of ``--label-bytes``), by several agents (host, pid).
Renders the text as ``prometheus_client.generate_latest`` did (the old endpoint, no
budget) and as :meth:`aclprofd.metrics.Metrics.render` does (the budget at its defaults:
500k series in all, 100k per agent, a quarter of the 512 MiB memory budget), side by side:
seconds, bytes, series, and tracemalloc's peak. Prometheus's default scrape timeout is 10 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
from _benchlib import table
from aclprofd import config
from aclprofd.aggregate.aggregator import Aggregator
from aclprofd.aggregate.keys import KeySource
from aclprofd.detector.engine import DetectorView
from aclprofd.metrics import DaemonCollector, Metrics
from aclprofd.promtext import Budget
from aclprofd.status import CountersSnapshot

from aclprof.protocol.wire import RECORD_DTYPE


def _fill(agg: Aggregator, sets: int, label_bytes: int, agents: int) -> None:
    names = {1: "MatMul", 2: "matmul_1"}
    per = -(-sets // agents)
    for a in range(agents):
        src = KeySource(f"host{a}", 1000 + a, f"service{a}")
        for i in range(min(per, sets - a * per)):
            label = f"{i}-" + "m" * max(0, label_bytes - 8)
            src.set_label(1, label)
            r = np.zeros(4, RECORD_DTYPE)
            r["model_id"], r["op_type"], r["op_name"] = 1, 1, 2
            r["duration"] = [1000, 20000, 400000, 9000000]
            r["end"] = 10**12
            r["start"] = r["end"] - r["duration"]
            agg.ingest(src, r, names)


class _Source:
    def __init__(self, agg: Aggregator):
        self.aggregator = agg
        self.published = CountersSnapshot(
            taken_ts=0.0, uptime_s=1.0, records_total=0, steps_total=0, records_per_s=0.0, dropped_total=0,
            protocol_errors=0, stream_skipped_total=0, drops_by_agent=(), agents=(), storage=None,
            aggregate_keys=agg.nkeys, aggregate_cap=agg.max_keys, aggregate_other_records=0,
            aggregate_windows=(), aggregate_since_ts=0.0, problems=())
        self.detection = type("D", (), {"published": DetectorView()})


def _measure(fn: Any, memory: bool) -> tuple[float, int, int]:
    if memory:
        tracemalloc.start()
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] if memory else 0
    if memory:
        tracemalloc.stop()
    return dt, out, peak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=16000)
    ap.add_argument("--label-bytes", type=int, default=250)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--memory", action="store_true", help="also trace Python allocations (slows both down)")
    ap.add_argument("--new-only", action="store_true", help="skip the old renderer (slow at these sizes)")
    args = ap.parse_args(argv)
    agg = Aggregator(max_keys=args.sets + 10)
    _fill(agg, args.sets, args.label_bytes, args.agents)
    src = _Source(agg)
    settings = config.load({"socket": "/nonexistent", "prometheus_port": "0"}, environ={})

    def old() -> int:
        from prometheus_client import CollectorRegistry, generate_latest
        reg = CollectorRegistry(auto_describe=False)
        reg.register(DaemonCollector(src, host_label="h"))  # type: ignore[arg-type]
        return len(generate_latest(reg))

    m = Metrics.__new__(Metrics)  # the rendering only: no listener
    m.daemon, m.settings = src, settings  # type: ignore[assignment]
    m.collector = DaemonCollector(src, host_label="h")  # type: ignore[arg-type]
    m._memory, m._building, m.renders, m.last = None, None, 0, None
    m.server = type("S", (), {"refused": {}, "served": 0})()  # type: ignore[assignment]
    b = m.budget()
    new_r: list[Any] = []

    def new() -> int:
        r = m.render()
        new_r.append(r)
        return r.size

    rows = []
    variants = [("prometheus_client (old)", old)] if not args.new_only else []
    for name, fn in (*variants, ("promtext within budget (new)", new)):
        dt, size, peak = _measure(fn, args.memory)
        rows.append([name, f"{dt:.2f}", f"{size / 2**20:.1f}", f"{peak / 2**20:.1f}" if args.memory else "-"])
    r = new_r[0]
    print(f"{args.sets} label sets ({args.sets * 31} series), labels of {args.label_bytes} bytes, "
          f"{args.agents} agents; budget {Budget(b.max_series, b.per_agent, b.max_bytes)}")
    table(["renderer", "seconds", "MiB", "peak MiB (tracemalloc)"], rows)
    print(f"new: {r.series} series shown, refused {r.refused}, agents over share {r.agents_over_share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
