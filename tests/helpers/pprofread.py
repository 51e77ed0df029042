"""Reading ``aclprof export --format pprof`` back with Go's pprof (``pprof -raw``) and npm's
pprof-format (tests/readers/pprof_decode.js), into the csv export's totals: {(service, pid,
device, model, op type): (calls, nanoseconds)}."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

from aclprof.exportfmt.opcsv import write_csv
from aclprof.exportfmt.pprof import LEVELS, SAMPLE_TYPES

__all__ = ["Key", "DECODE_JS", "csv_totals", "add_sample", "as_tuples", "read_go_pprof", "read_pprof_format"]

DECODE_JS = str(Path(__file__).parent.parent / "readers" / "pprof_decode.js")
Key = tuple[str, int, int, int, str]  # the csv's row key: service, pid, device, model, op type


def csv_totals(records: list[dict[str, Any]]) -> dict[Key, tuple[int, int]]:
    """{row key: (Count, Total Time in ns)} of the csv export of ``records``."""
    out = io.StringIO()
    write_csv([records], out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    return {(r["Service"], int(r["PID"]), int(r["Device_id"]), int(r["Model Name"]), r["OP Type"]):
            (int(r["Count"]), int(Decimal(r["Total Time(us)"]) * 1000)) for r in rows}


def add_sample(acc: dict[Key, list[int]], stack: list[str], labels: dict[str, str], values: list[int]) -> None:
    """Add one decoded sample (stack leaf first: op name, op type, model, service) to ``acc``."""
    pid = int(labels["pid"])
    service = stack[3]
    key = ("" if service == f"pid {pid}" else service, pid, int(labels["device"]),
           int(stack[2].removeprefix("model ")), stack[1])
    a = acc.setdefault(key, [0, 0])
    a[0] += values[0]
    a[1] += values[1]


def as_tuples(acc: dict[Key, list[int]]) -> dict[Key, tuple[int, int]]:
    return {k: (v[0], v[1]) for k, v in acc.items()}


_SAMPLE = re.compile(r"^\s+(\d+)\s+(\d+): ([\d ]+)$")
_LOCATION = re.compile(r"^\s*(\d+): 0x0 M=1 (.*) (%s):0 s=0$" % "|".join(LEVELS))
_LABELS = re.compile(r"^\s+((?:\w+:\[.*?\]\s*)+)$")


def read_go_pprof(tool: str, paths: list[Path]) -> dict[Key, tuple[int, int]]:
    """The totals Go's pprof reads from ``paths``: ``pprof -raw`` parses each and prints their
    merge (samples with their values, location ids and labels; locations with function and
    file). One process for many profiles: its start-up is most of its time."""
    p = subprocess.run([tool, "-raw", *map(str, paths)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "calls/count device time/nanoseconds[dflt]" in lines, p.stdout[:2000]
    names: dict[str, str] = {}
    for line in lines[lines.index("Locations"):]:
        m = _LOCATION.match(line)
        if m:
            names[m.group(1)] = m.group(2)
    acc: dict[Key, list[int]] = {}
    samples = lines[lines.index("calls/count device time/nanoseconds[dflt]") + 1: lines.index("Locations")]
    i = 0
    while i < len(samples):
        m = _SAMPLE.match(samples[i])
        assert m, samples[i]
        labels = dict(re.findall(r"(\w+):\[(.*?)\]", samples[i + 1]))
        add_sample(acc, [names[x] for x in m.group(3).split()], labels, [int(m.group(1)), int(m.group(2))])
        i += 2
    return as_tuples(acc)


def read_pprof_format(modules: str, paths: list[Path]) -> list[dict[Key, tuple[int, int]]]:
    """The totals npm's pprof-format decodes from each of ``paths`` (one node process)."""
    p = subprocess.run(["node", DECODE_JS, *map(str, paths)], capture_output=True, text=True, timeout=60,
                       env={"NODE_PATH": modules, "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    out = []
    for line in p.stdout.splitlines():
        doc = json.loads(line)
        assert doc["sampleTypes"] == [list(t) for t in SAMPLE_TYPES] and doc["defaultSampleType"] == "device time"
        acc: dict[Key, list[int]] = {}
        for s in doc["samples"]:
            assert [f[1] for f in s["stack"]] == list(LEVELS)
            add_sample(acc, [f[0] for f in s["stack"]], s["labels"], [int(v) for v in s["values"]])
        out.append(as_tuples(acc))
    return out
