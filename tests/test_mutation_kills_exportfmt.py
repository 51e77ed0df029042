"""The export writers (``aclprof.exportfmt``: chrome, csv, jsonl, tally) in process (issue 20):
their output read back with the consumer's own parser (``json``, ``csv``) and checked
against totals computed here, with several devices, services and processes in one export,
zero-length ops and a single sample. Before these, the writers ran only inside ``aclprof
export`` subprocesses, where no mutant can be seen."""

from __future__ import annotations

import csv
import io
import json

from aclprof.exportfmt.chrome import TID_STRIDE, write_chrome
from aclprof.exportfmt.jsonl import write_jsonl
from aclprof.exportfmt.opcsv import CSV_COLUMNS, write_csv
from aclprof.exportfmt.tally import tally


def _rec(op_type="MatMul", op_name="mm", duration=1000, start=10_000, **kw):
    r = {"ts": 1.5, "host": "h1", "pid": 40, "service": "svc", "device": 0, "model": 1, "op_type": op_type,
         "op_name": op_name, "start": start, "end": start + duration, "duration_ns": duration, "flag": 0,
         "thread_id": 7}
    r.update(kw)
    return r


# ---- tally -----------------------------------------------------------------------------------

def test_tally_keeps_count_total_min_and_max_per_key():
    groups: dict[str, list[int]] = {}
    for key, d in [("a", 5), ("a", 3), ("a", 9), ("a", 4), ("b", 0), ("b", 0)]:
        tally(groups, key, d)
    assert groups == {"a": [4, 21, 3, 9], "b": [2, 0, 0, 0]}
    one: dict[str, list[int]] = {}
    tally(one, "x", 7)
    assert one == {"x": [1, 7, 7, 7]}


# ---- csv -------------------------------------------------------------------------------------

def _csv(batches):
    out = io.StringIO()
    n = write_csv(batches, out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    return n, rows[0], rows[1:]


def test_csv_rows_per_device_and_service_with_exact_totals_and_device_ratios():
    batches = [
        [_rec(duration=3000), _rec(duration=1000), _rec(op_type="Add", duration=1500)],
        [_rec(device=1, duration=2500), _rec(service="other", pid=41, duration=500),
         _rec(kind="keypoint", op_type="step", duration=0)],
        [],
    ]
    n, head, rows = _csv(batches)
    assert n == 6  # every record read, the keypoint too
    assert head == CSV_COLUMNS
    # device 0 first, its rows by total time, largest first; then device 1
    assert rows == [
        ["svc", "40", "0", "1", "MatMul", "N/A", "2", "4.000", "1.000", "2.000", "3.000", "66.67"],
        ["svc", "40", "0", "1", "Add", "N/A", "1", "1.500", "1.500", "1.500", "1.500", "25.00"],
        ["other", "41", "0", "1", "MatMul", "N/A", "1", "0.500", "0.500", "0.500", "0.500", "8.33"],
        ["svc", "40", "1", "1", "MatMul", "N/A", "1", "2.500", "2.500", "2.500", "2.500", "100.00"],
    ]
    # the ratios of a device add up to 100 % (a constant factor would hide in a share; the
    # totals above are exact)
    assert sum(float(r[11]) for r in rows if r[2] == "0") == 100.0


def test_csv_means_are_not_rounded_down_to_whole_nanoseconds():
    _, _, rows = _csv([[_rec(duration=1), _rec(duration=2)]])
    assert rows[0][7:11] == ["0.003", "0.001", "0.002", "0.002"]  # mean 1.5 ns: 0.0015 us, not 0.001


def test_csv_counts_zero_length_ops_and_orders_equal_totals_by_key():
    n, _, rows = _csv([[_rec(op_type="B", duration=0), _rec(op_type="A", duration=0), _rec(model=2, duration=0)]])
    assert n == 3
    assert [r[3:8] for r in rows] == [["1", "A", "N/A", "1", "0.000"], ["1", "B", "N/A", "1", "0.000"],
                                      ["2", "MatMul", "N/A", "1", "0.000"]]
    assert {r[11] for r in rows} == {"0.00"}  # a device whose ops all took 0 ns: shares of 0, not a crash


def test_csv_escapes_peers_strings_and_reads_missing_fields_as_unknown():
    n, _, rows = _csv([[{"duration_ns": 2000, "op_type": "Mat\x1b[31mMul", "service": None}]])
    assert n == 1
    assert rows == [["", "0", "0", "0", "Mat\\x1b[31mMul", "N/A", "1", "2.000", "2.000", "2.000", "2.000",
                     "100.00"]]


def test_csv_of_nothing_is_its_header():
    assert _csv([]) == (0, CSV_COLUMNS, [])


# ---- chrome ----------------------------------------------------------------------------------

def _chrome(batches, **kw):
    out = io.StringIO()
    n = write_chrome(batches, out, **kw)
    return n, json.loads(out.getvalue())


def test_chrome_events_are_microseconds_with_one_thread_per_device_and_model():
    batches = [[_rec(start=2_000_500, duration=1_250), _rec(device=1, model=3, start=3_000_000, duration=0)],
               [_rec(pid=41, service=None, host="h2", op_type="Add", op_name="add1", start=5_000, duration=10)]]
    n, doc = _chrome(batches, generator="aclprof test")
    assert n == 3
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["generator"] == "aclprof test"
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["cat"], e["ts"], e["dur"], e["pid"], e["tid"]) for e in ops] == [
        ("mm", "MatMul", 2000.5, 1.25, 40, 1),
        ("mm", "MatMul", 3000.0, 0.0, 40, 1 * TID_STRIDE + 3),
        ("add1", "Add", 5.0, 0.01, 41, 1)]
    assert ops[0]["args"] == {"op_type": "MatMul", "flag": 0, "thread_id": 7, "received_ts": 1.5}
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert meta == {
        ("process_name", 40, 0): {"name": "svc (pid 40) @h1"},
        ("process_name", 41, 0): {"name": "process (pid 41) @h2"},
        ("thread_name", 40, 1): {"name": "device 0 / model 1"},
        ("thread_sort_index", 40, 1): {"sort_index": 1},
        ("thread_name", 40, TID_STRIDE + 3): {"name": "device 1 / model 3"},
        ("thread_sort_index", 40, TID_STRIDE + 3): {"sort_index": TID_STRIDE + 3},
        ("thread_name", 41, 1): {"name": "device 0 / model 1"},
        ("thread_sort_index", 41, 1): {"sort_index": 1},
    }
    assert TID_STRIDE == 100000
    # exact totals: the durations read back sum to what was written, in microseconds
    assert sum(e["dur"] for e in ops) * 1e3 == 1_250 + 0 + 10


