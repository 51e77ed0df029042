"""the installed ``aclprofd`` as a real process: sd_notify readiness, every control request,
SIGTERM/SIGINT (exit 0, socket removed, data flushed), kill -9 and restart, a live and a
stale socket, SIGHUP (log reopen, config reload), a hostile client logged with its pid,
Prometheus over HTTP on 127.0.0.1, command-line errors."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request

import pytest
from helpers.daemons import Client, agent, running, status
from helpers.procs import free_port, short_tmpdir, wait_for
from helpers.records import make_records

from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import Kind


@pytest.fixture
def tmp():
    d = short_tmpdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _run(*args: str) -> subprocess.CompletedProcess:
    # Run from a neutral directory: from the checkout, `-m` would import its unbuilt source.
    return subprocess.run([*daemon_argv(), *args], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), timeout=30)


def test_help_and_usage_errors(tmp):
    r = _run("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "--prometheus-port" in r.stdout
    r = _run("--disk-cap", "lots")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--disk-cap" in r.stderr
    r = _run("--config", os.path.join(tmp, "missing.toml"))
    assert r.returncode == 2 and "cannot read config file" in r.stderr and "Traceback" not in r.stderr
    r = _run("--socket", "/proc/no/such/dir/d.sock", "--data-dir", tmp, "--prometheus-port", "0")
    assert r.returncode == 1 and r.stderr.startswith("aclprofd: error:") and "Traceback" not in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_requests_then_signal_exit_flushes(tmp, sig):
    with running(tmp, "--flush-interval", "30") as d:  # only the shutdown flush can store them
        tail = Client(d.socket)
        tail.send_json(Kind.STREAM, {"filter": {"type": "Conv"}})
        c = Client(d.socket)
        assert c.request(Kind.STATUS)["records_total"] == 0  # STREAM was handled before this
        a = agent(d.socket, service="svc")
        a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {}})
        a.send_batch(make_records(3000))
        wait_for(lambda: c.request(Kind.STATUS)["records_total"] == 3000)
        streamed = 0
        while streamed < 1500:
            records, skipped, kind = tail.stream_frames()
            assert kind == Kind.STREAM_RECORDS
            assert all(r["op_type"] == "Conv2D" for r in records) and skipped == 0
            streamed += len(records)
        assert streamed == 1500
        snap = c.request(Kind.SNAPSHOT, {"window": "10s", "group_by": "type", "filter": {}})
        assert sum(r["count"] for r in snap["rows"]) == 3000
        assert c.request(Kind.RESET) == {}
        assert d.stop(sig) == 0
        assert not os.path.exists(d.socket)
        lines = d.log_lines()
        assert any(line["event"] == "stopped" for line in lines)
    with running(tmp) as d2:
        c = Client(d2.socket)
        recs = c.export()
        assert len(recs) == 3000 and recs[0]["service"] == "svc"
        assert d2.stop() == 0


def test_kill_9_then_restart_keeps_flushed_data(tmp):
    with running(tmp) as d:  # flush interval 0.2 s
        a = agent(d.socket)
        a.send_batch(make_records(2000))
        wait_for(lambda: status(d.socket)["storage"]["record_bytes_in"] >= 2000 * 56, what="flush")
        d.proc.kill()
        d.proc.wait(10)
        assert os.path.exists(d.socket)  # left behind: the next daemon must clean it
    with running(tmp) as d2:
        assert len(Client(d2.socket).export()) == 2000
        a = agent(d2.socket)
        a.send_batch(make_records(10))
        wait_for(lambda: status(d2.socket)["records_total"] == 10)
        assert d2.stop() == 0
    with running(tmp) as d3:
        assert len(Client(d3.socket).export()) == 2010


def _count_all(path: str) -> int:
    c = Client(path)
    try:
        return sum(r["count"] for r in c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type"})["rows"])
    finally:
        c.close()


def _saved_count(path: str) -> int:
    import numpy as np

    with np.load(path) as z:  # replaced atomically: never a torn file
        return int(z["count"].sum())


def test_aggregates_survive_sigterm_and_kill_9(tmp):
    saved = os.path.join(tmp, "data", "aggregates.npz")
    with running(tmp, "--flush-interval", "30") as d:  # only the clean stop saves them
        a = agent(d.socket)
        a.send_batch(make_records(1500))
        wait_for(lambda: _count_all(d.socket) == 1500, what="ingestion")
        assert not os.path.exists(saved)
        assert d.stop() == 0
    with running(tmp) as d2:  # flush interval 0.2 s
        assert _count_all(d2.socket) == 1500
        a = agent(d2.socket)
        a.send_batch(make_records(500))
        wait_for(lambda: _count_all(d2.socket) == 2000, what="ingestion")
        wait_for(lambda: _saved_count(saved) == 2000, what="a flush to save the aggregates")
        d2.proc.kill()
        d2.proc.wait(10)
    with running(tmp) as d3:
        assert _count_all(d3.socket) == 2000
        snap = Client(d3.socket).request(Kind.SNAPSHOT, {"window": "10s"})
        assert snap["rows"] == []  # the sliding windows restart empty
        assert d3.stop() == 0


def test_refuses_a_live_socket(tmp):
    with running(tmp) as d:
        r = _run("--socket", d.socket, "--data-dir", os.path.join(tmp, "other"), "--prometheus-port", "0")
        assert r.returncode == 1 and "another aclprofd is already listening" in r.stderr
        assert status(d.socket)["healthy"]  # the first one is unharmed


def test_stale_socket_is_replaced(tmp):
    path = os.path.join(tmp, "d.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    with running(tmp) as d:
        assert status(d.socket)["pid"] == d.proc.pid
        assert oct(os.stat(d.socket).st_mode & 0o777) == "0o660"


def test_sighup_reopens_logs_and_reloads_config(tmp):
    cfg = os.path.join(tmp, "aclprofd.toml")
    with open(cfg, "w") as f:
        f.write('log_level = "info"\ndisk_cap = "1GiB"\n')
    with running(tmp, "--config", cfg) as d:
        wait_for(lambda: d.log_lines(), what="first log line")
        os.rename(d.log_path, d.log_path + ".1")  # as logrotate does
        with open(cfg, "w") as f:
            f.write('log_level = "debug"\ndisk_cap = "2GiB"\nprometheus_port = 1\nmax_keys = 5\n')
        d.proc.send_signal(signal.SIGHUP)
        line = wait_for(lambda: next((x for x in d.log_lines() if x["event"] == "config reloaded"), None),
                          what="reload log line in the new file")
        # prometheus_port is also given as a flag (flags win): unchanged
        assert set(line["changed"]) == {"log_level", "disk_cap"} and line["needs_restart"] == ["max_keys"]
        st = status(d.socket)
        assert st["storage"]["disk_cap_bytes"] == 2 << 30
        # a broken config file keeps the running settings
        with open(cfg, "w") as f:
            f.write("disk_cap = [\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: any(x["event"].startswith("config reload failed") for x in d.log_lines()))
        assert status(d.socket)["healthy"] and d.stop() == 0


def test_hostile_frame_logged_with_pid(tmp):
    with running(tmp) as d:
        good = agent(d.socket)
        bad = Client(d.socket, "agent")  # its pid: the real one (SO_PEERCRED)
        bad.sock.sendall(b"\xff" * 64)
        assert bad.closed_by_peer()
        good.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 100)
        me = os.getpid()
        line = wait_for(lambda: next((x for x in d.log_lines() if x.get("pid") == me and x.get("level") == "warning"),
                                     None))
        assert "bad magic" in line["reason"]



def test_prometheus_metrics_on_loopback(tmp):
    port = free_port()
    with running(tmp, prometheus_port=port) as d:
        a = agent(d.socket, service="svc")
        a.send_batch(make_records(1000, durations=[5000, 2_000_000] * 500))
        a.send_json(Kind.LOSS, {"dropped": 3, "reason": "x"})
        wait_for(lambda: status(d.socket)["records_total"] == 1000)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "aclprofd_records_total 1000.0" in text
        assert f'aclprofd_agent_dropped_records_total{{pid="{os.getpid()}",service="svc"}} 3.0' in text
        assert "aclprofd_connected_agents 1.0" in text
        assert "aclprofd_storage_bytes" in text and "aclprofd_agent_lag_seconds" in text
        conv = [x for x in text.splitlines()
                if x.startswith("aclprofd_op_duration_seconds") and 'op_type="Conv2D"' in x]
        assert conv and all("op_name" not in x for x in conv)
        assert any(x.startswith("aclprofd_op_duration_seconds_count") and x.endswith(" 500.0") for x in conv)
        # every Conv2D record took 5 us: all of them in the le=2**13 ns bucket, none in 2**12
        assert any('le="8.192e-06"' in x and x.endswith(" 500.0") for x in conv)
        assert any('le="4.096e-06"' in x and x.endswith(" 0.0") for x in conv)
        # bound to loopback only
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
        listening = [r[1] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port]
        assert listening == [f"0100007F:{port:04X}"]
