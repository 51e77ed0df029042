"""Zero and degenerate records (issue 20): a zero-length op (end == start: an op with
timing off, or shorter than the clock's tick), a single sample, one device, one service.
Each is counted and shown everywhere: STATUS, every SNAPSHOT grouping and top's screen,
every export format (csv, chrome, jsonl, ascend) and /metrics; never refused, never
dropped, never a division by zero.

Each scenario (:data:`SCENARIOS`) is one service on one device sending its records from its
own process to a fresh daemon; every expected figure is computed here from the records.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemons import Daemon
from helpers.edgedata import Op, Service, cli_ok, metrics_text, screen_rows, series, snapshot, started, us, us_cell
from helpers.procs import free_port

T0 = 5_000_000_000
SCENARIOS = {
    # one op of zero length: the only record of its daemon
    "one zero-length op": [Op("Cast", "cast0", 0, 3, T0, 0)],
    # a single sample: every quantile is that sample
    "one op": [Op("Cast", "cast0", 0, 3, T0, 1_500)],
    # a zero-length op among others of the same key: it counts (count, min), adds 0 ns
    "zero among others": [Op("Cast", "cast0", 0, 3, T0, 700), Op("Cast", "cast0", 0, 3, T0 + 1_000, 0),
                          Op("Cast", "cast0", 0, 3, T0 + 2_000, 0)],
}
LE_NS = [2 ** k for k in range(7, 35)]  # the daemon's bucket bounds (daemon/README.md: 128 ns .. ~17 s)


@pytest.fixture(scope="module", params=list(SCENARIOS), ids=list(SCENARIOS))
def case(request) -> Iterator[tuple[Daemon, int, Service]]:
    svc = Service("solo", list(SCENARIOS[request.param]))
    port = free_port()
    d = started([svc], prometheus_port=port)
    try:
        yield d, port, svc
    finally:
        d.cleanup()


def _durs(svc: Service) -> list[int]:
    return [op.dur for op in svc.ops]


def test_status_counts_every_record_and_refuses_none(case):
    d, _, svc = case
    st = json.loads(cli_ok(d, "status", "--json"))
    assert st["records_total"] == len(svc.ops) and st["records_rejected"] == {}
    (a,) = [x for x in st["agents"] if x["service"] == "solo"] or [None]
    assert st["aggregates"]["keys"] == 1
    assert a is None or a["records"] == len(svc.ops)  # a finished sender may have left


@pytest.mark.parametrize("group", ["type", "name", "service", "process", "device", "model"])
def test_every_snapshot_grouping_shows_the_one_row(case, group: str):
    d, _, svc = case
    snap = snapshot(d.socket, group)
    durs = _durs(svc)
    (row,) = snap["rows"]
    assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (len(durs), sum(durs), min(durs),
                                                                          max(durs))
    assert snap["total_ns"] == sum(durs) and snap["summary"]["records"] == len(durs)
    if len(set(durs)) == 1:  # one value: every quantile is exactly it (clamped to min and max)
        assert row["p50_ns"] == row["p90_ns"] == row["p99_ns"] == durs[0]
    assert row["min_ns"] <= row["p50_ns"] <= row["p99_ns"] <= row["max_ns"]
    # its share: all of the time, or (no time at all) no share, never NaN or an error
    assert row["pct_time"] == (100.0 if sum(durs) else 0.0)
    assert snap["summary"]["devices"] == [0] and snap["summary"]["services"] == 1


def test_top_screen_shows_the_row_with_its_count(case):
    d, _, svc = case
    rows = screen_rows(cli_ok(d, "top", "--once", "--window", "all", "--group", "type"))
    assert list(rows) == ["Cast"]
    count, total = rows["Cast"][0], rows["Cast"][1]
    assert int(count) == len(svc.ops)
    assert us_cell(total) == pytest.approx(sum(_durs(svc)) / 1000, abs=0.051)


def test_csv_row(case):
    d, _, svc = case
    (row,) = list(csv.DictReader(io.StringIO(cli_ok(d, "export", "--format", "csv", "-o", "-"))))
    durs = _durs(svc)
    assert (row["Service"], row["PID"], row["Device_id"], row["Model Name"], row["OP Type"]) == \
        ("solo", str(svc.pid), "0", "3", "Cast")
    assert int(row["Count"]) == len(durs)
    assert (row["Total Time(us)"], row["Min Time(us)"], row["Max Time(us)"]) == (us(sum(durs)), us(min(durs)),
                                                                              us(max(durs)))
    assert float(row["Ratio(%)"]) == (100.0 if sum(durs) else 0.0)


def test_chrome_events(case):
    d, _, svc = case
    doc = json.loads(cli_ok(d, "export", "--format", "chrome", "-o", "-"))
    got = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"] if e["ph"] == "X")
    assert got == sorted((op.start / 1e3, op.dur / 1e3) for op in svc.ops)


def test_jsonl_lines(case):
    d, _, svc = case
    lines = [json.loads(x) for x in cli_ok(d, "export", "--format", "jsonl", "-o", "-").splitlines()]
    assert sorted((x["start"], x["end"], x["duration_ns"]) for x in lines) == \
        sorted((op.start, op.start + op.dur, op.dur) for op in svc.ops)


def test_ascend_kernel_details_and_op_statistic(case, tmp_path: Path):
    d, _, svc = case
    cli_ok(d, "export", "--format", "ascend", "-o", str(tmp_path / "a"))
    (proc,) = [p for p in (tmp_path / "a").iterdir() if p.name.endswith("_ascend_pt")]
    out = proc / "ASCEND_PROFILER_OUTPUT"
    kernels = list(csv.DictReader(open(out / "kernel_details.csv", newline="")))
    assert sorted((r["Start Time(us)"], r["Duration(us)"]) for r in kernels) == \
        sorted((us(op.start), us(op.dur)) for op in svc.ops)
    (stat,) = list(csv.DictReader(open(out / "op_statistic.csv", newline="")))
    durs = _durs(svc)
    assert (stat["OP Type"], int(stat["Count"])) == ("Cast", len(durs))
    assert float(stat["Total Time(us)"]) == pytest.approx(sum(durs) / 1000, abs=5e-4)
    assert float(stat["Ratio(%)"]) == (100.0 if sum(durs) else 0.0)
    trace = json.loads((out / "trace_view.json").read_text())
    kernel_events = [e for e in (trace if isinstance(trace, list) else trace["traceEvents"])
                     if e.get("ph") == "X" and e.get("name") == "cast0"]
    assert len(kernel_events) == len(durs)


def test_metrics_count_sum_and_every_bucket(case):
    _, port, svc = case
    text = metrics_text(port)
    durs = _durs(svc)
    (count,) = series(text, "aclprofd_op_duration_seconds_count").values()
    (total,) = series(text, "aclprofd_op_duration_seconds_sum").values()
    assert count == len(durs) and total == sum(durs) / 1e9
    buckets = {dict(k)["le"]: v for k, v in series(text, "aclprofd_op_duration_seconds_bucket").items()}
    assert buckets.pop("+Inf") == len(durs)
    assert len(buckets) == len(LE_NS)
    for le_ns in LE_NS:
        (v,) = [v for le, v in buckets.items() if float(le) == pytest.approx(le_ns / 1e9, rel=1e-12)]
        assert v == sum(1 for x in durs if x <= le_ns), le_ns


def test_top_once_json_prints_the_daemons_snapshot(case):
    """The CLI's ``top --once --json`` (the grouping tests read SNAPSHOT over the wire)."""
    d, _, _ = case
    printed = json.loads(cli_ok(d, "top", "--once", "--json", "--window", "all", "--group", "type"))
    direct = snapshot(d.socket, "type")
    drop = ("generated_ts", "summary")
    assert {k: v for k, v in printed.items() if k not in drop} == {k: v for k, v in direct.items() if k not in drop}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stream_delivers_every_record_live(scenario: str):
    """STREAM (``aclprof tail``): the records of each scenario reach a live client, zero-length
    ones included (a fresh in-process daemon: the stream sees only these)."""
    from helpers.daemons import Client, InProcess
    from helpers.edgedata import send

    from aclprof.protocol.wire import Kind

    svc = Service("solo", list(SCENARIOS[scenario]))
    with InProcess() as d:
        c = Client(d.socket)
        try:
            c.send_json(Kind.STREAM, {"filter": {}})
            send(d.socket, svc)
            got: list[dict] = []
            while len(got) < len(svc.ops):
                recs, skipped, kind = c.stream_frames()
                assert kind == Kind.STREAM_RECORDS and skipped == 0, kind
                got += recs
        finally:
            c.close()
    assert sorted((r["start"], r["end"], r["duration_ns"]) for r in got) == \
        sorted((op.start, op.start + op.dur, op.dur) for op in svc.ops)
