"""Latency from an op's end to its line in ``aclprof tail --json``, at 100 k and 250 k records/s.

    python tests/bench/bench_tail_latency.py [--quick] [--seconds S] [--rates R1,R2 | --rate R] [--procs P]

Starts a daemon (the installed ``aclprofd``, temporary socket and data directory, Prometheus
off), ``aclprof tail --json`` with its stdout on a pipe read by this script, then P agent
processes running a realtime mock model (100 ops x 5 us per inference, paced to
``--rate`` records/s in total). The mock's ``end`` timestamp is
CLOCK_MONOTONIC ns, the clock of this host, so the latency of a record is
``time.monotonic_ns()`` when its line is read here minus its ``end``. Lines are read in
chunks; every line is counted, and every 20th line of a chunk, plus its first and last,
is parsed for latency (the first line of a chunk waited longest: the sample keeps the
tail of the distribution). The first second is a warm-up and is not measured.

Each rate runs with a fresh daemon, tail and agents, one after the other; the table shows
the rates side by side. Reported per rate: records/s seen by tail, the sampled latency p50/p90/p99/max, how many records
tail reported as skipped (a slow client) and the agents as lost, and the CPU each process
spent per record (daemon and tail from /proc over the measured window, agents from their
own os.times()): on a machine shared with other work those, not the wall-clock figures,
say where the limit is (cores needed = rate x sum of CPU per record).
Goals: no records skipped and p99 <= 100 ms at 250 k records/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

from aclprof.cli.launch import daemon_argv

GOAL_P99_MS = 100.0
GOAL_RATE = 250_000.0

_LOAD = r"""
import json, os, sys, time
import aclprof
from aclprof import agent, mock
aclprof.use_mock()
ops = [{"name": f"layer{i // 10}/op{i}", "type": ["MatMulV2", "Add", "Conv2D", "Relu"][i % 4],
        "duration_ns": 5_000} for i in range(100)]
model = mock.load_model(ops)
mock.set_realtime(True)
agent.start(sys.argv[1], service="load")
agent.watch(model)
rate, seconds = float(sys.argv[2]), float(sys.argv[3])
period = 100 / rate   # seconds per inference of 100 records
start = time.monotonic()
i = 0
while time.monotonic() - start < seconds:
    mock.execute(model, 1)
    i += 1
    delay = start + i * period - time.monotonic()
    if delay > 0:
        time.sleep(delay)
st = agent.stop()
t = os.times()
print(json.dumps({"emitted": mock.stats()["recordsEmitted"], "lost": st.loss_reported + st.loss_pending,
                  "cpu_s": t.user + t.system}))
