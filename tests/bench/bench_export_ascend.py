"""Export writers: records/s of ``--format ascend`` (AscendWriter: kernel_details.csv,
trace_view.json, op_statistic.csv, Overlap Analysis) against ``--format chrome`` and
``--format csv`` on the same decoded records, beside each other.

    python tests/bench/bench_export_ascend.py [--quick] [--records N] [--rounds R]

Records: 4 processes, one 50-op model each, 2048-record batches as ``client.export`` yields
them, ops 10 us long with 10 us gaps (the worst case for Overlap Analysis: one Computing and
one Free span per op). The daemon and the socket are left out: this measures the writers.
Median of R rounds, each into a fresh temporary directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from aclprof.exportfmt.ascend import AscendWriter
from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.opcsv import write_csv


def make_batches(n: int) -> list[list[dict]]:
    types = ["MatMul", "Conv2D", "Add", "Relu", "LayerNorm"]
    recs = [{"ts": 1764400000.0 + i * 1e-5, "host": "node1", "pid": 4242 + i % 4, "service": "svc", "device": 0,
             "model": 1, "op_type": types[i % 5], "op_name": f"layer{i % 50 // 5}/{types[i % 5]}_{i % 50}",
             "start": 1_000_000_000 + i * 20_000, "end": 1_000_010_000 + i * 20_000, "duration_ns": 10_000,
             "flag": 0, "thread_id": 7, "kind": "op"} for i in range(n)]
    return [recs[i:i + 2048] for i in range(0, n, 2048)]


def run_dir_writer(make_writer, batches: list[list[dict]], prefix: str = "bench-ascend-") -> float:
    """Seconds to write ``batches`` with ``make_writer(directory fd)`` (a directory export's
    writer: add, finish, close) into a fresh temporary directory."""
    root = tempfile.mkdtemp(prefix=prefix)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        t = time.perf_counter()
        w = make_writer(fd)
        try:
            for b in batches:
                w.add(b)
            w.finish()
        finally:
            w.close()
        return time.perf_counter() - t
    finally:
        os.close(fd)
        shutil.rmtree(root)


def run_ascend(batches: list[list[dict]]) -> float:
    return run_dir_writer(AscendWriter, batches)


def run_text(writer, batches: list[list[dict]]) -> float:
    root = tempfile.mkdtemp(prefix="bench-text-")
    try:
        with open(os.path.join(root, "out"), "w", encoding="utf-8", newline="") as f:
            t = time.perf_counter()
            writer(iter(batches), f)
            f.flush()
            return time.perf_counter() - t
    finally:
        shutil.rmtree(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n, rounds = (100_000, 3) if a.quick else (a.records, a.rounds)
    batches = make_batches(n)
    cases = {"ascend (directory)": lambda: run_ascend(batches),
             "chrome (one json)": lambda: run_text(write_chrome, batches),
             "csv (op_statistic)": lambda: run_text(write_csv, batches)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):  # interleaved rounds
        for name, fn in cases.items():
            times[name].append(fn())
    chrome = statistics.median(times["chrome (one json)"])
    print(f"{n:,} records, median of {rounds} rounds")
    print(f"{'writer':<22}{'records/s':>14}{'s':>8}{'vs chrome':>11}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<22}{n / m:>14,.0f}{m:>8.2f}{m / chrome:>10.2f}x")


if __name__ == "__main__":
    main()
