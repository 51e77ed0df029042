"""Agent overhead: mock inference step time with ``aclprof.agent`` streaming vs without.

    python tests/bench/bench_agent_overhead.py [--quick] [--rounds R] [--steps S] [--nice-daemon N] [--with-tail]
                                               [--sched-daemon {batch,idle}]... [--slice-daemon S]...
                                               [--hog {off,on,both}] [--curve [--curve-daemon NAME=PATH]...]
                                               [--numpy-consumer] [--requests]

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
others, so the two daemons are compared in one run. ``--sched-daemon batch`` (or ``idle``,
repeatable) adds an ``agent batch`` (``agent idle``) variant against a daemon started with that
scheduling policy (``CPUSchedulingPolicy=`` in a unit): SCHED_BATCH wake-ups do not preempt
the running task, SCHED_IDLE runs only on an otherwise idle core. ``--slice-daemon S`` (repeatable)
adds an ``agent slice S`` variant against a daemon started with ``--cpu-slice S`` (``0``: the
kernel's default slice; the plain ``agent`` variant's daemon runs aclprofd's default, 100 us).
With ``--with-tail`` an ``aclprof tail
--json`` streams from the daemon(s) throughout: the agent is LIVE and sends every ~50 ms.

With ``--hog on`` (or ``both``, the default: the table quiet, then with the hog) the
benchmark starts the CPU hog itself: one process spinning in compiled code (a tiny C busy
loop built with ``cc``, else ``yes > /dev/null``) keeps one core busy for the whole phase,
as unrelated work on a production host does.

``--curve``: host CPU per op across the stack (the subscription's reader, the agent's
sender, the daemon with its detector, an ``aclprof tail --json`` client attached) at 10 k,
100 k and 1 M ops/s: it must fall or stay flat as the rate grows (batching, not
per-record wake-ups); ``--curve-daemon NAME=PATH`` (repeatable) runs it against each
``aclprofd`` in turn, ``--curve-rounds`` times (e.g. main's and a branch's, one of them
twice for the A/A row). ``--numpy-consumer``: a Python ``subscribe`` consumer reading numpy
batches from the queue, with the GIL-held time per acquisition of the reader and of the
consumer. Every agent variant prints the GIL held per wake-up of the agent's threads (the
sender's pump; the reader's Python deliveries, none in agent mode since issue 21).

With ``--twin`` a ``twin`` variant runs the steps beside a C process that spins the host CPU
the agent rounds of the same half used (reader + sender + daemon, so far in the run), in one
burst per ``--twin-period-us`` (10 ms; ``--twin-slice-us`` has it ask the scheduler for a short
EEVDF slice): the CPU without aclprof's coupling to the service (GIL, pipe, socket). Where the
twin leaves the tail alone and the agent does not, the agent's cost is how it runs, not how much.

With ``--requests`` (issue 25) the agent variant is ``agent+requests``: every step runs inside
``with aclprof.request(...)`` and the mock stamps each record with the executing thread, so the
agent's C tap keeps every op and its sender attributes them all to the steps' requests
(vectorised, every 0.1 s) and sends their bills; the run prints how many ops were attributed.
(A separate run: once a process marked a request, its agent attributes for good, so a plain
``agent`` row after it would not be plain.)

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
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
from bench_distortion import calibrate_python_work, make_ops, python_work, run_steps

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


#: the mock's pipe writer thread (mock_acl/src/subscribe_internal.h MOCK_WRITER_THREAD): the
#: library's own cost of a subscription (one write() per record), shown beside ours
LIBRARY_WRITER = "aclmock-writer"


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's aclprof threads (``aclprof-agent``: the sender,
    ``aclprof-reader-*``: the subscriptions' readers) and of the library's pipe writer
    (``library``: the mock's thread named :data:`LIBRARY_WRITER`), from /proc (Linux). A
    figure the machine's load does not distort the way it does step-time tails: the Python
    part of it is time the thread held the GIL."""
    import threading

    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")

    def add(key: str, tid: int | str) -> None:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick

    for t in threading.enumerate():
        if t.name.startswith("aclprof-") and t.native_id is not None:
            add("reader" if t.name.startswith("aclprof-reader") else "sender", t.native_id)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == LIBRARY_WRITER:
                    add("library", tid)
        except OSError:
            continue
    return out


def _proc_cpu(pid: int, system_only: bool = False) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat): the daemon's share of
    the 2 cores while the steps run is what competes with the service's threads. With
    ``system_only``, the kernel's part alone (the daemon's socket reads and storage writes)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


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


_POLICIES = {"batch": "SCHED_BATCH", "idle": "SCHED_IDLE"}


