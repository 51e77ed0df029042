"""``aclprof baseline`` and ``aclprof diff`` (issue 11): real files, a real daemon, and the
hostile inputs (malformed lines, oversize lines, bad specs, an unreachable daemon)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.daemons import InProcess, agent
from helpers.procs import env
from helpers.records import make_records

from aclprof.cli.main import main


def _jsonl(path, ops: dict[tuple[str, str], tuple[float, int]], seed: int, service: str = "svc") -> str:
    """An export-like JSON Lines file: per (type, name), n lognormal durations around a median."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for (op_type, op_name), (median, n) in ops.items():
            for d in rng.lognormal(math.log(median), 0.3, n).astype(int).tolist():
                f.write(json.dumps({"ts": 1.0, "host": "h", "pid": 1, "service": service, "device": 0, "model": 1,
                                    "op_type": op_type, "op_name": op_name, "duration_ns": d}) + "\n")
        f.write(json.dumps({"kind": "keypoint", "duration_ns": 10**12, "op_type": "step", "op_name": "s"}) + "\n")
    return str(path)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    import structlog
    saved = structlog.get_config()  # the CLI configures structlog onto this test's captured stderr
    try:
        rc = main(list(argv))
    finally:
        structlog.configure(**saved)
    out, err = capsys.readouterr()
    return rc, out, err


def test_diff_of_two_exports_ranks_the_slowed_op_first(tmp_path, capsys):
    a = _jsonl(tmp_path / "a.jsonl", {("MatMul", "fc1"): (100_000, 8_000), ("MatMul", "fc2"): (50_000, 8_000),
                                      ("Add", "add"): (5_000, 8_000), ("Gone", "g"): (1000, 500)}, 1)
    b = _jsonl(tmp_path / "b.jsonl", {("MatMul", "fc1"): (125_000, 8_000), ("MatMul", "fc2"): (50_000, 8_000),
                                      ("Add", "add"): (5_000, 8_000), ("New", "n"): (1000, 500)}, 2)
    rc, out, _ = _run(capsys, "diff", a, b, "--json")
    assert rc == 0
    res = json.loads(out)
    rows = {r["key"]: r for r in res["rows"]}
    assert res["rows"][0]["key"] == "MatMul" and rows["MatMul"]["verdict"] == "slower"
    assert rows["Add"]["verdict"] == "" and 0.97 < rows["Add"]["p50"]["shift"] < 1.03
    assert rows["Add"]["p50"]["lower"] < 1 < rows["Add"]["p50"]["upper"]
    assert res["only_in_a"] == ["Gone"] and res["only_in_b"] == ["New"]
    assert rows["MatMul"]["n_a"] == 16_000  # the keypoint line is not an op
    rc, out, _ = _run(capsys, "diff", a, b, "--json", "--by", "name")
    by_name = {r["key"]: r for r in json.loads(out)["rows"]}
    assert by_name["fc1"]["verdict"] == "slower" and by_name["fc1"]["p50"]["shift"] == pytest.approx(1.25, abs=0.03)
    assert by_name["fc2"]["verdict"] == ""
    rc, out, _ = _run(capsys, "diff", a, b)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("OP TYPE") and lines[1].startswith("MatMul") and "slower" in lines[1]
    assert "only in A: Gone" in out and "only in B: New" in out
    rc, out, _ = _run(capsys, "diff", a, b, "--service", "other", "--json")
    assert json.loads(out)["rows"] == []


