"""Op failures in ``aclprof tail`` (issue 24): the daemon's ``{"kind": "failure"}`` STREAM
lines, in order after the records of the same connection, the tail's filters, and the line
the CLI renders."""

from __future__ import annotations

import time

import pytest
from helpers.daemons import Client, InProcess
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


def _read_until(stream: Client, pred, timeout: float = 10.0) -> list[dict]:
    """STREAM lines until one satisfies ``pred`` (all of them, in order)."""
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    stream.sock.settimeout(timeout)
    while time.monotonic() < deadline:
        recs, _, kind = stream.stream_frames()
        assert kind != Kind.END
        out += recs
        if any(pred(r) for r in recs):
            return out
    raise AssertionError(f"no such line in {out}")


def test_a_failure_line_comes_after_the_records_its_connection_sent_before_it(daemon):
    from helpers.daemons import agent as raw_agent
    from helpers.records import make_records

    from aclprof.protocol.wire import encode_batch, encode_json

    stream = Client(daemon.socket)
    stream.send_json(Kind.STREAM, {"filter": {}})
    a = raw_agent(daemon.socket, service="svc-raw")
    try:
        wait_for(lambda: daemon.daemon.fanout.streaming == 1, 10, what="the stream")
        # 40 records and the failure of the last op in one write: the daemon reads both in
        # one loop turn, the records still pending for the stream when the failure comes
        failure = {"device": 0, "stream": 1, "task": 2, "thread": 3, "code": 507015, "op_name": "fc1",
                   "inputs": [[1, 2, [4, 4]]], "outputs": []}
        a.sock.sendall(encode_batch(make_records(40)) + encode_json(Kind.OP_FAILURE, failure))
        lines = _read_until(stream, lambda r: r["kind"] == "failure")
        assert [r["kind"] for r in lines] == ["op"] * 40 + ["failure"]
        f = lines[-1]
        assert (f["service"], f["model"], f["model_id"], f["op_type"], f["op_name"], f["code_name"]) == \
            ("svc-raw", "1", 1, "MatMul", "fc1", "ACL_ERROR_RT_AICORE_EXCEPTION")
    finally:
        stream.close()
        a.close()


def test_a_failure_line_reaches_the_streams_whose_filters_take_it(daemon):
    model = mock.load_model(OPS)
    agent.start(daemon.socket, service="svc-a", failures=True)
    agent.watch(model, labels={"model": "resnet"})
    everything = Client(daemon.socket)
    everything.send_json(Kind.STREAM, {"filter": {}})
    by_type = Client(daemon.socket)
    by_type.send_json(Kind.STREAM, {"filter": {"service": "svc-a", "type": "Relu", "min_duration_ns": 10**9}})
    by_model = Client(daemon.socket)
    by_model.send_json(Kind.STREAM, {"filter": {"model": model, "device": 0, "name": "^relu"}})
    other_type = Client(daemon.socket)
    other_type.send_json(Kind.STREAM, {"filter": {"type": "^Conv2D$"}})
    other_service = Client(daemon.socket)
    other_service.send_json(Kind.STREAM, {"filter": {"service": "svc-b"}})
    try:
        # the daemon learns this model's op names and types from its records first
        execute(model)
        seen = _read_until(everything, lambda r: r.get("op_name") == "relu1")
        assert [r["kind"] for r in seen] == ["op", "op"]
        mock.inject_op_failure(model, "relu1")
        assert execute(model) == 1
        lines = _read_until(everything, lambda r: r["kind"] == "failure")
        # relu1's own record is dropped (as CANN does): the failure line is the only relu1
        assert [r["op_name"] for r in lines if r["kind"] == "op"] in ([], ["conv1"])
        f = lines[-1]
        assert (f["service"], f["device"], f["model"], f["op_type"], f["code"], f["code_name"]) == \
            ("svc-a", 0, "resnet", "Relu", 507015, "ACL_ERROR_RT_AICORE_EXCEPTION")
        assert f["model_id"] == model and f["pid"] > 0
        assert f["inputs"] == [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]
        # a failure has no duration: min_duration does not hide it (it hides every record here)
        assert [r["kind"] for r in _read_until(by_type, lambda r: r["kind"] == "failure")] == ["failure"]
        typed = _read_until(by_model, lambda r: r["kind"] == "failure")
        assert [(r["kind"], r["op_name"]) for r in typed] == [("op", "relu1"), ("failure", "relu1")]
        # a filter for another op type or another service does not take it: what they get
        # is records of later executions, never the failure line
        execute(model)
        rest: list[dict] = []
        while sum(r.get("op_name") == "conv1" for r in rest) < 3:
            rest += _read_until(other_type, lambda r: r.get("op_name") == "conv1")
        assert all(r["kind"] == "op" and r["op_type"] == "Conv2D" for r in rest), rest
        other_service.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            other_service.stream_frames()
    finally:
        for c in (everything, by_type, by_model, other_type, other_service):
            c.close()


