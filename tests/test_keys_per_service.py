"""Per-service truth (issue 10): aggregates are keyed by service, process and model label,
and every view keeps them apart: Prometheus series, the csv export, SNAPSHOT groupings."""

from __future__ import annotations

import argparse
import csv
import io
import os
import socket
import urllib.request

import numpy as np
import pytest
from aclprofd import config
from aclprofd.aggregate import aggregator as aggregate
from aclprofd.aggregate import npzfile as aggregate_file
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from aclprofd.aggregate.groups import FIELDS
from aclprofd.aggregate.keys import model_label_of
from aclprofd.filters import Filter
from helpers.daemons import Client, Daemon, InProcess, agent, status
from helpers.procs import Worker, cli, free_port, wait_for
from helpers.records import make_records
from prometheus_client.parser import text_string_to_metric_families

from aclprof.cli.common import filter_from_args
from aclprof.cli.main import main
from aclprof.protocol.wire import Kind, decode_json, encode_batch, encode_json

pytestmark = pytest.mark.timeout(90)



def _durations(port: int) -> dict[tuple, float]:
    """``aclprofd_op_duration_seconds_count`` samples: sorted label items -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "aclprofd_op_duration_seconds_count":
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_two_services_with_the_same_model_id_stay_apart_in_prometheus_and_csv():
    """Two inference processes, services "alpha" (model labelled resnet50 v3) and "beta"
    (no label), both with model id 1 and a MatMulV2 op: two series told apart by service,
    and two csv rows; the old keys merged them into one of each (count 500)."""
    port = free_port()
    d = Daemon(None, "--prometheus-host-label", "node-a", prometheus_port=port)
    d.start()
    workers = []
    try:
        alpha = Worker(d.socket, "--service", "alpha", "--model-label", "resnet50", "--model-version", "v3")
        workers.append(alpha)
        beta = Worker(d.socket, "--service", "beta", "--model-label", "")
        workers.append(beta)
        assert alpha.model == beta.model == 1
        assert alpha.run(200) == 1000 and beta.run(300) == 1500
        for w in workers:
            w.stop()
        wait_for(lambda: d.status()["records_total"] == 2500, what="2500 records at the daemon")

        series = {k: v for k, v in _durations(port).items() if ("op_type", "MatMulV2") in k}
        base = {"host": "node-a", "device": "0", "op_type": "MatMulV2"}
        assert series == {
            tuple(sorted({**base, "service": "alpha", "model": "resnet50@v3"}.items())): 200.0,
            tuple(sorted({**base, "service": "beta", "model": "1"}.items())): 300.0,
        }

        def matmul_rows():
            p = cli("export", "--since", "-10m", "--format", "csv", "--socket", d.socket)
            assert p.returncode == 0, p.stderr
            rows = [r for r in csv.DictReader(io.StringIO(p.stdout)) if r["OP Type"] == "MatMulV2"]
            return rows if sum(int(r["Count"]) for r in rows) == 500 else None

        rows = wait_for(matmul_rows, what="500 MatMulV2 records on disk")
        got = sorted((r["Service"], int(r["PID"]), r["Device_id"], r["Model Name"], int(r["Count"])) for r in rows)
        assert got == [("alpha", alpha.pid, "0", "1", 200), ("beta", beta.pid, "0", "1", 300)]
    finally:
        for w in workers:
            w.kill()
        d.cleanup()


# ---- the aggregator: keys, groupings, summary, persistence ---------------------------------------

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "mm1"}


def _fleet() -> Aggregator:
    """alpha: pids 11 and 12, both "resnet50@v3" (model ids 1 and 2), device 0; beta: pid 21,
    unlabelled model id 1 on device 1; a process without service: pid 31, model 1, device 0.
    Every record takes 1 us: Conv2D and MatMul alternate. The aggregator started at t=900."""
    agg = Aggregator(clock=lambda: 900.0)
    a11, a12 = KeySource("h", 11, "alpha"), KeySource("h", 12, "alpha")
    a11.set_label(1, "resnet50@v3")
    a12.set_label(2, "resnet50@v3")
    agg.ingest(a11, make_records(100, model=1), NAMES, now=995.0)
    agg.ingest(a12, make_records(60, model=2), NAMES, now=999.0)
    agg.ingest(KeySource("h", 21, "beta"), make_records(40, model=1, device=1), NAMES, now=999.0)
    agg.ingest(KeySource("h", 31, None), make_records(10, model=1), NAMES, now=999.0)
    return agg


def _rows(snap: dict) -> dict[str, dict]:
    return {r["key"]: r for r in snap["rows"]}


def test_group_by_service_process_device_model_carry_their_identity():
    agg = _fleet()
    svc = _rows(agg.snapshot("all", "service"))
    assert {k: (r["count"], r["service"]) for k, r in svc.items()} == {
        "alpha": (160, "alpha"), "beta": (40, "beta"), "(none)": (10, None)}
    proc = _rows(agg.snapshot("all", "process"))
    assert {k: (r["count"], r["host"], r["pid"], r["service"]) for k, r in proc.items()} == {
        "alpha/11": (100, "h", 11, "alpha"), "alpha/12": (60, "h", 12, "alpha"),
        "beta/21": (40, "h", 21, "beta"), "pid 31": (10, "h", 31, None)}
    dev = _rows(agg.snapshot("all", "device"))
    assert {k: (r["count"], r["device"]) for k, r in dev.items()} == {"device 0": (170, 0), "device 1": (40, 1)}
    model = _rows(agg.snapshot("all", "model"))
    # a labelled model is one row over its processes (ids 1 and 2: no single model_id or pid)
    assert {k: (r["count"], r["service"], r["model"], r["model_id"], r["pid"]) for k, r in model.items()} == {
        "alpha/resnet50@v3": (160, "alpha", "resnet50@v3", None, None),
        "beta/21/1": (40, "beta", None, 1, 21), "pid 31/1": (10, None, None, 1, 31)}
    by_type = _rows(agg.snapshot("all", "type"))
    assert {k: (r["count"], r["op_type"]) for k, r in by_type.items()} == {"Conv2D": (105, "Conv2D"),
                                                                          "MatMul": (105, "MatMul")}
    assert {r["op_name"] for r in agg.snapshot("all", "name")["rows"]} == {"conv1", "mm1"}
    for group_by in ("type", "name", "service", "process", "device", "model"):
        snap = agg.snapshot("all", group_by)
        assert sum(r["count"] for r in snap["rows"]) == 210 and snap["group_by"] == group_by
        assert abs(sum(r["pct_time"] for r in snap["rows"]) - 100) < 0.01
    with pytest.raises(ValueError, match="group_by must be one of type, name, service, process, device, model"):
        agg.snapshot("all", "pid")


def test_device_filter_and_summary():
    agg = _fleet()
    dev1 = agg.snapshot("all", "service", Filter.parse({"device": 1}), now=1000.0)
    assert [(r["key"], r["count"]) for r in dev1["rows"]] == [("beta", 40)]
    assert dev1["summary"] == {"records": 40, "records_per_s": 0.4, "processes": 1, "services": 1, "devices": [1]}
    # since start (100 s before t=1000): 210 records
    everything = agg.snapshot("all", "type", now=1000.0)["summary"]
    assert everything == {"records": 210, "records_per_s": 2.1, "processes": 4, "services": 2, "devices": [0, 1]}
    # right after a start, the rate is over at least 1 s
    assert agg.snapshot("all", "type", now=900.2)["summary"]["records_per_s"] == 210.0
    # the 10 s window at t=1000: all records (995..999), over 10 s
    assert agg.snapshot("10s", "type", now=1000.0)["summary"]["records_per_s"] == 21.0
    # the 1 s before t=1000.5: the second 999 only (alpha/12, beta, pid 31)
    agg.sliding.seconds = (2, 10)
    w = agg.snapshot("2s", "process", now=1000.5)
    assert w["summary"]["records"] == 110 and w["summary"]["processes"] == 3
    assert {r["key"] for r in w["rows"]} == {"alpha/12", "beta/21", "pid 31"}


def test_the_other_key_is_its_own_row_in_every_grouping():
    agg = Aggregator(max_keys=1, clock=lambda: 1000.0)
    agg.ingest(KeySource("h", 1, "svc"), make_records(10), NAMES)  # 2 keys: the second is "(other)"
    for group_by in ("type", "name", "service", "process", "device", "model"):
        rows = _rows(agg.snapshot("all", group_by))
        assert rows["(other)"]["count"] == 5, group_by
        assert all(rows["(other)"][f] is None for f in FIELDS[group_by])
    summary = agg.snapshot("all", "type")["summary"]
    assert summary["records"] == 10 and summary["processes"] == 1 and summary["devices"] == [0]


def test_a_relabelled_model_id_gets_new_keys_and_the_file_keeps_labels(tmp_path):
    agg = Aggregator(clock=lambda: 1000.0)
    src = KeySource("h", 5, "svc")
    src.set_label(1, "bert@v1")
    agg.ingest(src, make_records(10), NAMES)
    src.set_label(1, "bert@v2")  # the process reloaded model id 1 as another model
    agg.ingest(src, make_records(4), NAMES)
    src.set_label(1, "")  # UNWATCH
    agg.ingest(src, make_records(2), NAMES)
    model = {k: r["count"] for k, r in _rows(agg.snapshot("all", "model")).items()}
    assert model == {"svc/bert@v1": 10, "svc/bert@v2": 4, "svc/5/1": 2}
    prom = {lab: c for lab, _, c, _ in agg.prometheus_view()}
    assert prom == {("svc", "0", "bert@v1", "Conv2D"): 5, ("svc", "0", "bert@v1", "MatMul"): 5,
                    ("svc", "0", "bert@v2", "Conv2D"): 2, ("svc", "0", "bert@v2", "MatMul"): 2,
                    ("svc", "0", "1", "Conv2D"): 1, ("svc", "0", "1", "MatMul"): 1}
    path = str(tmp_path / "agg.npz")
    agg.save(path)
    again = Aggregator(clock=lambda: 1000.0)
    again.load(path)
    assert {k: r["count"] for k, r in _rows(again.snapshot("all", "model")).items()} == model
    # the agent reconnects, watches again: its records continue the same key
    src2 = KeySource("h", 5, "svc")
    src2.set_label(1, "bert@v2")
    again.ingest(src2, make_records(2), NAMES)
    assert _rows(again.snapshot("all", "model"))["svc/bert@v2"]["count"] == 6 and again.nkeys == agg.nkeys


def test_a_version_1_aggregates_file_loads_with_unknown_model_labels(tmp_path, monkeypatch):
    agg = Aggregator(clock=lambda: 1000.0)
    src = KeySource("h", 5, "svc")
    agg.ingest(src, make_records(10), NAMES)
    path = str(tmp_path / "agg.npz")
    real_write = aggregate_file.write_state

    def write_v1(p, arrays, meta):  # the previous release: 7-field keys, version 1
        meta = {**meta, "keys": [k[:7] for k in meta["keys"]], "version": 1}
        real_write(p, arrays, meta)

    monkeypatch.setattr(aggregate, "write_state", write_v1)
    agg.save(path)
    meta, _ = aggregate_file.read_state(path)
    assert meta["version"] == 1 and all(len(k) == 7 for k in meta["keys"])
    again = Aggregator(clock=lambda: 1000.0)
    assert again.load(path)["records"] == 10
    assert {k: r["count"] for k, r in _rows(again.snapshot("all", "model")).items()} == {"svc/5/1": 10}
    assert again.keys.model_label[1:] == ["", ""]


def test_set_label_ignores_ids_records_cannot_carry():
    src = KeySource("h", 1, None)
    for mid in (-1, 1 << 32, 1 << 70):
        src.set_label(mid, "x")
    assert src.model_labels == {}
    assert model_label_of({"model": "resnet50", "version": "v3"}) == "resnet50@v3"
    assert model_label_of({"model": "resnet50"}) == "resnet50"
    assert model_label_of({"version": "v3"}) == "" and model_label_of({}) == ""


# ---- over the wire: WATCH labels, SNAPSHOT groupings and the device filter ---------------------

@pytest.fixture
def inproc():
    with InProcess() as d:
        yield d


def test_watch_labels_group_by_and_device_filter_over_the_wire(inproc):
    a = agent(inproc.socket, service="alpha", host="h1", names=NAMES)
    a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": "resnet50", "version": "v3"}})
    a.send_batch(make_records(100, model=1, device=0))
    b = agent(inproc.socket, service="beta", host="h2", names=NAMES)
    b.send_batch(make_records(40, model=1, device=1))  # never watched: unlabelled
    c = Client(inproc.socket)
    wait_for(lambda: status(inproc.socket)["records_total"] == 140)
    pid = os.getpid()  # the agents' HELLO pid is replaced by the peer's (this process)
    snap = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "model"})
    assert {r["key"]: (r["count"], r["service"], r["model"], r["model_id"], r["pid"]) for r in snap["rows"]} == {
        "alpha/resnet50@v3": (100, "alpha", "resnet50@v3", 1, pid), f"beta/{pid}/1": (40, "beta", None, 1, pid)}
    assert snap["summary"]["records"] == 140 and snap["summary"]["services"] == 2
    assert snap["summary"]["processes"] == 2 and snap["summary"]["devices"] == [0, 1]
    dev1 = c.request(Kind.SNAPSHOT, {"window": "10s", "group_by": "process", "filter": {"device": 1}})
    assert [(r["key"], r["host"], r["count"]) for r in dev1["rows"]] == [(f"beta/{pid}", "h2", 40)]
    assert dev1["summary"]["devices"] == [1] and dev1["summary"]["records"] == 40
    exported = c.export(filter={"device": 1})
    assert len(exported) == 40 and {(r["service"], r["device"]) for r in exported} == {("beta", 1)}
    # a new label for model id 1: later records are new rows; UNWATCH: unlabelled again
    a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": "resnet50", "version": "v4"}})
    a.send_batch(make_records(6, model=1))
    a.send_json(Kind.UNWATCH, {"model_id": 1})
    a.send_batch(make_records(2, model=1))
    wait_for(lambda: status(inproc.socket)["records_total"] == 148)
    rows = {r["key"]: r["count"] for r in c.request(Kind.SNAPSHOT, {"group_by": "model"})["rows"]}
    assert rows == {"alpha/resnet50@v3": 100, "alpha/resnet50@v4": 6, f"alpha/{pid}/1": 2, f"beta/{pid}/1": 40}
    for cl in (a, b, c):
        cl.close()


@pytest.mark.parametrize("request_obj, message", [
    ({"group_by": "pid"}, "group_by must be one of type, name, service, process, device, model, not 'pid'"),
    ({"group_by": ["type"]}, "group_by must be one of"),
    ({"filter": {"device": "0"}}, "filter device must be an integer"),
    ({"filter": {"device": True}}, "filter device must be an integer"),
    ({"filter": {"devices": 0}}, "unknown filter keys: devices"),
])
def test_bad_snapshot_requests_are_refused_with_a_reason(inproc, request_obj, message):
    a = agent(inproc.socket, service="s", names=NAMES)
    a.send_batch(make_records(10))
    wait_for(lambda: status(inproc.socket)["records_total"] == 10)
    c = Client(inproc.socket)
    c.send_json(Kind.SNAPSHOT, request_obj)
    kind, payload = c.recv()
    assert kind == Kind.ERROR and message in decode_json(payload)["message"]
    assert c.closed_by_peer()
    # the daemon and its aggregates are intact
    c2 = Client(inproc.socket)
    assert sum(r["count"] for r in c2.request(Kind.SNAPSHOT, {})["rows"]) == 10
    c2.close()
    a.close()


def test_groupings_take_one_python_step_per_new_key_only():
    """10 000 keys: a grouping identifies each key once; later snapshots and scrapes reuse it
    and identify only keys added since."""
    agg = Aggregator(max_keys=20_000, clock=lambda: 1000.0)
    names = {i: f"op{i}" for i in range(1, 101)}
    names.update({i: f"n{i}" for i in range(101, 10_102)})
    recs = make_records(20_000)
    recs["op_type"] = 1 + np.arange(20_000) % 100
    recs["op_name"] = 101 + np.arange(20_000) % 10_000
    src = KeySource("h", 1, "svc")
    agg.ingest(src, recs, names)
    assert agg.nkeys == 10_001
    calls: dict[str, list[int]] = {}
    for group_by in (*FIELDS, "prom"):
        agg.snapshot("all", group_by) if group_by != "prom" else agg.prometheus_view()  # builds it
        g = agg.groupings.get(agg.keys, group_by)
        real = g._identify
        seen = calls[group_by] = []
        g._identify = lambda reg, k, real=real, seen=seen: seen.append(k) or real(reg, k)
    for group_by in FIELDS:
        snap = agg.snapshot("10s", group_by, now=1000.0)
        assert sum(r["count"] for r in snap["rows"]) == 20_000
    agg.prometheus_view()
    assert all(c == [] for c in calls.values()), calls
    agg.ingest(src, make_records(1, types=(1,), names=(10_101,)), names)  # one new key: index 10 001
    for group_by in FIELDS:
        agg.snapshot("all", group_by)
    agg.prometheus_view()
    assert all(c == [10_001] for c in calls.values()), calls


# ---- the CLI's --device ------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [["tail"], ["top", "--once"], ["export", "--format", "csv"]])
@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_device_option_is_checked_before_connecting(cmd, value, capsys):
    assert main([*cmd, "--device", value, "--socket", "/nonexistent/aclprof.sock"]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "device id" in err


def test_device_option_reaches_the_daemon_filter(inproc):
    a = agent(inproc.socket, service="s", names=NAMES)
    a.send_batch(make_records(30, device=0))
    a.send_batch(make_records(12, device=3))
    def on_disk() -> int:
        c = Client(inproc.socket)
        try:
            return len(c.export())
        finally:
            c.close()

    wait_for(lambda: on_disk() == 42, what="42 records on disk")
    args = argparse.Namespace(device=3, model=None, pid=None, type=None, name=None, service=None, host=None)
    assert filter_from_args(args) == {"device": 3}
    p = cli("export", "--format", "csv", "--device", "3", "--socket", inproc.socket)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [(r["Device_id"], r["Count"]) for r in rows] == [("3", "6"), ("3", "6")]
    a.close()


def test_prometheus_host_label_setting():
    assert config.load({"socket": "/x"}, environ={}).prometheus_host_label == socket.gethostname()
    s = config.load({"socket": "/x"}, environ={"ACLPROFD_PROMETHEUS_HOST_LABEL": "node-7"})
    assert s.prometheus_host_label == "node-7"
    for bad in (" ", "x" * 257):
        with pytest.raises(config.ConfigError, match="--prometheus-host-label"):
            config.load({"socket": "/x", "prometheus_host_label": bad}, environ={})


def test_a_flood_of_relabelling_watches_stays_within_the_key_cap():
    """An agent that gives model 1 a new label before every batch: new keys until the cap,
    then "(other)"; every record is still counted and the daemon keeps answering."""
    with InProcess(max_keys=20) as d:
        a = agent(d.socket, service="flood", names=NAMES)
        frames = bytearray()
        for i in range(2000):
            frames += encode_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": f"m{i}"}})
            frames += encode_batch(make_records(2))
        a.sock.sendall(bytes(frames))
        st = wait_for(lambda: (s := status(d.socket))["records_total"] == 4000 and s, what="4000 records")
        assert st["aggregates"]["keys"] == 20 and st["protocol_errors"] == 0  # 10 labels x 2 op types
        c = Client(d.socket)
        snap = c.request(Kind.SNAPSHOT, {"group_by": "model"})
        rows = {r["key"]: r["count"] for r in snap["rows"]}
        assert sum(rows.values()) == 4000 and rows["(other)"] == 4000 - 20 and len(rows) == 11
        assert st["aggregates"]["other_bucket_records"] == 4000 - 20
        c.close()
        a.close()


def test_stream_device_filter(inproc):
    a = agent(inproc.socket, service="svc", names=NAMES)
    s = Client(inproc.socket)
    s.send_json(Kind.STREAM, {"filter": {"device": 2}})
    wait_for(lambda: any(c.stream is not None for c in list(inproc.daemon.conns.values())))
    a.send_batch(make_records(10, device=0))
    a.send_batch(make_records(7, device=2))
    a.send_batch(make_records(10, device=1))
    a.send_batch(make_records(3, device=2))
    got: list[dict] = []
    while len(got) < 10:
        records, skipped, kind = s.stream_frames()
        assert kind == Kind.STREAM_RECORDS and skipped == 0
        got += records
    assert len(got) == 10 and {r["device"] for r in got} == {2}
    s.close()
    a.close()


def test_pairs_whose_cache_hashes_collide_keep_their_own_keys():
    """A sender's pair cache is searched by a 64-bit hash of (model/device, name/type)
    (issue 21: a structured-array search cost ~1.5 us a record); two pairs with one hash
    must still resolve to their own keys, batch after batch, alone or together."""
    from aclprofd.aggregate.keys import pair_hash

    agg = Aggregator()
    src = KeySource("h", 1, "svc")
    dm1, dm2 = np.uint64(1 << 32), np.uint64(2 << 32)  # model 1 and model 2, device 0
    code1 = np.uint64((10 << 32) | 11)
    code2 = code1 ^ pair_hash(np.array([dm1]), np.zeros(1, np.uint64))[0] \
        ^ pair_hash(np.array([dm2]), np.zeros(1, np.uint64))[0]
    assert pair_hash(np.array([dm1]), np.array([code1])) == pair_hash(np.array([dm2]), np.array([code2]))
    assert int(code2) & 0xFFFFFFFF == 11  # the same type, another name id
    names = {10: "conv", 11: "Conv2D", int(code2) >> 32: "other_op"}
    reg = agg.keys

    def resolve(pairs):
        dm = np.array([p[0] for p in pairs], np.uint64)
        codes = np.array([p[1] for p in pairs], np.uint64)
        return [reg.identity(int(k))[2:6] for k in reg.resolve(src, dm, codes, names)]

    one, two = [0, 1, "Conv2D", "conv"], [0, 2, "Conv2D", "other_op"]
    for _ in range(3):
        assert resolve([(dm1, code1)]) == [one]
        assert resolve([(dm2, code2)]) == [two]
        assert resolve([(dm1, code1), (dm2, code2)]) == [one, two]
    assert len(src.hashes) == 1  # one of the colliding pairs is cached, the other looked up each time
