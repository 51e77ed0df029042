"""Request bills as OTLP spans (issue 25; aclprof/exportfmt/otlp_traces.py, ``aclprof otlp
--traces``), received by PyPI ``oteltap`` (a real OTLP/HTTP receiver): each span's ids, parent,
times, attributes and events equal to its bill, end to end from requests marked on the mock
through the agent and a real daemon; the daemon's REQUESTS ``until``/``matched``; the counted
bills that cannot be spans; the command's errors."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from helpers.daemons import InProcess, status
from helpers.procs import free_port, wait_for
from helpers.workloads import examples, names
from hypothesis import given, settings
from hypothesis import strategies as st

import aclprof
import aclprof.agent as agent
from aclprof import mock
from aclprof.agent.bills import BillBook
from aclprof.api import requests as rq
from aclprof.cli.main import main
from aclprof.protocol.traceparent import parse

pytest.importorskip("opentelemetry.sdk", reason="the otlp extra is not installed (pip install -e '.[otlp]')")
pytest.importorskip("oteltap", reason="oteltap is not installed (pip install -e '.[interop]')")

from helpers.otlpreceiver import Tap

from aclprof.exportfmt.otlp_traces import EVENT_NAME, SPAN_NAME, span_ids, spans

pytestmark = pytest.mark.timeout(120)

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MODEL_A = [{"name": "conv1", "type": "Conv2D", "duration_ns": 300_000},
           {"name": "relu1", "type": "Relu", "duration_ns": 50_000}]
MODEL_B = [{"name": "mm", "type": "MatMul", "duration_ns": 400_000},
           {"name": "add", "type": "Add", "duration_ns": 30_000}]


@pytest.fixture(scope="module")
def tap() -> Any:
    with Tap() as t:
        yield t


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def assert_span_is_the_bill(span: Any, bill: dict[str, Any]) -> None:
    """Every field of the received span against the bill it was made from."""
    trace_id, span_id = span_ids(bill)
    tp = bill.get("traceparent")
    if tp is not None:
        trace_id = parse(tp).trace_id
        assert span.parent_span_id == parse(tp).parent_id.to_bytes(8, "big")
    else:
        assert span.parent_span_id == b""
    assert (span.trace_id, span.span_id) == (trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"))
    assert (span.name, span.kind) == (SPAN_NAME, 1)  # 1: SPAN_KIND_INTERNAL
    assert span.start_time_unix_nano == bill["start_unix_ns"]
    assert span.end_time_unix_nano == bill["start_unix_ns"] + bill["wall_ns"]
    want = {"aclprof.request.id": bill["id"], "aclprof.request.service": bill["service"],
            "aclprof.request.models": bill["models"], "aclprof.request.device_ns": bill["device_ns"],
            "aclprof.request.device_share": bill["device_ns"] / bill["wall_ns"] if bill["wall_ns"] else 0.0,
            "aclprof.request.ops": bill["ops"], "aclprof.request.complete": bill["complete"]}
    if bill["slowest"] is not None:
        want.update({"aclprof.request.slowest_op.type": bill["slowest"][0],
                     "aclprof.request.slowest_op.name": bill["slowest"][1],
                     "aclprof.request.slowest_op.device_ns": bill["slowest"][2]})
    want.update({f"aclprof.request.attr.{k}": v for k, v in bill["attrs"].items()})
    assert _attrs(span.attributes) == want
    assert [(e.name, e.time_unix_nano, _attrs(e.attributes)) for e in span.events] == [
        (EVENT_NAME, span.end_time_unix_nano,
         {"aclprof.op_type": t, "aclprof.op_type.device_ns": ns, "aclprof.op_type.count": n})
        for t, ns, n in bill["types"]]
    assert span.dropped_attributes_count == span.dropped_events_count == 0


def _bill(rid: str, **over: Any) -> dict[str, Any]:
    b = {"ts": 1.0, "host": "h", "pid": 7, "service": "svc", "id": rid, "attrs": {"version": "B"},
         "traceparent": None, "start_unix_ns": 1_790_000_000_123_456_789, "wall_ns": 5_000_000,
         "device_ns": 3_000_000, "ops": 4, "models": [3, 4], "types": [["MatMul", 2_000_000, 3], ["Add", 1_000_000, 1]],
         "slowest": ["MatMul", "mm1", 900_000], "complete": True}
    b.update(over)
    return b


def test_each_bill_is_its_span_exactly(tap: Tap) -> None:
    from aclprof.exportfmt.otlp_traces import push_spans

    bills = [_bill("joins", traceparent=TP), _bill("root"), _bill("no-ops", ops=0, device_ns=0, types=[], models=[],
                                                               slowest=None, attrs={}, wall_ns=0, complete=False),
             _bill("other-svc", service="", host="h2", pid=9, traceparent=TP[:-2] + "00")]
    made = spans(bills)
    assert (made.no_start, made.bad_traceparent, len(made.spans)) == (0, 0, 4)
    got = tap.expect_spans(4, lambda: push_spans(made, tap.traces_endpoint))
    by_id = {_attrs(s.attributes)["aclprof.request.id"]: s for s in got}
    assert len(got) == 4 and by_id.keys() == {b["id"] for b in bills}
    for b in bills:
        assert_span_is_the_bill(by_id[b["id"]], b)
    # the resource (which the receiver does not hand out): the standard keys, one per process
    res = {s.attributes["aclprof.request.id"]: dict(s.resource.attributes) for s in made.spans}
    assert res["joins"] == {**res["joins"], "service.name": "svc", "host.name": "h", "process.pid": 7}
    assert res["other-svc"]["service.name"] == "unknown_service" and res["other-svc"]["process.pid"] == 9


_ns = st.integers(0, 2**62)
_bills = st.lists(st.fixed_dictionaries({
    "ts": st.just(1.0), "host": names, "pid": st.integers(0, 2**31), "service": st.one_of(st.just(""), names),
    "id": names, "attrs": st.dictionaries(names, names, max_size=16),
    "traceparent": st.one_of(st.none(), st.tuples(
        st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.integers(0, 255)).map(
        lambda t: f"00-{t[0]:032x}-{t[1]:016x}-{t[2]:02x}")),
    "start_unix_ns": st.integers(0, 2**62), "wall_ns": st.integers(0, 2**40), "device_ns": _ns,
    "ops": _ns, "models": st.lists(st.integers(0, 2**32 - 1), max_size=16),
    "types": st.lists(st.tuples(names, _ns, _ns).map(list), max_size=17),
    "slowest": st.one_of(st.none(), st.tuples(names, names, _ns).map(list)), "complete": st.booleans(),
}), min_size=1, max_size=8, unique_by=lambda b: (b["host"], b["pid"], b["service"], b["id"], b["start_unix_ns"]))


@settings(max_examples=examples(30))
@given(_bills)
def test_random_bills_arrive_as_their_spans(tap: Tap, bills: list[dict[str, Any]]) -> None:
    from aclprof.exportfmt.otlp_traces import push_spans

    made = spans(bills)
    got = tap.expect_spans(len(bills), lambda: push_spans(made, tap.traces_endpoint), quiet=0.05)
    by_key = {(s.span_id, _attrs(s.attributes)["aclprof.request.id"]): s for s in got}
    assert len(got) == len(by_key) == len(bills)
    for b in bills:
        assert_span_is_the_bill(by_key[(span_ids(b)[1].to_bytes(8, "big"), b["id"])], b)


def test_the_same_bill_is_the_same_span() -> None:
    a, b = spans([_bill("r")]).spans[0], spans([_bill("r")]).spans[0]
    assert (a.context.trace_id, a.context.span_id) == (b.context.trace_id, b.context.span_id)
    c = spans([_bill("r", start_unix_ns=_bill("r")["start_unix_ns"] + 1)]).spans[0]
    assert (c.context.trace_id, c.context.span_id) != (a.context.trace_id, a.context.span_id)


def test_a_bad_traceparent_or_no_start_is_counted(tap: Tap) -> None:
    from aclprof.exportfmt.otlp_traces import push_spans

    bad = "00-" + "0" * 32 + TP[35:]
    made = spans([_bill("bad-tp", traceparent=bad), _bill("old-agent", start_unix_ns=None)])
    assert (made.bad_traceparent, made.no_start, len(made.spans)) == (1, 1, 1)
    (span,) = tap.expect_spans(1, lambda: push_spans(made, tap.traces_endpoint))
    a = _attrs(span.attributes)
    assert a["aclprof.request.traceparent_error"] == f"traceparent {bad!r}: a trace id of all zeros is invalid"
    assert span.parent_span_id == b"" and span.trace_id == span_ids(_bill("bad-tp", traceparent=bad))[0].to_bytes(
        16, "big")


# -- end to end: requests on the mock -> agent -> daemon -> aclprof otlp --traces -> oteltap -----------------


@pytest.fixture
def daemon() -> Any:
    rq.drain()
    with InProcess() as d:
        yield d
    agent.stop(2)
    rq.drain()


def _serve(socket: str, service: str, n: int) -> list[str]:
    """Mark ``n`` requests on the mock (every third joins a trace, every fourth runs no model),
    bill them with a BillBook fed by the subscriptions (the README's example), and report the
    bills through an agent started afterwards (a user subscription beside a running agent is
    h25-wire's agent feeding: not mixed here)."""
    mock.set_realtime(True)
    mock.set_stamp_thread(True)
    models = [mock.load_model(MODEL_A), mock.load_model(MODEL_B)]
    book = BillBook(hold_ns=100_000_000, grace_ns=200_000_000)  # as tests/test_request_bills.py
    lock = threading.Lock()

    def on_batch(batch: Any) -> None:
        arrival = time.monotonic_ns()
        with lock:
            book.feed_events(rq.drain())
            book.feed_batch(batch.data, batch.names, arrival)

    subs = [aclprof.subscribe(m, batch_callback=on_batch) for m in models]
    ids = []
    try:
        for i in range(n):
            tp = f"00-{i + 1:032x}-{i + 0x100:016x}-01" if i % 3 == 0 else None
            rid = f"req-{i}"
            with aclprof.request(rid, traceparent=tp, plan=str(i % 4)):
                for m in models[:i % 4]:  # 0, 1 or 2 models (3: both, model B twice)
                    mock.execute(m)
                if i % 4 == 3:
                    mock.execute(models[1])
            ids.append(rid)
            time.sleep(0.0015)  # apart by more than the book's late_ns, as in tests/test_request_bills.py
    finally:
        for s in subs:
            s.close()
    with lock:
        book.feed_events(rq.drain())
        bills = book.collect(time.monotonic_ns() + 10**9)
    # how well ops are attributed is tests/test_request_bills.py's subject (on this shared
    # machine some arrive too late for their window, counted): here, bills as they come
    assert book.stats.ops_seen == book.stats.ops_attributed + book.stats.unattributed
    agent.start(socket, service=service)
    agent.report_bills(bills)
    return ids


def test_bills_of_a_real_daemon_arrive_as_their_spans(daemon: Any, tap: Tap, capsys: Any) -> None:
    before = time.time_ns()
    ids = _serve(daemon.socket, "svc-otlp", 12)
    after = time.time_ns()
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == len(ids), 10, what="the bills")
    assert main(["requests", "--json", "--top", "1000", "--socket", daemon.socket]) == 0
    bills = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert sorted(b["id"] for b in bills) == sorted(ids)
    assert sum(b["traceparent"] is not None for b in bills) == 4 and any(b["ops"] == 0 for b in bills)
    assert any(len(b["types"]) > 1 and b["slowest"] for b in bills)  # spans with several events
    rc: list[int] = []
    got = tap.expect_spans(len(bills), lambda: rc.append(main(
        ["otlp", "--traces", "--endpoint", tap.traces_endpoint, "--socket", daemon.socket])))
    assert rc == [0] and f"pushed {len(bills)} request bills as spans" in capsys.readouterr().err
    by_id = {_attrs(s.attributes)["aclprof.request.id"]: s for s in got}
    assert len(got) == len(bills) and by_id.keys() == {b["id"] for b in bills}
    for b in bills:
        assert_span_is_the_bill(by_id[b["id"]], b)
    # the spans sit when the requests ran, on the host's unix clock, in the order they ran
    slack = 1_000_000  # the agent reads the monotonic -> unix offset with two clock reads
    assert all(before - slack <= s.start_time_unix_nano <= s.end_time_unix_nano <= after + slack for s in got)
    assert [_attrs(s.attributes)["aclprof.request.id"] for s in sorted(got, key=lambda s: s.start_time_unix_nano)] \
        == ids


def test_windows_tile_and_a_full_window_is_an_error(daemon: Any, tap: Tap, capsys: Any, monkeypatch: Any) -> None:
    import aclprof.cli.otlp_traces as cmd

    ids = _serve(daemon.socket, "svc-tile", 5)
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == len(ids), 10, what="the bills")
    ts = sorted({b["ts"] for b in status(daemon.socket)["request_bills"]["slowest"]})
    first = ["otlp", "--traces", "--endpoint", tap.traces_endpoint, "--socket", daemon.socket]
    # nothing received before the first bill: nothing pushed, exit 0
    assert main([*first, "--until", str(ts[0] - 1)]) == 0
    assert "no request bills matched (the daemon received 5" in capsys.readouterr().err
    # the daemon sends at most MAX_BILLS: what came is pushed, the rest named, exit 1
    monkeypatch.setattr(cmd, "MAX_BILLS", 2)
    rc: list[int] = []
    got = tap.expect_spans(2, lambda: rc.append(main(first)))
    assert rc == [1] and len(got) == 2
    err = capsys.readouterr().err
    assert "pushed 2 request bills" in err and "3 more bills matched but the daemon sends at most 2" in err, err


