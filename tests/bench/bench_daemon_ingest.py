"""Daemon ingest throughput: records/s from 4 agent processes, with the daemon's CPU and RSS.

    python tests/bench/bench_daemon_ingest.py [--duration 120] [--agents 4] [--batch 4096]
                                              [--ops 200] [--quick]
    python tests/bench/bench_daemon_ingest.py --stages [--quick]

``--stages`` (issue 21): no daemon; the daemon's per-record stages at 100 k ops/s, in-process,
on one replayed stream (batches of 2632 records of a 1000-op model, what an agent sends every
~26 ms, the clock advancing as it would): the aggregator's fold in one C call (``fold_batch``)
vs the steps it replaced (tests/helpers/aggregate_reference.py), interleaved, with an A/A
pair and the per-round ratio; then what else the daemon spends per record (the detector's
observe, the tail's JSON encoding, the memory budget's table walk per flush) in us per
record at 100 k ops/s.

Starts the installed ``aclprofd`` (Prometheus off, a temporary data dir with a 512 MiB disk cap so
rotation runs during the test) and N agent *processes* speaking the wire protocol directly
(HELLO, NAMES for a 200-op transformer-like model, then BATCH frames of ``--batch``
realistic records as fast as the daemon takes them, blocking sends). Every second it reads
the daemon's ``records_total`` (STATUS), CPU time and RSS (/proc/<pid>/stat, status).
Prints per-second samples and a summary: sustained records/s (median of the per-second
rates after a 2 s warm-up), daemon CPU %, RSS at start and end (flat?). Goal:
>= 500 k records/s with flat RSS over 2 minutes on this 2-core machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np
from _benchlib import table

from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind, decode_json, encode_batch, encode_json, recv_frame


def _model(ops: int) -> tuple[dict[int, str], np.ndarray, np.ndarray, np.ndarray]:
    """A transformer-like op list: names like encoder/layer7/attention/MatMul_2."""
    kinds = [("MatMulV2", 30_000), ("Add", 4_000), ("LayerNorm", 9_000), ("Softmax", 12_000),
             ("GeLU", 6_000), ("Transpose", 5_000), ("Cast", 2_000), ("BatchMatMul", 25_000)]
    names: dict[int, str] = {i + 1: k for i, (k, _) in enumerate(kinds)}
    types, op_names, means = [], [], []
    for i in range(ops):
        k = i % len(kinds)
        nid = 100 + i
        names[nid] = f"encoder/layer{i // len(kinds)}/block/{kinds[k][0]}_{i}"
        types.append(k + 1)
        op_names.append(nid)
        means.append(kinds[k][1])
    return names, np.asarray(types), np.asarray(op_names), np.asarray(means)


def _agent(path: str, idx: int, batch: int, ops: int, stop_at: float, rate: float) -> None:
    names, types, op_names, means = _model(ops)
    rng = np.random.default_rng(idx)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(encode_json(Kind.HELLO, {"role": "agent", "version": "0.1.0", "pid": os.getpid(),
                                       "host": "bench", "service": f"svc{idx}", "labels": {}}))
    assert recv_frame(s, FrameReader(), [])[0] == Kind.WELCOME
    s.sendall(encode_json(Kind.WATCH, {"model_id": 1, "device": idx % 2, "labels": {}}))
    s.sendall(encode_json(Kind.NAMES, {"names": {str(k): v for k, v in names.items()}}))
    frames = []
    for _ in range(8):  # a few different batches, built before sending
        r = np.zeros(batch, RECORD_DTYPE)
        k = np.arange(batch) % ops
        r["model_id"] = 1
        r["device_id"] = idx % 2
        r["op_type"] = types[k]
        r["op_name"] = op_names[k]
        r["duration"] = (means[k] * rng.lognormal(0, 0.3, batch)).astype(np.uint64)
        r["thread_id"] = 1
        frames.append(r)
    i = 0
    t0 = time.monotonic()
    while time.time() < stop_at:
        if rate:  # paced: batch i is due at t0 + i * batch / rate
            delay = t0 + i * batch / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        r = frames[i % len(frames)]
        now = time.monotonic_ns()
        r["end"] = now
        r["start"] = now - r["duration"]
        s.sendall(encode_batch(r))
        i += 1
    s.close()


def _proc_stats(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return cpu, rss * 1024


def _status(path: str) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    r, p = FrameReader(), []
    s.sendall(encode_json(Kind.HELLO, {"role": "control", "version": "0.1.0", "pid": os.getpid(), "host": "b"}))
    recv_frame(s, r, p)
    s.sendall(encode_json(Kind.STATUS, {}))
    k, payload = recv_frame(s, r, p)
    s.close()
    return decode_json(payload)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096, help="records per BATCH frame")
    ap.add_argument("--ops", type=int, default=200, help="distinct ops of the model")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="total records/s the agents aim at (0: as fast as the daemon takes them)")
    ap.add_argument("--quick", action="store_true", help="20 s")
    ap.add_argument("--stages", action="store_true",
                    help="no daemon: the per-record stages in-process, fold_batch vs the steps it replaced")
    args = ap.parse_args(argv)
    if args.stages:
        return stages(args.quick)
    duration = 20.0 if args.quick else args.duration
    tmp = tempfile.mkdtemp(prefix="acldb-", dir="/tmp")
    path = os.path.join(tmp, "d.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(os.path.join(tmp, "notify"))
    notify.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=os.path.join(tmp, "notify"))
    daemon = subprocess.Popen([*daemon_argv(), "--socket", path, "--data-dir",
                               os.path.join(tmp, "data"), "--prometheus-port", "0", "--disk-cap", "512MiB",
                               "--log-format", "json", "--log-file", os.path.join(tmp, "log")], env=env, cwd=tmp)
    try:
        assert b"READY=1" in notify.recv(100)
        cpu0, rss0 = _proc_stats(daemon.pid)
        stop_at = time.time() + duration
        ctx = mp.get_context("fork")
        agents = [ctx.Process(target=_agent, args=(path, i, args.batch, args.ops, stop_at, args.rate / args.agents)) for i in range(args.agents)]
        for a in agents:
            a.start()
        rows = []
        prev_t, prev_n, prev_cpu = time.monotonic(), _status(path)["records_total"], _proc_stats(daemon.pid)[0]
        rss_first = None
        while time.time() < stop_at:
            time.sleep(1.0)
            t = time.monotonic()
            n = _status(path)["records_total"]
            cpu, rss = _proc_stats(daemon.pid)
            rate = (n - prev_n) / (t - prev_t)
            cpu_pct = 100.0 * (cpu - prev_cpu) / (t - prev_t)
            rows.append((len(rows) + 1, rate, cpu_pct, rss))
            if rss_first is None and len(rows) == 3:
                rss_first = rss
            prev_t, prev_n, prev_cpu = t, n, cpu
        for a in agents:
            a.join(30)
        st = _status(path)
    finally:
        daemon.terminate()
        rc = daemon.wait(30)
        notify.close()
    show = rows if len(rows) <= 20 else rows[:5] + rows[-5:]
    table(["second", "records/s", "daemon CPU %", "RSS MiB"],
                [(s, f"{r:,.0f}", f"{c:.0f}", f"{m / 2**20:.1f}") for s, r, c, m in show])
    # the first 2 s ramp up and the last sample straddles the stop: both left out
    steady = [r for _, r, _, _ in rows[2:-1]] or [r for _, r, _, _ in rows]
    cpus = [c for _, _, c, _ in rows[2:]] or [0.0]
    rss_end = rows[-1][3] if rows else rss0
    print()
    table(["summary", "value"], [
        ("agents x batch", f"{args.agents} x {args.batch} records, {args.ops} ops"),
        ("target records/s", f"{args.rate:,.0f}" if args.rate else "unpaced (as fast as taken)"),
        ("duration s", f"{duration:.0f}"),
        ("records/s (median, after 2 s)", f"{statistics.median(steady):,.0f}"),
        ("records/s (min)", f"{min(steady):,.0f}"),
        ("records total", f"{st['records_total']:,}"),
        ("daemon CPU % (median; 100 = one core)", f"{statistics.median(cpus):.0f}"),
        ("RSS MiB idle / at 3 s / end", f"{rss0 / 2**20:.1f} / {(rss_first or rss0) / 2**20:.1f} / {rss_end / 2**20:.1f}"),
        ("RSS MiB at 25 / 50 / 75 / 100 % of the run", " / ".join(
            f"{rows[max(0, int(len(rows) * f) - 1)][3] / 2**20:.1f}" for f in (0.25, 0.5, 0.75, 1.0)) if rows else "-"),
        ("storage bytes / segments", f"{st['storage']['bytes']:,} / {st['storage']['segments']}"),
        ("daemon exit code (SIGTERM)", rc),
    ])
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


STAGE_BATCH = 2632  # records per BATCH at 100 k ops/s (an agent sends every ~26 ms)


def _stage_stream(batches: int) -> tuple[dict[int, str], list[np.ndarray]]:
    """A 1000-op model's names and ``batches`` batches of its records (lognormal durations)."""
    rng = np.random.default_rng(1)
    names = {i + 1: t for i, t in enumerate(("MatMulV2", "Add", "SoftmaxV2", "LayerNormV3", "FastGelu", "Cast"))}
    names |= {100 + i: f"layer{i // 40}/block/op_{i}" for i in range(1000)}
    k = np.arange(STAGE_BATCH) % 1000
    out = []
    for _ in range(batches):
        r = np.zeros(STAGE_BATCH, RECORD_DTYPE)
        r["model_id"], r["op_type"], r["op_name"], r["thread_id"] = 1, k % 6 + 1, 100 + k, 1
        r["duration"] = (10_000 * rng.lognormal(0, 0.3, STAGE_BATCH)).astype(np.uint64)
        r["end"] = 1 << 40
        r["start"] = r["end"] - r["duration"]
        out.append(r)
    return names, out


