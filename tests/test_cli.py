"""The ``aclprof`` CLI end to end: a real daemon, agent processes on the mock (fixed op
durations, no jitter), the commands run as subprocesses; plus its parsing helpers."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers.agent_worker import FIXED_OPS
from helpers.daemons import Daemon
from helpers.procs import PtyOutput, Worker, cli, env, wait_for

from aclprof.cli.common import parse_duration_ns, parse_time
from aclprof.cli.main import main

pytestmark = pytest.mark.timeout(90)

N_OPS = len(FIXED_OPS)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    d.start()
    yield d
    d.cleanup()


@pytest.fixture(scope="module")
def fed(daemon):
    """One worker that ran 200 inferences of FIXED_OPS and stopped (1000 records)."""
    w = Worker(daemon.socket, "--service", "fed")
    try:
        assert w.run(200) == 1000
        w.stop()
    finally:
        w.kill()
    wait_for(lambda: _count(daemon, w.pid) == 1000, what="the daemon to aggregate 1000 records")
    return w


def _count(daemon: Daemon, pid: int) -> int:
    from aclprof.cli.client import Client

    with Client(daemon.socket) as c:
        snap = c.snapshot("all", "type", {"pid": pid})
    return sum(r["count"] for r in snap["rows"])


# -- parsing ---------------------------------------------------------------------------------

def test_parse_duration():
    assert parse_duration_ns("100us") == 100_000
    assert parse_duration_ns("1.5ms") == 1_500_000
    assert parse_duration_ns("250ns") == 250
    assert parse_duration_ns("2s") == 2_000_000_000
    assert parse_duration_ns("0") == 0
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration_ns("100")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration_ns("fast")


def test_parse_time():
    now = 1_764_400_000.0
    assert parse_time("-5m", now) == now - 300
    assert parse_time("10s ago", now) == now - 10
    assert parse_time("1h ago", now) == now - 3600
    assert parse_time("now", now) == now
    assert parse_time("1764400000.5", now) == 1764400000.5
    assert parse_time("2025-11-29T07:06:40Z", now) == 1764400000.0
    assert parse_time("2025-11-29T08:06:40+01:00", now) == 1764400000.0
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("yesterday", now)


def test_help_and_usage_errors(capsys):
    for cmd in ("tail", "top", "status", "export", "demo", "doctor"):
        assert main([cmd, "--help"]) == 0
        assert "examples:" in capsys.readouterr().out
    assert main(["tail", "--min-duration", "100"]) == 2
    assert "needs a unit" in capsys.readouterr().err
    assert main(["tail", "--type", "("]) == 2
    assert main(["export", "--format", "csv", "--since", "yesterday"]) == 2
    assert main([]) == 2


# -- status / doctor -------------------------------------------------------------------------

_COMMANDS = ("tail", "top", "status", "export", "demo", "doctor", "reset")
_SHARED = ("aclprof.cli.common", "aclprof.cli.client", "aclprof.cli.launch", "aclprof.cli.top.view",
           "aclprof.cli.top.keys", "aclprof.cli.top.header", "aclprof.cli.top.live", "aclprof.cli.top.baseline",
           "aclprof.cli.export_ascend", "aclprof.cli.export_msmonitor", "aclprof.cli.exportloss",
           "aclprof.cli.capturefmt", "aclprof.cli.failurefmt",
           "aclprof.cli.fit",
           "aclprof.cli.top.cells", "aclprof.cli.signals", "aclprof.cli.staging", "aclprof.cli.argtypes",
           "aclprof.cli.doctor_deploy", "aclprof.cli.doctor_check")


@pytest.mark.parametrize("command", _COMMANDS)
def test_commands_import_only_the_shared_modules(command):
    """No cycles: a command module imports common and helpers, never main nor another command."""
    import ast
    import importlib

    path = importlib.import_module(f"aclprof.cli.{command}").__file__
    assert path is not None
    tree = ast.parse(open(path, encoding="utf-8").read())
    cli_imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and (n.module or "").startswith("aclprof.cli")}
    assert cli_imports <= set(_SHARED), cli_imports


def test_every_command_help_shows_examples(capsys):
    for command in _COMMANDS:
        assert main([command, "--help"]) == 0
        assert "examples:" in capsys.readouterr().out, command


def test_status_unreachable_exits_2(tmp_path):
    p = cli("status", "--socket", str(tmp_path / "none.sock"))
    assert p.returncode == 2
    assert p.stderr.startswith("aclprof: error: no daemon socket") and "Traceback" not in p.stderr
    p = cli("status", "--json", "--socket", str(tmp_path / "none.sock"))
    assert p.returncode == 2 and json.loads(p.stdout)["reachable"] is False


def test_status_lists_processes_and_models(daemon):
    w = Worker(daemon.socket, "--service", "statussvc", "--device", "3")
    try:
        wait_for(lambda: any(a["pid"] == w.pid and a["models"] for a in daemon.status()["agents"]),
                 what="the agent and its model")
        p = cli("status", "--socket", daemon.socket)
        assert p.returncode == 0, p.stderr
        assert "healthy" in p.stdout and f"pid {w.pid} statussvc" in p.stdout
        assert f"model {w.model} on device 3" in p.stdout
        p = cli("status", "--json", "--socket", daemon.socket)
        st = json.loads(p.stdout)
        assert p.returncode == 0 and st["healthy"] is True
        (agent,) = [a for a in st["agents"] if a["pid"] == w.pid]
        assert agent["models"][0]["device"] == 3
        w.stop()
    finally:
        w.kill()


def test_doctor(daemon, tmp_path):
    p = cli("doctor", "--socket", daemon.socket)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "aclprof mock libascendcl" in p.stdout and "reachable: yes" in p.stdout
    for group in ("session", "op-desc getters", "msproftx", "runtime", "model"):  # where each came from
        assert re.search(rf"^  {group}: [1-9]\d* functions from /\S+libascendcl\.so$", p.stdout, re.M), group
    assert "mode 0660" in p.stdout
    p = cli("doctor", "--socket", str(tmp_path / "none.sock"))
    assert p.returncode == 1 and "daemon is not reachable" in p.stdout
    assert "Traceback" not in p.stderr


# -- top -------------------------------------------------------------------------------------

def test_top_once_json_matches_the_mock_timings(daemon, fed):
    p = cli("top", "--once", "--json", "--window", "all", "--pid", str(fed.pid), "--socket", daemon.socket)
    assert p.returncode == 0, p.stderr
    snap = json.loads(p.stdout)
    rows = {r["key"]: r for r in snap["rows"]}
    assert set(rows) == {"Conv2D", "BatchNorm", "Relu", "MatMulV2"}
    conv = rows["Conv2D"]
    assert conv["count"] == 400 and conv["total_ns"] == 200 * 60_000
    assert conv["min_ns"] == 20_000 and conv["max_ns"] == 40_000 and conv["mean_ns"] == pytest.approx(30_000)
    assert rows["BatchNorm"]["count"] == 200 and rows["BatchNorm"]["total_ns"] == 200 * 5_000
    for r in rows.values():  # one fixed duration each: quantiles within the histogram's error
        if r["key"] != "Conv2D":
            assert r["p50_ns"] == pytest.approx(r["mean_ns"], rel=0.05)
            assert r["p99_ns"] == pytest.approx(r["mean_ns"], rel=0.05)
    assert conv["pct_time"] == pytest.approx(100 * 60_000 / 77_000, abs=0.1)
    assert [r["key"] for r in snap["rows"]] == ["Conv2D", "MatMulV2", "BatchNorm", "Relu"]
    p = cli("top", "--once", "--json", "--window", "all", "--group", "name", "--sort", "count",
            "--name", "^conv", "--pid", str(fed.pid), "--socket", daemon.socket)
    names = {r["key"]: r for r in json.loads(p.stdout)["rows"]}
    assert set(names) == {"conv1", "conv2"}
    assert names["conv1"]["p50_ns"] == pytest.approx(40_000, rel=0.05)


def test_top_once_table(daemon, fed):
    p = cli("top", "--once", "--window", "all", "--pid", str(fed.pid), "--socket", daemon.socket)
    assert p.returncode == 0, p.stderr
    assert "Conv2D" in p.stdout and "12.00ms" in p.stdout and "\x1b[" not in p.stdout
    p = cli("top", "--json", "--socket", daemon.socket)
    assert p.returncode == 2 and "--json needs --once" in p.stderr
    p = cli("top", "--once", "--window", "5h", "--socket", daemon.socket)
    # checked against the daemon's windows before any SNAPSHOT (tests/test_cli_ops.py)
    assert p.returncode == 2 and p.stderr.startswith("aclprof: error: --window '5h': this daemon aggregates over")
    assert len(p.stderr.strip().splitlines()) == 1


def test_top_view_keys():
    from aclprof.cli.top.view import TopView

    v = TopView()
    for ch in "c":
        v.key(ch)
    assert v.sort == "count"
    v.key("9")
    assert v.sort == "p99"
    v.key("g")
    assert v.group == "name" and v.filter() == {}
    for ch in "/conv\r":
        v.key(ch)
    assert v.filter() == {"name": "conv"}
    v.key("w")
    assert v.window == "1m"
    v.key("r")
    assert v.reset_requested
    v.key("q")
    assert v.quit


# -- export ----------------------------------------------------------------------------------

def _export(daemon, pid, fmt, tmp_path, *extra):
    out = tmp_path / f"out.{fmt}"
    p = cli("export", "--since", "-10m", "--until", "now", "--format", fmt, "-o", str(out),
            "--pid", str(pid), *extra, "--socket", daemon.socket)
    assert p.returncode == 0, p.stderr
    return out.read_text()


def test_export_jsonl_csv_chrome(daemon, fed, tmp_path):
    lines = wait_for(lambda: (t := _export(daemon, fed.pid, "jsonl", tmp_path)).count("\n") == 1000 and t,
                     what="1000 records on disk")
    recs = [json.loads(line) for line in lines.splitlines()]
    assert {r["op_name"] for r in recs} == {op["name"] for op in FIXED_OPS}
    assert all(r["pid"] == fed.pid and r["service"] == "fed" for r in recs)

    rows = list(csv.DictReader(io.StringIO(_export(daemon, fed.pid, "csv", tmp_path))))
    assert list(rows[0]) == ["Service", "PID", "Device_id", "Model Name", "OP Type", "Core Type", "Count",
                             "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"]
    assert {(r["Service"], r["PID"]) for r in rows} == {("fed", str(fed.pid))}
    by_type = {r["OP Type"]: r for r in rows}
    assert by_type["Conv2D"]["Count"] == "400" and float(by_type["Conv2D"]["Total Time(us)"]) == 12_000
    assert float(by_type["Conv2D"]["Min Time(us)"]) == 20 and float(by_type["Conv2D"]["Max Time(us)"]) == 40
    assert float(by_type["Conv2D"]["Avg Time(us)"]) == 30
    assert sum(float(r["Ratio(%)"]) for r in rows) == pytest.approx(100, abs=0.05)

    trace = json.loads(_export(daemon, fed.pid, "chrome", tmp_path))
    events = trace["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == 1000 and all(e["pid"] == fed.pid for e in xs)
    conv1 = [e for e in xs if e["name"] == "conv1"]
    assert len(conv1) == 200 and all(e["dur"] == 40.0 and e["cat"] == "Conv2D" for e in conv1)
    meta = {(e["name"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", 0)]["name"].startswith(f"fed (pid {fed.pid})")
    assert meta[("thread_name", xs[0]["tid"])]["name"] == f"device 0 / model {fed.model}"

    assert _export(daemon, fed.pid, "jsonl", tmp_path, "--type", "^Relu$").count("\n") == 200


# -- tail ------------------------------------------------------------------------------------

def _sigint_default() -> None:
    # When pytest itself runs in the background (`pytest &`), SIGINT is ignored and children
    # inherit that; Python then installs no KeyboardInterrupt handler. Tests that send
    # SIGINT give their child the default disposition back.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tail(daemon, *args):
    return subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "--socket", daemon.socket, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                            preexec_fn=_sigint_default)


def _feed_until(worker, done, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out feeding records"
        worker.run(20)
        time.sleep(0.02)


def test_tail_filters_json_and_ctrl_c(daemon):
    w = Worker(daemon.socket, "--service", "tailsvc")
    tail = _tail(daemon, "--json", "--type", "Conv", "--min-duration", "30us", "--pid", str(w.pid))
    try:
        got: list[dict] = []
        import threading

        def reader():
            for line in tail.stdout:
                got.append(json.loads(line))

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        _feed_until(w, lambda: len(got) >= 20)
        assert all(r["op_type"] == "Conv2D" and r["op_name"] == "conv1" and r["duration_ns"] == 40_000
                   and r["pid"] == w.pid and r["model"] == w.model for r in got)
        tail.send_signal(signal.SIGINT)
        assert tail.wait(10) in (0, 130)
        err = tail.stderr.read()
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        w.stop()
    finally:
        w.kill()
        if tail.poll() is None:
            tail.kill()


def test_tail_human_lines(daemon):
    w = Worker(daemon.socket, "--service", "lines")
    tail = _tail(daemon, "--name", "^fc$", "--pid", str(w.pid))
    try:
        lines: list[str] = []
        import threading

        threading.Thread(target=lambda: [lines.append(x) for x in tail.stdout], daemon=True).start()
        _feed_until(w, lambda: len(lines) >= 3)
        assert f"pid {w.pid}" in lines[0] and "MatMulV2" in lines[0] and "10.0us" in lines[0]
        assert lines[0].rstrip().endswith("fc") and "\x1b[" not in lines[0]
        w.stop()
    finally:
        w.kill()
        tail.kill()
        tail.wait()


def test_tail_into_a_closed_pipe_exits_quietly(daemon):
    w = Worker(daemon.socket, "--service", "pipe")
    sh = subprocess.Popen(["bash", "-c", f'"{sys.executable}" -m aclprof tail --socket "{daemon.socket}" '
                                         f'--pid {w.pid} | head -3; echo "status=${{PIPESTATUS[0]}}" >&2'],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        _feed_until(w, lambda: sh.poll() is not None)
        out, err = sh.communicate(timeout=10)
        assert len(out.splitlines()) == 3
        assert "status=0" in err and "Traceback" not in err and "BrokenPipe" not in err
        w.stop()
    finally:
        w.kill()
        if sh.poll() is None:
            sh.kill()


# -- demo ------------------------------------------------------------------------------------

def test_demo_runs_and_cleans_up(tmp_path):
    import re
    import shutil

    p = cli("demo", "--duration", "2.5", "--services", "2", "--interval", "0.5", "--keep", timeout=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "aclprof demo:" in p.stdout and "emitted - received - lost = 0" in p.stdout
    assert "Conv2D" in p.stdout and "MatMulV2" in p.stdout
    summary = p.stdout[p.stdout.index("aclprof demo:"):]
    assert "by service" in summary and "resnet" in summary and "transformer" in summary  # per-service truth
    kept = re.search(r"kept (\S+) ", p.stdout).group(1)
    try:
        out = subprocess.run(["pgrep", "-f", kept], capture_output=True, text=True)
        assert out.stdout.strip() == "", f"children left running: {out.stdout}"
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_demo_ctrl_c_cleans_up():
    proc = subprocess.Popen([sys.executable, "-m", "aclprof", "demo", "--duration", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                            preexec_fn=_sigint_default)
    try:
        # The first table means the daemon and the services are up.
        wait_for(lambda: proc.stdout.readline().startswith("aclprof top"), timeout=30, what="a table")
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
        assert "Traceback" not in proc.stderr.read()
        for pid in children:
            wait_for(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or
                     open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=10, what=f"child {pid} to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- top, live, on a terminal ----------------------------------------------------------------

def test_top_live_keys_on_a_pty_and_terminal_restored(daemon, fed):
    import pty
    import termios

    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen([sys.executable, "-m", "aclprof", "top", "--interval", "0.2", "--window", "all",
                             "--pid", str(fed.pid), "--socket", daemon.socket],
                            stdin=slave, stdout=slave, stderr=slave, env=env(TERM="xterm", COLUMNS="120",
                                                                             LINES="40"),
                            start_new_session=True)
    os.close(slave)
    out = PtyOutput(master)
    read_until = out.read_until

    try:
        read_until(b"sorted by total")
        read_until(b"Conv2D")
        os.write(master, b"c")
        read_until(b"sorted by count")
        os.write(master, b"g")
        read_until(b"by op name")
        read_until(b"conv1")
        os.write(master, b"/relu\r")
        read_until(b"name=relu")
        os.write(master, b"q")
        assert proc.wait(10) == 0
        after = termios.tcgetattr(master)
        assert after[3] & termios.ECHO and after[3] & termios.ICANON  # cbreak undone
        assert after[3] == before[3]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_slow_tail_does_not_slow_ingestion_and_reports_skips(daemon):
    import threading

    w = Worker(daemon.socket, "--service", "flood")
    tail = _tail(daemon, "--json", "--pid", str(w.pid))
    try:
        first = threading.Event()
        threading.Thread(target=lambda: tail.stdout.readline() and first.set(), daemon=True).start()
        _feed_until(w, first.is_set)  # the stream is live
        # Now nobody reads tail's stdout: it blocks on the pipe, its socket fills, and the
        # daemon skips records for it instead of slowing ingestion.
        base = daemon.status()["records_total"]
        for _ in range(4):
            w.run(20000)  # 400 k records
        wait_for(lambda: daemon.status()["records_total"] >= base + 400_000, what="ingestion")
        err: list[str] = []
        lines = [0]
        threading.Thread(target=lambda: [err.append(x) for x in tail.stderr], daemon=True).start()

        def drain():
            for _ in tail.stdout:
                lines[0] += 1

        threading.Thread(target=drain, daemon=True).start()
        # The skip count arrives with the next frame the client gets: keep records coming.
        _feed_until(w, lambda: any("skipped" in e for e in err))
        notice = next(e for e in err if "skipped" in e)
        assert notice.startswith("# ") and int(notice.split()[1]) > 0
        assert 0 < lines[0] < 400_000
        w.stop()
    finally:
        w.kill()
        tail.kill()
        tail.wait()


def test_status_unhealthy_exits_1():
    import socket as so
    import tempfile
    import threading

    from aclprof.protocol import wire

    path = os.path.join(tempfile.mkdtemp(prefix="aclp-"), "u.sock")
    srv = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        reader, pending = wire.FrameReader(), []
        wire.recv_frame(c, reader, pending)  # HELLO
        c.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 1, "pid": 1,
                                                        "started_ts": 0.0}))
        wire.recv_frame(c, reader, pending)  # STATUS
        c.sendall(wire.encode_json(wire.Kind.STATUS_REPLY, {
            "version": "0.1.0", "pid": 1, "uptime_s": 3.0, "healthy": False,
            "problems": ["storage write failing: OSError: [Errno 28] No space left on device"],
            "records_total": 0, "records_per_s": 0.0, "dropped_by_agents": 0, "agents": [],
            "storage": {"dir": "/d", "bytes": 1024, "segments": 2, "at_cap": True}, "aggregates": {}}))
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        p = cli("status", "--socket", path)
        assert p.returncode == 1, p.stderr
        assert "UNHEALTHY" in p.stdout and "problem: storage write failing" in p.stdout
        assert "at disk cap" in p.stdout
    finally:
        import shutil

        srv.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