def start_daemon(root: str, sink: str = "daemon", nice: int = 0,
                 argv: list[str] | None = None, policy: str | None = None,
                 cpu_slice: str | None = None) -> tuple[subprocess.Popen, str]:
    """A daemon (or the null sink) on a socket of its own under ``root``, at ``nice`` and with
    the scheduling ``policy`` ("batch": no wake-up preemption of the running task; "idle":
    runs only on an otherwise idle core), as ``CPUSchedulingPolicy=`` in a unit would set it;
    ``cpu_slice``: the daemon's ``--cpu-slice`` (None: its default)."""
    tag = f"{nice}{policy or ''}{'s' + cpu_slice if cpu_slice is not None else ''}"
    socket = os.path.join(root, f"d{tag}.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    if sink == "null":
        cmd = [sys.executable, "-c", _NULL_SINK, socket]
    else:
        cmd = [*(argv or daemon_argv()), "--socket", socket, "--data-dir",
               os.path.join(root, f"data{tag}"), "--prometheus-port", "0", "--log-level", "warning",
               *(["--cpu-slice", cpu_slice] if cpu_slice is not None else [])]

    def lower() -> None:
        if nice:
            os.nice(nice)
        if policy:
            os.sched_setscheduler(0, getattr(os, _POLICIES[policy]), os.sched_param(0))

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lower if nice or policy else None)
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


_HOG_C = "int main(void) { volatile unsigned long x = 0; for (;;) x++; }\n"

# The CPU twin (--twin): a process that spins `percent` % of every `period` us (in one
# burst) and sleeps the rest, with no aclprof, no GIL and no pipe or socket shared with the
# service: the agent's host CPU (reader + sender + daemon, measured in this phase's agent
# rounds) with none of its coupling. Its rows against the agent's say how much of the
# agent's tail is the CPU it takes at all (which any consumer of that much CPU costs a
# 2-core host) and how much is how it takes it (GIL, wake-ups, placement).
_TWIN_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
struct attr { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t priority;
              uint64_t runtime, deadline, period; };