def test_diff_reads_kernel_details_directories(tmp_path, capsys):
    for side, slow in (("a", 1.0), ("b", 0.8)):
        d = tmp_path / side / "PROF_1" / "ASCEND_PROFILER_OUTPUT"
        d.mkdir(parents=True)
        rng = np.random.default_rng(7 if side == "a" else 8)
        with open(d / "kernel_details.csv", "w") as f:
            f.write("Name,Type,Accelerator Core,Start Time(us),Duration(us)\n")
            for i, us in enumerate(rng.lognormal(math.log(40.0), 0.2, 5000) * slow):
                f.write(f"conv{i % 3},Conv2D,AI_CORE,{i},{us:.3f}\n")
    rc, out, _ = _run(capsys, "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert rc == 0
    (row,) = json.loads(out)["rows"]
    assert row["key"] == "Conv2D" and row["verdict"] == "faster" and row["p50"]["shift"] == pytest.approx(0.8, abs=0.02)


@pytest.mark.parametrize("content, message", [
    (b'{"op_type": "A", "op_name": "a", "duration_ns": 5}\nnot json\n', "line 2 is not an aclprof export record"),
    (b'{"op_type": "A", "op_name": "a", "duration_ns": -5}\n', "line 1 .*duration_ns"),
    (b'{"op_type": "A", "op_name": "a", "duration_ns": "5"}\n', "line 1 .*duration_ns"),
    (b'{"op_type": "A", "duration_ns": 5}\n', "line 1 .*op_name"),
    (b'[1, 2]\n', "line 1 .*not an object"),
    (b'{"op_type": "A", "op_name": "a", "duration_ns": 1}\n' + b"x" * (2 << 20) + b"\n", "line 2 is longer"),
    (b'{"format": "aclprofd-baseline", "version": 2}', "not a aclprofd-baseline version 1"),
])
def test_diff_refuses_malformed_files(tmp_path, capsys, content, message):
    good = _jsonl(tmp_path / "good.jsonl", {("A", "a"): (1000, 10)}, 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    rc, _, err = _run(capsys, "diff", good, str(bad))
    assert rc == 2  # a malformed input is a usage error (issue 19)
    assert re.search(message, err), err
    assert str(bad) in err


def test_diff_bounds_the_distinct_ops_it_holds(tmp_path, capsys, monkeypatch):
    from aclprof.cli import diff_sources
    monkeypatch.setattr(diff_sources, "_MAX_CELLS", 3)
    many = _jsonl(tmp_path / "many.jsonl", {("A", f"a{i}"): (1000, 2) for i in range(4)}, 1)
    rc, _, err = _run(capsys, "diff", many, many)
    assert rc == 1 and "more than 3 distinct" in err


def test_diff_usage_errors_exit_2(tmp_path, capsys):
    good = _jsonl(tmp_path / "good.jsonl", {("A", "a"): (1000, 10)}, 1)
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in (["diff", good], ["diff", good, "baseline:../x"], ["diff", good, "live:yesterday"],
                 ["diff", good, "window:-1h"], ["diff", good, "window:now..-1h"], ["diff", good, "window:x..now"],
                 ["diff", good, good, "--min-effect", "0"], ["diff", good, good, "--z", "nan"],
                 ["diff", good, good, "--limit", "-1"], ["diff", "-", "-"], ["diff", good, good, "--by", "pid"],
                 ["baseline", "save", ".hidden"], ["baseline"]):
        rc, _, err = _run(capsys, *argv)
        assert rc == 2, (argv, err)
    rc, _, err = _run(capsys, "diff", good, str(empty))
    assert rc == 1 and "no kernel_details.csv" in err
    rc, _, err = _run(capsys, "diff", good, "baseline:x", "--socket", str(tmp_path / "none.sock"))
    assert rc == 2 and "no daemon socket" in err


@pytest.mark.slow
def _cli(*argv: str) -> tuple[int, str, str]:
    """The CLI in a child process: in this one, its logging set-up would capture the log
    lines of the in-process daemon's thread (structlog caches loggers on first use)."""
    p = subprocess.run([sys.executable, "-m", "aclprof", *argv], env=env(), capture_output=True, text=True,
                       timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return p.returncode, p.stdout, p.stderr


def test_baseline_save_list_and_diff_against_the_live_window(tmp_path):
    fast = {"detector_window_s": "2s", "detector_trailing_s": "4s", "detector_min_count": "200",
            "detector_persistence": "2", "data_dir": tmp_path / "data"}
    with InProcess(**fast) as d:
        a = agent(d.socket, service="svc")
        rng = np.random.default_rng(9)

        def feed(seconds: float, slow: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                dur = rng.lognormal(math.log(100_000), 0.3, 400)
                dur[0::2] *= slow  # even records: type id 2 (MatMul)
                a.send_batch(make_records(400, types=(2, 1), names=(4, 3), durations=dur.astype(np.int64)))
                time.sleep(0.1)
        t_start = time.time()
        feed(3.0, 1.0)
        t_mid = time.time()
        rc, out, _ = _cli("baseline", "save", "good", "--socket", d.socket)
        assert rc == 0 and out.startswith("saved baseline good: 2 ops (recent)")
        assert os.path.exists(os.path.join(d.settings.data_dir, "baselines", "good.json"))
        rc, out, _ = _cli("baseline", "list", "--socket", d.socket)
        assert rc == 0 and "in use: trailing" in out and "  good " in out
        feed(3.0, 1.3)
        rc, out, _ = _cli("diff", "baseline:good", "live:current", "--json", "--socket", d.socket)
        assert rc == 0
        rows = {r["key"]: r for r in json.loads(out)["rows"]}
        # the current window may still hold a little of the time before the slowdown
        assert rows["MatMul"]["verdict"] == "slower" and 1.15 < rows["MatMul"]["p50"]["shift"] < 1.35
        assert rows["Conv2D"]["verdict"] == ""
        # two windows of the records the daemon kept (EXPORT), before and after the slowdown
        rc, out, err = _cli("diff", f"window:{t_start}..{t_mid}", f"window:{t_mid}..now", "--json",
                            "--socket", d.socket)
        assert rc == 0, err
        res = json.loads(out)
        rows = {r["key"]: r for r in res["rows"]}
        assert rows["MatMul"]["verdict"] == "slower" and rows["Conv2D"]["verdict"] == ""
        assert rows["MatMul"]["n_a"] > 5000 and res["a"] == f"window:{t_start}..{t_mid}"
        rc, _, err = _cli("diff", "baseline:missing", "live:current", "--socket", d.socket)
        assert rc == 1 and "no baseline named 'missing'" in err
        a.close()
