"""Daemon ingest throughput: records/s from 4 agent processes, with the daemon's CPU and RSS.

    python tests/bench/bench_daemon_ingest.py [--duration 120] [--agents 4] [--batch 4096]
                                              [--ops 200] [--quick]

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
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
