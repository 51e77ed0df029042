"""``aclprof trace`` end to end (issue 11, on-demand traces): a real daemon, a mock service
process whose agent streams a model, the CLI. The session's PROF_* directory comes back,
the subscription resumes (records flow after), and the pause is counted in STATUS and
marked in the stream; hostile requests and agents are answered, never hung on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.daemons import Client, Daemon, InProcess, agent, status
from helpers.procs import Worker, cli, env, wait_for

from aclprof.protocol import trace as proto
from aclprof.protocol.wire import Kind, decode_json, encode_json

pytestmark = pytest.mark.timeout(90)


def _agent_of(sock: str, pid: int) -> dict | None:
    return next((a for a in status(sock)["agents"] if a["pid"] == pid), None)


def _models(sock: str, pid: int) -> list[int]:
    a = _agent_of(sock, pid)
    return [m["model_id"] for m in a["models"]] if a else []


def _cli_popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aclprof", *args], env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _trace(sock: str, timeout: float = 30.0, **req) -> dict:
    """One TRACE on a fresh control connection: the TRACE_REPLY."""
    c = Client(sock)
    c.sock.settimeout(timeout)
    try:
        return c.request(Kind.TRACE, {"service": None, "pid": None, "duration_s": 1.0, **req})
    finally:
        c.close()


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    d.start()
    yield d
    d.cleanup()


def stream_kinds(c: Client, want: int) -> list[str]:
    """The kinds of the records a raw STREAM client gets until it has ``want`` of them."""
    out: list[str] = []
    while len(out) < want:
        recs, _, _ = c.stream_frames()
        out += [r["kind"] for r in recs]
    return out


def _session_running(trace_dir: Path) -> bool:
    return any(trace_dir.glob("aclprof-trace-*/PROF_*/host/mock_session.json"))


def test_trace_returns_the_prof_directory_resumes_and_counts_the_gap(daemon, tmp_path):
    w = Worker(daemon.socket, "--service", "tracesvc", "--trace-dir", str(tmp_path))
    stream = Client(daemon.socket)
    tail = _cli_popen("tail", "--service", "tracesvc", "--socket", daemon.socket)
    tail_lines: list[str] = []
    reader = threading.Thread(target=lambda: tail_lines.extend(iter(tail.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        stream.send_json(Kind.STREAM, {"filter": {"service": "tracesvc"}})
        assert w.run(10) == 50
        wait_for(lambda: (_agent_of(daemon.socket, w.pid) or {}).get("records") == 50)
        # the tail process's STREAM has no reply to wait for: one op at a time until it shows them
        emitted = [50]

        def warm() -> list[str]:
            emitted[0] = w.run(1)
            return tail_lines

        wait_for(warm, what="tail to connect")
        sent = emitted[0]
        wait_for(lambda: (_agent_of(daemon.socket, w.pid) or {}).get("records") == sent)
        wait_for(lambda: len(stream_kinds(stream, sent)) == sent, what="the raw stream to catch up")
        time.sleep(0.2)
        tail_before = len(tail_lines)
        before = status(daemon.socket)["records_total"]
        proc = _cli_popen("trace", "--service", "tracesvc", "--duration", "1.5s", "--json",
                          "--socket", daemon.socket)
        # the agent paused its subscription (UNWATCH) and runs the session: ops run now are the gap
        wait_for(lambda: _models(daemon.socket, w.pid) == [], what="the subscription to pause")
        wait_for(lambda: _session_running(tmp_path), what="the session to start")
        w.run(20)  # 100 ops nobody streams
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        reply = json.loads(out)
        assert reply["ok"] and reply["data_types"] == ["ACL_API", "TASK_TIME"]
        [p] = reply["processes"]
        assert p["pid"] == w.pid and p["service"] == "tracesvc" and p["error"] is None
        [prof] = p["dirs"]
        prof_dir = Path(prof)
        assert prof_dir.name.startswith("PROF_") and prof_dir.is_dir() and prof_dir.parent.parent == tmp_path
        assert prof_dir.parent.stat().st_mode & 0o777 == 0o700  # mkdtemp: private to the service's user
        session = json.loads((prof_dir / "host" / "mock_session.json").read_text())
        assert session["pid"] == w.pid and session["dataTypeConfig"] == 3 and session["stopMonotonicNs"]
        cfg = json.loads((prof_dir / "device_0" / "mock_config.json").read_text())
        assert cfg["deviceId"] == 0
        assert p["models"] == [w.model] and p["pause_ns"] >= p["session_ns"] >= 1.5e9
        assert p["resumed_ts"] > p["paused_ts"]
        # the gap: every op run while the session ran, counted from what the session collected
        assert p["gap_records"] == 100
        assert json.loads((prof_dir / "device_0" / "mock_ops.json").read_text())["opsByModel"] == {str(w.model): 100}
        # the subscription resumed: records flow again, counted exactly
        wait_for(lambda: _models(daemon.socket, w.pid) == [w.model], what="the subscription to resume")
        w.run(10)
        wait_for(lambda: status(daemon.socket)["records_total"] == before + 50, what="records after the trace")
        # the gap is counted on the connection and in all
        a = _agent_of(daemon.socket, w.pid)
        assert a["trace_pauses"] == 1 and a["trace_paused_seconds"] >= 1.5
        assert (a["trace_gap_records"], a["trace_gap_unknown"]) == (100, 0)
        human = cli("status", "--socket", daemon.socket).stdout
        # the pause as counted (>= the 1.5 s asked for; more on a loaded machine), in seconds
        assert f"traced: 1 pauses, {a['trace_paused_seconds']:.1f}s, 100 ops not streamed" in human, human
        st = status(daemon.socket)
        assert st["traces"]["requested"] >= 1 and st["traces"]["trace_pauses"] >= 1
        assert st["traces"]["running"] == 0
        # ... and the stream got a line marking it, between the records before and after
        kinds: list[str] = []
        while kinds.count("op") < 50:
            recs, _, _ = stream.stream_frames()
            kinds += [r["kind"] for r in recs]
            gap = next((r for r in recs if r["kind"] == "gap"), None)
            if gap:
                assert gap["pid"] == w.pid and gap["pause_ns"] == p["pause_ns"] and gap["models"] == [w.model]
                assert gap["gap_records"] == 100
        assert kinds.count("gap") == 1 and kinds.index("gap") == 0
        # the human output; tail's line marks the gap where it was
        from aclprof.cli.trace import format_trace
        assert prof in format_trace(reply) and "ops not streamed" in format_trace(reply)
        wait_for(lambda: len(tail_lines) >= tail_before + 51, what="tail's lines after the trace")
        gap_at = [i for i, line in enumerate(tail_lines) if "-- gap" in line]
        assert gap_at == [tail_before], tail_lines[tail_before - 2:tail_before + 3]
        line = tail_lines[tail_before]
        assert f"pid {w.pid}" in line and "100 ops not streamed" in line and "for aclprof trace" in line
    finally:
        stream.close()
        tail.kill()
        tail.communicate(timeout=10)
        w.kill()


def test_the_mock_refuses_api_profiling_next_to_a_subscription(tmp_path):
    # 148047, the reason the agent pauses: checked on the mock, not assumed
    import aclprof
    from aclprof import mock
    from aclprof.binding.errors import AclError

    aclprof.use_mock()
    model = mock.load_model([{"name": "a", "type": "Relu", "duration_ns": 1000}])
    try:
        sub = aclprof.subscribe(model)
        try:
            with pytest.raises(AclError) as exc:
                aclprof.Profiler(tmp_path).start()
            assert exc.value.code == 148047
        finally:
            sub.close()
        with aclprof.Profiler(tmp_path) as prof:
            pass
        assert len(prof.result_dirs) == 1
    finally:
        mock.reset()


def test_data_type_names_are_aclprofs():
    from aclprof.binding.enums import DataType

    assert proto.DATA_TYPE_NAMES == tuple(DataType.__members__)


# ---- hostile --------------------------------------------------------------------------------


@pytest.fixture
def inproc(monkeypatch):
    import aclprofd.trace

    monkeypatch.setattr(aclprofd.trace, "REPLY_GRACE_S", 0.5)
    with InProcess() as d:
        yield d


@pytest.mark.parametrize("req, words", [
    ({"service": "x", "duration_s": 0.01}, "out of range"),
    ({"service": "x", "duration_s": 301}, "out of range"),
    ({"service": "x", "duration_s": float("nan")}, "out of range"),
    ({"service": "x", "duration_s": "1"}, "out of range"),
    ({"service": "x", "data_types": ["NOPE"]}, "unknown data types"),
    ({"service": "x", "data_types": []}, "non-empty"),
    ({"service": 5}, "service must be"),
    ({"service": "x" * 300}, "service must be"),
    ({"pid": -3}, "pid must be"),
    ({}, "needs a service or a pid"),
    ({"service": "nobody"}, "no connected agent matches service 'nobody'; connected: old (pid"),
])
def test_bad_requests_are_refused_with_a_reason(inproc, req, words):
    old = agent(inproc.socket, service="old")
    try:
        reply = _trace(inproc.socket, **req)
        assert reply["ok"] is False and words in reply["error"], reply
        assert status(inproc.socket)["traces"]["requested"] == 0
    finally:
        old.close()


def test_cli_usage_errors_exit_2(daemon):
    for args in (["--duration", "0.05s"], ["--duration", "6m"], ["--data-types", "ACL_API,BOGUS"],
                 ["--pid", "x"]):
        r = cli("trace", "--service", "s", *args, "--socket", daemon.socket)
        assert r.returncode == 2, (args, r.stderr)
    r = cli("trace", "--service", "nobody", "--duration", "1s", "--socket", daemon.socket)
    assert r.returncode == 1 and "error: trace refused: no connected agent matches service 'nobody'" in r.stderr
    r = cli("trace", "--service", "nobody", "--duration", "1s", "--json", "--socket", daemon.socket)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False


def test_old_agent_never_answers_and_is_reported(inproc):
    old = agent(inproc.socket, service="old")  # a wire agent that ignores TRACE_START
    try:
        t0 = time.monotonic()
        reply = _trace(inproc.socket, service="old", duration_s=0.2)
        assert time.monotonic() - t0 < 5
        [p] = reply["processes"]
        assert reply["ok"] is False and "no reply within 0.7 s (agent too old" in p["error"]
        # it did get the request
        k, payload = old.recv()
        assert k == Kind.TRACE_START and decode_json(payload)["duration_s"] == 0.2
    finally:
        old.close()


def test_two_traces_at_once_the_second_is_refused(inproc, tmp_path):
    old = agent(inproc.socket, service="old")
    first = Client(inproc.socket)
    try:
        first.send_json(Kind.TRACE, {"service": "old", "duration_s": 2.0})
        wait_for(lambda: status(inproc.socket)["traces"]["running"] == 1)
        reply = _trace(inproc.socket, service="old")
        assert reply["ok"] is False and "already tracing" in reply["error"], reply
        # the agent answers the first: it ends at once, with its result
        k, payload = old.recv()
        tid = decode_json(payload)["trace_id"]
        prof = tmp_path / f"aclprof-trace-{tid}-x" / "PROF_x"  # where the agent makes it (trace_route.check_dirs)
        prof.mkdir(parents=True)
        old.send_json(Kind.TRACE_DONE, {"trace_id": tid, "dirs": [str(prof)], "pause_ns": 5,
                                        "models": [1], "gap_records": 7})
        k, payload = first.recv()
        done = decode_json(payload)
        assert k == Kind.TRACE_REPLY and done["ok"] and done["processes"][0]["dirs"] == [str(prof)]
        a = status(inproc.socket)["agents"][0]
        assert (a["trace_pauses"], a["trace_gap_records"]) == (1, 7)
    finally:
        first.close()
        old.close()


def test_agent_that_dies_mid_trace_is_answered_with_its_error(daemon, tmp_path):
    w = Worker(daemon.socket, "--service", "dies", "--trace-dir", str(tmp_path))
    try:
        # registered first: an empty model list below must mean "paused by the trace", not "not
        # connected yet" (under load the trace then found no process and replied with none)
        wait_for(lambda: _models(daemon.socket, w.pid) == [w.model], what="the worker's subscription")
        proc = _cli_popen("trace", "--service", "dies", "--duration", "20s", "--json", "--socket", daemon.socket)
        wait_for(lambda: _models(daemon.socket, w.pid) == [], what="the trace to start")
        t0 = time.monotonic()
        w.kill()
        out, err = proc.communicate(timeout=15)
        assert time.monotonic() - t0 < 10
        assert proc.returncode == 1, err
        [p] = json.loads(out)["processes"]
        assert p["pid"] == w.pid and "connection closed during the trace" in p["error"]
        assert status(daemon.socket)["traces"]["running"] == 0
    finally:
        w.kill()


@pytest.mark.parametrize("bad", [
    {"trace_id": "1"}, {"trace_id": 1, "pause_ns": -1}, {"trace_id": 1, "dirs": "x"},
    {"trace_id": 1, "dirs": ["a"] * 100}, {"trace_id": 1, "gap_records": 1.5}, {"trace_id": 1, "error": 3},
    {"trace_id": 1, "pause_ns": 10**400}, {"trace_id": 1, "pause_ns": 1, "gap_records": 2**63},
    {"trace_id": 1, "session_ns": True}, {"trace_id": 1, "models": ["x"]},
])
def test_malformed_trace_done_closes_that_agent_only(inproc, bad):
    good = agent(inproc.socket, service="good")
    evil = agent(inproc.socket, service="evil")
    try:
        evil.send_json(Kind.TRACE_DONE, bad)
        assert evil.closed_by_peer(5)
        assert [a["service"] for a in status(inproc.socket)["agents"]] == ["good"]
    finally:
        good.close()
        evil.close()


def test_unrequested_trace_done_is_counted_not_fatal(inproc):
    a = agent(inproc.socket, service="s")
    try:
        a.send_json(Kind.TRACE_DONE, {"trace_id": 99, "pause_ns": 2_000_000_000, "gap_records": None,
                                      "paused_ts": float("inf")})
        st = wait_for(lambda: (s := status(inproc.socket))["traces"]["trace_pauses"] and s)
        assert st["agents"][0]["trace_gap_unknown"] == 1
        assert st["agents"][0]["trace_paused_seconds"] == 2.0
    finally:
        a.close()


def test_a_flood_of_trace_done_does_not_grow_a_stalled_stream_client():
    with InProcess(stream_buffer_bytes=65536) as d:
        reader = Client(d.socket)
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.send_json(Kind.STREAM, {"filter": {}})  # ... and never reads
        a = agent(d.socket, service="evil")
        try:
            frame = encode_json(Kind.TRACE_DONE, {"trace_id": 7, "pause_ns": 1, "gap_records": 1})
            for _ in range(20):
                a.sock.sendall(frame * 1000)
            st = wait_for(lambda: (s := status(d.socket))["traces"]["trace_pauses"] == 20_000 and s)
            assert st["traces"]["gap_lines_skipped"] > 10_000
            assert st["memory"]["used_bytes"] < 64 * 1024 + 64 * 1024, st["memory"]
        finally:
            a.close()
            reader.close()


def test_a_daemon_that_stops_answers_the_waiting_client_first(inproc):
    old = agent(inproc.socket, service="old")
    c = Client(inproc.socket)
    try:
        c.send_json(Kind.TRACE, {"service": "old", "duration_s": 30.0})
        wait_for(lambda: status(inproc.socket)["traces"]["running"] == 1)
        inproc.stop()
        k, payload = c.recv()
        [p] = decode_json(payload)["processes"]
        assert k == Kind.TRACE_REPLY and "the daemon stopped before this process answered" in p["error"]
    finally:
        c.close()
        old.close()


def test_trace_from_a_control_client_that_leaves_early_still_ends(inproc):
    old = agent(inproc.socket, service="old")
    c = Client(inproc.socket)
    c.send_json(Kind.TRACE, {"service": "old", "duration_s": 0.1})
    wait_for(lambda: status(inproc.socket)["traces"]["running"] == 1)
    c.close()
    wait_for(lambda: status(inproc.socket)["traces"]["running"] == 0, what="the timeout to end it")
    old.close()


def test_a_flood_of_trace_requests_is_refused_quickly(inproc):
    old = agent(inproc.socket, service="old")
    c = Client(inproc.socket)
    try:
        c.send_json(Kind.TRACE, {"service": "old", "duration_s": 5.0})
        wait_for(lambda: status(inproc.socket)["traces"]["running"] == 1)
        t0 = time.monotonic()
        for _ in range(200):
            reply = _trace(inproc.socket, service="old")
            assert "already tracing" in reply["error"]
        assert time.monotonic() - t0 < 20
        assert status(inproc.socket)["traces"]["refused"] == 200
    finally:
        c.close()
        old.close()


def test_non_admin_is_refused(tmp_path):
    import test_daemon_security as sec

    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user")
    gen = sec.other_user.__wrapped__()
    uid, gid, group = next(gen)
    try:
        root = sec._daemon_root(gid)
        from helpers.daemons import running

        with running(root, "--socket-group", group) as d:
            old = agent(d.socket, service="old")
            got = sec._as_user(uid, gid, lambda: sec._try(d.socket, Kind.TRACE, {"service": "old", "duration_s": 1}))
            assert got["closed"] and "TRACE refused" in got["error"] and f"uid {uid}" in got["error"]
            assert status(d.socket)["traces"]["requested"] == 0
            old.close()
    finally:
        next(gen, None)
