"""The histogram bin rule on the daemon's ingest hot path: the upper-inclusive exact rule vs the
float64 rule it replaced.

    python tests/bench/bench_bin_index.py [--quick]

Two measurements, each with both rules run interleaved:

* ``bin_index``: ns per duration over 1 M lognormal int64 durations (median 22 us, a wide
  spread), what ``Aggregator.ingest`` passes it;
* ``ingest``: ns per record of ``Aggregator.ingest`` (the daemon's aggregates) over 4096-record
  batches (one agent frame) of 200 op names, with ``bin_index`` as it is and with the previous
  rule patched in: the share of the ingest cost the bin rule takes.

The previous rule is ``floor(8*log2(d)) + 1`` in float64 (lower-inclusive bins: 2**k ns went one
bin up), copied here for the comparison only. Reported: medians, min, and the ratio to the
previous rule within each round.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
import numpy as np
from aclprofd.aggregate import aggregator as aggmod
from aclprofd.aggregate.aggregator import Aggregator, KeySource

from aclprof.protocol.quantshift import NBINS, bin_index
from aclprof.protocol.wire import RECORD_DTYPE


def previous_rule(durations: np.ndarray) -> np.ndarray:
    """The bin rule before the fix: ``[2**((b-1)/8), 2**(b/8))`` in float64."""
    d = np.asarray(durations, dtype=np.float64)
    with np.errstate(divide="ignore"):
        b = np.floor(np.log2(d) * 8) + 1
    b[d < 1] = 0
    np.clip(b, 0, NBINS - 1, out=b)
    out: np.ndarray = b.astype(np.int64)
    return out


def batches(n: int, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    r = np.zeros(n, RECORD_DTYPE)
    i = np.arange(n)
    r["model_id"], r["device_id"] = 1, 0
    r["op_name"], r["op_type"] = i % 200, 200 + i % 8
    r["duration"] = rng.lognormal(10, 2, n).astype(np.uint64)
    r["start"] = 1_700_000_000_000_000_000 + i * 1000
    r["end"] = r["start"] + r["duration"]
    return [r[k:k + size] for k in range(0, n, size)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds, n = (15, 1 << 20) if args.quick else (61, 1 << 20)
    rng = np.random.default_rng(0)
    d = rng.lognormal(10, 2, n).astype(np.int64)
    assert ((previous_rule(d) != bin_index(d)) <= ((d & (d - 1)) == 0)).all()  # only powers of two differ

    def timed(rule) -> float:
        t0 = time.perf_counter()
        rule(d)
        return (time.perf_counter() - t0) / n * 1e9

    B.header("bin_index: ns per duration (1 M int64 durations)", args.quick)
    s = B.interleaved({"previous (float64, lower-inclusive)": lambda: timed(previous_rule),
                       "bin_index (exact, upper-inclusive)": lambda: timed(bin_index)}, rounds)
    base = "previous (float64, lower-inclusive)"
    B.table(("rule", "ns/duration (median)", "min", "vs previous (per round)"),
            [(k, B.med(v), min(v), f"{B.med(B.per_round_ratio(s, k, base)):.3f}x") for k, v in s.items()])

    names = {i: f"layer{i // 10}/op{i}" for i in range(200)}
    names.update({200 + i: f"Type{i}" for i in range(8)})
    parts = batches(n // 4, 4096, rng)

    def ingest(rule) -> float:
        aggmod.bin_index = rule  # the aggregator's module-level name: what ingest calls
        try:
            agg = Aggregator(clock=lambda: 1_000_000.0)
            src = KeySource("bench", 1, "svc")  # one per aggregator: it caches its key rows
            t0 = time.perf_counter()
            for p in parts:
                agg.ingest(src, p, names)
            return (time.perf_counter() - t0) / (n // 4) * 1e9
        finally:
            aggmod.bin_index = bin_index

    print()
    B.header("Aggregator.ingest: ns per record (4096-record batches)", args.quick)
    s = B.interleaved({"previous rule": lambda: ingest(previous_rule),
                       "bin_index": lambda: ingest(bin_index)}, rounds)
    B.table(("rule in ingest", "ns/record (median)", "min", "vs previous (per round)"),
            [(k, B.med(v), min(v), f"{B.med(B.per_round_ratio(s, k, 'previous rule')):.3f}x")
             for k, v in s.items()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
