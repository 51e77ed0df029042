"""The capture writer on its own (no daemon): real segment files written by ``Storage``,
read back and written as a capture by ``write_capture``; the byte estimate that the bounds
rely on must never be below what is written, whatever the names; damaged segments are
reported in capture.json, never fatal."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from aclprofd.capture.store import tree_bytes
from aclprofd.capture.writer import Job, Outcome, estimate, write_capture
from aclprofd.storage import Storage
from helpers.records import make_records

NASTY = ['"quoted", with, commas', "\x1b[31mred\x07", "ü" * 300, "\ud800lone", "a\nb\r\nc", "𝔘" * 200, "x" * 4000]


def _store(tmp: Path, names: list[str], n: int = 3000, service: str = "svc") -> tuple[Storage, float]:
    st = Storage(str(tmp / "data"), segment_bytes=64 << 10)
    table = list(enumerate(names, start=1))
    t0 = time.time()
    ids = tuple(range(1, len(names) + 1))
    for i in range(0, n, 500):
        r = make_records(500, types=ids, names=tuple(reversed(ids)))
        st.write("c1", {"host": "h\x1bost", "pid": 42, "service": service, "labels": {}}, table,
                 [(t0 + i / n, r.tobytes())])
    st.flush()
    return st, t0


def _job(st: Storage, t0: float, max_bytes: int = 1 << 30, service: str = "svc") -> Job:
    return Job((service, "1", "MatMul"), ({"quantile": "p99", "shift": 1.4},), t0 + 0.5, t0 - 1, t0 + 2,
               tuple(st.files(t0 - 1, t0 + 2)), 20, max_bytes, "h")


@pytest.mark.parametrize("names", [["MatMul", "Conv2D", "fc1", "conv1"], NASTY])
def test_the_estimate_bounds_what_is_written(tmp_path, names):
    st, t0 = _store(tmp_path, names)
    seen = {}

    def room(need: int) -> tuple[str, int]:
        seen["need"] = need
        return "cap", 1 << 30
    out = Outcome()
    doc = write_capture(_job(st, t0), str(tmp_path / "captures"), room, threading.Event(), out)
    st.close()
    written = tree_bytes(str(tmp_path / "captures" / "cap"))
    assert out.written == out.found == 3000 and doc["truncated"] is False
    assert written <= seen["need"] < 4 * written
    trace = json.loads((tmp_path / "captures" / "cap" / "trace.json").read_text())
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 3000


def test_a_small_allowance_truncates_and_stays_within_it(tmp_path):
    st, t0 = _store(tmp_path, NASTY)
    out = Outcome()
    allowance = 1 << 20
    doc = write_capture(_job(st, t0), str(tmp_path / "captures"), lambda need: ("cap", allowance),
                        threading.Event(), out)
    st.close()
    assert doc["truncated"] is True and 0 < out.written < 3000 and out.written + out.truncated == 3000
    assert tree_bytes(str(tmp_path / "captures" / "cap")) <= allowance


def test_other_services_and_damaged_segments(tmp_path):
    st, t0 = _store(tmp_path, ["MatMul", "fc1"], service="other")
    files = st.files(t0 - 1, t0 + 2)
    st.close()
    path = files[0][0]
    with open(path, "r+b") as f:  # a flipped byte inside the first chunk's data: its CRC fails
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    out = Outcome()
    job = Job(("svc", "1", "MatMul"), ({},), t0, t0 - 1, t0 + 2, tuple(files), 20, 1 << 30, "h")
    doc = write_capture(job, str(tmp_path / "captures"), lambda need: ("cap", 1 << 30), threading.Event(), out)
    assert out.found == 0 and out.written == 0  # the other service's records are not taken
    assert any("CRC" in p for p in doc["records"]["read_problems"])
    os.unlink(files[-1][0])  # a segment deleted by the storage caps before it was read
    out = Outcome()
    write_capture(job, str(tmp_path / "captures"), lambda need: ("cap2", 1 << 30), threading.Event(), out)
    assert out.segments_gone == 1


def test_estimate_of_nothing_is_the_fixed_part():
    assert 0 < estimate([]) <= 64 << 10
