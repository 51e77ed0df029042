"""Export writers of issue 23: records/s of ``--format pprof``, ``--format msmonitor-db`` and
``aclprof otlp``'s aggregation (the OpenTelemetry SDK, one ``record()`` per op; skipped without
the ``otlp`` extra) beside ``--format csv``, on the same decoded records.

    python tests/bench/bench_export_readers.py [--quick] [--records N] [--rounds R]

The records are bench_export_ascend.py's (4 processes, one 50-op model each, 2048-record
batches); the daemon, the socket and the push are left out. Median of R interleaved rounds.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

from bench_export_ascend import make_batches, run_dir_writer

from aclprof.exportfmt.msmonitor import MsmonitorWriter
from aclprof.exportfmt.opcsv import write_csv
from aclprof.exportfmt.pprof import write_pprof


def run_msmonitor(batches: list[list[dict]]) -> float:
    return run_dir_writer(MsmonitorWriter, batches, "bench-msmonitor-")


def run_stream(writer, batches: list[list[dict]], out) -> float:
    t = time.perf_counter()
    writer(iter(batches), out)
    return time.perf_counter() - t


def run_otlp(batches: list[list[dict]]) -> float:
    from aclprof.exportfmt.otlp import collect

    t = time.perf_counter()
    collect(iter(batches))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n, rounds = (100_000, 3) if a.quick else (a.records, a.rounds)
    batches = make_batches(n)
    cases = {"csv (op_statistic)": lambda: run_stream(write_csv, batches, io.StringIO()),
             "pprof (gzipped)": lambda: run_stream(write_pprof, batches, io.BytesIO()),
             "msmonitor-db (sqlite)": lambda: run_msmonitor(batches)}
    try:
        import opentelemetry.sdk  # noqa: F401

        cases["otlp (SDK aggregation)"] = lambda: run_otlp(batches)
    except ImportError:
        print("otlp: skipped (pip install 'aclprof[otlp]')")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):  # interleaved rounds
        for name, fn in cases.items():
            times[name].append(fn())
    csv_s = statistics.median(times["csv (op_statistic)"])
    print(f"{n:,} records, median of {rounds} rounds")
    print(f"{'writer':<24}{'records/s':>14}{'s':>8}{'vs csv':>9}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<24}{n / m:>14,.0f}{m:>8.2f}{m / csv_s:>8.2f}x")


if __name__ == "__main__":
    main()
