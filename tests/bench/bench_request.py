"""Request marking cost (issue 25): ``aclprof.request`` per enter/exit pair, beside ``annotate``.

    python tests/bench/bench_request.py [--iterations N] [--rounds R]

Interleaved in one run (every round runs every variant once, the order rotating), with no
profiling session (the msproftx range is then skipped, as annotate's is):
``with contextlib.nullcontext()``, ``with aclprof.annotate("m")``, ``with req`` (a
pre-built request, entered again each time), ``with aclprof.request("id")`` (built each
time, as a service writes it) and the same with two attributes. The ring is drained
between rounds (the agent's side), so no variant measures the full-ring drop path.
Prints the median ns per pair and the ratios to annotate and to nullcontext.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time


def _loops(aclprof):
    ann = aclprof.annotate("m")
    req = aclprof.request("prebuilt")
    request = aclprof.request
    null = contextlib.nullcontext()

    def nullctx(n):
        for _ in range(n):
            with null:
                pass

    def annotate(n):
        for _ in range(n):
            with ann:
                pass

    def prebuilt(n):
        for _ in range(n):
            with req:
                pass

    def built(n):
        for _ in range(n):
            with request("req-42"):
                pass

    def attrs(n):
        for _ in range(n):
            with request("req-42", route="/v1/chat", version="B"):
                pass

    return {"nullcontext": nullctx, "annotate": annotate, "request (pre-built)": prebuilt,
            "request(id)": built, "request(id, 2 attrs)": attrs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    import aclprof
    from aclprof.api import requests as rq

    loops = _loops(aclprof)
    names = list(loops)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            rq.drain()
            t0 = time.perf_counter_ns()
            loops[k](args.iterations)
            samples[k].append((time.perf_counter_ns() - t0) / args.iterations)
    rq.drain()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'variant':<24} {'ns/pair':>9} {'x annotate':>11} {'x null':>8}  (median of {args.rounds} rounds "
          f"x {args.iterations})")
    for k in names:
        print(f"{k:<24} {med[k]:>9.0f} {med[k] / med['annotate']:>11.2f} {med[k] / med['nullcontext']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
