"""The Chrome trace writer itself (``aclprof.exportfmt.chrome.write_chrome_gathered``) in
process, against exact text written out by hand here: small hand-made :class:`Gathered`
inputs (several processes, devices and models, overlapping ops on extra lanes, zero-length
ops, step keypoints, request windows with flows, ``extra`` events, records' odd numbers),
the whole file compared character for character. Before these, the writer's lanes,
requests, ``extra`` and metadata were reached only by tests that run daemons in
subprocesses, where no mutant can be seen (tests/bench/MUTATION.md, issue 20)."""

from __future__ import annotations

import io
import json
import math

import pytest

from aclprof.exportfmt.chrome import _scalar, write_chrome, write_chrome_gathered
from aclprof.exportfmt.requests import RequestSpan
from aclprof.exportfmt.tracks import Gathered, Slice

CLOCK = "the ACL library's op timestamps (the device clock; CLOCK_MONOTONIC on the mock)"
LANE1 = 2**31 + 1  # LANE_TID_BASE + 1: the first extra thread of a process
LANE2 = 2**31 + 2
REQ1 = 3 * 2**30 + 1  # REQUEST_TID_BASE + 1: the first request thread of a process


def _head(generator: str = '"aclprof export"') -> str:
    return ('{"displayTimeUnit":"ns","otherData":{"generator":' + generator + ',"clock":"' + CLOCK
            + '"},"traceEvents":[\n')


def _file(events: list[str], generator: str = '"aclprof export"') -> str:
    return _head(generator) + ",\n".join(events) + "\n]}\n"


def _op(name, cat, ts, dur, pid, tid, op_type, flag, thread_id, received_ts) -> str:
    return ('{"name":%s,"cat":%s,"ph":"X","ts":%s,"dur":%s,"pid":%d,"tid":%d,"args":{"op_type":%s,"flag":%s,'
            '"thread_id":%s,"received_ts":%s}}' % (name, cat, ts, dur, pid, tid, op_type, flag, thread_id, received_ts))


def _proc(pid, name) -> str:
    return '{"name":"process_name","ph":"M","pid":%d,"tid":0,"args":{"name":"%s"}}' % (pid, name)


def _thread(pid, tid, name) -> list[str]:
    return ['{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":"%s"}}' % (pid, tid, name),
            '{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}}' % (pid, tid, tid)]


def _write(g: Gathered, **kw) -> tuple[int, str]:
    out = io.StringIO()
    n = write_chrome_gathered(g, out, **kw)
    text = out.getvalue()
    json.loads(text)  # valid JSON whatever the case
    return n, text


def _two_processes() -> Gathered:
    """pid 40: (device 0, model 1) a step holding an op, and an op overlapping that op (lane
    1); (device 1, model 2) a zero-length op, and two partly overlapping ops (the second on
    the process's second extra lane). pid 41: two overlapping ops (its own first extra lane).
    Slices are given out of start order."""
    g = Gathered()
    g.processes = {40: "svc (pid 40) @h1", 41: "process (pid 41) @h2"}
    g.threads = {
        (40, 0, 1): [Slice(2000, 1000, "add", "Add", False, 2, 8, None),
                     Slice(1000, 5000, "kp", "x", True, None, 7, 1.5),
                     Slice(1500, 1000, "mm", "MatMul", False, 0, 7, 1.25)],
        (40, 1, 2): [Slice(15, 20, "d", "Conv", False, True, 7, math.nan),
                     Slice(0, 0, "z", "Zero", False, 0, 7, 2.0),
                     Slice(10, 20, "c", "Conv", False, 0, 7, 3)],
        (41, 0, 0): [Slice(100, 50, "é", "Übersetzung", False, -1, "t", math.inf),
                     Slice(120, 50, "f", "F", False, 0, 9, -math.inf)],
    }
    g.count = 8
    return g


