"""Fleet p99 against the exact p99, before and after the fine buckets (issue 23), through a
real Prometheus: the before/after table of daemon/README.md "Fine buckets".

    python tests/bench/bench_fleet_quantiles.py [--seed N] [--window 1m]

An in-process aclprofd is fed the streams of tests/helpers/promexact.py's FIXED_STREAMS
(lognormal and bimodal, 20,000 records each; twice, so that rate() sees one whole copy);
Prometheus 2.42 scrapes it every 0.5 s. For each stream: the exact nearest-rank p99 of the
records, and the fleet p99 by the query `aclprof fleet` sends, over the power-of-two buckets
it read before (aclprofd_op_duration_seconds) and over the fine ones it reads now
(aclprofd_op_duration_fine_seconds), with their relative errors.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _benchlib import table
from helpers.daemons import InProcess
from helpers.procs import free_port
from helpers.prometheus import PROMETHEUS, SKIP_REASON, prometheus_server
from helpers.promexact import (
    COARSE_METRIC,
    FIXED_STREAMS,
    durations,
    exact_quantile,
    feed_twice,
    fleet_p99,
    relative_error,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--window", default="1m")
    args = ap.parse_args(argv)
    if PROMETHEUS is None:
        print(f"skipped: {SKIP_REASON}")
        return 0
    streams = {f"s{i}": durations(spec, args.seed + i) for i, spec in enumerate(FIXED_STREAMS)}
    port = free_port()
    with InProcess(prometheus_port=port) as d, prometheus_server([f"127.0.0.1:{port}"], interval="500ms") as prom:
        feed_twice(d.socket, prom, "bench", streams)
        after = fleet_p99(prom, "bench", window=args.window)
        before = fleet_p99(prom, "bench", COARSE_METRIC, window=args.window)
    rows = []
    for (name, dur), spec in zip(streams.items(), FIXED_STREAMS):
        exact = exact_quantile(dur, 0.99) / 1e9
        rows.append([spec.label(), f"{exact * 1e6:.1f}", f"{before[name] * 1e6:.1f}",
                     f"{100 * relative_error(before[name], exact):+.1f} %", f"{after[name] * 1e6:.1f}",
                     f"{100 * relative_error(after[name], exact):+.2f} %"])
    table(["stream", "exact p99 us", "before us", "before err", "after us", "after err"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
