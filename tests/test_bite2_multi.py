"""Two services, two devices in one process, two services on one model id: every export
(csv, chrome, jsonl, ascend) and screen (``status``, ``top`` for each grouping, ``/metrics``)
shows each row with the exact figures computed here from the records sent (issue 20,
"multi-device and multi-service data in every export and screen").

The data (:data:`SERVICES`): ``svc-a`` runs model 1 (labelled ``resnet``) on device 0 and
model 2 (unlabelled) on device 1 in one process; ``svc-b``, another process, runs its own
model 1, also labelled ``resnet``, on device 0. Each service streams from a process of its own, so the pids are
real and distinct. The expected values are plain sums (helpers/edgedata.py), never the code
under test.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemons import Daemon
from helpers.edgedata import (
    Op,
    Service,
    cli_ok,
    metrics_text,
    screen_rows,
    series,
    snapshot,
    started,
    totals,
    us,
    us_cell,
)
from helpers.procs import free_port

T0, T1 = 1_000_000_000, 2_000_000_000
SERVICES = [
    Service("svc-a", [Op("Conv2D", "conv1", 0, 1, T0, 1_000), Op("Conv2D", "conv1", 0, 1, T0 + 10_000, 3_000),
                      Op("MatMul", "fc1", 0, 1, T0 + 20_000, 6_000),
                      Op("Conv2D", "conv1", 1, 2, T0, 2_000), Op("MatMul", "fc1", 1, 2, T0 + 5_000, 500),
                      Op("MatMul", "fc1", 1, 2, T0 + 7_000, 1_500)],
            model_labels={1: {"model": "resnet"}}),
    Service("svc-b", [Op("Conv2D", "conv1", 0, 1, T1, 4_000), Op("Relu", "relu1", 0, 1, T1 + 10_000, 250),
                      Op("MatMul", "fc1", 0, 1, T1 + 20_000, 5_000)],
            model_labels={1: {"model": "resnet"}}),
]
ALL = [(s, op) for s in SERVICES for op in s.ops]


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Daemon, int]]:
    port = free_port()
    d = started(SERVICES, prometheus_port=port)
    try:
        yield d, port
    finally:
        d.cleanup()


def test_the_two_services_have_distinct_pids(daemon):
    pids = {s.name: s.pid for s in SERVICES}
    assert len(set(pids.values())) == 2 and all(pids.values()), pids


def test_csv_rows_per_service_device_model_and_type_with_per_device_ratios(daemon):
    d, _ = daemon
    rows = list(csv.DictReader(io.StringIO(cli_ok(d, "export", "--format", "csv", "-o", "-"))))
    want = totals(SERVICES, lambda s, op: (s.name, str(s.pid), str(op.device), str(op.model), op.op_type))
    device_total: dict[int, int] = {}
    for _, op in ALL:
        device_total[op.device] = device_total.get(op.device, 0) + op.dur
    got = {(r["Service"], r["PID"], r["Device_id"], r["Model Name"], r["OP Type"]): r for r in rows}
    assert set(got) == set(want)
    for k, w in want.items():
        r = got[k]
        assert int(r["Count"]) == w["count"], k
        assert (r["Total Time(us)"], r["Min Time(us)"], r["Max Time(us)"]) == (us(w["total"]), us(w["min"]),
                                                                              us(w["max"])), k
        assert float(r["Avg Time(us)"]) == pytest.approx(w["total"] / w["count"] / 1000, abs=5e-4), k
        share = 100 * w["total"] / device_total[int(k[2])]
        assert float(r["Ratio(%)"]) == pytest.approx(share, abs=5e-3), (k, share)
    # the ratios add up to 100 per device (not over the whole file)
    for dev in device_total:
        assert sum(float(r["Ratio(%)"]) for r in rows if r["Device_id"] == str(dev)) == pytest.approx(100, abs=0.02)


def test_chrome_one_process_per_pid_one_thread_per_device_and_model(daemon):
    d, _ = daemon
    doc = json.loads(cli_ok(d, "export", "--format", "chrome", "-o", "-"))
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    got = sorted((e["pid"], e["tid"], e["name"], e["cat"], e["ts"], e["dur"]) for e in events)
    want = sorted((s.pid, op.device * 100000 + op.model, op.op_name, op.op_type, op.start / 1e3, op.dur / 1e3)
                  for s, op in ALL)
    assert got == want
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    a, b = SERVICES
    threads = {(pid, tid): args["name"] for (name, pid, tid), args in meta.items() if name == "thread_name"}
    assert threads == {(a.pid, 1): "device 0 / model 1", (a.pid, 100002): "device 1 / model 2",
                       (b.pid, 1): "device 0 / model 1"}
    procs = {pid: args["name"] for (name, pid, _), args in meta.items() if name == "process_name"}
    assert set(procs) == {a.pid, b.pid}
    assert procs[a.pid].startswith(f"svc-a (pid {a.pid})") and procs[b.pid].startswith(f"svc-b (pid {b.pid})")


def test_jsonl_every_record_once_with_its_service_pid_device_and_model(daemon):
    d, _ = daemon
    lines = [json.loads(x) for x in cli_ok(d, "export", "--format", "jsonl", "-o", "-").splitlines()]
    got = sorted((x["service"], x["pid"], x["device"], x["model"], x["op_type"], x["op_name"], x["start"], x["end"],
                  x["duration_ns"]) for x in lines)
    want = sorted((s.name, s.pid, op.device, op.model, op.op_type, op.op_name, op.start, op.start + op.dur, op.dur)
                  for s, op in ALL)
    assert got == want


def test_ascend_one_directory_per_process_with_both_devices(daemon, tmp_path: Path):
    d, _ = daemon
    out = tmp_path / "asc"
    cli_ok(d, "export", "--format", "ascend", "-o", str(out))
    dirs = {int(p.name.split("_")[1]): p for p in out.iterdir() if p.name.endswith("_ascend_pt")}
    assert set(dirs) == {s.pid for s in SERVICES}
    for s in SERVICES:
        base = dirs[s.pid] / "ASCEND_PROFILER_OUTPUT"
        kernels = list(csv.DictReader(open(base / "kernel_details.csv", newline="")))
        got = sorted((int(r["Device_id"]), r["Name"], r["Type"], r["Start Time(us)"], r["Duration(us)"])
                     for r in kernels)
        assert got == sorted((op.device, op.op_name, op.op_type, us(op.start), us(op.dur)) for op in s.ops)
        stats = {r["OP Type"]: r for r in csv.DictReader(open(base / "op_statistic.csv", newline=""))}
        want = totals([s], lambda _s, op: op.op_type)
        grand = sum(op.dur for op in s.ops)
        assert set(stats) == set(want)
        for t, w in want.items():
            r = stats[t]
            assert int(r["Count"]) == w["count"]
            assert float(r["Total Time(us)"]) == pytest.approx(w["total"] / 1000, abs=5e-4)
            assert float(r["Ratio(%)"]) == pytest.approx(100 * w["total"] / grand, abs=5e-3)
        meta = json.loads((dirs[s.pid] / "profiler_metadata.json").read_text())
        assert s.name in json.dumps(meta)


@pytest.mark.parametrize("group", ["type", "name", "service", "process", "device", "model"])
def test_snapshot_every_grouping_has_exact_rows(daemon, group: str):
    d, _ = daemon
    snap = snapshot(d.socket, group)
    keyfn = {
        "type": lambda s, op: (op.op_type,),
        "name": lambda s, op: (op.op_name,),
        "service": lambda s, op: (s.name,),
        "process": lambda s, op: (s.host, s.pid, s.name),
        "device": lambda s, op: (op.device,),
        # a labelled model: one row per service and label; an unlabelled id: per process and id
        "model": lambda s, op: (s.name, (s.model_labels.get(op.model) or {}).get("model"), op.model, s.pid),
    }[group]
    fields = {"type": ("op_type",), "name": ("op_name",), "service": ("service",),
              "process": ("host", "pid", "service"), "device": ("device",),
              "model": ("service", "model", "model_id", "pid")}[group]
    want = totals(SERVICES, keyfn)
    got = {tuple(r[f] for f in fields): r for r in snap["rows"]}
    assert set(got) == set(want), (sorted(got), sorted(want))
    grand = sum(op.dur for _, op in ALL)
    assert snap["total_ns"] == grand
    for k, w in want.items():
        r = got[k]
        assert (r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) == (w["count"], w["total"], w["min"], w["max"]), k
        assert r["pct_time"] == pytest.approx(100 * w["total"] / grand, abs=0.05), k
    assert snap["summary"]["records"] == len(ALL)
    assert snap["summary"]["processes"] == 2 and snap["summary"]["services"] == 2
    assert sorted(snap["summary"]["devices"]) == [0, 1]


@pytest.mark.parametrize("group", ["service", "device"])
def test_topscreen_rows_per_service_and_per_device(daemon, group: str):
    """The screen (not the JSON): one row per service and per device with its count and
    total time (us, to the screen's precision)."""
    d, _ = daemon
    rows = screen_rows(cli_ok(d, "top", "--once", "--window", "all", "--group", group))
    keyfn = (lambda s, op: s.name) if group == "service" else (lambda s, op: str(op.device))
    want = totals(SERVICES, keyfn)
    assert set(rows) == set(want), rows
    for k, w in want.items():
        count, total = rows[k][0], rows[k][1]
        assert int(count.replace(",", "")) == w["count"], (k, rows[k])
        assert us_cell(total) == pytest.approx(w["total"] / 1000, abs=0.051), (k, rows[k])


def test_status_counts_each_service(daemon):
    d, _ = daemon
    st = json.loads(cli_ok(d, "status", "--json"))
    assert st["records_total"] == len(ALL) and st["records_rejected"] == {}
    assert st["aggregates"]["keys"] == len(totals(SERVICES, lambda s, op: (s.pid, op.device, op.model, op.op_type,
                                                                           op.op_name)))


def test_metrics_one_series_per_service_device_model_and_type(daemon):
    """/metrics: two services' model 1 are separate series (the label or the id), device 1's
    ops too; _count and _sum (seconds) exact per series."""
    _, port = daemon
    text = metrics_text(port)

    def key(s: Service, op: Op) -> tuple[tuple[str, str], ...]:
        model = (s.model_labels.get(op.model) or {}).get("model") or str(op.model)
        return tuple(sorted({"host": "edgehost", "service": s.name, "device": str(op.device), "model": model,
                             "op_type": op.op_type}.items()))

    want = totals(SERVICES, key)
    count = series(text, "aclprofd_op_duration_seconds_count")
    total = series(text, "aclprofd_op_duration_seconds_sum")
    assert set(count) == set(want) == set(total)
    for k, w in want.items():
        assert count[k] == w["count"], k
        assert total[k] == pytest.approx(w["total"] / 1e9, rel=1e-12), k



def test_top_once_json_prints_the_daemons_snapshot(daemon):
    """The CLI's ``top --once --json`` (the grouping tests read SNAPSHOT over the wire)."""
    d, _ = daemon
    printed = json.loads(cli_ok(d, "top", "--once", "--json", "--window", "all", "--group", "type"))
    direct = snapshot(d.socket, "type")
    drop = ("generated_ts", "summary")
    assert {k: v for k, v in printed.items() if k not in drop} == {k: v for k, v in direct.items() if k not in drop}