"""


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _env(socket: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
    env.update(ACLPROF_BACKEND="mock", ACLPROF_SOCKET=socket, PYTHONUNBUFFERED="1")
    return env


def _wait_daemon(socket: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    from aclprof.cli.client import Client, DaemonError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited with {proc.returncode}")
        try:
            with Client(socket, timeout=1.0) as c:
                c.status()
                return
        except DaemonError:
            time.sleep(0.05)
    raise SystemExit("daemon did not start")


def run(seconds: float, rate: float, procs: int, tail_args: list[str] | None = None) -> dict:
    root = tempfile.mkdtemp(prefix="aclp-bench-")
    socket = os.path.join(root, "d.sock")
    env = _env(socket)
    children: list[subprocess.Popen] = []
    try:
        daemon = subprocess.Popen([*daemon_argv(), "--socket", socket, "--data-dir",
                                   os.path.join(root, "data"), "--prometheus-port", "0", "--log-level", "warning"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(root, "d.log"), "wb"))
        children.append(daemon)
        _wait_daemon(socket, daemon)
        tail = subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "--json", *(tail_args or []), "--socket",
                                 socket],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        children.append(tail)
        samples: list[int] = []
        counts = {"lines": 0, "measured": 0}
        measure_from = [None]  # monotonic ns after warm-up
        skipped = []

        def read_stderr() -> None:
            for line in tail.stderr:
                text = line.decode(errors="replace")
                if "skipped" in text:
                    try:
                        skipped.append(int(text.split()[1]))
                    except (IndexError, ValueError):
                        pass

        def read_stdout() -> None:
            fd = tail.stdout.fileno()
            rest = b""
            while True:
                chunk = os.read(fd, 1 << 20)
                now = time.monotonic_ns()
                if not chunk:
                    return
                data = rest + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                rest = data[cut + 1:]
                lines = data[:cut].split(b"\n")
                counts["lines"] += len(lines)
                start = measure_from[0]
                if start is None:
                    continue
                picks = set(range(0, len(lines), 20)) | {len(lines) - 1}
                for i in picks:
                    end = json.loads(lines[i])["end"]
                    if end >= start:
                        samples.append(now - end)
                counts["measured"] += len(lines)

        threading.Thread(target=read_stdout, daemon=True).start()
        threading.Thread(target=read_stderr, daemon=True).start()
        time.sleep(0.5)  # tail connected (the stream starts with live records only)
        loads = [subprocess.Popen([sys.executable, "-c", _LOAD, socket, str(rate / procs), str(seconds + 1)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                 for _ in range(procs)]
        children.extend(loads)
        time.sleep(1.0)
        measure_from[0] = time.monotonic_ns()
        lines_before = counts["lines"]
        cpu0 = {"daemon": _cpu_s(daemon.pid), "tail": _cpu_s(tail.pid), "reader": _cpu_s(os.getpid())}
        t0 = time.monotonic()
        results = [json.loads(p.communicate(timeout=seconds + 60)[0].decode().strip().splitlines()[-1])
                   for p in loads]
        elapsed = time.monotonic() - t0
        time.sleep(0.5)
        cpu = {k: _cpu_s(p.pid) - cpu0[k] for k, p in (("daemon", daemon), ("tail", tail))}
        cpu["reader"] = _cpu_s(os.getpid()) - cpu0["reader"]  # this script reading tail's stdout
        cpu["agents"] = sum(r["cpu_s"] for r in results)
        load_avg = os.getloadavg()[0]
        return {"seen_per_s": (counts["lines"] - lines_before) / elapsed, "samples": samples,
                "skipped": sum(skipped), "emitted": sum(r["emitted"] for r in results),
                "lost": sum(r["lost"] for r in results), "lines": counts["lines"], "load": load_avg,
                "measured_lines": counts["lines"] - lines_before, "cpu": cpu, "elapsed": elapsed}
    finally:
        for p in reversed(children):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(root, ignore_errors=True)


def _rate_label(rate: float) -> str:
    return f"{rate / 1e3:g} k/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per rate (default 20, quick 5)")
    parser.add_argument("--rates", default="100000,250000",
                        help="comma-separated records/s in total, each run in turn and shown side by side "
                             "(default 100000,250000)")
    parser.add_argument("--rate", type=float, default=None, help="one rate only (overrides --rates)")
    parser.add_argument("--procs", type=int, default=2, help="agent processes (default 2)")
    parser.add_argument("--wire", choices=("auto", "jsonl"), default="auto",
                        help="aclprof tail --wire: auto (binary records when the daemon offers them, the default; "
                             "also what a version without --wire does) or jsonl (the daemon's JSON Lines)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    rates = [args.rate] if args.rate else [float(x) for x in args.rates.split(",") if x.strip()]
    B.header("aclprof tail latency: op end -> line in `aclprof tail --json`", args.quick)
    print(f"tail: {sys.executable} -m aclprof tail --json" + (f" --wire {args.wire}" if args.wire != "auto" else ""))
    results = [run(seconds, rate, args.procs, [] if args.wire == "auto" else ["--wire", args.wire]) for rate in rates]
    lat = [[x / 1e6 for x in r["samples"]] for r in results]

    def row(name: str, f) -> list[object]:
        return [name, *(f(r, s) for r, s in zip(results, lat))]

    B.table(["metric", *(_rate_label(rate) for rate in rates)], [
        row("records/s seen by tail", lambda r, s: r["seen_per_s"]),
        row("records emitted / lost by agents", lambda r, s: f"{r['emitted']:,} / {r['lost']:,}"),
        row("records skipped by the daemon (slow tail)", lambda r, s: r["skipped"]),
        row("latency samples", lambda r, s: len(s)),
        row("latency p50 (ms)", lambda r, s: B.pct(s, 50)),
        row("latency p90 (ms)", lambda r, s: B.pct(s, 90)),
        row("latency p99 (ms)", lambda r, s: B.pct(s, 99)),
        row("latency max (ms)", lambda r, s: max(s) if s else float("nan")),
        row("load average (1 min, at the end)", lambda r, s: r["load"]),
        row("daemon CPU us per record emitted (window)", lambda r, s: r["cpu"]["daemon"] * 1e6 / max(1, r["emitted"])),
        row("daemon CPU % of one core (window)", lambda r, s: 100 * r["cpu"]["daemon"] / r["elapsed"]),
        row("tail CPU us per line read (window)", lambda r, s: r["cpu"]["tail"] * 1e6 / max(1, r["measured_lines"])),
        row("this script's reader CPU us per line (window)",
            lambda r, s: r["cpu"]["reader"] * 1e6 / max(1, r["measured_lines"])),
        row("agents CPU us per record (whole run)", lambda r, s: r["cpu"]["agents"] * 1e6 / max(1, r["emitted"])),
        row("cores busy in all (approx.)", lambda r, s: (r["cpu"]["daemon"] + r["cpu"]["tail"]
                                                          + r["cpu"]["reader"]) / r["elapsed"]
            + r["cpu"]["agents"] / (r["elapsed"] + 1.0)),
    ])
    print()
    for rate, r, s in zip(rates, results, lat):
        p99 = B.pct(s, 99)
        print(f"{_rate_label(rate)}: goal p99 <= {GOAL_P99_MS:.0f} ms: {B.verdict(p99 <= GOAL_P99_MS)} "
              f"(p99 {p99:.1f} ms at {r['seen_per_s']:,.0f} records/s); goal no records skipped: "
              f"{B.verdict(r['skipped'] == 0)} ({r['skipped']:,} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
