"""``aclprof export --format ascend``: the formatting functions, the directory writer on
hostile records, the staged target directory, and the command against a real daemon.
(msprof-analyze reading the result: tests/test_export_ascend_interop.py.)"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import time

import numpy as np
import pytest
from helpers.ascendrun import write_ascend
from helpers.daemons import InProcess, agent
from helpers.procs import cli, open_fds, wait_for
from helpers.records import make_records

from aclprof.cli import export_ascend as ea
from aclprof.cli.client import DaemonError
from aclprof.cli.common import CliError
from aclprof.cli.main import main
from aclprof.exportfmt import ascend as fa
from aclprof.protocol.wire import FLAG_KEYPOINT

pytestmark = pytest.mark.timeout(60)


def _rec(**kw):
    r = {"ts": 1764400000.5, "host": "node1", "pid": 4242, "service": "svc", "device": 0, "model": 1,
         "op_type": "MatMul", "op_name": "fc1", "start": 1_000_000, "end": 1_010_000, "duration_ns": 10_000,
         "flag": 0, "thread_id": 7, "kind": "op"}
    r.update(kw)
    return r


def _write(tmp_path, batches, window=None):
    """Run AscendWriter into tmp_path/root; {dir name: its path}."""
    return write_ascend(tmp_path / "root", batches, window)


def _csv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def _trace(d):
    raw = (d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes()
    raw.decode("ascii")  # pure ASCII whatever the names
    return json.loads(raw)


# -- formatting ------------------------------------------------------------------------------

def test_columns_are_torch_npus_exactly():
    # torch_npu CsvHeaders.OP_SUMMARY_KERNEL_BASE_HEADERS and OpStatisticBean.HEADERS
    assert fa.KERNEL_DETAILS_COLUMNS == ["Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)",
                                         "Duration(us)", "Wait Time(us)", "Block Num"]
    assert fa.OP_STATISTIC_COLUMNS == ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)",
                                       "Avg Time(us)", "Max Time(us)", "Ratio(%)"]
    assert fa.NOT_COLLECTED == "N/A"


def test_format_us_is_exact_for_device_timestamps():
    assert fa.format_us(1_234_567) == "1234.567"
    assert fa.format_us(0) == "0.000"
    assert fa.format_us(999) == "0.999"
    assert fa.format_us(-1_500) == "-1.500"
    # a float would lose the last digits of a 19-digit ns timestamp
    assert fa.format_us(1_796_120_889_484_305_123) == "1796120889484305.123"


@pytest.mark.parametrize("host, expected", [
    ("node1.example", "node1.example"), ("a/b", "a-b"), ("../etc", "h..-etc"), ("", "h"), (".", "h."),
    ("host_1", "host-1"), ("h\x00\n\u202e", "h---"), ("hé", "h-"), ("x" * 300, "x" * 64),
])
def test_path_component_is_one_safe_name_part(host, expected):
    assert fa.path_component(host) == expected
    assert "/" not in expected and "_" not in expected


def test_process_dir_name_is_torch_npus_worker_name():
    name = fa.process_dir_name("node1", 4242, 1764400000.5)
    assert re.fullmatch(r"node1_4242_\d{14}_ascend_pt", name)
    assert name.split("_")[2] == time.strftime("%Y%m%d%H%M%S", time.localtime(1764400000.5))


def test_process_dir_name_survives_a_time_that_is_not_one():
    for ts in (1e300, float("nan"), -1e300):
        assert fa.process_dir_name("h", 1, ts) == "h_1_00000000000000_ascend_pt"


def test_name_cache_stays_bounded_and_correct(monkeypatch):
    monkeypatch.setattr(fa._Names, "LIMIT", 4)
    names = fa._Names()
    for i in range(20):
        assert names.get(f"op\n{i}") == (f"op\\x0a{i}", json.dumps(f"op\\x0a{i}"))
        assert len(names._cache) <= 4
    assert names.get("say \"hi\"")[1] == '"say \\"hi\\""'


def test_op_statistic_rows_sorted_with_ratios_like_torch_npu():
    rows = fa.op_statistic_rows({"Relu": [2, 4_000, 2_000, 2_000], "MatMul": [3, 36_000, 10_000, 14_000]})
    assert rows == [["MatMul", "N/A", 3, "36.0", "10.0", "12.0", "14.0", "90.0"],
                    ["Relu", "N/A", 2, "4.0", "2.0", "2.0", "2.0", "10.0"]]
    assert fa.op_statistic_rows({}) == []
    assert fa.op_statistic_rows({"A": [3, 1_000, 1, 998]})[0][5] == "0.333"


def test_busy_intervals_merge_overlapping_and_touching_spans():
    s = np.array([50, 0, 10, 30, 100], dtype=np.int64)
    e = np.array([60, 10, 20, 55, 100], dtype=np.int64)
    bs, be = fa.busy_intervals(s, e)
    assert bs.tolist() == [0, 30, 100] and be.tolist() == [20, 60, 100]
    bs, be = fa.busy_intervals(s[:0], e[:0])
    assert len(bs) == len(be) == 0


# -- the writer ------------------------------------------------------------------------------

def test_writer_fills_every_file_from_the_records(tmp_path):
    recs = [_rec(op_type="Conv2D", op_name="conv1", start=1_000_000, duration_ns=40_000),
            _rec(start=1_040_000, duration_ns=10_000),
            _rec(start=1_060_000, duration_ns=14_000),  # 10 us after the previous op of model 1
            _rec(model=2, device=1, start=1_000_000, duration_ns=5_000),
            _rec(kind="keypoint", op_type="na", op_name="keypoint_op", start=990_000, duration_ns=100_000)]
    w, dirs = _write(tmp_path, [recs[:2], recs[2:]], window={"since_ts": 1.0, "until_ts": None, "filter": {}})
    assert w.records == 5 and w.processes == 1
    (name, d), = dirs.items()
    assert re.fullmatch(r"node1_4242_\d{14}_ascend_pt", name)
    out = d / "ASCEND_PROFILER_OUTPUT"
    assert sorted(os.listdir(out)) == ["kernel_details.csv", "op_statistic.csv", "trace_view.json"]

    kd = _csv(out / "kernel_details.csv")
    assert kd[0] == fa.KERNEL_DETAILS_COLUMNS
    assert kd[1:] == [["0", "conv1", "Conv2D", "N/A", "1000.000", "40.000", "0.000", "0"],
                      ["0", "fc1", "MatMul", "N/A", "1040.000", "10.000", "0.000", "0"],
                      ["0", "fc1", "MatMul", "N/A", "1060.000", "14.000", "10.000", "0"],
                      ["1", "fc1", "MatMul", "N/A", "1000.000", "5.000", "0.000", "0"]]
    st = _csv(out / "op_statistic.csv")
    assert st[0] == fa.OP_STATISTIC_COLUMNS
    assert st[1:] == [["Conv2D", "N/A", "1", "40.0", "40.0", "40.0", "40.0", "57.971"],
                      ["MatMul", "N/A", "3", "29.0", "5.0", "9.667", "14.0", "42.029"]]

    ev = _trace(d)
    kernels = [e for e in ev if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID]
    assert [(e["name"], e["ts"], e["dur"], e["tid"]) for e in kernels] == [
        ("conv1", "1000.000", 40.0, 1), ("fc1", "1040.000", 10.0, 1), ("fc1", "1060.000", 14.0, 1),
        ("fc1", "1000.000", 5.0, fa.TID_STRIDE + 2)]
    assert kernels[0]["args"]["Type"] == "Conv2D" and kernels[0]["args"]["Task Type"] == "N/A"
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert procs == {fa.HARDWARE_PID: "Ascend Hardware", fa.OVERLAP_PID: "Overlap Analysis",
                     fa.STEP_PID: "Step Trace"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert threads == {(fa.HARDWARE_PID, 1): "Device 0 Model 1",
                       (fa.HARDWARE_PID, fa.TID_STRIDE + 2): "Device 1 Model 2", (fa.OVERLAP_PID, 1): "Computing",
                       (fa.OVERLAP_PID, 4): "Free", (fa.STEP_PID, 0): "Steps"}
    overlap = [(e["name"], e["ts"], e["dur"]) for e in ev if e["ph"] == "X" and e["pid"] == fa.OVERLAP_PID]
    assert overlap == [("Computing", "1000.000", 50.0), ("Free", "1050.000", 10.0), ("Computing", "1060.000", 14.0)]
    steps = [e for e in ev if e["ph"] == "X" and e["pid"] == fa.STEP_PID]
    assert [(e["name"], e["ts"], e["dur"]) for e in steps] == [("Step 1", "990.000", 100.0)]

    info = json.loads((d / "profiler_info.json").read_text())
    assert info["config"]["experimental_config"]["_profiler_level"] == "Level0"
    assert info["aclprof"]["op_records"] == 4 and info["aclprof"]["step_records"] == 1
    assert info["aclprof"]["window"]["since_ts"] == 1.0 and "Core Type" in info["aclprof"]["not_collected"]
    assert json.loads((d / "profiler_metadata.json").read_text()) == {
        "aclprof_service": "svc", "aclprof_host": "node1", "aclprof_pid": "4242"}


HOSTILE = ['Mat,Mul', 'say "hi"', "two\nlines", "cr\rlf", "lone\ud800surrogate", "\x1b]0;title\x07",
           "tab\there", "zero\x00", "bidi\u202eevil", "é中", "", ","]


def test_hostile_names_stay_one_row_and_valid_json(tmp_path):
    recs = [_rec(op_type=t, op_name=f"n-{t}", start=1_000_000 + 20_000 * i) for i, t in enumerate(HOSTILE)]
    recs.append(_rec(host="evil/../host\n", pid=7, service="s\ud800\n"))
    _, dirs = _write(tmp_path, [recs])
    assert len(dirs) == 2
    for name in dirs:
        assert "/" not in name and "\n" not in name and not name.startswith(".")
    d = next(p for n, p in dirs.items() if n.startswith("node1_"))
    kd = _csv(d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert len(kd) == 1 + len(HOSTILE) and all(len(r) == 8 for r in kd)
    types = [r[2] for r in kd[1:]]
    assert types[:2] == ['Mat,Mul', 'say "hi"']  # csv quoting keeps them whole
    assert types[2] == "two\\x0alines" and types[4] == "lone\\ud800surrogate" and types[9] == "é中"
    st = _csv(d / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
    assert {r[0] for r in st[1:]} == set(types) and len(st) == 1 + len(set(types))
    # every line of the csv files is one row: nothing a line-based reader would split
    raw = (d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").read_text(encoding="utf-8")
    assert raw.count("\n") == 1 + len(HOSTILE)
    ev = _trace(d)
    assert {e["args"]["Type"] for e in ev if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID} == set(types)
    other = next(p for n, p in dirs.items() if not n.startswith("node1_"))
    meta = json.loads((other / "profiler_metadata.json").read_text())
    assert meta["aclprof_service"] == "s\\ud800\\x0a" and meta["aclprof_host"] == "evil/../host\\x0a"


def test_zero_records_write_nothing(tmp_path):
    w, dirs = _write(tmp_path, [[], []])
    assert w.records == 0 and dirs == {}


def test_a_window_with_only_keypoints_gives_empty_tables_and_the_steps(tmp_path):
    steps = [_rec(kind="keypoint", op_type="na", op_name="keypoint_op", start=1_000_000 * i, duration_ns=500_000)
             for i in range(1, 4)]
    _, dirs = _write(tmp_path, [steps])
    (d,) = dirs.values()
    out = d / "ASCEND_PROFILER_OUTPUT"
    assert _csv(out / "kernel_details.csv") == [fa.KERNEL_DETAILS_COLUMNS]
    assert _csv(out / "op_statistic.csv") == [fa.OP_STATISTIC_COLUMNS]
    ev = _trace(d)
    assert [e["name"] for e in ev if e["ph"] == "X"] == ["Step 1", "Step 2", "Step 3"]
    assert not [e for e in ev if e["ph"] == "X" and e["pid"] == fa.OVERLAP_PID]


def test_many_processes_bound_the_open_files_and_lose_no_row(tmp_path):
    n = fa._MAX_OPEN_PROCESSES + 9
    before = len(open_fds())
    peak = [0]

    def batches():
        for round_ in range(3):
            yield [_rec(pid=1000 + p, start=1_000_000 + round_ * 20_000) for p in range(n)]
            peak[0] = max(peak[0], len(open_fds()) - before)

    _, dirs = _write(tmp_path, batches())
    assert len(dirs) == n
    assert peak[0] <= 2 * fa._MAX_OPEN_PROCESSES + 2
    assert len(open_fds()) == before
    for d in dirs.values():
        assert len(_csv(d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")) == 4
        assert len([e for e in _trace(d) if e["ph"] == "X" and e["pid"] == fa.HARDWARE_PID]) == 3


def test_hosts_that_sanitize_alike_get_distinct_directories(tmp_path):
    _, dirs = _write(tmp_path, [[_rec(host="a/b"), _rec(host="a_b"), _rec(host="a\nb")]])
    assert len(dirs) == 3
    assert sorted(n.split("_")[0] for n in dirs) == ["a-b", "a-b", "a-b"]
    assert len({n.split("_")[2] for n in dirs}) == 3  # the time part carries -2, -3


# -- the target directory --------------------------------------------------------------------

def _leftovers(parent) -> list[str]:
    return [n for n in os.listdir(parent) if n.endswith(".tmp")]


def test_staged_dir_appears_only_on_commit_with_the_usual_mode(tmp_path):
    target = tmp_path / "out"
    s = ea.StagedDir(str(target))
    try:
        os.mkdir("x", dir_fd=s.fd)
        assert not target.exists() and len(_leftovers(tmp_path)) == 1
        assert stat.S_IMODE(os.stat(tmp_path / _leftovers(tmp_path)[0]).st_mode) == 0o700
        s.commit()
    finally:
        s.close()
    assert os.listdir(target) == ["x"] and _leftovers(tmp_path) == []
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777 & ~umask


def test_staged_dir_accepts_an_empty_directory_and_a_symlink_to_one(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for given, final in (("empty", "empty"), ("link", "real")):
        s = ea.StagedDir(str(tmp_path / given))
        try:
            os.mkdir("x", dir_fd=s.fd)
            s.commit()
        finally:
            s.close()
        assert os.listdir(tmp_path / final) == ["x"]
    assert (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("setup, message", [
    ("file", "it exists and is not a directory"),
    ("nonempty", "is not empty"),
    ("planted_symlink", "is not empty"),
    ("no_parent", "cannot write"),
    ("parent_is_a_file", "cannot write"),
    ("proc", "cannot write"),
    ("sysfs", "cannot write"),  # refuses mkdir even to root: an unwritable directory for any user
])
def test_staged_dir_refuses_with_exit_2_and_touches_nothing(tmp_path, setup, message):
    target = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.mkdir()
    if setup == "file":
        target.write_text("keep")
    elif setup == "nonempty":
        target.mkdir()
        (target / "mine").write_text("keep")
    elif setup == "planted_symlink":
        target.mkdir()
        (target / "node1_1_20260101000000_ascend_pt").symlink_to(victim)
    elif setup == "no_parent":
        target = tmp_path / "missing" / "out"
    elif setup == "parent_is_a_file":
        (tmp_path / "plain").write_text("keep")
        target = tmp_path / "plain" / "out"
    elif setup == "proc":
        target = "/proc/aclprof-export-test"
    elif setup == "sysfs":
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("no sysfs")
        target = "/sys/aclprof-export-test"
    with pytest.raises(CliError) as exc:
        ea.StagedDir(str(target))
    assert exc.value.code == 2 and message in str(exc.value)
    assert os.listdir(victim) == [] and _leftovers(tmp_path) == []
    if setup == "file":
        assert target.read_text() == "keep"
    if setup == "nonempty":
        assert os.listdir(target) == ["mine"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode 0500 directory anyway")
def test_staged_dir_in_an_unwritable_directory_is_exit_2(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        with pytest.raises(CliError) as exc:
            ea.StagedDir(str(parent / "out"))
        assert exc.value.code == 2 and "Permission denied" in str(exc.value)
    finally:
        parent.chmod(0o700)


class _FakeClient:
    def __init__(self, batches):
        self.batches = batches
        self.closed = False

    def export(self, since, until, filt):
        for b in self.batches:
            if isinstance(b, BaseException):
                raise b
            if callable(b):
                b()
                continue
            yield b

    def close(self):
        self.closed = True


def _args(output, **kw):
    import argparse

    ns = argparse.Namespace(output=output, since=None, until=None, model=None, pid=None, type=None, name=None,
                            min_duration=None, service=None, host=None, socket=None)
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_a_failed_export_leaves_no_directory(tmp_path, monkeypatch):
    client = _FakeClient([[_rec()], DaemonError("the daemon stopped during the export")])
    monkeypatch.setattr(ea, "connect", lambda args, timeout=None: client)
    before = len(open_fds())
    with pytest.raises(DaemonError):
        ea.cmd_export_ascend(_args(str(tmp_path / "out")))
    assert os.listdir(tmp_path) == [] and client.closed and len(open_fds()) == before


def test_a_target_filled_during_the_export_is_not_replaced(tmp_path, monkeypatch):
    target = tmp_path / "out"

    def someone_writes():
        target.mkdir()
        (target / "theirs").write_text("keep")

    monkeypatch.setattr(ea, "connect", lambda args, timeout=None: _FakeClient([[_rec()], someone_writes]))
    with pytest.raises(CliError) as exc:
        ea.cmd_export_ascend(_args(str(target)))
    assert exc.value.code == 1 and "changed during the export" in str(exc.value)
    assert os.listdir(target) == ["theirs"] and _leftovers(tmp_path) == []


def test_usage_errors_exit_2(tmp_path):
    # as subprocesses: main() configures structlog onto the stderr it was given
    none = str(tmp_path / "none.sock")
    p = cli("export", "--format", "ascend", "--socket", none)
    assert p.returncode == 2 and "give it with -o DIR" in p.stderr
    p = cli("export", "--format", "ascend", "-o", "-", "--socket", none)
    assert p.returncode == 2 and "give it with -o DIR" in p.stderr
    (tmp_path / "f").write_text("x")
    p = cli("export", "--format", "ascend", "-o", str(tmp_path / "f"), "--socket", none)
    assert p.returncode == 2 and "not a directory" in p.stderr
    assert (tmp_path / "f").read_text() == "x"
    p = cli("export", "--format", "ascend", "-o", str(tmp_path / "d"), "--since", "now", "--until", "-5m")
    assert p.returncode == 2 and "--since is after --until" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_unreachable_daemon_leaves_nothing(tmp_path):
    p = cli("export", "--format", "ascend", "-o", str(tmp_path / "out"), "--socket", str(tmp_path / "none.sock"))
    assert p.returncode == 2 and os.listdir(tmp_path) == []


# -- the command against a real daemon -------------------------------------------------------

def test_export_ascend_from_a_daemon_with_filters_and_keypoints(tmp_path):
    with InProcess() as d:
        # one test process: the daemon records its real pid for both agents; hosts tell them apart
        a = agent(d.socket, host="hostA", service="svc-a", names={1: "Mat,Mul\n", 2: "Relu", 3: "fc\ud800", 4: "r"})
        b = agent(d.socket, host="hostB", service="svc-b")
        ops = make_records(100, types=(1, 2), names=(3, 4), durations=1_000)
        steps = make_records(3, types=(2,), names=(4,), durations=50_000)
        steps["flag"] = FLAG_KEYPOINT
        a.send_batch(ops)
        b.send_batch(steps)  # svc-b: only step keypoints

        def stored():
            p = cli("export", "--format", "jsonl", "--socket", d.socket)
            return p.stdout.count("\n") == 103

        wait_for(stored, what="103 records stored")
        p = cli("export", "--format", "ascend", "-o", str(tmp_path / "all"), "--socket", d.socket)
        assert p.returncode == 0, p.stderr
        assert "exported 103 records of 2 process(es)" in p.stderr
        dirs = {n.split("_")[0]: tmp_path / "all" / n for n in os.listdir(tmp_path / "all")}
        assert set(dirs) == {"hostA", "hostB"}
        assert {n.split("_")[1] for n in os.listdir(tmp_path / "all")} == {str(os.getpid())}
        kd = _csv(dirs["hostA"] / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
        assert len(kd) == 101 and {r[2] for r in kd[1:]} == {"Mat,Mul\\x0a", "Relu"}
        assert {r[1] for r in kd[1:]} == {"fc\ufffd", "r"}  # the daemon scrubs lone surrogates at ingest
        st = _csv(dirs["hostA"] / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
        assert [(r[0], r[2], r[3]) for r in st[1:]] == [("Mat,Mul\\x0a", "50", "50.0"), ("Relu", "50", "50.0")]
        assert _csv(dirs["hostB"] / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv") == [fa.KERNEL_DETAILS_COLUMNS]
        assert len([e for e in _trace(dirs["hostB"]) if e["ph"] == "X"]) == 3

        # a filter: only svc-a's Relu
        p = cli("export", "--format", "ascend", "-o", str(tmp_path / "relu"), "--type", "^Relu$",
                "--service", "svc-a", "--socket", d.socket)
        assert p.returncode == 0 and "exported 50 records of 1 process" in p.stderr, p.stderr
        (only,) = os.listdir(tmp_path / "relu")
        st = _csv(tmp_path / "relu" / only / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
        assert [r[0] for r in st[1:]] == ["Relu"] and st[1][-1] == "100.0"

        # nothing matches: an empty directory, exit 0, said on stderr
        p = cli("export", "--format", "ascend", "-o", str(tmp_path / "none"), "--service", "nobody",
                "--socket", d.socket)
        assert p.returncode == 0 and "no records matched" in p.stderr
        assert os.listdir(tmp_path / "none") == []
        assert sorted(os.listdir(tmp_path)) == ["all", "none", "relu"]  # no staging directory left
        a.close()
        b.close()


def test_help_lists_the_format(capsys):
    assert main(["export", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ascend" in out and "--format ascend -o" in out


def test_kernel_row_is_torch_npus_level0_row():
    assert fa.kernel_row(3, "fc1", "MatMul", 1_234_567_891, 10_500, 0) == [
        3, "fc1", "MatMul", "N/A", "1234567.891", "10.500", "0.000", 0]
