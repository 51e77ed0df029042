"""Op failures through the stack (issue 24): the agent's OP_FAILURE frames, the daemon's
counts, STATUS and /metrics, an old daemon, forged frames and the bounds."""

from __future__ import annotations

import time

import pytest
from helpers.daemons import Client, InProcess, status
from helpers.opfailures import OPS, execute
from helpers.procs import wait_for

import aclprof.agent as agent
from aclprof import mock
from aclprof.protocol.wire import Kind


@pytest.fixture
def daemon():
    with InProcess() as d:
        yield d
    agent.stop(2)


def test_a_failure_reaches_status_and_metrics_with_its_model_and_op_type(daemon):
    from aclprofd.metrics import DaemonCollector

    model = mock.load_model(OPS)
    agent.start(daemon.socket, service="svc-a", failures=True)
    agent.watch(model, labels={"model": "resnet"})
    execute(model)  # the daemon learns the op names and types of this model from its records
    wait_for(lambda: status(daemon.socket)["records_total"] == 2, 10, what="records")
    mock.inject_op_failure(model, "relu1")
    assert execute(model) == 1
    wait_for(lambda: status(daemon.socket)["failures"].get("total") == 1, 10, what="the failure in STATUS")
    f = status(daemon.socket)["failures"]
    assert f["by_key"] == [{"service": "svc-a", "device": 0, "model": "resnet", "op_type": "Relu",
                            "code": 507015, "count": 1}]
    (last,) = f["last"]
    assert (last["op_name"], last["task"], last["stream"], last["service"]) == ("relu1", 1, model, "svc-a")
    assert last["inputs"] == [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]
    assert f["unresolved"] == 0 and f["agent_dropped"] == 0
    families = {m.name: m for m in DaemonCollector(daemon.daemon).fixed_families(daemon.daemon.published)}
    (sample,) = families["aclprofd_op_failures"].samples
    assert sample.labels == {"service": "svc-a", "device": "0", "model": "resnet", "op_type": "Relu",
                             "code": "507015"} and sample.value == 1
    st = agent.stats()
    assert (st.failures_seen, st.failures_queued, st.failures_dropped, st.failures_unsent) == (1, 1, 0, 0)
    # the records of the op before the failure arrived; the failed op's did not. Records and
    # failures travel apart (the reader may still be gathering that record, up to its 10 ms
    # AGENT_COALESCE_NS, when the failure is sent): wait for it, then the flush says no more came
    wait_for(lambda: status(daemon.socket)["records_total"] == 3, 10, what="the record before the failure")
    assert agent.stop(5).records_sent == 3


def test_a_failure_of_an_op_the_daemon_never_saw_is_unresolved(daemon):
    model = mock.load_model(OPS)
    agent.start(daemon.socket, service="svc-b", failures=True)
    mock.inject_op_failure(model, "conv1")  # not watched: no records, no names
    execute(model)
    wait_for(lambda: status(daemon.socket)["failures"].get("total") == 1, 10, what="the failure")
    f = status(daemon.socket)["failures"]
    assert f["unresolved"] == 1 and f["by_key"][0]["model"] == "" and f["by_key"][0]["op_type"] == ""
    assert f["last"][0]["op_name"] == "conv1"


def test_an_old_daemon_is_never_sent_op_failure(daemon, monkeypatch):
    """A daemon of protocol 2 closes a connection on an unknown kind: the agent holds the
    frames back and counts them."""
    from aclprofd import handshake

    monkeypatch.setattr(handshake, "PROTOCOL_VERSION", 2)
    model = mock.load_model(OPS)
    agent.start(daemon.socket, service="svc-c", failures=True)
    agent.watch(model)
    wait_for(lambda: agent.stats().connected, 10, what="connected")
    mock.inject_op_failure(model, "relu1", every=1)
    assert execute(model, 3) == 3
    wait_for(lambda: agent.stats().failures_unsent == 3, 10, what="held back")
    s = status(daemon.socket)
    assert s["failures"]["total"] == 0 and s["protocol_errors"] == 0
    assert agent.stats().connections == 1, "the connection was never closed"


