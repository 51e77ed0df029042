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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from helpers.ascendrun import write_ascend

from aclprof.exportfmt import ascend as fa


def export(tmp_path: Path, batches, window=None) -> Path:
    """The process directory an AscendWriter writes for ``batches`` (one process)."""
    _, dirs = write_ascend(tmp_path / "root", batches, window)
    (d,) = dirs.values()
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
    # busy 1-3 us (two overlapping ops), 6-7 us, 10-10.5 us; free 3-6 us and 7-10 us
    d = export(tmp_path, [[rec(start=1_000, dur=1_500), rec(start=2_000, dur=1_000), rec(start=10_000, dur=500),
                           rec(start=6_000, dur=1_000)]])
    spans = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in trace(d) if e["pid"] == fa.OVERLAP_PID
             and e["ph"] == "X"]
    assert spans == [("Computing", 1, "1.000", 2.0), ("Free", 4, "3.000", 3.0), ("Computing", 1, "6.000", 1.0),
                     ("Free", 4, "7.000", 3.0), ("Computing", 1, "10.000", 0.5)]


def test_a_trace_with_as_many_records_as_closing_events_is_still_closed(tmp_path):
    """12 overlapping ops of one device and model: 12 kernel events, then 12 closing events
    (3 for the hardware process, 2 for its thread, 6 for Overlap Analysis, 1 busy span)."""
    d = export(tmp_path, [[rec(start=1_000 + k, dur=100) for k in range(12)]])
    events = trace(d)  # valid JSON: the list is closed
    assert len(events) == 24
    assert sum(1 for e in events if e["ph"] == "M") == 11


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


# ---- op statistics, names, the directory and its files ----------------------------------------

def test_op_statistic_rows_go_by_total_time_then_by_type():
    stats = {"Zeta": [1, 400, 400, 400], "Add": [4, 400, 10, 200], "Mul": [2, 1000, 100, 900],
             "Conv": [3, 400, 1, 300]}
    rows = fa.op_statistic_rows(stats)
    assert [r[0] for r in rows] == ["Mul", "Add", "Conv", "Zeta"]  # equal totals: by type, not by minimum
    assert rows[0] == ["Mul", "N/A", 2, "1.0", "0.1", "0.5", "0.9", "45.455"]
    assert abs(sum(float(r[7]) for r in rows) - 100.0) < 0.01


def test_a_host_name_that_starts_with_a_dot_keeps_the_limit():
    assert fa.path_component("." + "a" * 100) == "h." + "a" * 62
    assert len(fa.path_component("." * 10, limit=8)) == 8
    assert fa.path_component("", limit=8) == "h"


