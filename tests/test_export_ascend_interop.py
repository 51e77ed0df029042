"""``aclprof export --format ascend`` opened by its real consumer, ``msprof-analyze`` (the
``interop`` extra): a real daemon, two inference services on the mock, one of which gets a
slower MatMul half way; the exports of the windows before and after are compared by
``msprof-analyze compare`` and its workbook must name MatMul (and only MatMul) as slower."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile

import pytest
from helpers.daemons import Daemon
from helpers.procs import cli, env, wait_for

pytest.importorskip("msprof_analyze", reason="msprof-analyze is not installed (pip install -e '.[interop]')")

pytestmark = pytest.mark.timeout(90)

# The tool's console script, beside this interpreter (the venv's bin) or on PATH.
MSPROF_ANALYZE = (shutil.which("msprof-analyze", path=os.path.dirname(sys.executable))
                  or shutil.which("msprof-analyze"))

# An op type that needs csv quoting: the tools must read it back as one type.
ODD_TYPE = 'Add,"odd"'

_SERVICE = r'''
import json, os, sys
os.environ["ACLPROF_BACKEND"] = "mock"
import aclprof
from aclprof import agent, mock
aclprof.use_mock()
ops = [{"name": "conv1", "type": "Conv2D", "duration_ns": 40000},
       {"name": "fc1", "type": "MatMul", "duration_ns": 10000},
       {"name": "add1", "type": %(odd)r, "duration_ns": 3000},
       {"name": "relu1", "type": "Relu", "duration_ns": 2000}]
fast = mock.load_model(ops, seed=1)
# the same model after a change that doubles MatMul's time
slow = mock.load_model([dict(op, duration_ns=op["duration_ns"] * (2 if op["type"] == "MatMul" else 1))
                        for op in ops], seed=1)
agent.start(sys.argv[1], service=sys.argv[2])
agent.watch(fast)
agent.watch(slow)
print(json.dumps({"pid": os.getpid()}), flush=True)
for line in sys.stdin:
    which, n = line.split()
    mock.execute(fast if which == "fast" else slow, int(n))
    mock.wait_writer_idle()
    print(json.dumps({"emitted": mock.stats()["recordsEmitted"]}), flush=True)
agent.stop()
''' % {"odd": ODD_TYPE}


class _Service:
    def __init__(self, socket: str, name: str):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVICE, socket, name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        self.pid = self._read()["pid"]

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"service exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
        return json.loads(line)

    def run(self, which: str, n: int) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{which} {n}\n")
        self.proc.stdin.flush()
        return self._read()["emitted"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def _stored(daemon: Daemon, pid: int) -> int:
    p = cli("export", "--format", "jsonl", "--pid", str(pid), "--socket", daemon.socket)
    assert p.returncode == 0, p.stderr
    return p.stdout.count("\n")


_NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def read_xlsx(path: str) -> dict[str, list[list]]:
    """Every sheet of an .xlsx as rows of cell values (shared strings resolved, numbers as
    float): the workbook is a zip of XML, so no spreadsheet library is needed."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        shared = []
        if "xl/sharedStrings.xml" in names:
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", _NS):
                shared.append("".join(t.text or "" for t in si.iter(f"{{{_NS['m']}}}t")))
        rels = {r.get("Id"): r.get("Target") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
        sheets = {}
        for sheet in ET.fromstring(z.read("xl/workbook.xml")).find("m:sheets", _NS):
            target = rels[sheet.get(_REL)].lstrip("/")
            target = target if target.startswith("xl/") else f"xl/{target}"
            rows = []
            for row in ET.fromstring(z.read(target)).iter(f"{{{_NS['m']}}}row"):
                cells: dict[int, object] = {}
                for c in row.findall("m:c", _NS):
                    col = 0
                    for ch in re.match(r"[A-Z]+", c.get("r")).group(0):
                        col = col * 26 + ord(ch) - 64
                    v, t = c.find("m:v", _NS), c.get("t")
                    if t == "s":
                        value: object = shared[int(v.text)]
                    elif t == "inlineStr":
                        value = "".join(x.text or "" for x in c.iter(f"{{{_NS['m']}}}t"))
                    elif v is None:
                        value = None
                    elif t in ("str", "e"):
                        value = v.text
                    else:
                        value = float(v.text)
                    cells[col - 1] = value
                rows.append([cells.get(i) for i in range(max(cells) + 1)] if cells else [])
            sheets[sheet.get("name")] = rows
    return sheets


def _compare(new: str, base: str, out: str, *flags: str) -> dict[str, list[list]]:
    p = subprocess.run([MSPROF_ANALYZE, "compare", "-d", new, "-bp", base, "-o", out, "--force", *flags],
                       capture_output=True, text=True, timeout=60, cwd=out)
    # its exit status is 0 even after an error: judge by the workbook it wrote
    books = glob.glob(os.path.join(out, "performance_comparison_result_*.xlsx"))
    assert len(books) == 1, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    sheets = read_xlsx(books[0])
    os.unlink(books[0])
    return sheets


def _by_first_text(rows: list[list], key_col: int) -> dict[str, list]:
    return {r[key_col]: r for r in rows if len(r) > key_col and isinstance(r[key_col], str)}


@pytest.mark.slow  # ~7 s: a daemon, two services, three compares
@pytest.mark.skipif(MSPROF_ANALYZE is None, reason="the msprof-analyze command is not on PATH")
def test_msprof_analyze_names_the_op_type_that_got_slower(tmp_path):
    daemon = Daemon().start()
    changed = steady = None
    try:
        changed = _Service(daemon.socket, "ranker")
        steady = _Service(daemon.socket, "embedder")
        # before: 100 runs of each service (4 ops a run)
        assert changed.run("fast", 100) == 400 and steady.run("fast", 100) == 400
        wait_for(lambda: _stored(daemon, changed.pid) == 400 and _stored(daemon, steady.pid) == 400,
                 what="the first 800 records stored")
        boundary = time.time()
        time.sleep(0.05)
        # after: the ranker runs its changed model (MatMul x2); the embedder is unchanged
        assert changed.run("slow", 100) == 800 and steady.run("fast", 100) == 800
        wait_for(lambda: _stored(daemon, changed.pid) == 800 and _stored(daemon, steady.pid) == 800,
                 what="all 1600 records stored")

        dirs = {}
        for label, window in (("before", ("--until", str(boundary))), ("after", ("--since", str(boundary)))):
            out = tmp_path / label
            p = cli("export", "--format", "ascend", "-o", str(out), *window, "--service", "ranker",
                    "--socket", daemon.socket)
            assert p.returncode == 0, p.stderr
            assert "exported 400 records of 1 process" in p.stderr
            (d,) = os.listdir(out)
            assert re.fullmatch(rf"[A-Za-z0-9.-]+_{changed.pid}_\d{{14}}_ascend_pt", d), d
            dirs[label] = str(out / d)
        # no filter: one directory per process
        p = cli("export", "--format", "ascend", "-o", str(tmp_path / "all"), "--socket", daemon.socket)
        assert p.returncode == 0 and "of 2 process(es)" in p.stderr, p.stderr
        assert sorted(int(d.split("_")[-4]) for d in os.listdir(tmp_path / "all")) == sorted(
            [changed.pid, steady.pid])
    finally:
        for s in (changed, steady):
            if s is not None:
                s.close()
        daemon.cleanup()

    work = tmp_path / "cmp"
    work.mkdir()
    # kernel compare (kernel_details.csv): per op type, comparison (after) / base (before)
    rows = _compare(dirs["after"], dirs["before"], str(work), "--enable_kernel_compare")["KernelCompare"]
    header = rows[1]
    assert header[:3] == ["Order Id", "Kernel", "Input Shape"] and header[-2:] == ["Diff Total Ratio",
                                                                                   "Diff Avg Ratio"]
    kernels = _by_first_text(rows[2:], 1)
    assert set(kernels) == {"Conv2D", "MatMul", ODD_TYPE, "Relu"}
    assert kernels["MatMul"][-1] == pytest.approx(2.0) and kernels["MatMul"][-2] == pytest.approx(2.0)
    for other in ("Conv2D", ODD_TYPE, "Relu"):
        assert kernels[other][-1] == pytest.approx(1.0), kernels[other]
    assert kernels["MatMul"][3] == pytest.approx(1000.0) and kernels["MatMul"][8] == pytest.approx(2000.0)
    assert kernels["MatMul"][7] == 100 and kernels["MatMul"][12] == 100  # calls

    # kernel type compare (op_statistic.csv)
    rows = _compare(dirs["after"], dirs["before"], str(work), "--enable_kernel_compare",
                    "--use_kernel_type")["KernelTypeCompare"]
    types = _by_first_text(rows[2:], 1)
    assert types["MatMul"][2] == "N/A"  # Core Type: not reported by the subscription
    assert types["MatMul"][-1] == pytest.approx(2.0) and types["Conv2D"][-1] == pytest.approx(1.0)
    assert max(types.values(), key=lambda r: r[-1])[1] == "MatMul"

    # overall compare (trace_view.json's Overlap Analysis): 100 runs of 55 us, then 65 us
    rows = _compare(dirs["after"], dirs["before"], str(work), "--enable_profiling_compare")["OverallMetrics"]
    metrics = _by_first_text(rows[2:], 0)
    assert metrics["Computing Time"][1] == pytest.approx(5.5, rel=0.01)
    assert metrics["Computing Time"][4] == pytest.approx(6.5, rel=0.01)
