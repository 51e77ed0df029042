"""A batch of thousands of new aggregate keys: the loop step it costs (issue 19).

    python tests/bench/bench_new_keys.py [--keys 4096] [--rounds 15] [--quick]

A new agent with many models, or a hostile one (the soak's "65 k distinct model ids"), sends
a batch whose every record is a new key. Registering them grows the per-key arrays (the
exact histograms are 322 int64 bins a key: ~10 MB at 4096 keys). Measured side by side in
one run, interleaved: ``replaced`` grows as main did before (``np.full`` writes every page of
each new array, and the arrays double once per power of two on the way: six copies of the
histograms for one batch), ``now`` reserves the batch's room in one growth of ``np.zeros``
arrays (pages zeroed by the kernel as rows are first used). Each sample is the wall time of
``Aggregator.ingest`` of one batch of ``--keys`` new keys on a fresh aggregator (the
step's share of a loop turn). The rounds share one process, so the allocator may hand a
round the pages the round before freed, already faulted in: the medians understate the
first growth of a long-running daemon, whose new arrays come fresh from the kernel; the
max column shows such a round.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

sys.path.insert(0, os.path.join(B.REPO, "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 5
    from aclprofd.aggregate import aggregator as agg_mod
    from aclprofd.aggregate import keys as keys_mod
    from aclprofd.aggregate.aggregator import Aggregator
    from aclprofd.aggregate.keys import KeySource
    from helpers.records import make_records

    names = {1: "Conv", 2: "conv1"}
    recs = make_records(args.keys, types=(1,), names=(2,), durations=1000)
    recs["model_id"] = np.arange(args.keys)
    new_grow, new_reserve = keys_mod.grow, keys_mod.KeyRegistry.reserve

    def old_grow(arr: np.ndarray, old: int, cap, fill: int = 0) -> np.ndarray:
        new = np.full(cap, fill, dtype=keys_mod.I64)  # main's: every page written now
        if old:
            new[:old] = arr[:old]
        return new

    def one(replaced: bool) -> float:
        grow = old_grow if replaced else new_grow
        keys_mod.grow = agg_mod.grow = grow
        keys_mod.KeyRegistry.reserve = (lambda self, more: None) if replaced else new_reserve
        try:
            a = Aggregator(max_keys=10_000)
            t0 = time.perf_counter()
            a.ingest(KeySource("h", 1, "svc"), recs, names, time.time())
            dt = time.perf_counter() - t0
            assert a.nkeys >= args.keys
            del a
            return dt * 1e3
        finally:
            keys_mod.grow = agg_mod.grow = new_grow
            keys_mod.KeyRegistry.reserve = new_reserve

    B.header(f"one batch of {args.keys} new keys: Aggregator.ingest wall ms", args.quick)
    one(False), one(True)  # warm-up: imports, first allocations
    s = B.interleaved({"replaced": lambda: one(True), "now": lambda: one(False),
                       "now again (A/A)": lambda: one(False)}, args.rounds)
    rows = [(name, f"{B.med(v):.1f}", f"{min(v):.1f}", f"{max(v):.1f}",
             f"{B.med(B.per_round_ratio(s, name, 'replaced')):.2f}") for name, v in s.items()]
    B.table(("variant", "median ms", "min ms", "max ms", "ratio to replaced (per round)"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
