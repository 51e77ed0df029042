"""Units of every number that leaves the process (issue 20): Prometheus ``_sum`` (seconds),
``_count`` and buckets read back through a real Prometheus server's query API; csv and
ascend (microseconds), Chrome trace (microseconds), jsonl and SNAPSHOT (nanoseconds), top's
screen (scaled units): each checked against exact totals computed here from the records
sent, not as ratios or shares (a constant factor hides in a share).

Durations span seven decades (150 ns to 2 s) so that a factor of 1000 anywhere lands in
another bucket, another unit on the screen, or another total.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemons import Daemon
from helpers.edgedata import Op, Service, cli_ok, screen_rows, started, totals, us_cell
from helpers.procs import cli, free_port, wait_for
from helpers.prometheus import needs_prometheus, prometheus_server

T0 = 3_000_000_000
DURS_A0 = [150, 1_000, 3_000, 70_000, 1_500_000]     # svc-a, device 0 (Conv2D)
DURS_A1 = [6_000, 2_000_000_000]                     # svc-a, device 1 (MatMul: one of 2 s)
DURS_B0 = [900, 45_000, 45_000, 300_000_000]         # svc-b, device 0 (MatMul)


def _ops(op_type: str, name: str, device: int, durs: list[int], t: int) -> list[Op]:
    return [Op(op_type, name, device, 1, t + i * 10_000_000_000, d) for i, d in enumerate(durs)]


SERVICES = [
    Service("svc-a", _ops("Conv2D", "conv1", 0, DURS_A0, T0) + _ops("MatMul", "fc1", 1, DURS_A1, T0 + 1)),
    Service("svc-b", _ops("MatMul", "fc1", 0, DURS_B0, T0 + 2)),
]
ALL = [(s, op) for s in SERVICES for op in s.ops]
GRAND = sum(op.dur for _, op in ALL)
LE_NS = [2 ** k for k in range(7, 35)]


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Daemon, int]]:
    port = free_port()
    d = started(SERVICES, prometheus_port=port)
    try:
        yield d, port
    finally:
        d.cleanup()


def _ns(us_text: str) -> int:
    """``"12.345"`` microseconds as integer nanoseconds (exact: no float)."""
    whole, _, frac = us_text.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


@needs_prometheus
def test_prometheus_query_sum_count_and_buckets_in_seconds(daemon):
    """Through a real Prometheus: per (service, device, op_type) _sum in seconds and _count
    exact; every bucket holds the records whose duration is <= le seconds; the mean
    sum/count is the mean duration in seconds."""
    _, port = daemon
    with prometheus_server([f"127.0.0.1:{port}"]) as prom:
        wait_for(lambda: len(prom.query("aclprofd_op_duration_seconds_count")) == 3, timeout=30,
                 what="the first scrape")

        def by(expr: str) -> dict[tuple[str, str, str], float]:
            return {(r["metric"]["service"], r["metric"]["device"], r["metric"]["op_type"]): float(r["value"][1])
                    for r in prom.query(f"sum by (service, device, op_type) ({expr})")}

        want = totals(SERVICES, lambda s, op: (s.name, str(op.device), op.op_type))
        sums, counts = by("aclprofd_op_duration_seconds_sum"), by("aclprofd_op_duration_seconds_count")
        assert set(sums) == set(counts) == set(want)
        for k, w in want.items():
            assert counts[k] == w["count"], k
            assert sums[k] == pytest.approx(w["total"] / 1e9, rel=1e-12), (k, sums[k], w["total"])
        buckets = {r["metric"]["le"]: float(r["value"][1])
                   for r in prom.query("sum by (le) (aclprofd_op_duration_seconds_bucket)")}
        assert buckets.pop("+Inf") == len(ALL)
        assert len(buckets) == len(LE_NS)
        for le, v in buckets.items():
            le_ns = round(float(le) * 1e9)
            assert le_ns in LE_NS, le
            assert v == sum(1 for _, op in ALL if op.dur <= le_ns), (le, v)
        (mean,) = prom.query("sum(aclprofd_op_duration_seconds_sum) / sum(aclprofd_op_duration_seconds_count)")
        assert float(mean["value"][1]) == pytest.approx(GRAND / len(ALL) / 1e9, rel=1e-12)


def test_csv_times_are_microseconds(daemon):
    d, _ = daemon
    rows = list(csv.DictReader(io.StringIO(cli_ok(d, "export", "--format", "csv", "-o", "-"))))
    assert sum(_ns(r["Total Time(us)"]) for r in rows) == GRAND
    want = totals(SERVICES, lambda s, op: (s.name, str(op.device), op.op_type))
    for r in rows:
        w = want[(r["Service"], r["Device_id"], r["OP Type"])]
        assert (_ns(r["Total Time(us)"]), _ns(r["Min Time(us)"]), _ns(r["Max Time(us)"])) == \
            (w["total"], w["min"], w["max"])
        assert float(r["Avg Time(us)"]) * 1000 == pytest.approx(w["total"] / w["count"], abs=0.5)


def test_ascend_times_are_microseconds(daemon, tmp_path: Path):
    d, _ = daemon
    cli_ok(d, "export", "--format", "ascend", "-o", str(tmp_path / "a"))
    dirs = {int(p.name.split("_")[1]): p / "ASCEND_PROFILER_OUTPUT" for p in (tmp_path / "a").iterdir()}
    assert set(dirs) == {s.pid for s in SERVICES}
    for s in SERVICES:
        out, total = dirs[s.pid], sum(op.dur for op in s.ops)
        kernels = list(csv.DictReader(open(out / "kernel_details.csv", newline="")))
        assert sum(_ns(r["Duration(us)"]) for r in kernels) == total
        assert sorted(_ns(r["Start Time(us)"]) for r in kernels) == sorted(op.start for op in s.ops)
        want = totals([s], lambda _s, op: op.op_type)
        for r in csv.DictReader(open(out / "op_statistic.csv", newline="")):
            w = want[r["OP Type"]]
            assert float(r["Total Time(us)"]) * 1000 == pytest.approx(w["total"], abs=0.5)
            assert float(r["Max Time(us)"]) * 1000 == pytest.approx(w["max"], abs=0.5)
            assert float(r["Min Time(us)"]) * 1000 == pytest.approx(w["min"], abs=0.5)
        trace = json.loads((out / "trace_view.json").read_text())
        events = trace if isinstance(trace, list) else trace["traceEvents"]
        kernel_events = [e for e in events if e.get("ph") == "X" and e.get("name") in ("conv1", "fc1")]
        assert sum(float(e["dur"]) for e in kernel_events) * 1000 == pytest.approx(total, rel=1e-9)
        assert sorted(round(float(e["ts"]) * 1000) for e in kernel_events) == sorted(op.start for op in s.ops)


def test_chrome_ts_and_dur_are_microseconds(daemon):
    d, _ = daemon
    doc = json.loads(cli_ok(d, "export", "--format", "chrome", "-o", "-"))
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sum(e["dur"] for e in events) * 1000 == pytest.approx(GRAND, rel=1e-12)
    assert sorted(round(e["ts"] * 1000) for e in events) == sorted(op.start for _, op in ALL)
    assert doc["displayTimeUnit"] == "ns"  # a display preference; ts/dur stay in us (Trace Event Format)


def test_jsonl_and_snapshot_are_nanoseconds(daemon):
    d, _ = daemon
    lines = [json.loads(x) for x in cli_ok(d, "export", "--format", "jsonl", "-o", "-").splitlines()]
    assert sum(x["duration_ns"] for x in lines) == GRAND
    assert all(x["end"] - x["start"] == x["duration_ns"] for x in lines)
    snap = json.loads(cli_ok(d, "top", "--once", "--json", "--window", "all", "--group", "type"))
    assert snap["total_ns"] == GRAND
    want = totals(SERVICES, lambda s, op: op.op_type)
    for r in snap["rows"]:
        w = want[r["op_type"]]
        assert (r["total_ns"], r["min_ns"], r["max_ns"]) == (w["total"], w["min"], w["max"])
        assert r["mean_ns"] == pytest.approx(w["total"] / w["count"], abs=1)


def test_top_screen_scales_units(daemon):
    """The screen's cells carry their unit: the 2 s op's max reads as seconds, the
    150 ns op's min as nanoseconds; every cell within the screen's precision."""
    d, _ = daemon
    rows = screen_rows(cli_ok(d, "top", "--once", "--window", "all", "--group", "service"))
    want = totals(SERVICES, lambda s, op: s.name)
    for name, w in want.items():
        cells = rows[name]
        total, mx = us_cell(cells[1]), us_cell(cells[-2])
        assert total == pytest.approx(w["total"] / 1000, rel=0.01), (name, cells)
        assert mx == pytest.approx(w["max"] / 1000, rel=0.01), (name, cells)
    assert rows["svc-a"][-2].endswith("s") and not rows["svc-a"][-2].endswith(("ms", "us", "µs", "ns"))


def test_a_duration_of_exactly_a_bucket_bound_is_in_that_bucket():
    """Prometheus's ``le`` is "<=": 2**k ns counts in ``le=2**k`` ns, 2**k + 1 in the next one
    (the daemon's bins were lower-inclusive, which put 2**k one bucket up)."""
    import numpy as np
    from aclprofd.aggregate.quantiles import PROM_EXPONENTS, prom_bucket

    from aclprof.protocol.quantshift import bin_index

    for k in PROM_EXPONENTS:
        d = np.array([2 ** k - 1, 2 ** k, 2 ** k + 1], dtype=np.int64)
        got = [PROM_EXPONENTS[int(i)] if i < len(PROM_EXPONENTS) else None for i in prom_bucket(bin_index(d))]
        nxt = k + 1 if k + 1 <= PROM_EXPONENTS[-1] else None  # above the last le: only +Inf
        assert got == [k, k, nxt], (k, got)


@needs_prometheus
def test_fleet_reports_seconds_and_calls_per_second():
    """``aclprof fleet`` over a real Prometheus: each op type's p50/p99 (seconds) lie in the
    buckets that hold its durations (tests/helpers/fleetservice.py: duration +- jitter, ns),
    its calls per second match the service's rate (one call per op type per execution),
    and a host's count over the window is its rate times the window's seconds."""
    import math
    import subprocess
    import sys

    from helpers.fleetservice import OPS
    from helpers.procs import TESTS, env

    rate, window = 100, 10.0
    port = free_port()
    d = Daemon(None, "--prometheus-host-label", "unit-host", prometheus_port=port).start()
    svc = subprocess.Popen([sys.executable, str(TESTS / "helpers" / "fleetservice.py"), "--socket", d.socket,
                            "--service", "units", "--rate", str(rate)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        assert svc.stdout is not None and json.loads(svc.stdout.readline())["ready"]
        with prometheus_server([f"127.0.0.1:{port}"]) as prom:
            def fleet() -> dict | None:
                p = cli("fleet", "--prometheus", prom.url, "--once", "--json", "--window", "10s", timeout=30)
                assert p.returncode == 0, p.stderr
                doc = json.loads(p.stdout)
                rows = {r["op_type"]: r for r in doc["rows"]}
                # a full window of scrapes: the rate settles
                ok = len(rows) == len(OPS) and all(r["calls_per_s"] and r["hosts"][0]["count"] >= 0.8 * rate * window
                                                    for r in rows.values())
                return rows if ok else None
            rows = wait_for(fleet, timeout=60, interval=1.0, what="a full window of every op type")
        for _name, op_type, dur, jit in OPS:
            r = rows[op_type]
            lo = 2.0 ** math.floor(math.log2(dur - jit)) / 1e9   # the bucket edges around the durations
            hi = 2.0 ** math.ceil(math.log2(dur + jit)) / 1e9
            assert lo <= r["p50_s"] <= r["p99_s"] <= hi, (op_type, r["p50_s"], r["p99_s"], lo, hi)
            assert r["calls_per_s"] == pytest.approx(rate, rel=0.3), (op_type, r["calls_per_s"])
            (h,) = r["hosts"]
            assert h["count"] / h["calls_per_s"] == pytest.approx(window, rel=0.2), (op_type, h)
    finally:
        if svc.stdin is not None:
            svc.stdin.close()
        try:
            svc.wait(15)
        except subprocess.TimeoutExpired:
            svc.kill()
            svc.wait(5)
        for f in (svc.stdout, svc.stderr):
            if f is not None:
                f.close()
        d.cleanup()
