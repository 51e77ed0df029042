"""Issue 19: the configured ``memory_budget`` bounds the daemon's resident size.

The budget used to count only what clients make the daemon hold, so the interpreter's base
(~55 MiB idle) came on top of it: clients filling the budget took the process well past
it. Now what the daemon holds itself (its RSS at start, its tables) and an eighth of the
budget for allocator slack come off first; clients share the rest (daemon/README.md
"Memory budget"). The subprocess tests run the installed ``aclprofd`` and read its
``/proc/PID/status``."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest
from helpers.daemons import Client, agent, running, status
from helpers.procs import env, short_tmpdir, wait_for

from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import Kind, encode_json

BUDGET_MIB = 128


@pytest.fixture
def tmp():
    d = short_tmpdir("aclm-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _vm(pid: int, field: str) -> int:
    """A ``Vm*`` line of /proc/PID/status, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _fill_names(path: str, tag: int, frames: int = 4) -> Client | None:
    """An agent defining ``frames`` NAMES frames of 3,000 names of 300 characters (~0.9 MB
    each, charged 1.5 MB: 500 bytes a name), never using them. The daemon closes it when the
    clients' share is spent (refused, counted): then None, else the live connection that
    holds them."""
    a = agent(path)
    per = 300
    try:
        for frame in range(frames):
            base = 10 + frame * 3000
            a.names({base + i: f"{tag:03d}.{base + i:09d}." + "n" * (per - 14) for i in range(3000)})
    except OSError:  # reset or broken pipe: refused
        a.close()
        return None
    if a.closed_by_peer(0.5):
        a.close()
        return None
    return a


def test_clients_filling_their_share_leave_the_rss_within_the_budget(tmp):
    """Twenty agents each define 6 MB of names (under a connection's names share) and a
    control client never reads its STATUS replies. The daemon refuses what passes the
    clients' share (counted) and its resident size, peak included, stays within the budget.
    On main the names alone were allowed the whole budget, on top of the interpreter."""
    with running(tmp, "--memory-budget", f"{BUDGET_MIB}MiB") as d:
        assert d.proc is not None
        pid, budget = d.proc.pid, BUDGET_MIB << 20
        held = [a for a in (_fill_names(d.socket, i) for i in range(20)) if a is not None]
        lazy = Client(d.socket)
        lazy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        req = encode_json(Kind.STATUS, {}) * 200
        try:
            for _ in range(100):  # ~1 KB a reply: far past the 1 MiB a non-reader may have queued
                lazy.sock.sendall(req)
        except OSError:
            pass
        assert lazy.closed_by_peer(10), "the daemon kept queueing replies for a client that does not read"
        lazy.close()
        st = status(d.socket)
        mem = st["memory"]
        rss, hwm = _vm(pid, "VmRSS"), _vm(pid, "VmHWM")
        assert hwm <= budget, (f"VmHWM {hwm / 2**20:.1f} MiB over the {BUDGET_MIB} MiB budget; "
                               f"{len(held)} agents hold their names; memory: {mem}")
        assert rss <= budget
        assert mem["refused"].get("names", 0) >= 1 and mem["refused"].get("replies", 0) >= 1, mem
        assert held, "no agent kept its names: the share was not filled"
        # STATUS shows the arithmetic: budget = base + tables + slack + the clients' share
        assert 30 << 20 < mem["base_bytes"] < budget // 2, mem
        assert mem["slack_bytes"] == budget // 8
        assert mem["clients_share_bytes"] == budget - mem["base_bytes"] - mem["tables_bytes"] - mem["slack_bytes"]
        assert mem["used_bytes"] <= mem["clients_share_bytes"]
        for a in held:
            a.close()


def test_a_budget_below_what_the_daemon_holds_itself_is_refused_at_start(tmp):
    """32 MiB is less than the interpreter alone: the daemon exits 1 at start naming its base
    and the least budget it takes (on main it started, and its RSS passed the budget idle)."""
    p = subprocess.run([*daemon_argv(), "--socket", f"{tmp}/d.sock", "--data-dir", f"{tmp}/data",
                        "--memory-budget", "32MiB"], env=env(), cwd=tmp, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "memory_budget of 33554432 bytes (32.0 MiB) is too small" in p.stderr
    assert "MiB resident at start, its base" in p.stderr and "set memory_budget to " in p.stderr, p.stderr


def test_a_reload_to_a_budget_too_small_keeps_the_running_one(tmp):
    """SIGHUP with a budget that leaves clients less than a quarter of it: refused, logged,
    the running budget kept (and the daemon with it)."""
    import signal

    conf = f"{tmp}/aclprofd.toml"
    with open(conf, "w") as f:
        f.write(f'memory_budget = "{BUDGET_MIB}MiB"\n')
    with running(tmp, "--config", conf) as d:
        assert d.proc is not None
        with open(conf, "w") as f:
            f.write('memory_budget = "40MiB"\n')
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: any("memory_budget refused" in line.get("event", "") for line in d.log_lines()))
        assert status(d.socket)["memory"]["budget_bytes"] == BUDGET_MIB << 20
        line = next(x for x in d.log_lines() if "memory_budget refused" in x.get("event", ""))
        assert "41943040 bytes (40.0 MiB) is too small" in line["error"], line


def test_tables_grown_past_three_quarters_of_the_budget_are_a_status_problem():
    """The tables are bounded by max_keys, not refused: when they leave the clients under a
    quarter of the budget, STATUS says so (a problem naming the figures and the fix) and
    the clients' share shrinks with them (in-process: only the tables count)."""
    import numpy as np
    from helpers.daemons import InProcess
    from helpers.records import make_records

    with InProcess(memory_budget_bytes=16 << 20) as d:
        before = status(d.socket)
        assert before["healthy"] and before["memory"]["clients_share_bytes"] > 12 << 20, before["memory"]
        a = agent(d.socket)
        batch = np.concatenate([make_records(2, model=m) for m in range(1, 400)])
        a.send_batch(batch)
        wait_for(lambda: status(d.socket)["records_total"] == len(batch))

        def problem() -> list[str]:
            return [p for p in status(d.socket)["problems"] if p.startswith("memory: ")]
        wait_for(lambda: problem() != [])  # the tables are read again at the next flush
        st = status(d.socket)
        assert "under a quarter: raise memory_budget or lower max_keys" in problem()[0], st["problems"]
        assert st["memory"]["tables_bytes"] > 10 << 20 and st["memory"]["clients_share_bytes"] < 4 << 20
        a.close()


def test_metrics_show_the_daemons_own_bytes_and_the_clients_share():
    """/metrics has the split STATUS shows: the daemon's own bytes (base + tables) and the
    clients' share of memory_budget."""
    import urllib.request

    from helpers.daemons import InProcess
    from helpers.procs import free_port

    port = free_port()
    with InProcess(prometheus_port=port, memory_budget_bytes=64 << 20) as d:
        mem = status(d.socket)["memory"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("aclprofd_memory_") and not line.startswith("#")}
        assert values["aclprofd_memory_clients_share_bytes"] == mem["clients_share_bytes"] > 0, (values, mem)
        assert values["aclprofd_memory_own_bytes"] == mem["base_bytes"] + mem["tables_bytes"] > 0