def test_every_lane_of_every_process_is_written_exactly():
    n, text = _write(_two_processes(), generator="aclprof tést \"q\"")
    assert n == 8  # the gathered count, returned as is
    assert text == _file([
        # pid 40, device 0 / model 1: lane 0 (the step, then the op it holds), lane 1
        _op('"step"', '"step"', "1", "5", 40, 1, '"x"', "null", "7", "1.5"),
        _op('"mm"', '"MatMul"', "1.5", "1", 40, 1, '"MatMul"', "0", "7", "1.25"),
        _op('"add"', '"Add"', "2", "1", 40, LANE1, '"Add"', "2", "8", "null"),
        # device 1 / model 2: tid 1 * 100000 + 2; the zero-length op first, the overlapping
        # op on the process's second extra thread
        _op('"z"', '"Zero"', "0", "0", 40, 100002, '"Zero"', "0", "7", "2.0"),
        _op('"c"', '"Conv"', "0.01", "0.02", 40, 100002, '"Conv"', "0", "7", "3"),
        _op('"d"', '"Conv"', "0.015", "0.02", 40, LANE2, '"Conv"', "true", "7", "NaN"),
        # pid 41: its extra threads are counted from 1 again; names as UTF-8
        _op('"é"', '"Übersetzung"', "0.1", "0.05", 41, 0, '"Übersetzung"', "-1", '"t"', "Infinity"),
        _op('"f"', '"F"', "0.12", "0.05", 41, LANE1, '"F"', "0", "9", "-Infinity"),
        _proc(40, "svc (pid 40) @h1"), _proc(41, "process (pid 41) @h2"),
        *_thread(40, 1, "device 0 / model 1"), *_thread(40, LANE1, "device 0 / model 1 #1"),
        *_thread(40, 100002, "device 1 / model 2"), *_thread(40, LANE2, "device 1 / model 2 #1"),
        *_thread(41, 0, "device 0 / model 0"), *_thread(41, LANE1, "device 0 / model 0 #1"),
    ], generator='"aclprof t\\u00e9st \\"q\\""')


def _with_request() -> tuple[Gathered, list[RequestSpan]]:
    """One thread: a step, an op in it (lane 0) and an op overlapping that op (lane 1), all
    on host thread 8, and a request window on thread 8 that holds both ops."""
    g = Gathered()
    g.processes = {40: "svc (pid 40) @h1"}
    g.threads = {(40, 0, 1): [Slice(1000, 5000, "kp", "x", True, None, 8, None),
                              Slice(1500, 1000, "mm", "MatMul", False, 0, 8, None),
                              Slice(2000, 1000, "add", "Add", False, 0, 8, None)]}
    g.count = 3
    return g, [RequestSpan("r1", 40, 8, 1400, 3100, {"k": "v"})]


REQUEST_EVENTS = [
    '{"name":"r1","cat":"request","ph":"X","ts":1.4,"dur":1.7,"pid":40,"tid":%d,"args":{"request_id":"r1",'
    '"thread_id":8,"ops":2,"device_ns":2000,"attr.k":"v"}}' % REQ1,
    # each flow ends on its op's own thread: the lane 1 op's on the extra thread
    '{"name":"bill","cat":"request","ph":"s","id":1,"ts":1.4,"pid":40,"tid":%d}' % REQ1,
    '{"name":"bill","cat":"request","ph":"f","bp":"e","id":1,"ts":1.5,"pid":40,"tid":1}',
    '{"name":"bill","cat":"request","ph":"s","id":2,"ts":1.4,"pid":40,"tid":%d}' % REQ1,
    '{"name":"bill","cat":"request","ph":"f","bp":"e","id":2,"ts":2,"pid":40,"tid":%d}' % LANE1,
]
OPS_OF_REQUEST = [
    _op('"step"', '"step"', "1", "5", 40, 1, '"x"', "null", "8", "null"),
    _op('"mm"', '"MatMul"', "1.5", "1", 40, 1, '"MatMul"', "0", "8", "null"),
    _op('"add"', '"Add"', "2", "1", 40, LANE1, '"Add"', "0", "8", "null"),
]
META_OF_REQUEST = [_proc(40, "svc (pid 40) @h1"), *_thread(40, 1, "device 0 / model 1"),
                   *_thread(40, LANE1, "device 0 / model 1 #1"), *_thread(40, REQ1, "requests (thread 8)")]