def test_tail_renders_a_failure_line_that_stands_out():
    from aclprof.cli.tail import FAILURE_MARK, tail_layout, tail_line

    r = {"kind": "failure", "ts": 1764684000.25, "host": "h", "pid": 4242, "service": "svc-a", "device": 1,
         "stream": 3, "task": 7, "thread": 99, "code": 507015, "code_name": "ACL_ERROR_RT_AICORE_EXCEPTION",
         "op_name": "relu1", "op_type": "Relu", "model": "resnet", "model_id": 1,
         "inputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}],
         "outputs": [{"dtype": 0, "format": 2, "shape": None}]}
    line = tail_line(r, False)
    assert line.startswith(FAILURE_MARK + " ")
    for part in ("svc-a", "pid 4242", "dev 1", "model resnet", "Relu relu1", "507015 ACL_ERROR_RT_AICORE_EXCEPTION",
                 "in [float16[8x4x112x112x16] NC1HWC0]", "out [float[?] ND]"):
        assert part in line, (part, line)
    assert "\x1b[1;31m" + FAILURE_MARK in tail_line(r, True)
    # 80 and 40 columns: the marker, op type and code stay whole, the line fits
    for width in (80, 40):
        narrow = tail_line(r, False, tail_layout(width), width)
        assert len(narrow) <= width, (width, narrow)
        assert narrow.startswith(FAILURE_MARK) and "Relu" in narrow and "507015" in narrow, narrow
    # an old daemon's line without code_name, an op GE did not know: still a failure line
    bare = tail_line({"kind": "failure", "code": 507014, "task": 5, "op_name": None, "inputs": [], "outputs": []},
                     False)
    assert bare.startswith(FAILURE_MARK) and "507014 ACL_ERROR_RT_AICORE_TIMEOUT" in bare and "task 5" in bare


def test_failure_names_match_the_binding():
    from aclprof.binding import opfailure
    from aclprof.binding.errors import code_name
    from aclprof.protocol.failurenames import DTYPES, FAILURE_CODES, FORMATS

    assert all(code_name(c) == n for c, n in FAILURE_CODES.items())
    assert all(opfailure.enum_name("aclDataType", v) == n for v, n in DTYPES.items())
    assert all(opfailure.enum_name("aclFormat", v) == n for v, n in FORMATS.items())


def test_a_stream_that_does_not_read_gets_no_failure_lines_past_its_bound():
    import socket

    with InProcess(stream_buffer_bytes=65536) as d:
        try:
            reader = Client(d.socket)
            reader.send_json(Kind.STREAM, {"filter": {}})
            reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            a = Client(d.socket, "agent", service="storm")
            big = {"device": 0, "stream": 1, "task": 2, "thread": 3, "code": 507015, "op_name": "x" * 200,
                   "inputs": [[1, 2, [1] * 8]] * 16, "outputs": [[1, 2, [1] * 8]] * 16}
            n = 3000
            for i in range(n):
                a.send_json(Kind.OP_FAILURE, {**big, "task": i})
            wait_for(lambda: _failures(d.socket)["total"] == n, 20, what="every failure counted")
            f = _failures(d.socket)
            assert f["lines_skipped"] > 0 and f["lines_sent"] + f["lines_skipped"] == n
            assert status_ok(d.socket)
        finally:
            agent.stop(2)


def status_ok(path: str) -> bool:
    from helpers.daemons import status

    return status(path)["protocol_errors"] == 0


def _failures(path: str) -> dict:
    from helpers.daemons import status

    return status(path)["failures"]


def test_status_and_top_show_the_failures(daemon):
    from helpers.edgedata import screen_rows
    from helpers.procs import cli

    model = mock.load_model(OPS)
    agent.start(daemon.socket, service="svc-a", failures=True)
    agent.watch(model, labels={"model": "resnet"})
    execute(model)
    wait_for(lambda: _status(daemon.socket)["records_total"] == 2, 10, what="records")
    healthy = cli("top", "--once", "--window", "all", "--group", "type", "--socket", daemon.socket)
    assert healthy.returncode == 0 and "Count" in healthy.stdout and "Fail" not in healthy.stdout, healthy.stdout
    mock.inject_op_failure(model, "relu1", every=1)
    assert execute(model, 3) == 3
    wait_for(lambda: _failures(daemon.socket).get("total") == 3, 10, what="the failures")
    c = Client(daemon.socket)
    try:
        by_type = {r["key"]: r for r in c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type"})["rows"]}
        assert (by_type["Relu"]["failures"], by_type["Conv2D"]["failures"]) == (3, 0)
        (m,) = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "model"})["rows"]
        assert (m["model"], m["failures"]) == ("resnet", 3)
        (svc,) = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "service"})["rows"]
        assert svc["failures"] == 3
        # the request's filter applies: another op type's filter, another device's: none
        rows = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "service", "filter": {"type": "Conv"}})["rows"]
        assert [r["failures"] for r in rows] == [0]
        rows = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name", "filter": {"device": 1}})["rows"]
        assert rows == []
        by_name = {r["key"]: r["failures"]
                   for r in c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name"})["rows"]}
        assert by_name == {"conv1": 0, "relu1": 3}
    finally:
        c.close()
    top = cli("top", "--once", "--window", "all", "--group", "type", "--socket", daemon.socket)
    assert top.returncode == 0, top.stderr
    rows = screen_rows(top.stdout)
    assert "Fail" in top.stdout and rows["Relu"][-1] == "3" and rows["Conv2D"][-1] == "0", top.stdout
    st = cli("status", "--socket", daemon.socket)
    assert st.returncode == 0, st.stderr
    assert "op failures: 3 total" in st.stdout, st.stdout
    assert "3 x svc-a/resnet Relu dev 0 507015 ACL_ERROR_RT_AICORE_EXCEPTION" in st.stdout, st.stdout
    last = [line for line in st.stdout.splitlines() if line.startswith("  last ")]
    assert len(last) == 3 and "relu1: 507015" in last[0] and "in [float16[8x4x112x112x16] NC1HWC0]" in last[0]


def _status(path: str) -> dict:
    from helpers.daemons import status

    return status(path)
