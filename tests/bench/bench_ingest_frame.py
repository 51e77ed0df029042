"""The daemon's CPU per agent BATCH frame, in-process (issue 21): ``Daemon._handle`` of one
agent's BATCH frames (ingest, aggregates, windows, detector observe, lag, the owned copy,
storage at every flush), replayed as the bench_agent_overhead curve's agent sends them (a
1000-op model, one frame every ``--period-ms``: by default 50 ms, the agent's interval while
a tail watches, 500 records at 10 k ops/s, 5000 at 100 k; 25 ms before 2026-12-04), the clock
advancing as it would, plus the loop's per-second work that scales with those frames (the
detector's tick, the windows' second roll, the storage flush). Prints thread CPU us per
frame and per record. With ``--gap-ms 50`` the thread sleeps before each frame as the
daemon's loop does: a frame then costs ~4x its back-to-back cost (caches and branch
predictors cold: 400 vs 90 us at 250 records on the 2-core VM of 2026-12-03), which is
what the daemon pays.

    python tests/bench/bench_ingest_frame.py [--frames 2000] [--rounds 5] [--period-ms 50] [--gap-ms 50] [--json]

Run it with two installations' interpreters to compare them (e.g. main's venv and a
branch's), twice with one of them for the A/A row: ``--json`` prints one line of results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import numpy as np


def _frames(n_ops: int, per_frame: int, frames: int) -> list[bytes]:
    from aclprof.protocol.wire import RECORD_DTYPE

    rng = np.random.default_rng(7)
    out, op, t = [], 0, 1_000_000_000
    for _ in range(frames):
        recs = np.zeros(per_frame, RECORD_DTYPE)
        ids = (op + np.arange(per_frame)) % n_ops
        op = (op + per_frame) % n_ops
        recs["model_id"], recs["device_id"], recs["thread_id"] = 1, 0, 7
        recs["op_name"] = ids + 1
        recs["op_type"] = n_ops + 1 + ids % 6
        dur = rng.integers(8_000, 12_000, per_frame).astype(np.uint64)
        recs["start"] = t + np.arange(per_frame, dtype=np.uint64) * 10_000
        recs["end"] = recs["start"] + dur
        recs["duration"] = dur
        t += per_frame * 10_000
        out.append(recs.tobytes())
    return out


def run(per_frame: int, frames: int, frame_s: float, gap_s: float = 0.0) -> float:
    """Thread CPU seconds of handling ``frames`` frames (and the per-second work they cause);
    ``gap_s``: asleep that long before each frame (the thread's CPU clock does not count it),
    as the loop waits in select between an agent's frames: its caches are cold then."""
    from aclprofd.aggregate.keys import KeySource
    from aclprofd.config import Settings
    from aclprofd.conn import Conn
    from aclprofd.server import Daemon

    from aclprof.protocol.wire import Kind

    root = tempfile.mkdtemp(prefix="aclp-frame-")
    a, b = socket.socketpair()
    try:
        d = Daemon(Settings(socket=os.path.join(root, "s"), data_dir=os.path.join(root, "data")))
        from aclprofd.storage import Storage  # what Daemon.start opens

        d.storage = Storage(os.path.join(root, "data"))
        conn = Conn(a, "bench")
        conn.role, conn.pid, conn.host, conn.service = "agent", 1, "h", "bench"
        conn.keysrc = KeySource("h", 1, "bench")
        n_ops = 1000
        conn.names = {i + 1: f"layer{i // 40}/op_{i}" for i in range(n_ops)}
        conn.names.update({n_ops + 1 + k: f"Type{k}" for k in range(6)})
        conn.names_order = list(conn.names.items())
        payloads = [memoryview(p) for p in _frames(n_ops, per_frame, 64)]
        clock = [time.time()]
        real_time = time.time
        time.time = lambda: clock[0]  # the frames' own clock
        try:
            for p in payloads[:8]:  # warm: the keys registered, the caches filled
                d._handle(conn, Kind.BATCH, p)
            next_s = clock[0] + 1.0
            c0 = time.thread_time()
            for i in range(frames):
                if gap_s:
                    time.sleep(gap_s)
                d._handle(conn, Kind.BATCH, payloads[i % len(payloads)])
                clock[0] += frame_s
                if clock[0] >= next_s:  # the loop's per-second work
                    next_s += 1.0
                    d.detection.detector.tick(clock[0])
                    d.flush()
            return time.thread_time() - c0
        finally:
            time.time = real_time
            if d.storage is not None:
                d.storage.close()
    finally:
        a.close()
        b.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep before each frame (e.g. 50, the agent's period: cold caches, as in the daemon)")
    ap.add_argument("--json", action="store_true", help="one line of results (us per frame, median of the rounds)")
    ap.add_argument("--period-ms", type=float, default=50.0,
                    help="the agent's interval: a frame holds this long's records (50: LIVE since 2026-12-04)")
    args = ap.parse_args()
    res = {}
    period = args.period_ms / 1e3
    for rate, ops_s in (("10k", 10_000), ("100k", 100_000)):
        per_frame = round(ops_s * period)
        cpu = [run(per_frame, args.frames, period, args.gap_ms / 1e3) / args.frames * 1e6 for _ in range(args.rounds)]
        res[rate] = statistics.median(cpu)
        if not args.json:
            print(f"{rate} ops/s ({per_frame} records a frame): {res[rate]:.0f} us CPU per frame, "
                  f"{res[rate] / per_frame * 1e3:.0f} ns per record (rounds: {', '.join(f'{c:.0f}' for c in cpu)})")
    if args.json:
        print(json.dumps({"python": sys.executable, **{k: round(v, 1) for k, v in res.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
