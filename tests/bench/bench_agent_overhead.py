"""Agent overhead: mock inference step time with ``aclprof.agent`` streaming vs without.

    python tests/bench/bench_agent_overhead.py [--quick] [--rounds R] [--steps S] [--nice-daemon N] [--with-tail]

A step is one ``aclmdlExecute`` of a realtime mock model (1000 ops x 10 us = 10 ms, 100 k
ops/s), timed from Python. Rounds rotate between

* ``off``: nothing subscribed;
* ``subscribe``: ``aclprof.subscribe(model, batch_callback=<no-op>)`` only (the cost of the
  subscription itself, measured by bench_distortion.py too);
* ``agent``: ``aclprof.agent.start()`` + ``watch(model)`` streaming to a running daemon
  (the installed ``aclprofd`` on a temporary socket, Prometheus off): subscription + buffer +
  sender thread + wire conversion + socket writes; started before the round's steps and
  stopped (flushed) after them, outside the timed steps.

With ``--nice-daemon N`` an ``agent niceN`` variant streams to a second daemon started with
nice N (the deployment recommendation of daemon/aclprofd.service), interleaved with the
others, so the two daemons are compared in one run. With ``--with-tail`` an ``aclprof tail
--json`` streams from the daemon(s) throughout: the agent is LIVE and sends every ~10 ms.

The overhead is median(agent) / median(off) - 1, and the median of per-round ratios. The
goal is at most 5 %. Every record is accounted for (sent + lost = emitted).

Tail latency: every variant prints p50/p90/p99/p99.9/max of the step time, and
GIL contention measured directly (``_benchlib.GilProbe``: how late a 1 ms sleeper wakes
while the steps run). The goals: with the agent streaming, p99 and p99.9 within +5 % of
off and the worst step within +1 ms of off's worst, in the plain 10 ms realtime step and in
a step that also runs ~5 ms of pure-Python work (``--work-ms``; 0 skips that half).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
from bench_distortion import calibrate_python_work, make_ops, run_steps

from aclprof.cli.launch import daemon_argv

GOAL = 0.05
TAIL_GOAL = 0.05      # p99 and p99.9 within +5 % of off
MAX_GOAL_US = 1000.0  # the worst step within +1 ms of off's worst


# --sink null: a process that completes the handshake and discards everything (isolates
# the agent's own cost from the daemon's CPU use on a 2-core machine).
_NULL_SINK = r"""
import os, socket, sys, threading
from aclprof.protocol import wire
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[1]); srv.listen(8)
def serve(c):
    r = wire.FrameReader(); hello = False
    while True:
        d = c.recv(1 << 20)
        if not d:
            return
        if not hello:
            for kind, _ in r.feed(d):
                if kind == wire.Kind.HELLO:
                    c.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 1,
                                                                   "pid": os.getpid(), "started_ts": 0.0}))
                    hello = True
                    break
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's aclprof threads (``aclprof-agent``: the sender,
    ``aclprof-reader-*``: the subscriptions' readers), from /proc (Linux). A figure the
    machine's load does not distort the way it does step-time tails: the Python part of it
    is time the thread held the GIL."""
    import threading

    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for t in threading.enumerate():
        if not t.name.startswith("aclprof-") or t.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        key = "reader" if t.name.startswith("aclprof-reader") else "sender"
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat): the daemon's share of
    the 2 cores while the steps run is what competes with the service's threads."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sender_pump_us(records_per_batch: int, batches: int, reps: int = 50) -> float:
    """GIL-held time of one sender pump (take, convert, frame; no socket): best-of-5 mean
    us per pump of ``batches`` batches. Python and numpy hold the GIL throughout; the
    compiled conversion does not, but it is a few us per pump, so this is close to the
    time the sender keeps the service's threads from the GIL per wake-up."""
    import numpy as np

    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.sender import Sender
    from aclprof.agent.watched import Watched
    from aclprof.api.records import OP_DTYPE

    buf = RecordBuffer(1 << 20)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    conn.gen = 1
    conn.names.reset(1)
    w = Watched(1, 0, {})
    w.announced = 1
    sender = Sender(buf, conn, {1: w}, backoff_max=1)
    names = [f"op{i}" for i in range(50)]
    data = []
    for _ in range(batches):
        d = np.zeros(records_per_batch, OP_DTYPE)
        d["op_name"] = np.arange(records_per_batch) % 50
        data.append(d)
    best = float("inf")
    try:
        for _ in range(5):
            total = 0.0
            for _ in range(reps):
                for d in data:
                    buf.add_batch(w, d, names)
                t0 = time.perf_counter()
                sender._pump()  # no socket: the frames stay in conn.out
                total += time.perf_counter() - t0
                conn.out.clear()
            best = min(best, total / reps)
    finally:
        buf.close()
    return best * 1e6


