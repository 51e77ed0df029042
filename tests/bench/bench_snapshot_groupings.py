"""Cost of a SNAPSHOT per ``group_by`` and of a Prometheus scrape, with many aggregate keys.

    python tests/bench/bench_snapshot_groupings.py [--keys 10000] [--services 4] [--quick]

Fills an in-process ``Aggregator`` with ``--keys`` keys spread over ``--services`` services
(two processes each, one labelled model per process, 100 op types) and times, interleaved
over rounds, ``snapshot("all", g)`` for every grouping g, ``snapshot("10s", "type")`` and
``prometheus_view()``; the first call of each grouping (which identifies every key once) is
timed apart. Prints ms per call and the ratio to ``snapshot("all", "type")`` of the same
round (every grouping should cost about what the op-type view costs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
from _benchlib import interleaved, med, per_round_ratio, table
from aclprofd.aggregate.aggregator import GROUP_BY, Aggregator, KeySource

from aclprof.protocol.wire import RECORD_DTYPE


def _fill(keys: int, services: int) -> Aggregator:
    agg = Aggregator(max_keys=keys + 10, clock=time.time)
    per_proc = max(1, keys // (2 * services))
    names = {i: f"Type{i}" for i in range(1, 101)}
    names.update({100 + i: f"layer{i}/op" for i in range(1, per_proc + 1)})
    now = time.time()
    for s in range(services):
        for p in range(2):
            src = KeySource("host", 1000 + 10 * s + p, f"svc{s}")
            src.set_label(1, f"model{s}@v1")
            recs = np.zeros(per_proc * 4, RECORD_DTYPE)
            idx = np.arange(len(recs)) % per_proc
            recs["model_id"], recs["device_id"] = 1, s % 8
            recs["op_type"], recs["op_name"] = 1 + idx % 100, 101 + idx
            recs["duration"] = np.random.default_rng(s).lognormal(10, 1, len(recs)).astype(np.uint64) + 1
            recs["end"] = 10**12
            recs["start"] = recs["end"] - recs["duration"]
            agg.ingest(src, recs, names, now)
    return agg


def _timer(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--services", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=0, help="default 15 (--quick: 5)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    agg = _fill(args.keys, args.services)
    print(f"{agg.nkeys - 1:,} keys, {args.services} services x 2 processes, {rounds} rounds\n")
    first = [(g, _timer(lambda g=g: agg.snapshot("all", g))) for g in GROUP_BY]
    first.append(("prometheus", _timer(agg.prometheus_view)))
    table(["first call (identifies every key)", "ms"], first)
    print()
    variants = {f"snapshot all {g}": (lambda g=g: _timer(lambda: agg.snapshot("all", g))) for g in GROUP_BY}
    variants["snapshot 10s type"] = lambda: _timer(lambda: agg.snapshot("10s", "type"))
    variants["prometheus_view"] = lambda: _timer(agg.prometheus_view)
    samples = interleaved(variants, rounds)
    base = "snapshot all type"
    table(["later calls", "median ms", "min ms", f"x {base}"],
          [(name, med(v), min(v), med(per_round_ratio(samples, name, base))) for name, v in samples.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