def test_requests_follow_the_ops_then_extra_events_then_every_threads_names():
    g, spans = _with_request()
    extra_calls = []

    def extra():
        extra_calls.append(1)
        return [{"name": "op failure", "ph": "i", "ts": 2.5, "pid": 40, "tid": 1, "s": "t", "args": {"n": 1}}]

    n, text = _write(g, generator="g", extra=extra, requests=spans)
    assert n == 3 and extra_calls == [1]
    assert text == _file([
        *OPS_OF_REQUEST, *REQUEST_EVENTS,
        '{"name":"op failure","ph":"i","ts":2.5,"pid":40,"tid":1,"s":"t","args":{"n":1}}',
        *META_OF_REQUEST], generator='"g"')


def test_write_chrome_passes_extra_and_requests_on():
    records = [{"pid": 40, "service": "svc", "host": "h1", "device": 0, "model": 1, "kind": "keypoint",
                "start": 1000, "duration_ns": 5000, "op_type": "x", "op_name": "kp", "thread_id": 8},
               {"pid": 40, "device": 0, "model": 1, "start": 1500, "end": 2500, "op_type": "MatMul",
                "op_name": "mm", "flag": 0, "thread_id": 8},
               {"pid": 40, "device": 0, "model": 1, "start": 2000, "duration_ns": 1000, "op_type": "Add",
                "op_name": "add", "flag": 0, "thread_id": 8}]
    _, spans = _with_request()
    out = io.StringIO()
    n = write_chrome([records[:1], records[1:]], out, "g", lambda: [{"ph": "i"}], spans)
    assert n == 3
    assert out.getvalue() == _file([*OPS_OF_REQUEST, *REQUEST_EVENTS, '{"ph":"i"}', *META_OF_REQUEST],
                                   generator='"g"')


def test_requests_without_any_op_start_the_event_list_themselves():
    g = Gathered()
    n, text = _write(g, requests=[RequestSpan("r", 5, 3, 2000, 2000)])
    assert n == 0
    assert text == _file([
        '{"name":"r","cat":"request","ph":"X","ts":2,"dur":0,"pid":5,"tid":%d,"args":{"request_id":"r",'
        '"thread_id":3,"ops":0,"device_ns":0}}' % REQ1,
        *_thread(5, REQ1, "requests (thread 3)")])


def test_extra_events_without_any_op_start_the_event_list_themselves():
    _, text = _write(Gathered(), extra=lambda: [{"a": [1, 2]}, {"b": None}])
    assert text == _file(['{"a":[1,2]}', '{"b":null}'])


def test_no_extra_events_and_no_requests_add_nothing():
    g, _ = _with_request()
    plain = _file([*OPS_OF_REQUEST, _proc(40, "svc (pid 40) @h1"), *_thread(40, 1, "device 0 / model 1"),
                   *_thread(40, LANE1, "device 0 / model 1 #1")])
    assert _write(g, extra=lambda: [], requests=[]) == (3, plain)
    assert _write(g) == (3, plain)


def test_a_process_without_ops_is_named_alone_and_nothing_is_an_empty_list():
    g = Gathered()
    g.processes = {7: "p"}
    g.threads = {(7, 0, 0): []}
    assert _write(g) == (0, _file([_proc(7, "p")]))
    assert _write(Gathered()) == (0, _head() + "\n]}\n")


@pytest.mark.parametrize("value, text", [
    (0, "0"), (-12, "-12"), (2**70, str(2**70)), (1.5, "1.5"), (0.0, "0.0"), (-2.0, "-2.0"), (1e20, "1e+20"),
    (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (None, "null"), (True, "true"),
    (False, "false"), ("s\u00e9", '"s\\u00e9"'),
])
def test_a_records_number_is_written_as_json_dumps_writes_it(value, text):
    assert _scalar(value) == text == json.dumps(value)
