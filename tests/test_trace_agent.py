"""The agent's side of ``aclprof trace`` in this process (aclprof.agent.trace): every path
resumes the subscriptions, watch()/unwatch() during a trace, stop() during a trace, one
trace at a time, bad TRACE_START; against an in-process daemon."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agent_worker import FIXED_OPS
from helpers.daemons import Client, InProcess, status
from helpers.procs import aclprof_threads, cli, wait_for

import aclprof
from aclprof import agent as agent_mod
from aclprof import mock
from aclprof.protocol.wire import Kind

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def daemon() -> Iterator[InProcess]:
    with InProcess() as d:
        yield d


@pytest.fixture
def agent(tmp_path) -> Iterator[Any]:
    aclprof.use_mock()
    mock.reset()
    yield agent_mod
    agent_mod.stop(timeout=1.0)
    mock.reset()


def _models(sock: str) -> list[int]:
    agents = status(sock)["agents"]
    return [m["model_id"] for m in agents[0]["models"]] if agents else []


def _trace(sock: str, duration: float = 0.3, **extra: Any) -> dict:
    c = Client(sock)
    c.sock.settimeout(30)
    try:
        return c.request(Kind.TRACE, {"service": "svc", "duration_s": duration, **extra})
    finally:
        c.close()


def _start(agent: Any, sock: str, tmp_path: Any) -> int:
    agent.start(sock, service="svc", backoff_max=0.05, trace_dir=tmp_path)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    wait_for(lambda: _models(sock) == [model], what="WATCH")
    return model


def test_a_failed_session_still_resumes_the_subscription(daemon, agent, tmp_path):
    model = _start(agent, daemon.socket, tmp_path)
    mock.fail_next("aclprofStart", 1, 500005)
    reply = _trace(daemon.socket)
    [p] = reply["processes"]
    assert reply["ok"] is False and "profiling session failed" in p["error"] and "500005" in p["error"]
    assert p["models"] == [model] and p["dirs"] == []
    assert list(tmp_path.iterdir()) == []  # the failed session's empty directory is gone
    # resumed: records flow again, and the library is back to a subscription only
    wait_for(lambda: _models(daemon.socket) == [model], what="the subscription to resume")
    assert mock.mode() == "SUBSCRIBE"
    before = status(daemon.socket)["records_total"]
    mock.execute(model, 4)
    wait_for(lambda: status(daemon.socket)["records_total"] == before + 20)


def test_watch_during_a_trace_is_done_after_it_and_unwatch_drops_a_paused_model(daemon, agent, tmp_path):
    first = _start(agent, daemon.socket, tmp_path)
    second = mock.load_model(FIXED_OPS)
    third = mock.load_model(FIXED_OPS)
    agent.watch(third)
    wait_for(lambda: sorted(_models(daemon.socket)) == sorted([first, third]))
    c = Client(daemon.socket)
    try:
        c.send_json(Kind.TRACE, {"service": "svc", "duration_s": 1.0})
        wait_for(lambda: mock.mode() == "API_CTRL", what="the session to start")
        agent.watch(second)          # cannot subscribe now (148047): deferred, no error
        agent.unwatch(third)         # paused: it is not resumed
        with pytest.raises(ValueError, match="already watched"):
            agent.watch(first)
        with pytest.raises(ValueError, match="not watched"):
            agent.unwatch(12345)
        k, payload = c.recv()
        assert k == Kind.TRACE_REPLY and b'"ok":true' in bytes(payload)
    finally:
        c.close()
    wait_for(lambda: sorted(_models(daemon.socket)) == sorted([first, second]), what="the resumed set")
    assert agent.stats().models == tuple(sorted([first, second]))


def test_stop_during_a_trace_ends_it_at_once(daemon, agent, tmp_path):
    _start(agent, daemon.socket, tmp_path)
    c = Client(daemon.socket)
    try:
        c.send_json(Kind.TRACE, {"service": "svc", "duration_s": 60.0})
        wait_for(lambda: mock.mode() == "API_CTRL", what="the session to start")
        t0 = time.monotonic()
        agent.stop(timeout=1.0)
        assert time.monotonic() - t0 < 5
        assert mock.mode() == "OFF"  # the session was stopped and finalized; nothing resubscribed
        assert not [t for t in aclprof_threads() if t.name == "aclprof-trace"]
        # the agent's last flush carried its TRACE_DONE: the client learns why it ended early
        k, payload = c.recv()
        assert k == Kind.TRACE_REPLY and b"the agent stopped before the trace's end" in bytes(payload)
    finally:
        c.close()


def test_one_trace_at_a_time_and_bad_trace_start(daemon, agent, tmp_path):
    _start(agent, daemon.socket, tmp_path)
    a = agent_mod._agent
    replies: list[dict] = []
    done = threading.Event()
    real = a._tracer.reply

    def capture(obj: dict) -> None:
        replies.append(obj)
        if len(replies) == 3:
            done.set()
        real(obj)

    a._tracer.reply = capture
    a._tracer.on_start({"trace_id": 1, "duration_s": 0.5, "data_types": ["ACL_API"]})
    a._tracer.on_start({"trace_id": 2, "duration_s": 0.5, "data_types": ["ACL_API"]})
    a._tracer.on_start({"trace_id": 3, "duration_s": 0, "data_types": ["ACL_API"]})
    a._tracer.on_start({"trace_id": "x"})  # ignored: no id to answer to
    assert done.wait(10)
    by_id = {r["trace_id"]: r for r in replies}
    assert "already tracing (trace 1)" in by_id[2]["error"]
    assert "bad TRACE_START" in by_id[3]["error"] and "out of range" in by_id[3]["error"]
    assert by_id[1].get("error") is None and len(by_id[1]["dirs"]) == 1 and by_id[1]["gap_records"] is None
    # ACL_API only: the mock collects no task time, so the gap is unknown, not 0
    assert len(replies) == 3
    # the daemon got the unrequested replies: the pause is counted all the same
    wait_for(lambda: status(daemon.socket)["traces"]["trace_pauses"] == 1)


def _devices(sock: str) -> list[tuple[int, Any]]:
    agents = status(sock)["agents"]
    return [(m["model_id"], m.get("device")) for m in agents[0]["models"]] if agents else []


def _trace_with_ops_in_the_gap(sock: str, trace_dir: Any, model: int, runs: int) -> dict:
    """A trace of 1 s during which ``model`` runs ``runs`` times (ops nobody streams)."""
    c = Client(sock)
    c.sock.settimeout(30)
    try:
        c.send_json(Kind.TRACE, {"service": "svc", "duration_s": 1.0})
        wait_for(lambda: any(trace_dir.glob("aclprof-trace-*/PROF_*/host/mock_session.json")),
                 what="the session to start")
        mock.execute(model, runs)
        k, payload = c.recv()
        assert k == Kind.TRACE_REPLY
        return json.loads(bytes(payload))
    finally:
        c.close()


def test_a_model_on_device_1_watched_without_device_is_reported_and_traced_on_device_1(daemon, agent, tmp_path):
    """agent.watch(id) with no device= on a thread without a current device recorded device
    0: STATUS said "on device 0" and a trace profiled device 0, so the 100 ops run on
    device 1 during its pause were counted as "0 ops not streamed". The records' devId
    (filled by the mock) names the device; the daemon is told, and the trace profiles it."""
    agent.start(daemon.socket, service="svc", backoff_max=0.05, trace_dir=tmp_path)
    model = mock.load_model(FIXED_OPS, device=1)
    agent.watch(model)
    mock.execute(model, 2)
    wait_for(lambda: _devices(daemon.socket) == [(model, 1)], what="device 1 learned from the records")
    assert f"model {model} on device 1" in cli("status", "--socket", daemon.socket).stdout
    reply = _trace_with_ops_in_the_gap(daemon.socket, tmp_path, model, 20)
    [p] = reply["processes"]
    assert p["error"] is None and p["models"] == [model]
    assert p["gap_records"] == 100  # 20 runs of 5 ops, all on device 1
    [prof] = p["dirs"]
    assert (Path(prof) / "device_1" / "mock_ops.json").is_file() and not (Path(prof) / "device_0").exists()
    wait_for(lambda: _devices(daemon.socket) == [(model, 1)], what="resumed on device 1")
    a = status(daemon.socket)["agents"][0]
    assert (a["trace_gap_records"], a["trace_gap_unknown"]) == (100, 0)


def test_a_device_nothing_tells_is_reported_unknown_not_0(daemon, agent, tmp_path):
    """As on CANN's main path, records leave devId 0 ("not filled") and this thread has no
    current device: the device is unknown, and said so; a trace's gap is unknown, not 0."""
    mock.set_devid_zero(True)
    agent.start(daemon.socket, service="svc", backoff_max=0.05, trace_dir=tmp_path)
    model = mock.load_model(FIXED_OPS, device=1)
    agent.watch(model)
    mock.execute(model, 2)
    wait_for(lambda: (status(daemon.socket)["agents"] or [{}])[0].get("records") == 10, what="the records")
    assert _devices(daemon.socket) == [(model, None)]
    assert f"model {model} on an unknown device" in cli("status", "--socket", daemon.socket).stdout
    reply = _trace_with_ops_in_the_gap(daemon.socket, tmp_path, model, 20)
    [p] = reply["processes"]
    assert p["error"] is None and p["models"] == [model] and p["gap_records"] is None


def test_watch_without_device_takes_the_threads_current_device(daemon, agent, tmp_path):
    """The CANN way to know it: the thread that loaded the model has its device current."""
    from aclprof.binding import lowlevel

    mock.set_devid_zero(True)  # nothing from the records
    lowlevel.rt_set_device(2)
    try:
        agent.start(daemon.socket, service="svc", backoff_max=0.05, trace_dir=tmp_path)
        model = mock.load_model(FIXED_OPS, device=2)
        agent.watch(model)
        wait_for(lambda: _devices(daemon.socket) == [(model, 2)], what="WATCH on device 2")
    finally:
        lowlevel.rt_reset_device(2)