static unsigned long long now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}
int main(int argc, char **argv) {
    double percent = argc > 1 ? atof(argv[1]) : 8.0;
    unsigned long long period = (unsigned long long)(argc > 2 ? atof(argv[2]) : 10000.0) * 1000ull;
    unsigned long long busy = (unsigned long long)(period * percent / 100.0), next = now();
    size_t touch = (size_t)(argc > 4 ? atof(argv[4]) : 0.0) * 1024u;
    unsigned char *mem = touch ? malloc(touch) : NULL;
    volatile unsigned long x = 0;
    if (argc > 3 && atof(argv[3]) > 0) {  /* an EEVDF custom slice (Linux >= 6.12) */
        struct attr a; memset(&a, 0, sizeof a);
        a.size = sizeof a; a.runtime = (uint64_t)(atof(argv[3]) * 1000.0);
        if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) { perror("sched_setattr"); return 2; }
    }
    for (;;) {
        unsigned long long end = next + busy;
        if (mem) memset(mem, (int)(x++ & 0xff), touch);  /* a working set, as a real consumer has */
        while (now() < end) x++;
        next += period;
        struct timespec t = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    }
}
"""


def build_c(root: str, name: str, source: str) -> str | None:
    """``source`` built with cc into ``root``/``name``: its path, or None without a C compiler."""
    src, exe = os.path.join(root, f"{name}.c"), os.path.join(root, name)
    with open(src, "w") as f:
        f.write(source)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc and subprocess.run([cc, "-O1", "-o", exe, src], capture_output=True).returncode == 0:
        return exe
    return None


def start_hog(root: str) -> tuple[subprocess.Popen, str]:
    """One process spinning in compiled code: the C busy loop (built with cc), else `yes`."""
    exe = build_c(root, "hog", _HOG_C)
    if exe is not None:
        return subprocess.Popen([exe]), "a C busy loop (cc)"
    return subprocess.Popen(["yes"], stdout=subprocess.DEVNULL), "`yes > /dev/null` (no cc)"


class WakeTimer:
    """GIL-held time per wake-up of the agent's Python, measured in place: the wall time of
    each call of the wrapped methods (the sender's pump; the reader's Python delivery),
    which run holding the GIL but for the short C calls inside them."""

    def __init__(self) -> None:
        self.us: dict[str, list[float]] = {}  # wall time per call (descheduling included)
        self.cpu_us: dict[str, list[float]] = {}  # the thread's CPU time per call (the work itself)
        self._undo: list[tuple[Any, str, Any]] = []
        self._inner: dict[int, float] = {}  # thread -> CPU us of inner (GIL-free) calls so far

    def wrap(self, cls: Any, method: str, key: str, inner: bool = False) -> None:
        """Time ``cls.method``; ``inner``: a compiled call that releases the GIL, whose
        CPU time is taken off the calls around it (recorded under ``key + ", Python"``)."""
        original = getattr(cls, method)
        spans = self.us.setdefault(key, [])
        cpu = self.cpu_us.setdefault(key, [])
        python = self.cpu_us.setdefault(f"{key}, Python", [])
        acc = self._inner

        def timed(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            i0 = acc.get(threading.get_ident(), 0.0)
            try:
                return original(*a, **k)
            finally:
                c = (time.thread_time() - c0) * 1e6
                spans.append((time.perf_counter() - t0) * 1e6)
                cpu.append(c)
                if inner:
                    acc[threading.get_ident()] = acc.get(threading.get_ident(), 0.0) + c
                else:
                    python.append(c - (acc.get(threading.get_ident(), 0.0) - i0))

        setattr(cls, method, timed)
        self._undo.append((cls, method, original))

    def undo(self) -> None:
        for cls, method, original in reversed(self._undo):
            setattr(cls, method, original)
        self._undo.clear()


def wake_timer() -> WakeTimer:
    import aclprof.agent.sender as sender_module
    from aclprof.agent.connection import Connection
    from aclprof.agent.sender import Sender
    from aclprof.api.subscription.decoder import Decoder
    from aclprof.api.subscription.reader import Reader

    t = WakeTimer()
    t.wrap(Sender, "_pump", "sender pump")
    if hasattr(Sender, "_serve"):  # the sender's C loop between Python's turns (issue 21)
        t.wrap(Sender, "_serve", "sender serve")
    # a names pump's slices: the sender sleeps between them, so each is one GIL hold of its
    # own (taken off the pump's Python part like the compiled calls; printed apart)
    if hasattr(Sender, "_names_slice"):
        t.wrap(Sender, "_names_slice", "sender: a names slice", inner=True)
    t.wrap(Decoder, "finish", "reader: wrap a batch")
    t.wrap(Reader, "_deliver", "reader: deliver a batch")
    # the compiled calls inside a pump run without the GIL: their time is taken off
    t.wrap(sender_module, "convert", "C", inner=True)
    # the socket write: the kernel's copy runs without the GIL (socket.send releases it)
    t.wrap(Connection, "flush", "C", inner=True)
    try:
        from aclprof.binding.agentpath import AgentQueue
    except ImportError:  # before issue 21
        pass
    else:
        t.wrap(AgentQueue, "frame", "C", inner=True)
    try:
        from aclprof.binding.agentpath import Pump
    except ImportError:  # before the C sender loop
        pass
    else:
        t.wrap(Pump, "run", "C", inner=True)
    try:
        from aclprof.agent.billfeed import BillFeeder
    except ImportError:  # before issue 25's agent wiring
        pass
    else:
        t.wrap(BillFeeder, "pump", "bill feed")  # request attribution (--requests)
    return t


def print_wakes(timer: WakeTimer, wall: float, label: str) -> None:
    parts = []
    for key, v in timer.us.items():
        if key == "C":
            continue
        if not v:
            parts.append(f"{key}: none")
            continue
        c = timer.cpu_us[key]
        parts.append(f"{key}: {len(v) / wall:.0f}/s, CPU p50 {B.pct(c, 50):.1f} / p99 {B.pct(c, 99):.1f} us, "
                     f"wall p50 {B.pct(v, 50):.1f} / p99 {B.pct(v, 99):.1f} / max {max(v):.0f} us, "
                     f"{sum(v) / wall / 1e4:.2f} % of the time")
    python = timer.cpu_us.get("sender pump, Python", [])
    if python:
        sliced = " and names slices" if timer.cpu_us.get("sender: a names slice") else ""
        parts.append(f"sender pump less its compiled calls (which release the GIL){sliced}: CPU p50 "
                     f"{B.pct(python, 50):.1f} / p99 {B.pct(python, 99):.1f} us per pump")
        slices = timer.cpu_us.get("sender: a names slice", [])
        if slices:
            parts.append(f"GIL held per acquisition by the sender: p99 "
                         f"{max(B.pct(python, 99), B.pct(slices, 99)):.1f} / max "
                         f"{max(max(python), max(slices)):.0f} us CPU")
    serve = timer.cpu_us.get("sender serve, Python", [])
    if serve:
        parts.append(f"sender serve less its C loop (which releases the GIL): CPU p50 {B.pct(serve, 50):.1f} / "
                     f"p99 {B.pct(serve, 99):.1f} / max {max(serve):.0f} us per return to Python")
    print(f"GIL held per wake-up ({label}): " + "; ".join(parts))


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
    parser.add_argument("--sched-daemon", action="append", default=[], choices=tuple(_POLICIES),
                        help="also run an 'agent POLICY' variant streaming to a daemon started with that "
                             "scheduling policy (SCHED_BATCH: its wake-ups do not preempt the service; "
                             "SCHED_IDLE: it runs only when a core is otherwise idle); repeatable")
    parser.add_argument("--slice-daemon", action="append", default=[], metavar="S",
                        help="also run an 'agent slice S' variant streaming to a daemon started with "
                             "--cpu-slice S (0: the kernel's default slice; the plain agent's daemon has "
                             "aclprofd's default); repeatable")
    parser.add_argument("--with-tail", action="store_true",
                        help="keep `aclprof tail --json > /dev/null` streaming from the daemon(s) the whole run: "
                             "agents are then LIVE and send every ~50 ms instead of ~100 ms")
    parser.add_argument("--work-ms", type=float, default=5.0,
                        help="pure-Python work per step in the second half of the variants (0: none)")
    parser.add_argument("--hog", choices=("off", "on", "both"), default="both",
                        help="a process spinning in C keeps one core busy: not, only, or both phases (default)")
    parser.add_argument("--curve", action="store_true",
                        help="only the CPU-per-op curve at 10k, 100k, 1M ops/s (daemon with detector + tail)")
    parser.add_argument("--curve-seconds", type=float, default=3.0, help="seconds per rate of --curve")
    parser.add_argument("--curve-daemon", action="append", default=[], metavar="NAME=PATH",
                        help="--curve against this aclprofd executable (repeatable: the daemons alternate, "
                             "--curve-rounds times, one table each; name one twice for the A/A row); "
                             "default: this installation's")
    parser.add_argument("--curve-rounds", type=int, default=1, help="rounds of --curve over the daemons")
    parser.add_argument("--requests", action="store_true",
                        help="the agent variant marks every step as a request and attributes every op (issue 25)")
    parser.add_argument("--twin", action="store_true",
                        help="add a 'twin' variant: a C process using the agent rounds' host CPU (no aclprof)")
    parser.add_argument("--twin-period-us", type=float, default=10_000.0,
                        help="the twin's period: one busy burst of its share each period")
    parser.add_argument("--twin-slice-us", type=float, default=0.0,
                        help="the twin asks the scheduler for this slice (sched_setattr, Linux >= 6.12); 0: the default")
    parser.add_argument("--twin-touch-kb", type=float, default=0.0,
                        help="the twin writes this much memory at the start of each burst (its working set)")
    parser.add_argument("--numpy-consumer", action="store_true",
                        help="only the Python numpy-batch consumer: GIL held per acquisition")
    args = parser.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 12)
    steps = args.steps or (15 if args.quick else 40)
    op_ns = int(args.op_us * 1000)

    aclprof = B.use_mock()
    import structlog

    import aclprof.agent as agent
    import aclprof.mock as mock

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    if args.curve:
        return curve(args, aclprof)
    if args.numpy_consumer:
        return numpy_consumer(args, aclprof)
    B.header(f"agent overhead on a realtime mock model ({rounds} interleaved rounds x {steps} steps, "
             f"streaming to: {args.sink}{', with aclprof tail attached' if args.with_tail else ''})", args.quick)
    root = tempfile.mkdtemp(prefix="aclp-bench-")
    daemon, socket = start_daemon(root, args.sink)
    daemons = [daemon]
    agent_name = "agent+requests" if args.requests else "agent"
    sockets = {agent_name: socket}
    pids = {agent_name: daemon.pid}
    if args.requests:
        mock.set_stamp_thread(True)  # records carry the executing thread: attribution by thread
    # the variants streaming to a daemon of their own: (name, how start_daemon starts it)
    others: list[tuple[str, dict[str, Any]]] = [(f"agent nice{args.nice_daemon}", {"nice": args.nice_daemon})] \
        if args.nice_daemon else []
    others += [(f"agent {policy}", {"policy": policy}) for policy in args.sched_daemon]
    others += [(f"agent slice {cpu_slice}", {"cpu_slice": cpu_slice}) for cpu_slice in args.slice_daemon]
    for name, how in others:
        other, sockets[name] = start_daemon(root, args.sink, **how)
        daemons.append(other)
        pids[name] = other.pid
    if args.with_tail:
        if args.sink != "daemon":
            raise SystemExit("--with-tail needs --sink daemon")
        for sock in sockets.values():  # after the daemons: they stop first at the end, tail follows
            daemons.append(start_tail(sock))
    args.twin_exe = build_c(root, "twin", _TWIN_C) if args.twin else None
    if args.twin and args.twin_exe is None:
        raise SystemExit("--twin needs a C compiler (cc)")
    model = mock.load_model(make_ops(args.ops, op_ns))
    mock.set_realtime(True)
    work = calibrate_python_work(args.work_ms) if args.work_ms > 0 else 0
    halves = [("", 0)] + ([(f"+{args.work_ms:g}ms py", work)] if work else [])
    phases = {"off": [False], "on": [True], "both": [False, True]}[args.hog]
    try:
        run_steps(mock, model, 3)  # warm-up
        for hog in phases:
            hog_proc = None
            if hog:
                hog_proc, what = start_hog(root)
                print(f"\n== with the hog: {what}, pid {hog_proc.pid}, keeping one core busy ==")
            else:
                print("\n== quiet: no hog ==")
            try:
                phase(args, aclprof, agent, mock, model, halves, rounds, steps, op_ns, sockets, pids)
            finally:
                if hog_proc is not None:
                    hog_proc.kill()
                    hog_proc.wait(10)
    finally:
        mock.set_realtime(False)
        mock.unload(model)
        for d in daemons:
            d.terminate()
            d.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    pump = [(f"{per} x {n}", sender_pump_us(per, n)) for per, n in ((35, 57), (1000, 2))]
    print("sender pump, Python batches (the callback path), GIL-held us per ~2000 records (records per batch x "
          "batches): " + ", ".join(f"{k}: {v:.0f} us" for k, v in pump))
    try:
        print(f"sender pump, agent mode (C queue), GIL-held us per 2000 records: {native_pump_us(2000):.0f} us")
    except TypeError:  # before issue 21: no C queue
        print("sender pump, agent mode (C queue): not in this version")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    return 0


def start_tail(sock: str, python: str | None = None) -> subprocess.Popen:
    """``aclprof tail --json`` of ``python`` (default: this one's) streaming from ``sock``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    return subprocess.Popen([python or sys.executable, "-m", "aclprof", "tail", "--json", "--socket", sock],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tail_python(daemon_argv: list[str] | None) -> str:
    """The python whose ``aclprof tail`` goes with a daemon: the one beside ``aclprofd`` in
    its venv (so a base daemon is measured with the base's tail, a new one with the new
    tail), else this one."""
    if daemon_argv:
        beside = os.path.join(os.path.dirname(daemon_argv[0]), "python")
        if os.path.exists(beside):
            return beside
    return sys.executable


def native_pump_us(records: int, reps: int = 50) -> float:
    """GIL-held time of one sender pump in agent mode: ``records`` rows in the C queue
    (as the reader leaves them), taken, converted and framed; best-of-5 mean us."""
    import numpy as np

    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.sender import Sender
    from aclprof.agent.watched import Watched
    from aclprof.api.records import OP_DTYPE

    buf = RecordBuffer(1 << 20, native=True)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    conn.gen = 1
    conn.names.reset(1)
    w = Watched(1, 0, {})
    w.announced = 1
    sink = buf.sink(w)
    sender = Sender(buf, conn, {1: w}, backoff_max=1)
    d = np.zeros(records, OP_DTYPE)
    d["op_name"] = 0  # "?" : the slot has no names of its own here
    best = float("inf")
    try:
        for _ in range(5):
            total = 0.0
            for _ in range(reps):
                sink.push(d, None)
                t0 = time.perf_counter()
                sender._pump()
                total += time.perf_counter() - t0
                conn.out.clear()
            best = min(best, total / reps)
    finally:
        buf.close()
    return best * 1e6


def run_request_steps(mock: Any, model_id: int, steps: int, work: int = 0) -> list[float]:
    """:func:`run_steps` with each step a request (``aclprof.request``), timed with it."""
    import aclprof
    from aclprof.binding import lowlevel

    out = []
    execute, request = lowlevel.mdl_execute, aclprof.request
    with lowlevel.mdl_create_dataset() as inputs, lowlevel.mdl_create_dataset() as outputs:
        for i in range(steps):
            t0 = time.perf_counter()
            with request(f"step-{i}", bench="overhead"):
                if work:
                    python_work(work)
                execute(model_id, inputs, outputs)
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def phase(args: Any, aclprof: Any, agent: Any, mock: Any, model: int, halves: list[tuple[str, int]],
          rounds: int, steps: int, op_ns: int, sockets: dict[str, str], pids: dict[str, int]) -> None:
    """One interleaved table (quiet, or with the hog running)."""
    per_step: dict[str, list[float]] = {}
    gil: dict[str, list[int]] = {}
    totals = {"emitted": 0, "sent": 0, "lost": 0}
    billing = {"tapped": 0, "tap dropped": 0, "attributed": 0, "unattributed": 0, "bills": 0}
    cpu: dict[str, dict[str, float]] = {}
    wakes = WakeTimer()
    wake_wall = [0.0]

    def timed(name: str, w: int) -> list[float]:
        dpid = pids.get(name.split(" +")[0])
        c0, t0 = _thread_cpu(), time.perf_counter()
        d0 = _proc_cpu(dpid) if dpid else 0.0
        with B.GilProbe() as probe:
            t = (run_request_steps if name.startswith("agent+requests") else run_steps)(mock, model, steps, w)
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
        timer = wake_timer()
        t0 = time.perf_counter()
        try:
            t = timed(name, w)
        finally:
            wake_wall[0] += time.perf_counter() - t0
            timer.undo()
            for k, v in timer.us.items():
                wakes.us.setdefault(k, []).extend(v)
            for k, v in timer.cpu_us.items():
                wakes.cpu_us.setdefault(k, []).extend(v)
            mock.wait_writer_idle(60)
            st = agent.stop(timeout=10)
        emitted = mock.stats()["recordsEmitted"] - before
        totals["emitted"] += emitted
        totals["sent"] += st.records_sent
        totals["lost"] += st.loss_reported + st.loss_pending
        for k, v in (("tapped", st.bill_ops_tapped), ("tap dropped", st.bill_ops_dropped),
                     ("attributed", st.bill_ops_attributed), ("unattributed", st.bill_ops_unattributed),
                     ("bills", st.bills_queued)):
            billing[k] += v
        if st.records_sent != emitted:  # say where a loss came from (counted either way)
            print(f"  {name}: {emitted - st.records_sent:,} of {emitted:,} records not sent: {st}")
        return B.med(t)

    twin_percent: dict[str, list[float]] = {}

    def twin(name: str, w: int) -> float:
        # the agent's stack CPU in this half's agent rounds so far (the first round: a guess)
        sfx = name[len("twin"):]
        c = cpu.get(f"{agents[0]}{sfx}")
        percent = (100 * sum(c.get(k, 0.0) for k in ("sender", "reader", "daemon")) / c["wall"]
                   if c and c["wall"] else 8.0)
        twin_percent.setdefault(name, []).append(percent)
        proc = subprocess.Popen([args.twin_exe, f"{percent:.3f}", f"{args.twin_period_us:g}",
                                 f"{args.twin_slice_us:g}", f"{args.twin_touch_kb:g}"])
        pids["twin"] = proc.pid
        try:
            return B.med(timed(name, w))
        finally:
            proc.kill()
            proc.wait()

    variants: dict[str, Any] = {}
    agents = list(sockets)
    for suffix, w in halves:
        # "off again" is off once more (an A/A pair): how far two identical variants differ in
        # p99.9 and max in this run, the resolution of the tail goals on this machine
        for base_name, fn in (("off", off), ("off again", off), ("subscribe", subscribe),
                              *((a, with_agent) for a in agents),
                              *((("twin", twin),) if args.twin_exe else ())):
            name = f"{base_name}{' ' + suffix if suffix else ''}"
            variants[name] = (lambda fn=fn, name=name, w=w: fn(name, w))
    load0 = os.getloadavg()[0]
    samples = B.interleaved(variants, rounds)

    rows = []
    goals: list[tuple[str, bool, str]] = []
    noise: list[str] = []
    slow = 0.0
    for suffix, _ in halves:
        sfx = f" {suffix}" if suffix else ""
        off_t = per_step[f"off{sfx}"]
        base = B.med(off_t)
        twins = [f"twin{sfx}"] if args.twin_exe else []
        for name in (f"off{sfx}", f"off again{sfx}", f"subscribe{sfx}", *(f"{a}{sfx}" for a in agents), *twins):
            t = per_step[name]
            m = B.med(t)
            ratio = B.med(B.per_round_ratio(samples, name, f"off{sfx}")) - 1
            late = [x / 1e3 for x in gil[name]]
            c = cpu[name]
            rows.append((name, m, f"{(m / base - 1) * 100:+.1f}%", f"{ratio * 100:+.1f}%",
                         B.pct(t, 90), B.pct(t, 99), f"{B.pct(t, 99):.0f} ({(B.pct(t, 99) / B.pct(off_t, 99) - 1) * 100:+.1f}%)",
                         f"{B.pct(t, 99.9):.0f} ({(B.pct(t, 99.9) / B.pct(off_t, 99.9) - 1) * 100:+.1f}%)",
                         f"{max(t):.0f} ({max(t) - max(off_t):+.0f})",
                         f"{B.pct(late, 99):.0f}/{max(late):.0f}",
                         f"{c.get('sender', 0) / c['wall'] * 100:.1f}/{c.get('reader', 0) / c['wall'] * 100:.1f}"
                         f"/{c.get('daemon', 0) / c['wall'] * 100:.1f}/{c.get('library', 0) / c['wall'] * 100:.1f}"))
        aa = per_step[f"off again{sfx}"]
        noise.append(f"off again{sfx} vs off{sfx}: p99 {(B.pct(aa, 99) / B.pct(off_t, 99) - 1) * 100:+.1f}%, "
                     f"p99.9 {(B.pct(aa, 99.9) / B.pct(off_t, 99.9) - 1) * 100:+.1f}%, "
                     f"max {max(aa) - max(off_t):+.0f} us")
        for an in agents:
            a = per_step[f"{an}{sfx}"]
            if not suffix and an in ("agent", "agent+requests"):
                slow = B.med(a) / base - 1
            for q in (99, 99.9):
                d = B.pct(a, q) / B.pct(off_t, q) - 1
                goals.append((f"{an}{sfx} p{q:g} within +5% of off", d <= TAIL_GOAL, f"{d * 100:+.1f}%"))
            dmax = max(a) - max(off_t)
            goals.append((f"{an}{sfx} max within +1 ms of off's max", dmax <= MAX_GOAL_US, f"{dmax:+.0f} us"))
    rows = [r[:5] + r[6:] for r in rows]
    B.table(("variant", "median us", "vs off", "per-round", "p90 us", "p99 us (vs off)", "p99.9 us (vs off)",
             "max us (vs off)", "GIL wait p99/max us", "CPU % sender/reader/daemon/library writer"), rows)
    for line in noise:
        print(f"resolution (A/A, the same variant twice): {line}")
    for name, percents in twin_percent.items():
        print(f"{name}: a C process spinning {B.med(percents):.1f} % of a core (the {agents[0]} rounds' "
              f"sender + reader + daemon CPU, median over rounds) in one burst per {args.twin_period_us:g} us; "
              f"its CPU is in the daemon column")
    print(f"\nrecords: {totals['emitted']:,} emitted in agent rounds, {totals['sent']:,} sent, "
          f"{totals['lost']:,} lost (sent + lost = emitted: {totals['sent'] + totals['lost'] == totals['emitted']})")
    if args.requests:  # ops still held (0.25 s) or in open bills (2 s) at each round's stop are neither
        print("request attribution in the agent rounds: " + ", ".join(f"{v:,} {k}" for k, v in billing.items())
              + " (every round's requests are billed at its agent's stop)")
    print(f"goal: agent overhead <= 5% at {args.ops / (args.ops * op_ns / 1e9) / 1e3:.0f} k ops/s: "
          f"{B.verdict(slow <= GOAL)} ({slow * 100:+.1f}%)")
    for label, ok, value in goals:
        print(f"goal: {label}: {B.verdict(ok)} ({value})")
    print_settled(per_step, steps, [f"{a}{' ' + sfx if sfx else ''}" for sfx, _ in halves for a in agents],
                  [f"off{' ' + sfx if sfx else ''}" for sfx, _ in halves])
    print_wakes(wakes, wake_wall[0], "agent variants")
    print(f"load: {load0:.2f} at the start of the phase, {os.getloadavg()[0]:.2f} at its end (1 min)")


#: steps of a round counted as its agent's connection settling (the first 100 ms at 10 ms
#: a step): a connection maps and sends its model's names, the daemon learns its keys
SETTLE_STEPS = 10


def print_settled(per_step: dict[str, list[float]], steps: int, agents: list[str], offs: list[str]) -> None:
    """Info beside the goals (which count every step): each agent variant's tail in the
    first SETTLE_STEPS steps of its rounds (the agent starts and connects before each round,
    which a service does once) and in the rest, each against off's same steps. Rounds are
    ``steps`` long in ``per_step``, in order."""
    if steps <= SETTLE_STEPS:
        return

    def split(t: list[float]) -> tuple[list[float], list[float]]:
        first = [x for i, x in enumerate(t) if i % steps < SETTLE_STEPS]
        return first, [x for i, x in enumerate(t) if i % steps >= SETTLE_STEPS]

    for name in agents:
        off = offs[1] if " +" in name and len(offs) > 1 else offs[0]
        (a0, a1), (o0, o1) = split(per_step[name]), split(per_step[off])
        print(f"{name}, first {SETTLE_STEPS} steps of a round (a new connection) vs {off}'s: "
              f"p99 {(B.pct(a0, 99) / B.pct(o0, 99) - 1) * 100:+.1f}%, max {max(a0) - max(o0):+.0f} us; "
              f"the other {steps - SETTLE_STEPS}: p99 {(B.pct(a1, 99) / B.pct(o1, 99) - 1) * 100:+.1f}%, "
              f"p99.9 {(B.pct(a1, 99.9) / B.pct(o1, 99.9) - 1) * 100:+.1f}%, max {max(a1) - max(o1):+.0f} us "
              f"(info: the goals count every step)")


def curve(args: Any, aclprof: Any) -> int:
    """Host CPU per op across reader + sender + daemon (detector on, a tail attached) at
    10 k, 100 k and 1 M ops/s of a realtime model (1000 ops per step). With
    ``--curve-daemon NAME=PATH`` (repeated) the daemons take turns, ``--curve-rounds``
    times, so two builds (and an A/A pair) are compared under the same load; each with the
    ``aclprof tail`` of its own venv (the python beside PATH; printed per run)."""
    B.header("host CPU per op across the stack (reader + agent sender + daemon with detector, tail attached)",
             args.quick)
    daemons = [tuple(d.split("=", 1)) for d in args.curve_daemon] or [("this", "")]
    tables: dict[str, list[list[tuple[str, ...]]]] = {}
    for r in range(args.curve_rounds):
        for name, path in daemons:
            tables.setdefault(name, []).append(curve_rows(args, [path] if path else None))
            if len(daemons) > 1 or args.curve_rounds > 1:
                print(f"round {r + 1}, daemon {name}: " + ", ".join(f"{row[0]} {row[4]} % (kernel {row[5]})" for row in tables[name][-1]),
                      flush=True)
    for name, runs in tables.items():
        if len(daemons) > 1:
            print(f"\ndaemon {name} ({dict(daemons)[name] or 'this installation'}), round by round:")
        for rows in runs:
            B.table(("target ops/s", "achieved", "reader CPU %", "sender CPU %", "daemon CPU %",
                     "of it kernel %", "us CPU per op (reader+sender+daemon)", "tail us/op", "sender wakes/s", "pump p99 us",
                     "library writer CPU %", "accounted"), rows)
    if len(daemons) > 1 or args.curve_rounds > 1:
        print("\nmedian daemon CPU % of a core over the rounds (the A/A pair: the same daemon twice):")
        for name, runs in tables.items():
            print(f"  {name:>12}: " + ", ".join(
                f"{runs[0][i][0]} {B.med([float(rows[i][4]) for rows in runs]):.1f} %" for i in range(len(runs[0]))))
    print("goal: <= 0.5 us of host CPU per op at 100k ops/s, falling or flat with the rate")
    print("the reader's CPU includes the library's two one-shot getters per record, a floor under any reader that "
          "grows with the records in flight: tests/bench/bench_getter_floor.py times them on the mock and on a "
          "model of CANN's")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    return 0


def curve_rows(args: Any, argv: list[str] | None) -> list[tuple[str, ...]]:
    """One run of the curve against the daemon ``argv`` (None: this installation's)."""
    import aclprof.agent as agent
    import aclprof.mock as mock

    root = tempfile.mkdtemp(prefix="aclp-bench-")
    daemon, sock = start_daemon(root, argv=argv)
    tail = start_tail(sock, tail_python(argv))
    print(f"tail: {tail_python(argv)} -m aclprof tail --json", flush=True)
    hog_proc = None
    if args.hog == "on":
        hog_proc, what = start_hog(root)
        print(f"with the hog: {what}")
    rows = []
    try:
        time.sleep(1.0)  # the tail connects: the agent is LIVE (sends every ~50 ms)
        for rate in (10_000, 100_000, 1_000_000):
            op_ns = int(1e9 / rate)
            model = mock.load_model(make_ops(1000, op_ns))
            mock.set_realtime(True)
            agent.start(sock, service="bench")
            agent.watch(model)
            deadline = time.monotonic() + 5
            while not agent.stats().connected and time.monotonic() < deadline:
                time.sleep(0.01)
            timer = wake_timer()
            before = mock.stats()["recordsEmitted"]
            c0, d0, tl0, t0 = _thread_cpu(), _proc_cpu(daemon.pid), _proc_cpu(tail.pid), time.perf_counter()
            ds0 = _proc_cpu(daemon.pid, system_only=True)
            steps = max(1, int(args.curve_seconds * rate / 1000))
            run_steps(mock, model, steps)
            mock.wait_writer_idle(60)
            time.sleep(0.1)  # the last records reach the daemon
            wall = time.perf_counter() - t0
            c1, d1, tl1 = _thread_cpu(), _proc_cpu(daemon.pid), _proc_cpu(tail.pid)
            dsys = _proc_cpu(daemon.pid, system_only=True) - ds0
            timer.undo()
            ops = mock.stats()["recordsEmitted"] - before
            st = agent.stop(timeout=10)
            mock.set_realtime(False)
            mock.unload(model)
            reader = c1.get("reader", 0) - c0.get("reader", 0)
            sender = c1.get("sender", 0) - c0.get("sender", 0)
            library = c1.get("library", 0) - c0.get("library", 0)
            dcpu, tcpu = d1 - d0, tl1 - tl0
            per = (reader + sender + dcpu) / ops * 1e6 if ops else float("nan")
            pumps = timer.us.get("sender pump", [])
            rows.append((f"{rate // 1000}k", f"{ops / wall / 1e3:.0f}k", f"{reader / wall * 100:.1f}",
                         f"{sender / wall * 100:.1f}", f"{dcpu / wall * 100:.1f}", f"{dsys / wall * 100:.1f}",
                         f"{per:.2f}",
                         f"{tcpu / ops * 1e6:.2f}" if ops else "-", f"{len(pumps) / wall:.0f}",
                         f"{B.pct(pumps, 99):.0f}" if pumps else "-",
                         f"{library / wall * 100:.1f}",
                         f"{st.records_sent + st.loss_reported + st.loss_pending == st.records_in}"))
    finally:
        if hog_proc is not None:
            hog_proc.kill()
        tail.terminate()
        daemon.terminate()
        daemon.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def numpy_consumer(args: Any, aclprof: Any) -> int:
    """A Python consumer of numpy batches (``sub.get_batch``): the GIL held per acquisition
    by the reader (wrapping and queueing a batch) and by the consumer (its numpy work on a
    batch), at 100 k ops/s; a batch is at most ``read_records`` (4096) records, so both are
    bounded."""
    import threading

    import aclprof.mock as mock

    B.header("Python subscribe consumer of numpy batches: GIL held per acquisition", args.quick)
    model = mock.load_model(make_ops(1000, 10_000))
    mock.set_realtime(True)
    timer = wake_timer()
    held: list[float] = []
    held_cpu: list[float] = []
    sizes: list[int] = []
    sub = aclprof.subscribe(model)
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() or sub.stats.queued:
            b = sub.get_batch(timeout=0.05)
            if b is None:
                continue
            t0, c0 = time.perf_counter(), time.thread_time()
            d = b.data
            _ = (float(d["duration"].sum()), int(d["op_type"].max()))
            held.append((time.perf_counter() - t0) * 1e6)
            held_cpu.append((time.thread_time() - c0) * 1e6)
            sizes.append(len(b))

    th = threading.Thread(target=consume)
    th.start()
    t0 = time.perf_counter()
    with B.GilProbe() as probe:
        t = run_steps(mock, model, 150 if args.quick else 400)
    wall = time.perf_counter() - t0
    mock.wait_writer_idle(60)
    stop.set()
    th.join(10)
    sub.close()
    timer.undo()
    mock.set_realtime(False)
    mock.unload(model)
    reader = [a + b for a, b in zip(timer.us["reader: wrap a batch"], timer.us["reader: deliver a batch"],
                                    strict=False)]
    reader_cpu = [a + b for a, b in zip(timer.cpu_us["reader: wrap a batch"], timer.cpu_us["reader: deliver a batch"],
                                        strict=False)]
    late = [x / 1e3 for x in probe.late_ns]
    print(f"batches: {len(sizes)}, records per batch p50 {B.pct(sizes, 50):.0f}, max {max(sizes)} (bound 4096)")
    print(f"reader, GIL held per batch (wrap + queue): CPU p50 {B.pct(reader_cpu, 50):.1f} / p99 "
          f"{B.pct(reader_cpu, 99):.1f} / max {max(reader_cpu):.0f} us; wall p50 {B.pct(reader, 50):.1f} / p99 "
          f"{B.pct(reader, 99):.1f} / max {max(reader):.0f} us")
    print(f"consumer, GIL held per batch (sum + max over numpy columns): CPU p50 {B.pct(held_cpu, 50):.1f} / p99 "
          f"{B.pct(held_cpu, 99):.1f} / max {max(held_cpu):.0f} us; wall p50 {B.pct(held, 50):.1f} / p99 "
          f"{B.pct(held, 99):.1f} / max {max(held):.0f} us")
    print(f"step p99 {B.pct(t, 99):.0f} us; GIL wait p99/max {B.pct(late, 99):.0f}/{max(late):.0f} us; "
          f"{len(sizes) / wall:.0f} acquisitions/s")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
