"""Op failures under faults (issue 24): failures while aclprof trace pauses the subscriptions,
a process that forks, and a failure storm (every execution fails) against a live daemon
process: each failure counted, the daemon's memory bounded, tail's lines bounded per client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.daemons import Client, Daemon, InProcess, status
from helpers.procs import TESTS, Worker, env, wait_for

from aclprof.protocol.wire import Kind


def _stream_until(c: Client, pred, timeout: float = 15.0) -> list[dict]:
    out: list[dict] = []
    c.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while not pred(out):
        assert time.monotonic() < deadline, out[-5:]
        recs, _, kind = c.stream_frames()
        assert kind != Kind.END
        out += recs
    return out


def _agent_of(sock: str, pid: int) -> dict | None:
    return next((a for a in status(sock)["agents"] if a["pid"] == pid), None)


def test_failures_while_a_trace_pauses_the_subscriptions_are_counted_and_streamed(tmp_path):
    with InProcess() as d:
        w = Worker(d.socket, "--service", "tracesvc", "--trace-dir", str(tmp_path), "--failures")
        stream = Client(d.socket)
        try:
            stream.send_json(Kind.STREAM, {"filter": {"service": "tracesvc"}})
            wait_for(lambda: d.daemon.fanout.streaming == 1, 10, what="the stream")
            w.run(2)  # the daemon learns the op names and types
            wait_for(lambda: (_agent_of(d.socket, w.pid) or {}).get("records") == 10, 10, what="records")
            tracer = Client(d.socket)
            tracer.sock.settimeout(30)
            tracer.send_json(Kind.TRACE, {"service": "tracesvc", "pid": None, "duration_s": 1.5})
            wait_for(lambda: (_agent_of(d.socket, w.pid) or {}).get("models") == [], 10,
                     what="the subscription to pause")
            wait_for(lambda: any(tmp_path.glob("aclprof-trace-*/PROF_*/host/mock_session.json")), 10,
                     what="the session to start")
            assert w.cmd("fail relu1 3 1")["failed"] == 3  # during the pause
            kind, payload = tracer.recv()
            assert kind == Kind.TRACE_REPLY
            reply = json.loads(bytes(payload))
            tracer.close()
            assert reply["ok"] and reply["processes"][0]["error"] is None, reply
            lines = _stream_until(stream, lambda out: sum(r["kind"] == "failure" for r in out) == 3
                                  and any(r["kind"] == "gap" for r in out))
            fails = [r for r in lines if r["kind"] == "failure"]
            # no records while paused: the failures are what shows it went wrong meanwhile,
            # resolved from the records before the pause
            assert [(r["op_name"], r["op_type"], r["model"]) for r in fails] == [("relu1", "Relu", "fixed")] * 3
            assert [r["kind"] for r in lines].index("gap") > [r["kind"] for r in lines].index("failure")
            f = status(d.socket)["failures"]
            assert f["total"] == 3 and f["unresolved"] == 0
            st = w.stats()["agent"]
            assert (st["failures_seen"], st["failures_dropped"]) == (3, 0)
            # the subscription resumed: records flow again
            wait_for(lambda: [m["model_id"] for m in (_agent_of(d.socket, w.pid) or {}).get("models", [])]
                     == [w.model], 10, what="the subscription to resume")
        finally:
            stream.close()
            w.kill()


def test_a_forked_child_drops_the_parents_watches_and_reports_its_own(tmp_path):
    with InProcess() as d:
        stream = Client(d.socket)
        stream.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: d.daemon.fanout.streaming == 1, 10, what="the stream")
        p = subprocess.run([sys.executable, str(TESTS / "helpers" / "failure_fork.py"), d.socket],
                           capture_output=True, text=True, timeout=60, env=env())
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        out = {r["who"]: r for r in map(json.loads, p.stdout.splitlines())}
        # the child failed twice; the first, before it attached anything, went nowhere (not into
        # the parent's queue, which has no dispatcher in the child); its own agent sent the second
        assert (out["child"]["failed"], out["child"]["seen"], out["child"]["queued"]) == (2, 1, 1)
        assert (out["parent"]["failed"], out["parent"]["seen"], out["parent"]["queued"]) == (2, 2, 2)
        wait_for(lambda: status(d.socket)["failures"]["total"] == 3, 10, what="three failures")
        lines = _stream_until(stream, lambda o: sum(r["kind"] == "failure" for r in o) == 3)
        by = sorted((r["service"], r["pid"]) for r in lines if r["kind"] == "failure")
        assert by == sorted([("forker", out["parent"]["pid"])] * 2 + [("forker-child", out["child"]["pid"])])
        assert status(d.socket)["protocol_errors"] == 0
        stream.close()


def _proc(pid: int) -> tuple[float, int]:
    """(CPU seconds, resident KiB) of process ``pid``, from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return cpu, rss


@pytest.mark.timeout(120)
def test_a_failure_storm_is_counted_with_bounded_daemon_memory_and_stream(capsys):
    d = Daemon(None, "--capture-before", "1s", "--capture-after", "0.2s", "--stream-buffer", "64KiB")
    d.start()
    w = None
    reader = Client(d.socket)
    try:
        import socket

        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.send_json(Kind.STREAM, {"filter": {}})  # ... and never reads
        w = Worker(d.socket, "--service", "storm", "--failures")
        w.run(1)
        wait_for(lambda: d.status()["records_total"] == 5, 10, what="the daemon to learn the op names")
        assert d.proc is not None
        cpu0, rss0 = _proc(d.proc.pid)
        n = 0
        for _ in range(4):  # every execution fails
            n += w.cmd("fail relu1 1500 1")["failed"]
        assert n == 6000
        st = wait_for(lambda: (lambda s: s if s["failures_queued"] + s["failures_dropped"] == n else None)(
            w.stats()["agent"]), 30, what="the agent to hand every failure over")
        assert st["failures_seen"] == n
        # all counted: what the agent sent plus what it dropped and reported (dropped_before)
        wait_for(lambda: d.status()["failures"]["total"] == n, 30, what="every failure counted by the daemon")
        cpu1, rss1 = _proc(d.proc.pid)
        s = d.status()
        f, cap = s["failures"], s["captures"]
        assert f["total"] == n and f["keys"] == 1 and len(f["last"]) <= 8
        # the non-reading stream got at most its buffer's worth of lines; the rest counted
        assert f["lines_skipped"] > 0 and f["lines_sent"] + f["lines_skipped"] == n - f["agent_dropped"]
        # one capture for the storm (one per (service, op) per interval), the rest counted
        wait_for(lambda: d.status()["captures"]["made_total"] == 1, 20, what="the storm's capture")
        assert cap["failures_joined_total"] + cap["failures_rate_limited_total"] == n - f["agent_dropped"] - 1
        assert s["protocol_errors"] == 0 and s["healthy"]
        # memory: the daemon's resident size grew by less than 64 MiB for 6000 failures
        assert rss1 - rss0 < 64 << 10, (rss0, rss1)
        with capsys.disabled():
            print(f"\nfailure storm: {n} failures, daemon CPU {cpu1 - cpu0:.2f} s "
                  f"({1e6 * (cpu1 - cpu0) / n:.0f} us each), RSS {rss0} -> {rss1} KiB, "
                  f"agent dropped {f['agent_dropped']}, lines sent {f['lines_sent']} skipped {f['lines_skipped']}")
    finally:
        reader.close()
        if w is not None:
            w.kill()
        d.cleanup()