def test_chrome_keypoints_show_the_step_and_a_missing_duration_is_end_minus_start():
    rec = {"pid": 1, "start": 4000, "end": 9000, "op_type": "Conv", "op_name": "c"}
    kp = {"pid": 1, "start": 9000, "end": 9000, "kind": "keypoint", "op_type": "x", "op_name": "y"}
    bare = {"pid": 1}
    n, doc = _chrome([[rec, kp], [bare]])
    assert n == 3
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    # one thread (pid 1, device 0, model 0): its slices in start order
    assert [(e["name"], e["cat"], e["ts"], e["dur"]) for e in ops] == [
        ("?", "?", 0.0, 0.0), ("c", "Conv", 4.0, 5.0), ("step", "step", 9.0, 0.0)]
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {"process (pid 1) @?"}


def test_chrome_events_are_one_compact_line_each():
    """One event a line, without the spaces json.dumps adds by default: a flight recorder's
    trace of 10^6 events is a fifth smaller (what Perfetto reads is the same either way)."""
    out = io.StringIO()
    write_chrome([[_rec(), _rec(device=1)]], out)
    lines = out.getvalue().splitlines()
    events = [ln.rstrip(",") for ln in lines[1:-1]]
    assert len(events) == 2 + 1 + 2 * 2  # two ops, one process name, two threads' name and sort index
    for ln in events:
        assert ln == json.dumps(json.loads(ln), separators=(",", ":")), ln


def test_chrome_of_nothing_is_a_valid_empty_trace():
    n, doc = _chrome([[], []])
    assert n == 0 and doc["traceEvents"] == []
    assert doc["otherData"]["generator"] == "aclprof export"


# ---- jsonl -----------------------------------------------------------------------------------

def test_jsonl_passes_the_daemons_lines_through_and_counts_them():
    out = io.BytesIO()
    lines = [b'{"a":1}\n{"a":2}\n', b"", b'{"a":3}\n']
    assert write_jsonl(iter(lines), out) == 3
    assert out.getvalue() == b"".join(lines)
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [{"a": 1}, {"a": 2}, {"a": 3}]


# ---- ascend: records with fields left out, step events, span openers --------------------------

def _ascend(tmp_path, batches):
    from helpers.ascendrun import write_ascend

    _, dirs = write_ascend(tmp_path / "root", batches)
    (d,) = dirs.values()
    out = d / "ASCEND_PROFILER_OUTPUT"
    with open(out / "kernel_details.csv", encoding="utf-8", newline="") as f:
        kd = list(csv.reader(f))[1:]
    return kd, json.loads((out / "trace_view.json").read_text())


def test_ascend_reads_left_out_fields_as_zero_and_the_duration_from_end_minus_start(tmp_path):
    from aclprof.exportfmt import ascend as fa

    bare = {"host": "n", "pid": 5, "start": 2_000, "end": 7_500}           # no device, model, type, name, duration
    nothing = {"host": "n", "pid": 5}                                      # not even times
    backwards = {"host": "n", "pid": 5, "start": 9_000, "end": 8_000}      # end before start: 0, not negative
    kd, ev = _ascend(tmp_path, [[bare, nothing, backwards]])
    assert kd == [["0", "?", "?", "N/A", "2.000", "5.500", "0.000", "0"],
                  ["0", "?", "?", "N/A", "0.000", "0.000", "0.000", "0"],
                  ["0", "?", "?", "N/A", "9.000", "0.000", "9.000", "0"]]  # 9 us after the previous, at 0
    kernels = [(e["name"], e["tid"], e["dur"], e["args"]["Model Id"], e["args"]["Device Id"], e["args"]["Type"])
               for e in ev if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID]
    assert kernels == [("?", 0, 5.5, 0, 0, "?"), ("?", 0, 0.0, 0, 0, "?"), ("?", 0, 0.0, 0, 0, "?")]


