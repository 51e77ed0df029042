"""Views of request bills (issue 25): bills in ``aclprof tail`` as they close, per-model
request device-time histograms in /metrics, ``aclprof diff`` by request attribute, and the
detector and flight recorder naming the requests a regression hurt.

Bills reach a real daemon through the public path: ``aclprof.agent.report_bills``."""

from __future__ import annotations

import time

import pytest
from helpers.daemons import Client, InProcess, status
from helpers.procs import wait_for

import aclprof.agent as agent
from aclprof.agent.bills import Bill
from aclprof.protocol.wire import Kind


def _bill(rid: str, wall: int, device: int | None = None, models: tuple[int, ...] = (3,), **attrs: str) -> Bill:
    dev = wall // 2 if device is None else device
    by_type = {"MatMul": (dev - dev // 4, 3), "Relu": (dev // 4, 1)} if dev else {}
    return Bill(request_id=rid, key=1, attrs=attrs, traceparent=None, start_ns=0, end_ns=wall, device_ns=dev,
                ops=4 if dev else 0, by_type=by_type, slowest=("MatMul", "fc1", dev // 2) if dev else None,
                models=models)


@pytest.fixture
def daemon():
    with InProcess() as d:
        yield d
    agent.stop(2)


def _lines(stream: Client, n: int, timeout: float = 10.0) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    stream.sock.settimeout(timeout)
    while len(out) < n and time.monotonic() < deadline:
        recs, _, kind = stream.stream_frames()
        assert kind != Kind.END
        out += recs
    return out


def test_tail_gets_each_bill_as_a_line_of_its_own_when_its_filter_takes_it(daemon):
    from aclprof.cli.tail import REQUEST_MARK, tail_line

    everything, by_model, other_model, by_type, other_service = (Client(daemon.socket) for _ in range(5))
    everything.send_json(Kind.STREAM, {"filter": {}})
    by_model.send_json(Kind.STREAM, {"filter": {"model": 5, "service": "svc-req"}})
    other_model.send_json(Kind.STREAM, {"filter": {"model": 4}})
    by_type.send_json(Kind.STREAM, {"filter": {"type": "MatMul"}})  # selects ops: a bill is not one
    other_service.send_json(Kind.STREAM, {"filter": {"service": "svc-b"}})
    try:
        wait_for(lambda: daemon.daemon.fanout.streaming == 5, 10, what="the streams")
        agent.start(daemon.socket, service="svc-req")
        agent.report_bills([_bill("req-1", 2_000_000, version="A"),
                            _bill("req-2", 8_000_000, models=(3, 5), version="B")])
        got = _lines(everything, 2)
        assert [(r["kind"], r["id"]) for r in got] == [("request", "req-1"), ("request", "req-2")]
        r2 = got[1]
        assert (r2["service"], r2["wall_ns"], r2["device_ns"], r2["ops"], r2["models"], r2["attrs"]) == \
            ("svc-req", 8_000_000, 4_000_000, 4, [3, 5], {"version": "B"})
        assert [r["id"] for r in _lines(by_model, 1)] == ["req-2"]
        for c in (other_model, by_type, other_service):
            c.sock.settimeout(0.3)
            with pytest.raises(TimeoutError):
                c.stream_frames()
        rb = status(daemon.socket)["request_bills"]
        assert rb["lines_sent"] == 3 and rb["lines_skipped"] == 0
        line = tail_line(r2, colour=False)
        assert line.startswith(f"{REQUEST_MARK} req-2 ")
        assert "wall 8.00ms device 4.00ms (50%) 4 ops | MatMul 3.00ms x3 Relu 1.00ms x1 | slowest MatMul fc1 2.00ms " \
               "| version=B" in line
        narrow = tail_line(r2, colour=False, width=70)
        assert len(narrow) <= 70 and narrow.startswith(f"{REQUEST_MARK} req-2 ") and "version" not in narrow
    finally:
        for c in (everything, by_model, other_model, by_type, other_service):
            c.close()
