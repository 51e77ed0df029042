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

import aclprof
from aclprof import mock
from aclprof.agent.bills import BillBook
from aclprof.api import requests as rq
from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.perfetto import MissingDependency, write_perfetto
from aclprof.exportfmt.requests import RequestSpan, link
from aclprof.exportfmt.tracks import gather

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


def _spans(events: list[Any]) -> list[RequestSpan]:
    """The request windows of the ring's events (START/END per request and thread)."""
    open_: dict[tuple[int, int], tuple[int, Any]] = {}
    out = []
    for kind, key, tid, t, req in events:
        if kind == rq.START:
            open_[(key, tid)] = (t, req)
        else:
            start, r = open_.pop((key, tid))
            out.append(RequestSpan(r.id, PID, tid, start, t, dict(r.attrs)))
    assert not open_
    return out


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
    events: list[Any] = []
    records: list[dict[str, Any]] = []

    def feed_events() -> None:
        evs = rq.drain()
        events.extend(evs)
        book.feed_events(evs)

    def on_batch(batch: Any) -> None:
        arrival = time.monotonic_ns()
        with lock:
            feed_events()
            book.feed_batch(batch.data, batch.names, arrival)
            records.extend({"ts": 1.0, "host": "h", "pid": PID, "service": "svc", "device": r.device_id,
                            "model": r.model_id, "op_type": r.op_type, "op_name": r.op_name, "start": r.start,
                            "end": r.end, "duration_ns": r.duration, "flag": r.flag, "thread_id": r.thread_id,
                            "kind": r.kind} for r in batch.records())

    subs = [aclprof.subscribe(m, batch_callback=on_batch) for m in models.values()]
    try:
        def client(i: int) -> None:
            for j in range(8):
                with aclprof.request(f"t{i}-r{j}", client=str(i)):
                    for name in PLANS[(i + j) % len(PLANS)]:
                        mock.execute(models[name])
                time.sleep(0.0015)  # requests of one thread apart (BillBook's late_ns)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
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
    return records, _spans(events), bills


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


def test_spans_from_json_names_the_bad_item():
    from aclprof.exportfmt.requests import spans_from_json

    good = {"id": "r1", "pid": 1, "thread_id": 7, "start": 10, "end": 20, "attrs": {"v": "2"}}
    assert spans_from_json([good]) == [RequestSpan("r1", 1, 7, 10, 20, {"v": "2"})]
    for bad, why in [({**good, "end": 5}, "end before start"), ({**good, "pid": "1"}, "integers"),
                     ({k: v for k, v in good.items() if k != "start"}, "'start'"),
                     ({**good, "attrs": {"v": 2}}, "attrs")]:
        with pytest.raises(ValueError, match=f"request span #1 .*{why}"):
            spans_from_json([good, bad])


def test_no_requests_writes_the_trace_of_before():
    recs = [{"pid": 1, "device": 0, "model": 1, "op_type": "T", "op_name": "o", "start": 10, "end": 20,
             "duration_ns": 10, "thread_id": 7, "kind": "op"}]
    a, b = io.StringIO(), io.StringIO()
    write_chrome([recs], a)
    write_chrome([recs], b, requests=[])
    assert a.getvalue() == b.getvalue() and '"request"' not in a.getvalue()
