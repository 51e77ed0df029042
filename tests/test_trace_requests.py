"""Request bills in the trace exports (issue 25: "the bill as Perfetto flows in the
Chrome/protobuf trace, checked with Perfetto's trace processor SQL").

A mock service runs requests (``aclprof.request``) on three host threads against two
models; the agent's :class:`~aclprof.agent.bills.BillBook` bills them from the same op
batches the export gets. Both trace writers are given the request windows
(:mod:`aclprof.exportfmt.requests`); Perfetto's own trace processor reads each trace and its
``flow`` table, grouped by the request slice a flow leaves and the op type of the slice it
enters, must equal every bill's per-type count and device time to the nanosecond; the
request slices carry the request id in their args. On the mock without an offset the
device clock is the host's ``CLOCK_MONOTONIC``, so the windows need no mapping here.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from helpers.perfetto_tp import SKIP_REASON, TraceProcessor, needs_trace_processor
from helpers.requestmix import run_clients

import aclprof
from aclprof import mock
from aclprof.agent.bills import BillBook
from aclprof.agent.billsend import bill_payload
from aclprof.api import requests as rq
from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.perfetto import MissingDependency, write_perfetto
from aclprof.exportfmt.requests import RequestSpan, link, spans_from_bills
from aclprof.exportfmt.tracks import gather
from aclprof.protocol.wire import Kind

pytestmark = pytest.mark.timeout(120)

MODEL_A = [{"name": "conv1", "type": "Conv2D", "duration_ns": 200_000},
           {"name": "relu1", "type": "Relu", "duration_ns": 40_000}]
MODEL_B = [{"name": "mm", "type": "MatMul", "duration_ns": 300_000},
           {"name": "add", "type": "Add", "duration_ns": 30_000}]
PLANS = [["A"], ["B"], ["A", "B"], ["B", "B"], []]
PID = 4242


@pytest.fixture(scope="module")
def tp():
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    with TraceProcessor() as t:
        yield t


def _spans(bills: dict[str, Any]) -> list[RequestSpan]:
    """The request windows of the bills, as the daemon gets them (REQUEST_BILL frames) and
    ``aclprof export --requests`` reads them back (pid: the daemon's, from the connection)."""
    return spans_from_bills([{**bill_payload(b), "pid": PID} for b in bills.values()])


def _run_service() -> tuple[list[dict[str, Any]], list[RequestSpan], dict[str, Any]]:
    """Requests on 3 threads x 2 models; the export records, the windows and the bills."""
    rq.drain()
    mock.set_realtime(True)
    mock.set_stamp_thread(True)
    mock.set_device_clock_offset(0)
    mock.set_device_clock_drift(0)
    models = {"A": mock.load_model(MODEL_A), "B": mock.load_model(MODEL_B)}
    book = BillBook(hold_ns=50_000_000, grace_ns=100_000_000)
    lock = threading.Lock()
    records: list[dict[str, Any]] = []

    def feed_events() -> None:
        book.feed_events(rq.drain())

    def on_batch(batch: Any) -> None:
        # arrival = the batch's last end (the device clock is the host's here): a scheduling
        # delay on a loaded machine would map ops later than the book's late margin, and
        # this test is about the trace matching the bills, not about the clock map
        arrival = int(batch.data["end"].max())
        with lock:
            feed_events()
            book.feed_batch(batch.data, batch.names, arrival)
            records.extend({"ts": 1.0, "host": "h", "pid": PID, "service": "svc", "device": r.device_id,
                            "model": r.model_id, "op_type": r.op_type, "op_name": r.op_name, "start": r.start,
                            "end": r.end, "duration_ns": r.duration, "flag": r.flag, "thread_id": r.thread_id,
                            "kind": r.kind} for r in batch.records())

    subs = [aclprof.subscribe(m, batch_callback=on_batch) for m in models.values()]
    try:
        run_clients(models, 3, 8, attr="client", plans=PLANS)
    finally:
        for s in subs:
            s.close()
        for m in models.values():
            mock.unload(m)
        mock.set_stamp_thread(False)
        mock.set_realtime(False)
    with lock:
        feed_events()
        bills = {b.request_id: b for b in book.collect(time.monotonic_ns() + 10 * 10**9)}
    assert book.stats.unattributed == 0, book.stats
    assert all(b.windows and not b.windows_cut for b in bills.values())
    return records, _spans(bills), bills


@pytest.fixture(scope="module")
def service():
    return _run_service()


_FLOWS_SQL = """
select r.name as rid, o.category as cat, count(*) as n, sum(o.dur) as total
from flow f join slice r on f.slice_out = r.id join slice o on f.slice_in = o.id
where r.category = 'request' group by r.name, o.category
"""


@needs_trace_processor
@pytest.mark.parametrize("fmt", ["chrome", "perfetto"])
def test_trace_flows_equal_the_bills(tp, service, tmp_path, fmt):
    records, spans, bills = service
    assert len(spans) == len(bills) == 24 and records
    path = tmp_path / f"t.{fmt}"
    try:
        if fmt == "chrome":
            with open(path, "w", encoding="utf-8") as f:
                write_chrome([records], f, requests=spans)
        else:
            with open(path, "wb") as f:
                write_perfetto([records], f, requests=spans)
    except MissingDependency as exc:
        pytest.skip(str(exc))
    tp.load(path)
    assert tp.stats_errors() == []
    got: dict[str, dict[str, tuple[int, int]]] = {}
    for r in tp.query(_FLOWS_SQL):
        got.setdefault(r["rid"], {})[r["cat"]] = (r["total"], r["n"])
    want = {rid: dict(b.by_type) for rid, b in bills.items() if b.ops}
    assert len(want) >= 12 and got == want
    # every request is a slice on its host thread's request track, its id in the args
    rows = tp.query("select s.name as name, t.name as tname, a.display_value as rid from slice s "
                    "join thread_track tt on s.track_id = tt.id join thread t using (utid) "
                    "join args a on a.arg_set_id = s.arg_set_id "
                    "where s.category = 'request' and a.key like '%request_id'")
    assert sorted(r["name"] for r in rows) == sorted(bills)
    assert all(r["rid"] == r["name"] and r["tname"].startswith("requests (thread ") for r in rows)
    by_thread = {sp.request_id: f"requests (thread {sp.thread_id})" for sp in spans}
    assert {r["name"]: r["tname"] for r in rows} == by_thread
    # the ops themselves are all still there, once
    assert tp.query("select count(*) as n from slice where category not in ('request', 'step')")[0]["n"] == len(
        [r for r in records if r["kind"] == "op"])


def test_an_op_two_requests_hold_is_linked_to_neither():
    recs = [{"pid": 1, "device": 0, "model": 1, "op_type": "T", "op_name": f"o{i}", "start": s, "end": s + 5,
             "duration_ns": 5, "thread_id": tid, "kind": "op"}
            for i, (s, tid) in enumerate([(110, 7), (160, 7), (300, 7), (120, 8), (120, 9)])]
    spans = [RequestSpan("a", 1, 7, 100, 200), RequestSpan("b", 1, 7, 150, 250),  # overlap on thread 7
             RequestSpan("c", 1, 8, 100, 200), RequestSpan("d", 2, 9, 100, 200)]  # thread 9 of another pid
    links = link(gather([recs]), spans)
    assert [[s.name for s in ops] for ops in links.ops_of] == [["o0"], [], ["o3"], []]
    assert (links.ambiguous, links.unlinked, links.linked) == (1, 2, 2)  # o1 both; o2 after all, o4 other pid


def test_spans_from_bills_names_the_bad_bill():
    from aclprof.exportfmt.requests import spans_from_bills

    good = {"id": "r1", "pid": 1, "attrs": {"v": "2"}, "windows": [[7, 10, 20], [8, 30, 40]]}
    assert spans_from_bills([good, {"id": "r2", "pid": 1}]) == [
        RequestSpan("r1", 1, 7, 10, 20, {"v": "2"}), RequestSpan("r1", 1, 8, 30, 40, {"v": "2"})]
    for bad, why in [({**good, "windows": [[7, 20, 10]]}, "ends before it starts"),
                     ({**good, "pid": "1"}, "pid an integer"), ({"pid": 1}, "'id'"),
                     ({**good, "windows": [[7, 1]]}, "windows must be"), ({**good, "attrs": {"v": 2}}, "attrs")]:
        with pytest.raises(ValueError, match=f"request bill #1 .*{why}"):
            spans_from_bills([good, bad])


def test_no_requests_writes_the_trace_of_before():
    recs = [{"pid": 1, "device": 0, "model": 1, "op_type": "T", "op_name": "o", "start": 10, "end": 20,
             "duration_ns": 10, "thread_id": 7, "kind": "op"}]
    a, b = io.StringIO(), io.StringIO()
    write_chrome([recs], a)
    write_chrome([recs], b, requests=[])
    assert a.getvalue() == b.getvalue() and '"request"' not in a.getvalue()


def _flows(t: TraceProcessor) -> dict[str, dict[str, tuple[int, int]]]:
    got: dict[str, dict[str, tuple[int, int]]] = {}
    for r in t.query(_FLOWS_SQL):
        got.setdefault(r["rid"], {})[r["cat"]] = (r["total"], r["n"])
    return got


@needs_trace_processor
def test_cli_export_requests_of_a_daemon_in_perfetto(tp, tmp_path):
    """``aclprof export --requests`` end to end: an agent sends ops (thread 7) and bills with
    their windows to a real daemon; both traces' flows hold exactly the ops in each window."""
    from helpers.daemons import status
    from helpers.edgedata import Op, Service, cli_ok, started
    from helpers.procs import wait_for

    t0 = 1_000_000_000
    ops = [Op("Conv2D" if i % 2 else "MatMul", f"op{i}", 0, 1, t0 + i * 10_000, 3_000 + i) for i in range(30)]
    bill = {"wall_ns": 1, "device_ns": 1, "ops": 1, "attrs": {"version": "B"}}
    bills = [{**bill, "id": "r1", "windows": [[7, t0 + 1_000, t0 + 95_000]], "window_margin": [1_000, 0]},  # ops 0-9
             {**bill, "id": "r2", "windows": [[7, t0 + 150_000, t0 + 200_000], [7, t0 + 250_000, t0 + 250_000]]},
             {**bill, "id": "r3"},  # an agent without windows: no slice
             {**bill, "id": "r4", "windows": [[8, t0, t0 + 300_000]]}]  # another thread: no op
    svc = Service("svc-req", ops, bills=bills)
    d = started([svc])
    try:
        wait_for(lambda: status(d.socket)["request_bills"].get("total") == 4, 10, what="the bills kept")
        for fmt, name in [("chrome", "t.json"), ("perfetto", "t.pftrace")]:
            cli_ok(d, "export", "--format", fmt, "--requests", "-o", str(tmp_path / name))
    finally:
        d.cleanup()

    def want_of(lo: int, hi: int) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = {}
        for op in ops:
            if lo <= op.start <= hi:
                e = out.setdefault(op.op_type, [0, 0])
                e[0] += op.dur
                e[1] += 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    r2 = want_of(t0 + 150_000, t0 + 200_000)
    for k, v in want_of(t0 + 250_000, t0 + 250_000).items():
        r2[k] = (r2.get(k, (0, 0))[0] + v[0], r2.get(k, (0, 0))[1] + v[1])
    for name in ("t.json", "t.pftrace"):
        tp.load(tmp_path / name)
        assert tp.stats_errors() == []
        assert _flows(tp) == {"r1": want_of(t0, t0 + 95_000), "r2": r2}, name
        rows = tp.query("select s.name as name, p.pid as pid, t.name as tname from slice s join thread_track tt "
                        "on s.track_id = tt.id join thread t using (utid) join process p using (upid) "
                        "where s.category = 'request' order by s.ts, t.name")
        assert [(r["name"], r["pid"], r["tname"]) for r in rows] == [
            ("r1", svc.pid, "requests (thread 7)"), ("r4", svc.pid, "requests (thread 8)"),
            ("r2", svc.pid, "requests (thread 7)"), ("r2", svc.pid, "requests (thread 7)")], name


def test_a_bill_carries_its_windows_in_the_records_clock():
    """BillBook maps a request's host windows to the device clock the op records carry (the
    trace exports draw them there): with the device an hour ahead, the windows are an hour
    ahead too, to within the clock map's error; the windows beyond the limit are counted."""
    import numpy as np

    from aclprof.agent.bills import BillBook
    from aclprof.protocol.wire import RECORD_DTYPE, REQUEST_BILL_MAX_WINDOWS

    hour = 3600 * 10**9
    book = BillBook(hold_ns=0, grace_ns=0)
    evs = [(rq.START, 1, 7, 1000), (rq.END, 1, 7, 2000)]
    for k in range(REQUEST_BILL_MAX_WINDOWS + 2):  # request 2: 18 windows on thread 9
        evs += [(rq.START, 2, 9, 10_000 + 100 * k), (rq.END, 2, 9, 10_050 + 100 * k)]
    book.feed_events([(kind, key, tid, t, None) for kind, key, tid, t in evs])
    data = np.zeros(1, dtype=RECORD_DTYPE)
    data["start"], data["end"] = hour + 100, hour + 200  # arrived right after it ended: D = 1 h
    book.feed_batch(data, ["?"], arrival_ns=200)
    bills = {b.key: b for b in book.collect(10**9)}
    assert bills[1].windows == ((7, hour + 1000, hour + 2000),) and bills[1].windows_cut == 0
    assert bills[1].window_margin == (book.early_ns, book.late_ns)
    assert len(bills[2].windows) == REQUEST_BILL_MAX_WINDOWS and bills[2].windows_cut == 2
    assert bills[2].windows[0] == (9, hour + 10_000, hour + 10_050)


def test_the_bill_frame_and_the_daemon_keep_the_windows():
    from aclprof.agent.bills import Bill
    from aclprof.agent.billsend import bill_payload

    b = Bill(request_id="r", key=1, attrs={}, traceparent=None, start_ns=0, end_ns=5, device_ns=0, ops=0,
             by_type={}, slowest=None, models=(), windows=((7, 10, 20),), windows_cut=3)
    p = bill_payload(b)
    assert p["windows"] == [[7, 10, 20]] and p["windows_cut"] == 3 and p["window_margin"] == [0, 0]
    assert "windows" not in bill_payload(Bill(**{**b.__dict__, "windows": (), "windows_cut": 0}))


@pytest.mark.parametrize("windows", [[[7, 20, 10]], [[7, 1]], [[-1, 1, 2]], [[7, 1, 2]] * 17, {"a": 1},
                                     [[7, 1, 2**70]], [[True, 1, 2]], "margin"])
def test_forged_windows_cost_only_their_connection(windows):
    from helpers.daemons import Client, InProcess, status
    from helpers.procs import wait_for

    bill = {"id": "x", "wall_ns": 1, "device_ns": 1, "ops": 1}
    with InProcess() as d:
        bad = Client(d.socket, "agent", service="forger")
        forged = {**bill, "windows": [[7, 1, 2]], "window_margin": [-1, 0]} if windows == "margin" else {
            **bill, "windows": windows}
        bad.send_json(Kind.REQUEST_BILL, forged)
        assert bad.closed_by_peer()
        wait_for(lambda: status(d.socket)["protocol_errors"] == 1, 10, what="the protocol error")
        good = Client(d.socket, "agent", service="good")
        good.send_json(Kind.REQUEST_BILL, {**bill, "windows": [[7, 1, 2]], "windows_cut": 4})
        wait_for(lambda: status(d.socket)["request_bills"].get("total") == 1, 10, what="the good bill")
        kept = status(d.socket)["request_bills"]["slowest"]
        assert [(b["service"], b["windows"], b["windows_cut"], b["window_margin"]) for b in kept] == [
            ("good", [[7, 1, 2]], 4, [0, 0])]


def test_requests_with_a_format_that_cannot_show_them_is_a_usage_error(tmp_path):
    from helpers.procs import cli

    p = cli("export", "--format", "csv", "--requests", "-o", str(tmp_path / "x.csv"),
            "--socket", str(tmp_path / "nothing.sock"))
    assert p.returncode == 2 and "--requests needs --format chrome or perfetto (not csv)" in p.stderr, p.stderr
    assert not (tmp_path / "x.csv").exists()