def start_daemon(root: str, sink: str = "daemon", nice: int = 0) -> tuple[subprocess.Popen, str]:
    socket = os.path.join(root, f"d{nice}.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    if sink == "null":
        cmd = [sys.executable, "-c", _NULL_SINK, socket]
    else:
        cmd = [*daemon_argv(), "--socket", socket, "--data-dir",
               os.path.join(root, f"data{nice}"), "--prometheus-port", "0", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.path.exists(socket):
            import socket as s

            probe = s.socket(s.AF_UNIX, s.SOCK_STREAM)
            try:
                probe.connect(socket)
                return proc, socket
            except OSError:
                pass
            finally:
                probe.close()
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the daemon did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps (< 20 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--op-us", type=float, default=10.0)
    parser.add_argument("--sink", choices=("daemon", "null"), default="daemon",
                        help="what the agent streams to: the real daemon, or a process that discards")
    parser.add_argument("--nice-daemon", type=int, default=0, metavar="N",
                        help="also run an 'agent nice N' variant streaming to a second daemon started "
                             "with nice N (the deployment recommendation, daemon/aclprofd.service), "
                             "interleaved with the others in the same run")
    parser.add_argument("--with-tail", action="store_true",
                        help="keep `aclprof tail --json > /dev/null` streaming from the daemon(s) the whole run: "
                             "agents are then LIVE and send every ~10 ms instead of ~50 ms")
    parser.add_argument("--work-ms", type=float, default=5.0,
                        help="pure-Python work per step in the second half of the variants (0: none)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 12)
    steps = args.steps or (15 if args.quick else 40)
    op_ns = int(args.op_us * 1000)

    aclprof = B.use_mock()
    import aclprof.agent as agent
    import aclprof.mock as mock

    B.header(f"agent overhead on a realtime mock model ({rounds} interleaved rounds x {steps} steps, "
             f"streaming to: {args.sink}{', with aclprof tail attached' if args.with_tail else ''})", args.quick)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    root = tempfile.mkdtemp(prefix="aclp-bench-")
    daemon, socket = start_daemon(root, args.sink)
    daemons = [daemon]
    sockets = {"agent": socket}
    pids = {"agent": daemon.pid}
    if args.nice_daemon:
        name = f"agent nice{args.nice_daemon}"
        niced, sockets[name] = start_daemon(root, args.sink, args.nice_daemon)
        daemons.append(niced)
        pids[name] = niced.pid
    if args.with_tail:
        if args.sink != "daemon":
            raise SystemExit("--with-tail needs --sink daemon")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
        for sock in sockets.values():  # after the daemons: they stop first at the end, tail follows
            daemons.append(subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "--json", "--socket", sock],
                                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    model = mock.load_model(make_ops(args.ops, op_ns))
    mock.set_realtime(True)
    work = calibrate_python_work(args.work_ms) if args.work_ms > 0 else 0
    halves = [("", 0)] + ([(f"+{args.work_ms:g}ms py", work)] if work else [])
    per_step: dict[str, list[float]] = {}
    gil: dict[str, list[int]] = {}
    totals = {"emitted": 0, "sent": 0, "lost": 0}

    cpu: dict[str, dict[str, float]] = {}

    def timed(name: str, w: int) -> list[float]:
        dpid = pids.get(name.split(" +")[0])
        c0, t0 = _thread_cpu(), time.perf_counter()
        d0 = _proc_cpu(dpid) if dpid else 0.0
        with B.GilProbe() as probe:
            t = run_steps(mock, model, steps, w)
        c1, wall = _thread_cpu(), time.perf_counter() - t0
        if dpid:
            c0["daemon"], c1["daemon"] = 0.0, _proc_cpu(dpid) - d0
        acc = cpu.setdefault(name, {"wall": 0.0})
        acc["wall"] += wall
        for k in c1:
            acc[k] = acc.get(k, 0.0) + c1[k] - c0.get(k, c1[k])
        per_step.setdefault(name, []).extend(t)
        gil.setdefault(name, []).extend(probe.late_ns)
        return t

    def off(name: str, w: int) -> float:
        return B.med(timed(name, w))

    def subscribe(name: str, w: int) -> float:
        sub = aclprof.subscribe(model, batch_callback=lambda b: None)
        try:
            t = timed(name, w)
        finally:
            mock.wait_writer_idle(60)
            sub.close()
        return B.med(t)

    def with_agent(name: str, w: int) -> float:
        before = mock.stats()["recordsEmitted"]
        agent.start(sockets[name.split(" +")[0]], service="bench")
        agent.watch(model)
        # Connected before timing (the first connection is not what is measured).
        deadline = time.monotonic() + 5
        while not agent.stats().connected and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            t = timed(name, w)
        finally:
            mock.wait_writer_idle(60)
            st = agent.stop(timeout=10)
        totals["emitted"] += mock.stats()["recordsEmitted"] - before
        totals["sent"] += st.records_sent
        totals["lost"] += st.loss_reported + st.loss_pending
        return B.med(t)

    variants: dict[str, Any] = {}
    agents = list(sockets)
    for suffix, w in halves:
        # "off again" is off once more (an A/A pair): how far two identical variants differ in
        # p99.9 and max in this run, the resolution of the tail goals on this machine
        for base_name, fn in (("off", off), ("off again", off), ("subscribe", subscribe),
                              *((a, with_agent) for a in agents)):
            name = f"{base_name}{' ' + suffix if suffix else ''}"
            variants[name] = (lambda fn=fn, name=name, w=w: fn(name, w))
    try:
        run_steps(mock, model, 3)  # warm-up
        samples = B.interleaved(variants, rounds)
    finally:
        mock.set_realtime(False)
        mock.unload(model)
        for d in daemons:
            d.terminate()
            d.wait(10)
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    goals: list[tuple[str, bool, str]] = []
    noise: list[str] = []
    slow = 0.0
    for suffix, _ in halves:
        sfx = f" {suffix}" if suffix else ""
        off_t = per_step[f"off{sfx}"]
        base = B.med(off_t)
        for name in (f"off{sfx}", f"off again{sfx}", f"subscribe{sfx}", *(f"{a}{sfx}" for a in agents)):
            t = per_step[name]
            m = B.med(t)
            ratio = B.med(B.per_round_ratio(samples, name, f"off{sfx}")) - 1
            late = [x / 1e3 for x in gil[name]]
            c = cpu[name]
            rows.append((name, m, f"{(m / base - 1) * 100:+.1f}%", f"{ratio * 100:+.1f}%",
                         B.pct(t, 90), B.pct(t, 99), B.pct(t, 99.9), max(t),
                         f"{B.pct(late, 99):.0f}/{max(late):.0f}",
                         f"{c.get('sender', 0) / c['wall'] * 100:.1f}/{c.get('reader', 0) / c['wall'] * 100:.1f}"
                         f"/{c.get('daemon', 0) / c['wall'] * 100:.1f}"))
        aa = per_step[f"off again{sfx}"]
        noise.append(f"off again{sfx} vs off{sfx}: p99 {(B.pct(aa, 99) / B.pct(off_t, 99) - 1) * 100:+.1f}%, "
                     f"p99.9 {(B.pct(aa, 99.9) / B.pct(off_t, 99.9) - 1) * 100:+.1f}%, "
                     f"max {max(aa) - max(off_t):+.0f} us")
        for an in agents:
            a = per_step[f"{an}{sfx}"]
            if not suffix and an == "agent":
                slow = B.med(a) / base - 1
            for q in (99, 99.9):
                d = B.pct(a, q) / B.pct(off_t, q) - 1
                goals.append((f"{an}{sfx} p{q:g} within +5% of off", d <= TAIL_GOAL, f"{d * 100:+.1f}%"))
            dmax = max(a) - max(off_t)
            goals.append((f"{an}{sfx} max within +1 ms of off's max", dmax <= MAX_GOAL_US, f"{dmax:+.0f} us"))
    B.table(("variant", "median us", "vs off", "per-round", "p90 us", "p99 us", "p99.9 us", "max us",
             "GIL wait p99/max us", "CPU % sender/reader/daemon"), rows)
    print(f"\nrecords: {totals['emitted']:,} emitted in agent rounds, {totals['sent']:,} sent, "
          f"{totals['lost']:,} lost (sent + lost = emitted: {totals['sent'] + totals['lost'] == totals['emitted']})")
    print(f"goal: agent overhead <= 5% at {args.ops / (args.ops * op_ns / 1e9) / 1e3:.0f} k ops/s: "
          f"{B.verdict(slow <= GOAL)} ({slow * 100:+.1f}%)")
    for label, ok, value in goals:
        print(f"goal: {label}: {B.verdict(ok)} ({value})")
    for line in noise:
        print(f"resolution (A/A, the same variant twice): {line}")
    pump = [(f"{per} x {n}", sender_pump_us(per, n)) for per, n in ((35, 57), (1000, 2))]
    print("sender pump, GIL-held us per ~2000 records (records per batch x batches): "
          + ", ".join(f"{k}: {v:.0f} us" for k, v in pump))
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
