"""``aclprof export --format msmonitor-db`` (issue 23 item 3): msMonitor's SQLite tables, read
by ``msprof-analyze cluster -m compute_op_sum`` (PyPI msprof-analyze, the ``interop`` extra). Raw
ops are exported, so its Count, Median and Q3 per (rank, op type) must equal the exact ones of
the records (not only within one of our histogram buckets), on randomised workloads."""

from __future__ import annotations

import csv
import os
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.readers import msprof_analyze
from helpers.workloads import examples, process_records
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof.exportfmt.msmonitor import SCHEMA_META, TABLES, UINT32_MAX, MsmonitorWriter
from aclprof.protocol.safetext import safe

FILE_NAME = re.compile(r"^msmonitor_(\d+)_\d{17}_(-1|\d+)\.db$")  # msprof-analyze's pattern
PROCESSES_PER_EXAMPLE = 30  # one msprof-analyze run (~7 s of start-up) reads them all


def write_dbs(root: Path, records: list[dict[str, Any]]) -> MsmonitorWriter:
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = MsmonitorWriter(fd)
        try:
            w.add(records)
            w.finish()
        finally:
            w.close()
    finally:
        os.close(fd)
    return w


def test_tables_names_and_rows(tmp_path: Path) -> None:
    recs = [{"ts": 1764400000.25, "host": "b", "pid": 7, "service": "svc", "device": 3, "model": 2,
             "op_type": "Conv2D", "op_name": "conv\ud800", "start": 100, "end": 900, "duration_ns": 500},
            {"ts": 1764400001.0, "host": "b", "pid": 7, "kind": "keypoint", "start": 5, "end": 6},
            {"ts": 1764400000.5, "host": "a", "pid": 9, "service": "", "device": 0, "model": 0,
             "op_type": "MatMul", "op_name": "fc", "start": 0, "end": 10, "duration_ns": 10}]
    w = write_dbs(tmp_path / "d", recs)
    assert (w.records, w.keypoints, w.processes) == (3, 1, 2)
    assert w.ranks == {("a", 9): 0, ("b", 7): 1}  # (host, pid) order
    files = sorted(os.listdir(tmp_path / "d"))
    assert [FILE_NAME.match(f).groups() for f in files] == [("7", "1"), ("9", "0")]  # type: ignore[union-attr]
    con = sqlite3.connect(tmp_path / "d" / files[0])
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == set(TABLES)
        for t, cols in TABLES.items():
            assert [(r[1], r[2]) for r in con.execute(f"PRAGMA table_info({t})")] == [
                (c, ty.split()[0]) for c, ty in cols]
        task = con.execute("SELECT * FROM TASK").fetchall()
        # endNs - startNs is duration_ns (not end - start); what was not collected is UINT32_MAX
        assert [r[:3] + r[4:6] + r[7:] for r in task] == [(100, 600, 3, 0, 7, UINT32_MAX, UINT32_MAX, UINT32_MAX, 2)]
        joined = con.execute("SELECT n.value, o.value, t.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS n "
                             "ON n.id = c.name JOIN STRING_IDS o ON o.id = c.opType JOIN STRING_IDS t "
                             "ON t.id = c.taskType").fetchall()
        assert joined == [("conv\\ud800", "Conv2D", "N/A")]  # escaped, as in every export
        meta = con.execute("SELECT name, value FROM META_DATA").fetchall()
        assert meta[:4] == SCHEMA_META and ("aclprof_pid", "7") in meta and ("aclprof_service", "svc") in meta
        assert con.execute("SELECT * FROM RANK_DEVICE_MAP").fetchall() == [(1, 3)]
        # the session: its ops' receive times (the keypoint is not written)
        assert con.execute("SELECT * FROM SESSION_TIME_INFO").fetchall() == [(1764400000250000000,
                                                                               1764400000250000000)]
    finally:
        con.close()


def _exact(records: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, float, float]]:
    """{(pid, op type as exported): (count, median µs, Q3 µs)}, pandas' (linear) quantiles of
    the records."""
    by: dict[tuple[int, str], list[int]] = {}
    for r in records:
        if r.get("kind") != "keypoint":
            by.setdefault((r["pid"], safe(r["op_type"])), []).append(r["duration_ns"])
    return {k: (len(v), float(np.quantile(np.array(v) / 1e3, 0.5)), float(np.quantile(np.array(v) / 1e3, 0.75)))
            for k, v in by.items()}


@st.composite
def _processes(draw: Any) -> list[dict[str, Any]]:
    pids = draw(st.lists(st.integers(1, 4_000_000), min_size=PROCESSES_PER_EXAMPLE,
                         max_size=PROCESSES_PER_EXAMPLE, unique=True))
    return [r for pid in pids for r in draw(process_records(pid))]


@pytest.mark.slow  # one msprof-analyze run per example (~7 s of start-up)
@pytest.mark.skipif(msprof_analyze() is None, reason="msprof-analyze is not installed (pip install -e '.[interop]')")
@settings(max_examples=examples(2))
@given(_processes())
def test_msprof_analyze_compute_op_sum_counts_and_quantiles_are_exact(
        tmp_path_factory: pytest.TempPathFactory, records: list[dict[str, Any]]) -> None:
    tmp = tmp_path_factory.mktemp("mm")
    w = write_dbs(tmp / "d", records)
    tool = msprof_analyze()
    assert tool is not None
    p = subprocess.run([tool, "cluster", "-m", "compute_op_sum", "-d", str(tmp / "d"), "-o", str(tmp / "out"),
                        "--export_type", "text", "--force"], capture_output=True, text=True, timeout=120,
                       cwd=tmp)
    out = tmp / "out" / "cluster_analysis_output" / "ComputeOpSum" / "rank_stats_by_optype.csv"
    assert out.is_file(), (p.returncode, p.stdout[-3000:], p.stderr[-3000:])  # its exit status is 0 on errors
    pid_of = {rank: pid for (_, pid), rank in w.ranks.items()}
    got = {}
    with open(out, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            assert row["TaskType"] == "N/A"
            got[(pid_of[int(row["Rank"])], row["OpType"])] = (int(row["Count"]), float(row["Median(Us)"]),
                                                               float(row["Q3(Us)"]))
    want = _exact(records)
    assert got.keys() == want.keys()
    disagreements = [(k, got[k], want[k]) for k in want if got[k][0] != want[k][0] or not np.allclose(
        got[k][1:], want[k][1:], rtol=1e-12, atol=0)]
    assert disagreements == []