@contextmanager
def local_zone(tz: str) -> Iterator[None]:
    """Local time in ``tz`` (directory names use local time, like torch_npu's)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_a_record_without_host_pid_or_times_is_written_under_defaults(tmp_path):
    with local_zone("UTC"):
        d = export(tmp_path, [[{"op_type": "Add"}, {"op_type": "Add", "ts": 3.0}]])
    assert d.name == "-_0_19700101000000_ascend_pt"
    info = json.loads((d / "profiler_info.json").read_text())["aclprof"]
    assert (info["host"], info["pid"], info["service"]) == ("?", 0, None)
    assert (info["first_received_ts"], info["last_received_ts"], info["op_records"]) == (0.0, 3.0, 2)
    assert json.loads((d / "profiler_metadata.json").read_text()) == {
        "aclprof_service": "", "aclprof_host": "?", "aclprof_pid": "0"}


@pytest.mark.parametrize("tz, stamp", [("Asia/Shanghai", "20231115061320"), ("America/Sao_Paulo", "20231114191320")])
def test_the_directory_is_named_after_the_first_records_receive_time(tmp_path, tz, stamp):
    with local_zone(tz):  # UTC+8 and UTC-3, neither with daylight saving in 2023
        d = export(tmp_path, [[rec(ts=1_700_000_000.5), rec(ts=1_800_000_000.0)]])
    assert d.name == f"n1_77_{stamp}_ascend_pt"  # 2023-11-14 22:13:20 UTC


def test_hosts_whose_names_differ_only_in_unsafe_characters_get_numbered_directories(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = fa.AscendWriter(fd)
        try:
            w.add([rec(host=h, ts=0.0) for h in ("a/b", "a?b", "a*b", "a b")])
            w.finish()
        finally:
            w.close()
    finally:
        os.close(fd)
    stamp = fa.process_dir_name("x", 1, 0.0).split("_")[2]
    base = f"a-b_77_{stamp}"
    assert sorted(os.listdir(root)) == sorted([f"{base}_ascend_pt", f"{base}-2_ascend_pt", f"{base}-3_ascend_pt",
                                               f"{base}-4_ascend_pt"])
    hosts = {json.loads((root / n / "profiler_info.json").read_text())["aclprof"]["host"] for n in os.listdir(root)}
    assert hosts == {"a/b", "a?b", "a*b", "a b"}


def test_files_are_created_with_the_usual_modes_and_unix_line_ends(tmp_path):
    old = os.umask(0o027)
    try:
        d = export(tmp_path, [[rec(), rec(op_type="Add", start=5_000)]])
    finally:
        os.umask(old)
    assert os.stat(d).st_mode & 0o777 == 0o750
    assert os.stat(d / fa.OUTPUT_DIR).st_mode & 0o777 == 0o750
    files = [d / "profiler_info.json", d / "profiler_metadata.json"] + \
        [d / fa.OUTPUT_DIR / n for n in ("kernel_details.csv", "op_statistic.csv", "trace_view.json")]
    for f in files:
        assert os.stat(f).st_mode & 0o777 == 0o640, f
        data = f.read_bytes()
        assert data.endswith(b"\n") and b"\r" not in data, f


def test_a_file_planted_in_the_way_is_never_written_through(tmp_path):
    """The writer owns its staging directory: a symlink planted where a summary file goes
    fails the export (O_EXCL|O_NOFOLLOW), and the link's target is left untouched."""
    root = tmp_path / "root"
    root.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = fa.AscendWriter(fd)
        try:
            w.add([rec()])
            (d,) = [root / x for x in os.listdir(root)]
            (d / fa.OUTPUT_DIR / "op_statistic.csv").symlink_to(target)
            try:
                w.finish()
            except FileExistsError:
                pass
            else:
                raise AssertionError("finish() wrote through a planted symlink")
        finally:
            w.close()
    finally:
        os.close(fd)
    assert target.read_text() == "keep\n"


def test_open_files_are_close_on_exec_and_refuse_a_symlink(tmp_path):
    import fcntl

    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = fa.AscendWriter(fd)
        try:
            w.add([rec()])
            for kd, _, tv in w._open.values():
                for f in (kd, tv):
                    assert fcntl.fcntl(f.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC, f.name
            (d,) = [root / x for x in os.listdir(root)]
            with w._create(f"{d.name}/extra") as f:  # how the summary files are created
                assert fcntl.fcntl(f.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC
            tv_path = d / fa.OUTPUT_DIR / "trace_view.json"
            w.close()
            tv_path.unlink()
            tv_path.symlink_to(tmp_path / "elsewhere")
            (tmp_path / "elsewhere").write_text("")
            try:
                w.add([rec(start=5_000)])
            except OSError as exc:
                assert exc.errno == 40  # ELOOP: O_NOFOLLOW
            else:
                raise AssertionError("the trace list was reopened through a symlink")
        finally:
            w.close()
    finally:
        os.close(fd)
    assert (tmp_path / "elsewhere").read_text() == ""


def test_a_negative_start_from_a_peer_is_written_not_a_crash(tmp_path):
    d = export(tmp_path, [[rec(start=-2_000, dur=1_000), rec(start=0, dur=500)]])
    spans = [(e["name"], e["ts"], e["dur"]) for e in trace(d) if e["pid"] == fa.OVERLAP_PID and e["ph"] == "X"]
    assert spans == [("Computing", "-2.000", 1.0), ("Free", "-1.000", 1.0), ("Computing", "0.000", 0.5)]
