"""``aclprof export --format ascend``'s directory (``aclprof/exportfmt/ascend.py``) read back as
MindStudio Insight and torch_npu's analysis read it (issue 20, mutation run): every metadata
event of trace_view.json (the processes and threads the viewer shows, and their order),
profiler_info.json's level fields the tools check, the kernel events' thread ids, and the file
layout (one compact JSON event a line).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from aclprof.exportfmt import ascend as fa


def export(tmp_path: Path, batches, window=None) -> Path:
    """The process directory an AscendWriter writes for ``batches`` (one process)."""
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = fa.AscendWriter(fd, window)
        try:
            for b in batches:
                w.add(b)
            w.finish()
        finally:
            w.close()
    finally:
        os.close(fd)
    (d,) = [root / x for x in os.listdir(root)]
    return d


def trace(d: Path) -> list[dict]:
    return json.loads((d / fa.OUTPUT_DIR / "trace_view.json").read_text())


def rec(device=0, model=1, start=1_000, dur=1_000, **kw):
    r = {"host": "n1", "pid": 77, "service": "svc", "ts": 5.0, "device": device, "model": model,
         "op_type": "MatMul", "op_name": "mm", "start": start, "duration_ns": dur, "thread_id": 3}
    r.update(kw)
    return r


def meta_events(events: list[dict]) -> list[tuple]:
    return [(e["name"], e["pid"], e["tid"], json.dumps(e["args"], sort_keys=True)) for e in events if e["ph"] == "M"]


def test_trace_metadata_names_and_orders_every_process_and_thread(tmp_path):
    """The "Ascend Hardware" process (labelled NPU) with one thread per device and model, the
    "Overlap Analysis" process with its Computing and Free threads, and "Step Trace" when
    there are steps: each named and given its sort index, as torch_npu's trace_view.json."""
    d = export(tmp_path, [[rec(device=1, model=2), rec(device=0, model=5, start=5_000),
                           {"host": "n1", "pid": 77, "kind": "keypoint", "start": 0, "duration_ns": 9_000}]])
    hw, ov, st = fa.HARDWARE_PID, fa.OVERLAP_PID, fa.STEP_PID
    t1, t2 = 0 * fa.TID_STRIDE + 5, 1 * fa.TID_STRIDE + 2
    expected = [
        ("process_name", hw, 0, {"name": "Ascend Hardware"}),
        ("process_labels", hw, 0, {"labels": "NPU"}),
        ("process_sort_index", hw, 0, {"sort_index": hw}),
        ("thread_name", hw, t1, {"name": "Device 0 Model 5"}),
        ("thread_sort_index", hw, t1, {"sort_index": t1}),
        ("thread_name", hw, t2, {"name": "Device 1 Model 2"}),
        ("thread_sort_index", hw, t2, {"sort_index": t2}),
        ("process_name", ov, 0, {"name": "Overlap Analysis"}),
        ("process_sort_index", ov, 0, {"sort_index": ov}),
        ("thread_name", ov, 1, {"name": "Computing"}),
        ("thread_sort_index", ov, 1, {"sort_index": 1}),
        ("thread_name", ov, 4, {"name": "Free"}),
        ("thread_sort_index", ov, 4, {"sort_index": 4}),
        ("process_name", st, 0, {"name": "Step Trace"}),
        ("process_sort_index", st, 0, {"sort_index": st}),
        ("thread_name", st, 0, {"name": "Steps"}),
    ]
    assert (hw, ov, st) == (1, 2, 3)
    assert meta_events(trace(d)) == [(n, p, t, json.dumps(a, sort_keys=True)) for n, p, t, a in expected]


def test_without_steps_there_is_no_step_trace_process(tmp_path):
    names = {(e["name"], e["pid"]) for e in trace(export(tmp_path, [[rec()]])) if e["ph"] == "M"}
    assert ("process_name", fa.STEP_PID) not in names and ("thread_name", fa.STEP_PID) not in names
    assert ("process_name", fa.OVERLAP_PID) in names