def test_ascend_wait_time_is_per_device_and_model_and_zero_when_ops_touch(tmp_path):
    recs = [{"host": "n", "pid": 5, "device": 1, "model": 2, "start": 1_000, "duration_ns": 1_000},
            {"host": "n", "pid": 5, "device": 1, "model": 3, "start": 5_000, "duration_ns": 1_000},
            {"host": "n", "pid": 5, "device": 1, "model": 2, "start": 2_000, "duration_ns": 500},   # touches
            {"host": "n", "pid": 5, "device": 1, "model": 2, "start": 4_000, "duration_ns": 500},   # 1.5 us gap
            {"host": "n", "pid": 5, "device": 0, "model": 2, "start": 9_000, "duration_ns": 500}]   # another device
    kd, _ = _ascend(tmp_path, [recs])
    assert [(r[0], r[6]) for r in kd] == [("1", "0.000"), ("1", "0.000"), ("1", "0.000"), ("1", "1.500"),
                                          ("0", "0.000")]


def test_ascend_step_events_carry_their_number_model_device_and_times(tmp_path):
    from aclprof.exportfmt import ascend as fa

    steps = [{"host": "n", "pid": 5, "kind": "keypoint", "device": 1, "model": 3, "start": 10_000, "end": 12_500},
             {"host": "n", "pid": 5, "kind": "keypoint"},
             {"host": "n", "pid": 5, "kind": "keypoint", "start": 20_000, "duration_ns": 4_000}]
    kd, ev = _ascend(tmp_path, [steps])
    assert kd == []  # a step is no kernel
    got = [e for e in ev if e["ph"] == "X" and e["pid"] == fa.STEP_PID]
    assert got == [
        {"ph": "X", "name": "Step 1", "pid": fa.STEP_PID, "tid": 0, "ts": "10.000", "dur": 2.5,
         "args": {"Model Id": 3, "Device Id": 1}},
        {"ph": "X", "name": "Step 2", "pid": fa.STEP_PID, "tid": 0, "ts": "0.000", "dur": 0.0,
         "args": {"Model Id": 0, "Device Id": 0}},
        {"ph": "X", "name": "Step 3", "pid": fa.STEP_PID, "tid": 0, "ts": "20.000", "dur": 4.0,
         "args": {"Model Id": 0, "Device Id": 0}}]


def test_span_openers_mark_the_first_op_of_each_busy_interval_in_the_ops_own_order():
    import numpy as np

    from aclprof.exportfmt.ascend import busy_intervals, span_openers

    s = np.array([50, 0, 10, 30, 100, 100], dtype=np.int64)
    e = np.array([60, 10, 20, 55, 100, 101], dtype=np.int64)
    assert span_openers(s, e).tolist() == [False, True, False, True, True, False]
    assert span_openers(s, e).sum() == len(busy_intervals(s, e)[0])
    assert span_openers(s[:0], e[:0]).tolist() == []
    # many ops starting together: the first to arrive opens the span, whatever the sort
    rng = np.random.default_rng(1)
    starts = (np.repeat(np.arange(50), 40)[rng.permutation(2000)] * 1000).astype(np.int64)
    ends = starts + 10
    opened = span_openers(starts, ends)
    assert opened.sum() == 50
    first = {int(v): int(np.flatnonzero(starts == v)[0]) for v in np.unique(starts)}
    assert sorted(np.flatnonzero(opened).tolist()) == sorted(first.values())


def test_csv_keeps_reading_after_a_keypoint_and_reads_left_out_fields():
    out = io.StringIO()
    decoded = json.loads('{"kind": "keypoint", "duration_ns": 50}')  # a parsed string, not the literal
    n = write_csv([[decoded, _rec(duration=2000), {"pid": 3}]], out)
    assert n == 3
    text = out.getvalue()
    assert "\r" not in text and text.endswith("\n")  # Unix lines, as every other export
    rows = list(csv.reader(io.StringIO(text)))[1:]
    assert rows == [["svc", "40", "0", "1", "MatMul", "N/A", "1", "2.000", "2.000", "2.000", "2.000", "100.00"],
                    ["", "3", "0", "0", "?", "N/A", "1", "0.000", "0.000", "0.000", "0.000", "0.00"]]


def test_chrome_reads_left_out_fields_as_zero_and_prefers_the_records_duration():
    n, doc = _chrome([[{"start": 1000, "end": 9000, "duration_ns": 3000}, {"op_name": "x"}]])
    assert n == 2
    ops = [(e["pid"], e["tid"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e["ph"] == "X"]
    assert ops == [(0, 0, 0.0, 0.0), (0, 0, 1.0, 3.0)]  # one thread: in start order
    assert doc["otherData"]["clock"] == ("the ACL library's op timestamps (the device clock; CLOCK_MONOTONIC on "
                                         "the mock)")