def test_usage_errors_exit_2(daemon: Any, capsys: Any) -> None:
    base = ["otlp", "--traces", "--socket", daemon.socket]
    assert main([*base, "--endpoint", "http://127.0.0.1:4318/v1/metrics"]) == 2
    assert "is a metrics endpoint; spans go to the traces endpoint" in capsys.readouterr().err
    assert main([*base, "--endpoint", "http://127.0.0.1:4318/v1/traces", "--type", "Conv", "--device", "1"]) == 2
    assert "--device, --type select op records, not request bills" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"])
def test_without_the_extra_the_command_says_so_before_connecting(missing: str, monkeypatch: Any, capsys: Any) -> None:
    import builtins

    real = builtins.__import__

    def absent(name: str, *args: Any, **kwargs: Any) -> Any:  # as if not installed
        if name == missing or name.startswith(missing + "."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", absent)
    assert main(["otlp", "--traces", "--endpoint", "http://127.0.0.1:4318/v1/traces", "--socket", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "is not installed" in err and "pip install 'aclprof[otlp]'" in err and "no daemon socket" not in err, err


def test_a_refused_push_exits_1(daemon: Any, capsys: Any) -> None:
    _serve(daemon.socket, "svc-refused", 1)
    wait_for(lambda: status(daemon.socket)["request_bills"].get("total") == 1, 10, what="the bill")
    url = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    assert main(["otlp", "--traces", "--endpoint", url, "--timeout", "1", "--socket", daemon.socket]) == 1
    assert f"{url} did not accept the spans (0 of 1 were accepted before" in capsys.readouterr().err