@pytest.mark.parametrize("payload", [
    {"device": -1, "stream": 1, "task": 1, "thread": 1, "code": 507015},
    {"device": 0, "stream": 1, "task": 1, "thread": 1},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "op_name": 5},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "op_name": "x" * 1025},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "dropped_before": 2**70},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "inputs": [[1, 2, [1] * 33]]},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "inputs": [[1, 2]] * 1},
    {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 1, "outputs": [[1, 2, None]] * 65},
])
def test_a_forged_op_failure_costs_only_its_connection(daemon, payload):
    bad = Client(daemon.socket, "agent", service="forger")
    bad.send_json(Kind.OP_FAILURE, payload)
    assert bad.closed_by_peer()
    wait_for(lambda: status(daemon.socket)["protocol_errors"] == 1, 10, what="the protocol error")
    good = Client(daemon.socket, "agent", service="good")
    good.send_json(Kind.OP_FAILURE, {"device": 0, "stream": 1, "task": 1, "thread": 1, "code": 507015,
                                     "op_name": "x", "dropped_before": 4})
    wait_for(lambda: status(daemon.socket)["failures"].get("total") == 5, 10, what="the good frame and its drops")
    f = status(daemon.socket)["failures"]
    assert f["agent_dropped"] == 4 and f["by_key"][0]["service"] == "good"


def test_the_count_keys_are_bounded():
    import json
    import socket

    from aclprofd.aggregate.keys import KeyRegistry
    from aclprofd.conn import Conn
    from aclprofd.failures import OTHER, Failures
    from aclprofd.ratelimit import LogLimiter

    a, b = socket.socketpair()
    try:
        conn = Conn(a, "c1")
        conn.service, conn.pid, conn.host = "svc", 1, "h"
        f = Failures(KeyRegistry(16, lambda old, new: None), LogLimiter(), max_keys=3)
        for code in range(5):
            f.failure(conn, memoryview(json.dumps({"device": 0, "stream": 1, "task": 2, "thread": 3,
                                                   "code": code, "op_name": None}).encode()))
        assert len(f.counts) == 4 and f.total == 5 and f.keys_refused == 2
        assert f.counts[(OTHER, 0, "", OTHER, 0)] == 2
        assert len(f.summary()["last"]) == 5 and f.unresolved == 5
    finally:
        a.close()
        b.close()


def test_failure_storm_with_no_daemon_is_bounded_and_counted(tmp_path):
    from aclprof.agent.failures import MAX_PENDING

    model = mock.load_model(OPS)
    agent.start(str(tmp_path / "nobody.sock"), service="storm", failures=True)
    try:
        mock.inject_op_failure(model, "relu1", every=1)
        n = MAX_PENDING + 50
        assert execute(model, n) == n
        wait_for(lambda: agent.stats().failures_seen == n, 20, what="every failure handed over")
        st = agent.stats()
        assert st.failures_queued == MAX_PENDING and st.failures_dropped == 50
    finally:
        t0 = time.monotonic()
        agent.stop(1)
        assert time.monotonic() - t0 < 10
    # no daemon ever came: the queued frames were never sent, and are counted dropped too
    assert agent.stats().failures_dropped == 50 + MAX_PENDING


def test_a_storms_last_drops_reach_a_daemon_that_comes_later():
    """The failures dropped after the last queued frame are counted in the newest waiting frame,
    so a daemon counts every one even though no failure follows them (a count carried by the
    *next* frame never arrived: 50 failures missing from the daemon's total)."""
    import os

    from helpers.procs import short_tmpdir

    from aclprof.agent.failures import MAX_PENDING

    model = mock.load_model(OPS)
    sock = os.path.join(short_tmpdir(), "d.sock")
    agent.start(sock, service="storm", failures=True)
    try:
        mock.inject_op_failure(model, "relu1", every=1)
        n = MAX_PENDING + 50
        assert execute(model, n) == n
        wait_for(lambda: agent.stats().failures_seen == n, 20, what="every failure handed over")
        assert agent.stats().failures_dropped == 50
        with InProcess(socket=sock):
            wait_for(lambda: status(sock)["failures"].get("total") == n, 20, what="every failure counted")
            f = status(sock)["failures"]
            assert f["agent_dropped"] == 50 and f["total"] == n
    finally:
        agent.stop(1)
