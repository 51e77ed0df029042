"""Issue 9 loose ends: every hardening counter is in the one counters snapshot, reported
alike by STATUS and /metrics; a socket file that cannot be recreated is a STATUS problem;
the CLI validates filters with RE2 like the daemon; STREAM buffers are charged to the
memory budget."""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.request

from helpers.daemons import Client, InProcess, agent, status
from helpers.procs import cli, free_port, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import MAX_NAME_BYTES, Kind


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


# STATUS path (dotted) -> Prometheus sample
_PAIRS = {
    "connections.internal_errors": "aclprofd_internal_errors_total",
    "connections.refused": "aclprofd_connections_refused_total",
    "connections.idle_closed": "aclprofd_control_idle_closed_total",
    "connections.accept_errors": "aclprofd_accept_errors_total",
    "connections.peer_gone": "aclprofd_connections_peer_gone_total",
    "storage.corrupt_chunks": "aclprofd_storage_corrupt_chunks_total",
    "storage.names_skipped": "aclprofd_storage_names_skipped_total",
    "storage.records_lost": "aclprofd_storage_records_lost_total",
    "names_truncated": "aclprofd_names_truncated_total",
}


def _get(st: dict, path: str) -> int:
    for part in path.split("."):
        st = st[part]
    return st  # type: ignore[return-value]


def test_hardening_counters_agree_in_status_and_metrics():
    port = free_port()
    with InProcess(prometheus_port=port, control_idle_timeout_s="0.3", max_control_connections=2) as d:
        # names_truncated: a name longer than MAX_NAME_BYTES
        a = agent(d.socket, names={1: "Conv2D", 2: "M" * (MAX_NAME_BYTES + 10), 3: "conv1", 4: "fc1"})
        a.send_batch(make_records(10))
        wait_for(lambda: status(d.socket)["records_total"] == 10)
        # idle_closed: a control client that asks nothing for control_idle_timeout
        idle = Client(d.socket)
        assert idle.closed_by_peer(timeout=5)
        # refused: a third busy control client beyond max_control_connections=2
        busy = [Client(d.socket) for _ in range(3)]
        time.sleep(0.2)
        st = status(d.socket)
        for c in busy:
            c.close()
        # corrupt_chunks: a segment whose chunk is damaged, met by an export
        seg_dir = d.settings.data_dir
        segs = sorted(f for f in os.listdir(seg_dir) if f.endswith(".acps"))
        assert segs
        path = os.path.join(seg_dir, segs[-1])
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 8)
            f.write(b"\xff" * 8)
        c = Client(d.socket)
        c.export()
        c.close()
        st = wait_for(lambda: (s := status(d.socket))["storage"]["corrupt_chunks"] > 0 and s)
        assert st["names_truncated"] >= 1
        assert st["connections"]["idle_closed"] >= 1
        assert st["connections"]["refused"] >= 1
        # /metrics reads the snapshot the loop published; STATUS publishes one too: once
        # nothing changes, both say the same
        time.sleep(0.3)
        st = status(d.socket)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for path, sample in _PAIRS.items():
            assert _metric(text, sample) == _get(st, path), (path, sample)
        a.close()


def test_status_formats_the_new_counters():
    from aclprof.cli.status import format_status

    st = {"healthy": True, "connections": {"refused": 3, "idle_closed": 4, "accept_errors": 5, "internal_errors": 6,
                                           "peer_gone": 11},
          "names_truncated": 7, "storage": {"dir": "/d", "corrupt_chunks": 8, "records_lost": 9, "names_skipped": 10}}
    text = format_status(st)
    for n in ("refused 3", "idle closed 4", "accept errors 5", "internal errors 6",
              "left before reading their replies 11", "names truncated 7",
              "8 corrupt chunks", "9 records lost", "10 segment names skipped"):
        assert n in text, (n, text)


def test_socket_that_cannot_be_recreated_is_a_problem_until_it_is_back():
    with InProcess() as d:
        c = Client(d.socket)  # connected before: STATUS still reaches the daemon
        assert c.request(Kind.STATUS)["healthy"]
        os.unlink(d.socket)
        with open(d.socket, "w") as f:  # something else takes the path: bind refuses it
            f.write("not a socket")

        def problem() -> list[str]:
            return [p for p in c.request(Kind.STATUS)["problems"] if "socket" in p]
        probs = wait_for(problem, what="socket problem in STATUS")
        assert d.socket in probs[0] and "cannot" in probs[0]
        assert not c.request(Kind.STATUS)["healthy"]
        os.unlink(d.socket)  # the path is free again: the daemon listens again, healthy
        wait_for(lambda: not problem(), what="socket problem cleared")
        assert status(d.socket)["healthy"]  # reachable through the recreated file
        c.close()


def test_cli_refuses_a_pattern_re2_rejects_naming_the_flag(tmp_path):
    tmp = str(tmp_path)
    # a backreference: Python's re accepts it, the daemon's RE2 does not
    for flag in ("--type", "--name"):
        for cmd in ("tail", "top", "export"):
            p = cli(cmd, flag, r"(a)\1", "--socket", os.path.join(tmp, "none.sock"))
            assert p.returncode == 2, (cmd, flag, p.stderr)
            assert flag in p.stderr and "RE2" in p.stderr, p.stderr
            assert "not reachable" not in p.stderr and "Traceback" not in p.stderr
    p = cli("tail", "--type", "x" * 2000, "--socket", os.path.join(tmp, "none.sock"))
    assert p.returncode == 2 and "--type" in p.stderr and "1024" in p.stderr, p.stderr


def test_top_view_checks_regex_with_re2():
    from aclprof.cli.top.view import TopView

    v = TopView()
    for ch in "/(a)\\1\r":
        v.key(ch)
    assert v.regex is None and "RE2" in v.message
    for ch in "/Conv|MatMul\r":
        v.key(ch)
    assert v.regex == "Conv|MatMul"


def test_stream_buffers_are_charged_to_the_memory_budget():
    # the aggregate tables (their windows' unmerged parts: up to ~8 MiB for these 120k
    # records) come off the budget first, then the clients share the rest
    budget = 32 << 20
    with InProcess(memory_budget_bytes=budget, stream_buffer_bytes="8MiB") as d:
        streams = []
        for _ in range(6):  # 6 x 8 MiB of stream buffers on a ~20 MiB clients' share: never read
            c = Client(d.socket)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.send_json(Kind.STREAM, {"filter": {}})
            streams.append(c)
        a = agent(d.socket)
        peak = 0
        for _ in range(60):
            a.send_batch(make_records(2000))
            peak = max(peak, d.daemon.published.memory_used)
        wait_for(lambda: status(d.socket)["records_total"] == 120_000)
        st = status(d.socket)
        assert st["memory"]["refused"].get("stream", 0) > 0, st["memory"]
        assert st["stream_skipped"] > 0
        # within the budget (the snapshot is published every 0.1 s: sampled, not exact)
        assert peak <= budget, (peak, budget)
        assert st["healthy"] or all("memory" not in p for p in st["problems"])
        for c in streams:
            c.close()
        a.close()
