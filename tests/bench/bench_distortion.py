"""Distortion: how much slower mock inference steps run while a subscription reads them.

    python tests/bench/bench_distortion.py [--quick] [--rounds R] [--steps S]

A "step" is one ``aclmdlExecute`` of a mock model, timed from Python. Rounds alternate
(order rotating) between

* ``off``: no subscription (the mock's emit path costs one atomic load per op), and
* ``on``: ``aclprof.subscribe(model, batch_callback=...)`` reading in the background
  (the mock builds, signs and queues one record per op, its writer thread writes each to
  the pipe, aclprof's reader thread decodes them); the subscription is opened before the
  round's steps and closed after them, outside the timed steps.

Three kinds of step:

* ``realtime``: the service case of the goal: the mock sleeps each op's simulated time;
  1000 ops of 10 us = a 10 ms step, 100 k ops/s. The slowdown is what the writer and the
  reader take from the "inference" thread (CPU, GIL, locks) on this 2-core machine.
* ``realtime + Python``: the same, plus ~5 ms of pure-Python work per step (pre- and
  post-processing of a Python service), which holds the GIL the reader thread also needs.
* ``emission`` (realtime off): steps return as fast as the mock can simulate, so this
  measures the mock's own per-op emission cost with a subscription (CRC, name table, ring)
  plus contention with the writer and reader threads; it is informative only (a real
  device does not run ops on the host thread).

For every kind and variant the table gives the step time's median, p90, p99, p99.9 and
max, and the GIL wait measured directly by :class:`_benchlib.GilProbe` (a Python thread
that asks to wake every 1 ms, in both variants; how late it runs is mostly the wait for
the GIL). The goals, on both realtime kinds: p99 and p99.9 within +5 % of off, and
the worst step within +1 ms of off's worst. The median slowdown, median(on) /
median(off) - 1, and the median of the per-round ratios are printed too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

GOAL_SLOWDOWN = 0.05
GOAL_TAIL = 0.05  # p99 and p99.9 of on within +5 % of off
GOAL_MAX_US = 1000.0  # the worst step of on within +1 ms of off's worst


def make_ops(n: int, duration_ns: int) -> list[dict]:
    kinds = [("MatMulV2", "attention/MatMul"), ("Add", "attention/Add"),
             ("SoftmaxV2", "attention/Softmax"), ("LayerNormV3", "LayerNorm"),
             ("FastGelu", "ffn/FastGelu"), ("TransposeD", "attention/Transpose")]
    ops = []
    for i in range(n):
        op_type, name = kinds[i % len(kinds)]
        ops.append({"name": f"layer{i // 40}/{name}_{i % 40}", "type": op_type,
                    "duration_ns": duration_ns})
    return ops


def python_work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def calibrate_python_work(ms: float) -> int:
    """Loop count of python_work() that takes about ``ms`` (best of 5: the machine is noisy)."""
    n = 10_000
    while True:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            python_work(n)
            best = min(best, (time.perf_counter() - t0) * 1e3)
        if best > 2:
            return max(1, int(n * ms / best))
        n *= 2


def run_steps(mock, model_id: int, steps: int, work: int = 0) -> list[float]:
    """Per-step wall times in us."""
    from aclprof.binding import lowlevel

    out = []
    execute = lowlevel.mdl_execute
    # Empty datasets, made once outside the timed steps (as an inference loop reuses its own).
    with lowlevel.mdl_create_dataset() as inputs, lowlevel.mdl_create_dataset() as outputs:
        for _ in range(steps):
            t0 = time.perf_counter()
            if work:
                python_work(work)
            execute(model_id, inputs, outputs)
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def measure(aclprof, model_id: int, *, realtime: bool, steps: int, rounds: int, work: int = 0):
    mock = aclprof.mock
    per_step: dict[str, list[float]] = {"off": [], "on": []}
    gil: dict[str, list[float]] = {"off": [], "on": []}  # GilProbe lateness, us
    received = [0]
    lost = [0]
    lib_dropped = [0]
    batches = [0]  # callbacks: how often the reader took the GIL to deliver

    def on_batch(batch):
        received[0] += len(batch)
        batches[0] += 1

    def off() -> float:
        mock.set_realtime(realtime)
        with B.GilProbe() as probe:
            times = run_steps(mock, model_id, steps, work)
        gil["off"] += [x / 1e3 for x in probe.late_ns]
        per_step["off"] += times
        return B.med(times)

    def on() -> float:
        mock.set_realtime(realtime)
        stats0 = mock.stats()
        before = stats0["recordsEmitted"]
        sub = aclprof.subscribe(model_id, batch_callback=on_batch)
        try:
            with B.GilProbe() as probe:
                times = run_steps(mock, model_id, steps, work)
            gil["on"] += [x / 1e3 for x in probe.late_ns]
        finally:
            mock.wait_writer_idle(60)
            sub.close()
        stats1 = mock.stats()
        emitted = stats1["recordsEmitted"] - before
        lost[0] += emitted - sub.stats.delivered
        # Of those, dropped by the library's writer (its queue was full: the reader was late)
        lib_dropped[0] += stats1["recordsDropped"] - stats0["recordsDropped"]
        per_step["on"] += times
        return B.med(times)

    run_steps(mock, model_id, 2)  # warm-up
    rounds_samples = B.interleaved({"off": off, "on": on}, rounds)
    return rounds_samples, per_step, gil, received[0], f"{lost[0]:,} ({lib_dropped[0]:,})", batches[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps (< 20 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="steps per round (realtime model)")
    parser.add_argument("--ops", type=int, default=1000, help="ops per step (realtime model)")
    parser.add_argument("--op-us", type=float, default=10.0, help="simulated us per op")
    args = parser.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 12)
    steps = args.steps or (25 if args.quick else 60)
    op_ns = int(args.op_us * 1000)
    step_ms = args.ops * op_ns / 1e6
    rate = args.ops / (step_ms / 1e3)

    aclprof = B.use_mock()
    import aclprof.mock

    B.header(f"step-time distortion by a background subscription ({rounds} interleaved rounds "
             f"per model)", args.quick)
    realtime_id = aclprof.mock.load_model(make_ops(args.ops, op_ns))
    emission_id = aclprof.mock.load_model(make_ops(200, 10_000))
    try:
        rt = measure(aclprof, realtime_id, realtime=True, steps=steps, rounds=rounds)
        work = calibrate_python_work(5.0)
        rtpy = measure(aclprof, realtime_id, realtime=True, steps=steps, rounds=rounds, work=work)
        em = measure(aclprof, emission_id, realtime=False, steps=steps * 25, rounds=rounds)
    finally:
        aclprof.mock.set_realtime(False)
        aclprof.mock.unload(realtime_id)
        aclprof.mock.unload(emission_id)

    rows, dist, goals = [], [], []
    for label, ops, (samples, per_step, gil, received, lost, nbatch) in (
            (f"realtime: {args.ops} ops x {args.op_us:g} us = {step_ms:g} ms step "
             f"({rate / 1e3:.0f} k ops/s)", args.ops, rt),
            ("realtime + ~5 ms pure-Python work per step", args.ops, rtpy),
            ("emission: 200 ops, realtime off (mock emit cost)", 200, em)):
        off_ms, on_ms = B.med(per_step["off"]), B.med(per_step["on"])  # us
        slow = on_ms / off_ms - 1
        slow_rounds = B.med(B.per_round_ratio(samples, "on", "off")) - 1
        rows.append((label, off_ms, on_ms, f"{slow * 100:+.1f}%", f"{slow_rounds * 100:+.1f}%",
                     ops * 1e6 / on_ms, received, lost, received / max(1, nbatch)))
        kind = label.split(":")[0].split(" (")[0]
        for variant in ("off", "on"):
            t, g = per_step[variant], gil[variant]
            dist.append((f"{kind} / {variant}", B.med(t), B.pct(t, 90), B.pct(t, 99),
                         B.pct(t, 99.9), max(t), f"{B.pct(g, 99):,.0f} / {max(g or [0]):,.0f}"))
        if not label.startswith("realtime"):
            continue  # emission: informative only (a real device does not run ops on the host)
        p99 = B.pct(per_step["on"], 99) / B.pct(per_step["off"], 99) - 1
        p999 = B.pct(per_step["on"], 99.9) / B.pct(per_step["off"], 99.9) - 1
        worst = max(per_step["on"]) - max(per_step["off"])
        goals.append((f"{kind}: p99 on <= off +5%", f"{p99 * 100:+.1f}%", B.verdict(p99 <= GOAL_TAIL)))
        goals.append((f"{kind}: p99.9 on <= off +5%", f"{p999 * 100:+.1f}%",
                      B.verdict(p999 <= GOAL_TAIL)))
        goals.append((f"{kind}: max on <= off max +1 ms", f"{worst / 1e3:+.2f} ms",
                      B.verdict(worst <= GOAL_MAX_US)))
        if label.startswith("realtime: "):
            goals.append((f"{kind}: median slowdown <= 5%", f"{slow * 100:+.1f}% "
                          f"(rounds: {slow_rounds * 100:+.1f}%)", B.verdict(slow <= GOAL_SLOWDOWN)))
    B.table(("step", "off us/step", "on us/step", "slowdown", "per-round", "ops/s on",
             "records read", "lost (library dropped)", "records/batch"), rows)
    print()
    B.table(("variant (us per step)", "median", "p90", "p99", "p99.9", "max",
             "GIL wait p99/max us"), dist)
    if args.quick:
        print(f"(--quick: {rounds * steps} steps per realtime variant, so p99.9 is about the max)")
    print()
    B.table(("goal", "measured", "verdict"), goals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
