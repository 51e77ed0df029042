"""Request bills through the stack (issue 25): REQUEST_BILL frames from the agent, the
daemon's bounded per-service store and STATUS, an old daemon, forged frames."""

from __future__ import annotations

import json
import socket

import pytest
from helpers.daemons import Client, InProcess, status
from helpers.procs import wait_for

import aclprof.agent as agent
from aclprof.agent.bills import Bill
from aclprof.agent.billsend import OTHER, bill_payload
from aclprof.protocol.wire import REQUEST_BILL_MAX_TYPES, Kind


def _bill(rid: str, wall: int, types: int = 2, **attrs: str) -> Bill:
    by_type = {f"T{i}": (1000 * (i + 1), i + 1) for i in range(types)}
    return Bill(request_id=rid, key=1, attrs=attrs, traceparent=None, start_ns=0, end_ns=wall,
                device_ns=sum(v[0] for v in by_type.values()), ops=sum(v[1] for v in by_type.values()),
                by_type=by_type, slowest=("T1", "op1", 2000) if types > 1 else None, models=(3,))


@pytest.fixture
def daemon():
    with InProcess() as d:
        yield d
    agent.stop(2)


def test_bills_reach_status_slowest_first(daemon):
    agent.start(daemon.socket, service="svc-bills")
    agent.report_bills([_bill("fast", 10_000, version="A"), _bill("slow", 90_000, version="B")])
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == 2, 10, what="the bills in STATUS")
    rb = status(daemon.socket)["request_bills"]
    assert [b["id"] for b in rb["slowest"]] == ["slow", "fast"]
    slow = rb["slowest"][0]
    assert slow["service"] == "svc-bills" and slow["attrs"] == {"version": "B"}
    assert slow["types"] == [["T1", 2000, 2], ["T0", 1000, 1]] and slow["slowest"] == ["T1", "op1", 2000]
    assert agent.stats().bills_queued == 2 and agent.stats().bills_unsent == 0


def test_an_old_daemon_is_never_sent_bills(daemon, monkeypatch):
    from aclprofd import handshake

    monkeypatch.setattr(handshake, "PROTOCOL_VERSION", 3)
    agent.start(daemon.socket, service="svc-old")
    wait_for(lambda: agent.stats().connected, 10, what="connected")
    agent.report_bills([_bill("a", 1), _bill("b", 2)])
    wait_for(lambda: agent.stats().bills_unsent == 2, 10, what="held back")
    s = status(daemon.socket)
    assert s["request_bills"]["total"] == 0 and s["protocol_errors"] == 0
    assert agent.stats().connections == 1


@pytest.mark.parametrize("payload", [
    {"id": 5, "wall_ns": 1, "device_ns": 1, "ops": 1},
    {"id": "x", "wall_ns": -1, "device_ns": 1, "ops": 1},
    {"id": "x", "wall_ns": 1, "device_ns": 1},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "types": [["T", 1]]},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "types": [["T", 1, 1]] * 18},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "attrs": {"k": 1}},
    {"id": "x" * 1025, "wall_ns": 1, "device_ns": 1, "ops": 1},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "dropped_before": 2**70},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "start_unix_ns": -1},
    {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1, "start_unix_ns": "1700000000"},
])
def test_a_forged_bill_costs_only_its_connection(daemon, payload):
    bad = Client(daemon.socket, "agent", service="forger")
    bad.send_json(Kind.REQUEST_BILL, payload)
    assert bad.closed_by_peer()
    wait_for(lambda: status(daemon.socket)["protocol_errors"] == 1, 10, what="the protocol error")
    good = Client(daemon.socket, "agent", service="good")
    good.send_json(Kind.REQUEST_BILL, {"id": "ok", "wall_ns": 5, "device_ns": 1, "ops": 1, "dropped_before": 3})
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == 4, 10, what="the good bill and its drops")
    rb = status(daemon.socket)["request_bills"]
    assert rb["agent_dropped"] == 3 and [b["service"] for b in rb["slowest"]] == ["good"]


def test_the_store_is_bounded_per_service_and_in_services():
    from aclprofd.bills import RequestBills
    from aclprofd.conn import Conn

    a, b = socket.socketpair()
    try:
        conn = Conn(a, "c1")
        conn.pid, conn.host = 1, "h"
        store = RequestBills(keep=4, max_services=2)
        for svc in ("s1", "s2", "s3"):
            conn.service = svc
            for i in range(10):
                store.bill(conn, memoryview(json.dumps(bill_payload(_bill(f"{svc}-{i}", i))).encode()))
        assert store.total == 30 and store.services_refused == 10
        assert sorted(store.by_service) == ["s1", "s2"] and all(len(d) == 4 for d in store.by_service.values())
        assert [b["id"] for b in store.slowest(2, service="s2")] == ["s2-9", "s2-8"]
    finally:
        a.close()
        b.close()


def test_a_bill_payload_keeps_the_top_types_and_folds_the_rest():
    p = bill_payload(_bill("many", 5, types=REQUEST_BILL_MAX_TYPES + 4))
    assert len(p["types"]) == REQUEST_BILL_MAX_TYPES + 1
    assert p["types"][0][0] == f"T{REQUEST_BILL_MAX_TYPES + 3}"  # the most device time first
    other = p["types"][-1]
    assert other == [OTHER, 1000 + 2000 + 3000 + 4000, 1 + 2 + 3 + 4]


def test_frame_kinds_are_unique():
    """An IntEnum makes a repeated value an alias: REQUEST_BILL must not be TRACE_START."""
    assert len({k.value for k in Kind}) == len(list(Kind)) == len(Kind.__members__)


def test_aclprof_requests_lists_the_slowest_with_filters(daemon, capsys):
    from aclprof.cli.main import main

    agent.start(daemon.socket, service="svc-cli")
    agent.report_bills([_bill("fast-a", 10_000, version="A"), _bill("slow-b", 90_000, version="B"),
                        _bill("mid-b", 50_000, version="B")])
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == 3, 10, what="the bills")
    assert main(["requests", "--socket", daemon.socket]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[1:]] == ["slow-b", "mid-b", "fast-a"]
    assert "T1 2.0us x2" in lines[1] and "svc-cli" in lines[1]
    assert main(["requests", "--socket", daemon.socket, "--attr", "version=B", "--top", "1", "--json"]) == 0
    (only,) = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert only["id"] == "slow-b" and only["attrs"] == {"version": "B"}
    assert main(["requests", "--socket", daemon.socket, "--model", "4"]) == 0
    assert "no request bills kept (received 3)" in capsys.readouterr().out
    assert main(["requests", "--socket", daemon.socket, "--attr", "novalue"]) == 2


def test_a_malformed_requests_query_is_refused(daemon):
    c = Client(daemon.socket, "control")
    c.send_json(Kind.REQUESTS, {"top": 0})
    assert c.closed_by_peer()
    c = Client(daemon.socket, "control")
    c.send_json(Kind.REQUESTS, {"until": "now"})
    assert c.closed_by_peer()