def test_overlap_analysis_shows_busy_spans_and_the_free_time_between_them(tmp_path):
    # busy 1-3 us (two overlapping ops), 6-7 us; free 3-6 us
    d = export(tmp_path, [[rec(start=1_000, dur=1_500), rec(start=2_000, dur=1_000), rec(start=6_000, dur=1_000)]])
    spans = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in trace(d) if e["pid"] == fa.OVERLAP_PID
             and e["ph"] == "X"]
    assert spans == [("Computing", 1, "1.000", 2.0), ("Free", 4, "3.000", 3.0), ("Computing", 1, "6.000", 1.0)]


def test_trace_view_is_one_compact_event_a_line(tmp_path):
    d = export(tmp_path, [[rec(), rec(start=9_000)],
                          [{"host": "n1", "pid": 77, "kind": "keypoint", "start": 0, "duration_ns": 10}]])
    lines = (d / fa.OUTPUT_DIR / "trace_view.json").read_text().splitlines()
    events = [ln.rstrip(",") for ln in lines if ln.startswith("{")]
    assert len(events) == len(trace(d)) > 10
    for ln in events:
        assert ln == json.dumps(json.loads(ln), separators=(",", ":")), ln


def test_kernel_events_carry_the_records_thread_id_as_given(tmp_path):
    d = export(tmp_path, [[rec(thread_id=3), rec(start=3_000, thread_id="t-9"), rec(start=5_000, thread_id=None),
                           {k: v for k, v in rec(start=7_000).items() if k != "thread_id"}]])
    ids = [e["args"]["Thread Id"] for e in trace(d) if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID]
    assert ids == [3, "t-9", None, None]


def test_a_name_of_null_does_not_stand_in_for_later_names(tmp_path):
    """The writer caches each distinct peer string's escaped text: a record whose op type and
    name are JSON null must not give its text to the records after it."""
    d = export(tmp_path, [[rec(op_type=None, op_name=None), rec(start=3_000, op_type="Add", op_name="add_1")]])
    with open(d / fa.OUTPUT_DIR / "kernel_details.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [(r[1], r[2]) for r in rows][1] == ("add_1", "Add")
    kernels = [(e["name"], e["args"]["Type"]) for e in trace(d) if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID]
    assert kernels[1] == ("add_1", "Add")
    assert kernels[0][0] == rows[0][1] and kernels[0][1] == rows[0][2]  # the null's text, the same in both files


def test_profiler_info_says_level0_and_what_aclprof_wrote(tmp_path):
    window = {"since_ts": 1.0, "until_ts": 2.0}
    d = export(tmp_path, [[rec(ts=5.0), rec(start=3_000, ts=6.5)],
                          [{"host": "n1", "pid": 77, "kind": "keypoint", "ts": 7.25, "start": 0, "duration_ns": 10}]],
               window=window)
    info = json.loads((d / "profiler_info.json").read_text())
    assert info == {
        "config": {
            "common_config": {"activities": ["ProfilerActivity.NPU"], "record_shapes": False,
                              "profile_memory": False, "with_stack": False, "with_flops": False,
                              "with_modules": False},
            "experimental_config": {"_profiler_level": "Level0", "_aic_metrics": "ACL_AICORE_NONE",
                                    "_l2_cache": False, "_data_simplification": True}},
        "aclprof": {"generator": "aclprof export --format ascend", "source": "operator subscription",
                    "host": "n1", "pid": 77, "service": "svc", "window": window,
                    "first_received_ts": 5.0, "last_received_ts": 7.25, "op_records": 2, "step_records": 1,
                    "not_collected": ["Accelerator Core", "Core Type", "Block Num", "Input Shapes", "PMU metrics",
                                      "framework (torch) ops", "memory", "communication"]}}
    assert json.loads((d / "profiler_metadata.json").read_text()) == {
        "aclprof_service": "svc", "aclprof_host": "n1", "aclprof_pid": "77"}


def test_span_openers_is_a_boolean_mask_usable_as_an_index():
    starts = np.array([5, 0, 1, 10], dtype=np.int64)
    ends = np.array([6, 2, 3, 11], dtype=np.int64)
    m = fa.span_openers(starts, ends)
    assert m.dtype == np.bool_
    assert starts[m].tolist() == [5, 0, 10]
    assert fa.span_openers(starts[:0], ends[:0]).dtype == np.bool_
