"""Time zones (issue 20): everything that reads or writes local time, under three zones the
test sets itself (``TZ`` and ``time.tzset()``), against wall-clock strings written here for
each zone (not computed with ``time.localtime``, which would agree with a bug that used UTC
on a machine that is on UTC):

- UTC;
- Asia/Shanghai, +08:00 (ahead, whole hours);
- America/St_Johns, -03:30 in November (behind, a half-hour offset).

Local: ``--since``/``--until`` without an offset (:func:`aclprof.cli.argtypes.parse_time`),
``tail``'s lines and gap lines, the times of ``export``'s loss report and of ``captures``,
and the ascend export's directory names (as torch_npu names them: local time). UTC whatever
the zone: the daemon's capture names and storage loss times (marked ``Z``).

The existing tests that format local time compute their expectation with ``time.localtime``
and pass under every zone (checked for this change under Asia/Shanghai and America/St_Johns:
tests/test_export_ascend.py, test_screens_fit.py, test_cli.py, test_cli_screens.py,
test_cli_tail_follow.py, test_cli_options.py, test_storage_losses.py, test_capture_writer.py).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.edgedata import Op, Service, started
from helpers.procs import env

TS = 1764400000.5  # 2025-11-29T07:06:40.5Z
#: zone -> (UTC offset in seconds on that day, local wall clock of TS)
ZONES = {
    "UTC": (0, "2025-11-29 07:06:40"),
    "Asia/Shanghai": (8 * 3600, "2025-11-29 15:06:40"),
    "America/St_Johns": (-(3 * 3600 + 1800), "2025-11-29 03:36:40"),
}


@pytest.fixture(params=list(ZONES), ids=list(ZONES))
def zone(request, monkeypatch) -> Iterator[tuple[str, int, str]]:
    name = request.param
    if not Path("/usr/share/zoneinfo", name).exists():
        pytest.skip(f"no tzdata for {name} (Debian: tzdata)")
    monkeypatch.setenv("TZ", name)
    time.tzset()
    offset, wall = ZONES[name]
    assert time.localtime(TS).tm_gmtoff == offset  # the zone is in effect (and the table right)
    try:
        yield name, offset, wall
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_time_without_offset_is_local_and_one_with_an_offset_is_not(zone):
    from aclprof.cli.argtypes import parse_time

    _, _, wall = zone
    now = TS + 3600
    # the zone's wall clock of TS is TS (read as UTC it would be TS + the offset)
    assert parse_time(wall.replace(" ", "T"), now) == int(TS)
    assert parse_time(wall.replace(" ", "T") + ".5", now) == TS
    assert parse_time("2025-11-29T07:06:40Z", now) == int(TS)
    assert parse_time("2025-11-29T08:06:40+01:00", now) == int(TS)
    assert parse_time("-5m", now) == now - 300


def test_tail_lines_show_local_time(zone):
    from aclprof.cli.tail import tail_line

    _, _, wall = zone
    hms = wall.split()[1]
    r = {"ts": TS, "pid": 42, "service": "svc", "device": 0, "model": 1, "op_type": "Conv2D", "op_name": "conv1",
         "duration_ns": 1500, "start": 1, "end": 1501, "flag": 0, "thread_id": 7}
    assert tail_line(r, False).startswith(hms + ".500"), tail_line(r, False)
    gap = {"kind": "gap", "ts": TS, "pid": 42, "service": "svc", "pause_ns": 1_000_000, "gap_records": 3}
    assert tail_line(gap, False).startswith(hms + " "), tail_line(gap, False)


def test_loss_report_and_capture_times_are_local(zone):
    from aclprof.cli import capturefmt, exportloss

    _, _, wall = zone
    assert exportloss._when(TS) == wall
    assert capturefmt._when(TS) == wall


def test_ascend_directory_names_use_local_time(zone):
    from aclprof.exportfmt.ascend import process_dir_name

    _, _, wall = zone
    stamp = wall.replace("-", "").replace(" ", "").replace(":", "")
    assert process_dir_name("node1", 4242, TS) == f"node1_4242_{stamp}_ascend_pt"


def test_daemon_names_and_loss_times_are_utc_in_every_zone(zone):
    from aclprofd.capture.store import capture_name
    from aclprofd.storage_losses import _iso

    assert capture_name(TS, "svc", "MatMul") == "20251129T070640Z_svc_MatMul"
    assert _iso(TS) == "2025-11-29T07:06:40.500Z"


@pytest.fixture(scope="module")
def one_record() -> Iterator[tuple]:
    """One daemon holding one record for every zone's child (each reads it in its own TZ)."""
    svc = Service("tzsvc", [Op("Cast", "c0", 0, 1, 10_000, 500)])
    d = started([svc])
    try:
        yield d, svc
    finally:
        d.cleanup()


@pytest.mark.parametrize("tz", list(ZONES))
def test_export_since_local_wall_clock_and_ascend_dir_in_a_child_with_tz(tz: str, tmp_path: Path, one_record):
    """The CLI as a user runs it, with TZ in its environment: ``--since`` given as the local
    wall clock of a minute ago finds the records, a minute ahead finds none; the ascend
    directory is named with the local time of the first record's receive time."""
    if not Path("/usr/share/zoneinfo", tz).exists():
        pytest.skip(f"no tzdata for {tz}")
    offset = ZONES[tz][0]
    d, svc = one_record
    def local_iso(ts: float) -> str:  # the zone's wall clock, by arithmetic on UTC
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts + offset))

    def export(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "aclprof", "export", *args, "--socket", d.socket],
                           env=env(TZ=tz), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    lines = export("--format", "jsonl", "-o", "-")
    (rec,) = [json.loads(x) for x in lines.splitlines()]
    ts = rec["ts"]
    assert export("--format", "jsonl", "-o", "-", "--since", local_iso(ts - 60)).count("\n") == 1
    assert export("--format", "jsonl", "-o", "-", "--since", local_iso(ts + 60)) == ""
    export("--format", "ascend", "-o", str(tmp_path / "a"))
    (proc,) = list((tmp_path / "a").iterdir())
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(ts + offset))
    assert proc.name == f"edgehost_{svc.pid}_{stamp}_ascend_pt", (proc.name, stamp)
    rows = list(csv.DictReader(open(proc / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="")))
    assert len(rows) == 1