def stages(quick: bool) -> int:
    """The daemon's per-record stages in-process (see the module docstring)."""
    import queue

    sys.path.insert(0, os.path.dirname(HERE))  # tests/: the reference fold
    from _benchlib import header, interleaved, med, per_round_ratio
    from aclprofd import config
    from aclprofd.aggregate.aggregator import Aggregator
    from aclprofd.aggregate.keys import KeySource
    from aclprofd.detector.service import DetectorService
    from aclprofd.memory import array_bytes
    from aclprofd.records import NameJson, encode_frames, identity_head
    from helpers.aggregate_reference import ReferenceAggregator

    from aclprof.protocol._batchgroup import group
    from aclprof.protocol.quantshift import BIN_UPPER_NS
    from aclprof.protocol.wire import Kind as K

    header("aclprofd per-record stages at 100 k ops/s (in-process, one replayed stream)", quick)
    rounds, per_round = (5, 40) if quick else (15, 80)
    names, stream = _stage_stream(8)
    tmp = tempfile.mkdtemp(prefix="acldb-")
    settings = config.load({"socket": os.path.join(tmp, "s"), "data_dir": tmp}, environ={})

    def make(cls: type[Aggregator]) -> tuple[Aggregator, KeySource, list[float], DetectorService]:
        clock = [1.7e9]
        agg = cls(clock=lambda: clock[0])
        det = DetectorService(settings, agg, queue.Queue(), live_owners=set, truncations={})
        src = KeySource("bench", 1, "svc")
        agg.ingest(src, stream[0], names, clock[0])  # the keys registered: what follows is the steady state
        return agg, src, clock, det

    fed = {"fold_batch (new)": make(Aggregator), "fold_batch again (A/A)": make(Aggregator),
           "the replaced steps (old)": make(ReferenceAggregator)}

    def variant(name: str):
        agg, src, clock, _ = fed[name]

        def run() -> float:
            t0 = time.perf_counter()
            for i in range(per_round):
                clock[0] += STAGE_BATCH / 100_000  # 100 k ops/s: slots roll over every ~38 batches
                agg.ingest(src, stream[i % len(stream)], names, clock[0])
            return (time.perf_counter() - t0) / (per_round * STAGE_BATCH) * 1e9
        return run

    samples = interleaved({name: variant(name) for name in fed}, rounds)
    new, aa, old = list(fed)
    rows = [(name, f"{med(samples[name]):.1f}", f"{min(samples[name]):.1f}") for name in fed]
    table(["Aggregator.ingest + detector observe", "ns/record (median)", "min"], rows)
    print(f"ratio old / new (median of per-round ratios): {med(per_round_ratio(samples, old, new)):.2f}x")
    print(f"A/A: new again / new: {med(per_round_ratio(samples, aa, new)):.2f}x (the run's noise)")
    a, b = fed[new][0], fed[old][0]
    same = all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("count", "total", "min", "max", "hist", "prom",
                                                                       "prom_sum", "fine", "fine_sum"))
    print(f"identical since-start figures, new vs old after the same batches: {same}")

    # what else the daemon does per record at 100 k ops/s (us per record)
    def best(fn, reps: int) -> float:
        out = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            out = min(out, (time.perf_counter() - t0) / reps)
        return out

    head, nj = identity_head("bench", 1, "svc"), NameJson(names, {})
    enc = best(lambda: [encode_frames(stream[0][i:i + 1024], 1.7e9, head, nj, K.STREAM_RECORDS)
                        for i in range(0, STAGE_BATCH, 1024)], 20) / STAGE_BATCH
    agg, _, _, det = fed[new]
    walk = best(lambda: (array_bytes(agg), array_bytes(det.detector)), 5)
    scratch = np.empty((8, STAGE_BATCH), np.int64)
    grouping = best(lambda: group(stream[1], BIN_UPPER_NS, scratch[0].view(np.uint64), scratch[1].view(np.uint64),
                                  *scratch[2:]), 50) / STAGE_BATCH
    table(["stage (100 k ops/s)", "us per record"], [
        ("aggregate + detector observe (fold_batch)", f"{med(samples[new]) / 1e3:.3f}"),
        ("  of which group (C: key pairs and bins)", f"{grouping * 1e6:.3f}"),
        ("aggregate + detector observe (replaced steps)", f"{med(samples[old]) / 1e3:.3f}"),
        ("tail: JSON Lines encoding (C, warm name cache)", f"{enc * 1e6:.3f}"),
        (f"memory budget table walk, {walk * 1e3:.1f} ms per flush (1/s)", f"{walk / 100_000 * 1e6:.3f}"),
    ])
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
