"""The flight recorder's bounds and failures with a real daemon: at most N captures (the
oldest deleted), at most M bytes (a capture too large alone is truncated around the flag and
says so), one capture per key per interval, and an unwritable or full disk counted and
survived. Flags are handed to the recorder as the detector publishes them (a
``DetectorView``), so each test controls when and what is flagged; the records are real,
sent by agent connections and read back from the daemon's segment files."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.daemons import Client, InProcess, agent, running
from helpers.procs import short_tmpdir, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind


def _flag(d: InProcess, op_type: str, service: str = "svc") -> float:
    """Publish a detector view whose flag on (service, op_type) was raised now; its time."""
    from aclprofd.detector.engine import DetectorView

    t = time.time()
    flag = {"service": service, "model": "1", "op_type": op_type, "quantile": "p99", "shift": 1.5,
            "lower": 1.3, "upper": 1.7, "since_ts": t}
    d.daemon.detection.detector.published = DetectorView(ts=t, flags=(flag,))
    return t


def _quiet_detector(d: InProcess) -> None:
    """The real detector's ticks would replace the views these tests publish."""
    d.daemon.detection.tick = lambda mono: None  # type: ignore[method-assign]


def _captures(d: InProcess) -> dict:
    c = Client(d.socket)
    try:
        return c.request(Kind.STATUS)["captures"]
    finally:
        c.close()


def _send(a, n: int, batch: int = 500) -> None:
    for i in range(0, n, batch):
        a.send_batch(make_records(min(batch, n - i), types=(2, 1), names=(4, 3)))


def _wait_made(d: InProcess, made: int) -> dict:
    return wait_for(lambda: (lambda c: c if c["made_total"] + c["errors_total"] >= made else None)(_captures(d)),
                    timeout=15, what=f"{made} captures")


def test_count_bound_deletes_the_oldest_and_a_key_is_rate_limited():
    with InProcess(capture_max_count=2, capture_before_s="1s", capture_after_s="0.2s",
                   capture_min_interval_s="1h") as d:
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        names = []
        last = 0.0
        for i, op in enumerate(("MatMul", "Conv2D", "MatMul", "Relu")):
            # each flag out of the others' 1 s windows: a capture flagged within a new one's
            # window is the same event and kept (a fast machine flagged all four within 1 s)
            time.sleep(max(0.0, last + 1.05 - time.time()))
            _send(a, 200)
            last = _flag(d, op)
            if op == "MatMul" and i == 2:  # the same key again within capture_min_interval
                wait_for(lambda: _captures(d)["rate_limited_total"] == 1, timeout=5)
                continue
            cap = _wait_made(d, len(names) + 1)
            names.append(cap["newest"]["name"])  # same second: the order is still the order made
        cap = _captures(d)
        assert cap["made_total"] == 3 and cap["errors_total"] == 0 and cap["rate_limited_total"] == 1
        assert cap["count"] == 2 and cap["evicted_total"] == 1
        assert [i["name"] for i in cap["items"]] == [names[2], names[1]]  # newest first; the oldest went
        assert sorted(os.listdir(cap["dir"])) == sorted(names[1:])
        assert [i["op_type"] for i in cap["items"]] == ["Relu", "Conv2D"]
        text = _scrape(d)
        assert "aclprofd_captures_total 3.0" in text and "aclprofd_capture_errors_total 0.0" in text
        assert 'aclprofd_captures_not_taken_total{reason="rate_limited"} 1.0' in text
        assert "aclprofd_captures_kept 2.0" in text and f"aclprofd_captures_bytes {float(cap['bytes'])}" in text
        a.close()


def _scrape(d: InProcess) -> str:
    from aclprofd.metrics import DaemonCollector
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry(auto_describe=False)
    reg.register(DaemonCollector(d.daemon))
    return generate_latest(reg).decode()


def test_a_capture_larger_than_the_byte_bound_is_truncated_around_the_flag():
    with InProcess(capture_max_bytes="1MiB", capture_before_s="2s", capture_after_s="0.5s",
                   capture_min_interval_s="0s") as d:
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        other = agent(d.socket, service="other", pid=os.getpid() + 1)
        for _ in range(8):  # 8 batches before the flag, 0.1 s apart: distinct receive times
            _send(a, 1000, batch=1000)
            _send(other, 1000, batch=1000)
            time.sleep(0.1)
        t = _flag(d, "MatMul")
        for _ in range(3):
            _send(a, 1000, batch=1000)
            time.sleep(0.1)
        cap = _wait_made(d, 1)
        item = cap["newest"]
        doc = json.loads((Path(item["path"]) / "capture.json").read_text())
        rec = doc["records"]
        assert doc["truncated"] is True and item["truncated"] is True and cap["truncated_total"] == 1
        assert rec["found"] == 11_000  # the service's records only
        # 1 MiB at ~380 bytes per record in the three outputs (the estimate is within ~10 % above)
        assert rec["written"] + rec["truncated"] == rec["found"] and 2000 < rec["written"] < 2900
        assert cap["records_truncated_total"] == rec["truncated"]
        assert item["bytes"] <= 1 << 20 and cap["bytes"] <= 1 << 20
        # the kept records are the ones nearest the flag
        events = [e for e in json.loads((Path(item["path"]) / "trace.json").read_text())["traceEvents"]
                  if e["ph"] == "X"]
        kept = max(abs(e["args"]["received_ts"] - t) for e in events)
        c = Client(d.socket)
        window = c.export(since_ts=doc["window"]["since_ts"], until_ts=doc["window"]["until_ts"],
                          filter={"service": "svc"})
        c.close()
        assert len(window) == rec["found"]
        assert sum(abs(r["ts"] - t) < kept for r in window) <= rec["written"]
        assert any(abs(r["ts"] - t) > kept for r in window)

        # the next capture makes room: the bound holds for all of them together
        _send(a, 1000, batch=1000)
        _flag(d, "Conv2D")
        _send(a, 1000, batch=1000)
        cap = _wait_made(d, 2)
        assert cap["errors_total"] == 0 and cap["bytes"] <= 1 << 20
        assert sum(i["bytes"] for i in cap["items"]) == cap["bytes"]
        a.close()
        other.close()


def test_an_unusable_captures_directory_is_counted_and_the_daemon_goes_on():
    tmp = short_tmpdir()
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    Path(data, "captures").write_text("in the way\n")  # not a directory: neither readable nor writable
    try:
        with InProcess(data_dir=data, capture_before_s="1s", capture_after_s="0.2s",
                       capture_min_interval_s="0s") as d:
            _quiet_detector(d)
            a = agent(d.socket, service="svc")
            _send(a, 500)
            wait_for(lambda: _captures(d)["errors_total"] == 1, timeout=5, what="the failed scan")
            _flag(d, "MatMul")
            cap = _wait_made(d, 2)  # the scan's error, then this capture's
            assert cap["errors_total"] == 2 and cap["made_total"] == 0 and cap["count"] == 0
            assert "aclprofd_capture_errors_total 2.0" in _scrape(d)
            assert "captures" in cap["last_error"]
            c = Client(d.socket)
            before = c.request(Kind.STATUS)["records_total"]
            _send(a, 500)
            wait_for(lambda: c.request(Kind.STATUS)["records_total"] == before + 500, timeout=5)
            c.close()

            os.unlink(os.path.join(data, "captures"))  # fixed: the next flag is captured
            _send(a, 500)
            _flag(d, "Conv2D")
            cap = _wait_made(d, 3)
            assert cap["made_total"] == 1 and cap["count"] == 1 and cap["newest"]["records"] > 0
            a.close()
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def test_leftovers_of_a_crash_are_removed_and_old_captures_counted(tmp_path):
    tmp = short_tmpdir()
    data = os.path.join(tmp, "data")
    old = Path(data, "captures", "20260101T000000Z_svc_MatMul")
    old.mkdir(parents=True)
    (old / "capture.json").write_text(json.dumps({"flag": {"service": "svc", "op_type": "MatMul"},
                                                  "records": {"written": 3}}))
    (old / "trace.json").write_text("x" * 1000)
    Path(data, "captures", ".20260101T000001Z_svc_Conv2D.tmp").mkdir()
    outside = Path(tmp, "outside")
    outside.mkdir()
    (outside / "keep.txt").write_text("not the daemon's")
    Path(data, "captures", "20260101T000003Z_svc_Link").symlink_to(outside)  # never followed nor counted
    broken = Path(data, "captures", "20260101T000002Z_svc_Relu")
    broken.mkdir()
    (broken / "capture.json").write_text("{not json")
    odd = Path(data, "captures", "20260101T000004Z_svc_Odd")
    odd.mkdir()
    (odd / "capture.json").write_text(json.dumps({"flag": {"service": "s" * 500_000, "shift": "1.5",
                                                           "op_type": ["x"], "since_ts": float("nan")},
                                                  "records": {"written": True}, "truncated": "no"}))
    try:
        with InProcess(data_dir=data) as d:
            cap = wait_for(lambda: (lambda c: c if c["count"] else None)(_captures(d)), timeout=5)
            assert cap["count"] == 3 and cap["errors_total"] == 0
            o = next(i for i in cap["items"] if i["name"] == odd.name)  # foreign values: bounded, typed
            assert o["service"] == "s" * 256 and o["shift"] is None and o["op_type"] is None
            assert o["flag_ts"] is None and o["records"] is None and o["truncated"] is None and o["readable"]
            byname = {i["name"]: i for i in cap["items"]}
            assert byname[old.name]["records"] == 3 and byname[old.name]["bytes"] >= 1000
            assert byname[broken.name]["records"] is None and byname[broken.name]["readable"] is False
            assert byname[old.name]["readable"] is True
            assert not Path(data, "captures", ".20260101T000001Z_svc_Conv2D.tmp").exists()
        assert (outside / "keep.txt").read_text() == "not the daemon's"
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


# ---- a full disk, in a real aclprofd process -------------------------------------------------

def _feed(a, seconds: float, slow: float = 1.0) -> None:
    """About 2,000 MatMul and 2,000 Conv2D records per second; MatMul durations times ``slow``."""
    rng = np.random.default_rng(5)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        dur = rng.lognormal(math.log(100_000), 0.3, 400)
        dur[0::2] *= slow
        a.send_batch(make_records(400, types=(2, 1), names=(4, 3), durations=dur.astype(np.int64)))
        time.sleep(0.1)


@pytest.mark.slow
def test_a_full_disk_fails_the_capture_counted_and_the_daemon_goes_on():
    root = short_tmpdir("aclp-")
    with running(root, "--detector-window", "2s", "--detector-trailing", "4s", "--detector-min-count", "200",
                 "--detector-persistence", "2", "--capture-before", "3s", "--capture-after", "1s",
                 "--segment-size", "64KiB") as d:
        a = agent(d.socket, service="svc")
        _feed(a, 4.0)
        assert d.proc is not None
        soft, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE)
        # segments (64 KiB) and the log still fit; a capture's trace (~12,000 records) does not
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (256 << 10, hard))
        try:
            def failed():
                _feed(a, 0.3, slow=1.5)
                return d.status()["captures"]["errors_total"]
            wait_for(failed, timeout=30, what="the failed capture")
        finally:
            resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
        st = d.status()
        cap = st["captures"]
        assert cap["errors_total"] == 1 and cap["made_total"] == 0 and cap["count"] == 0
        assert "File too large" in cap["last_error"]
        assert os.listdir(cap["dir"]) == []  # the unfinished capture was removed
        assert any(x["event"] == "capture failed" for x in d.log_lines())
        before = st["records_total"]
        _feed(a, 0.3)
        wait_for(lambda: d.status()["records_total"] > before, timeout=5)
        a.close()
        assert d.stop() == 0


# ---- the stop path and the writer child ------------------------------------------------------

def test_a_stop_kills_the_capture_being_written_and_abandons_the_waiting_ones():
    d = InProcess(capture_before_s="1h", capture_after_s="0.1s", capture_min_interval_s="0s")
    try:
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        _send(a, 100_000, batch=2000)  # several seconds of formatting for the child
        c = Client(d.socket)
        wait_for(lambda: c.request(Kind.STATUS)["records_total"] == 100_000, timeout=20)
        c.close()
        caps = d.daemon.captures
        _flag(d, "MatMul")
        wait_for(lambda: caps.child._proc is not None, timeout=10, what="the writer child")
        child = caps.child._proc
        d.daemon.settings = dataclasses.replace(d.daemon.settings, capture_after_s=3600.0)
        _flag(d, "Conv2D")  # waits an hour for its window
        wait_for(lambda: len(caps.pending) == 1, timeout=5)
        root = os.path.join(d.settings.data_dir, "captures")
        wait_for(lambda: os.path.isdir(root) and any(n.endswith(".tmp") for n in os.listdir(root)), timeout=20,
                 what="the child writing its .tmp directory")
        assert child.poll() is None
        t0 = time.monotonic()
        d.stop()
        assert time.monotonic() - t0 < 5
        assert child.poll() is not None  # killed, not left running
        assert caps.abandoned == 2 and caps.made == 0 and caps.errors == 0
        assert os.listdir(root) == []  # no unfinished directory
        a.close()
    finally:
        d.__exit__(None, None, None)


def test_a_writer_that_takes_too_long_is_killed_and_counted():
    with InProcess(capture_before_s="1s", capture_after_s="0.1s", capture_min_interval_s="0s") as d:
        _quiet_detector(d)
        d.daemon.captures.child.timeout_s = 0.05  # less than the child's start-up
        a = agent(d.socket, service="svc")
        _send(a, 1000)
        _flag(d, "MatMul")
        cap = _wait_made(d, 1)
        assert cap["errors_total"] == 1 and cap["made_total"] == 0
        assert "took more than" in cap["last_error"]
        assert not os.path.isdir(cap["dir"]) or os.listdir(cap["dir"]) == []  # nothing unfinished left
        d.daemon.captures.child.timeout_s = 600.0
        _send(a, 1000)
        _flag(d, "Conv2D")
        cap = _wait_made(d, 2)
        assert cap["made_total"] == 1 and cap["newest"]["records"] > 0
        a.close()


def _view(d: InProcess, *op_types: str) -> None:
    """Publish a new detector view in which ``op_types`` of service svc are flagged."""
    from aclprofd.detector.engine import DetectorView

    t = time.time()
    flags = tuple({"service": "svc", "model": "1", "op_type": op, "quantile": "p99", "shift": 1.5, "lower": 1.3,
                   "upper": 1.7, "since_ts": t - 5} for op in op_types)  # raised earlier, still flagged
    d.daemon.detection.detector.published = DetectorView(ts=t, flags=flags)
    time.sleep(0.3)  # several loop turns: the recorder has seen it


def test_only_newly_raised_flags_are_captured_and_disabling_skips_them():
    with InProcess(capture_before_s="1s", capture_after_s="0.1s", capture_min_interval_s="0s") as d:
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        _send(a, 500)
        _view(d, "MatMul")
        _wait_made(d, 1)
        _view(d, "MatMul")  # the same flag in the next evaluation: not a new one
        _view(d, "MatMul", "Conv2D")  # Conv2D is new
        cap = _wait_made(d, 2)
        time.sleep(0.5)
        cap = _captures(d)
        assert cap["made_total"] == 2 and [i["op_type"] for i in cap["items"]] == ["Conv2D", "MatMul"]
        d.daemon.settings = dataclasses.replace(d.daemon.settings, capture_enabled=False)
        _view(d, "Relu")  # raised while disabled: never captured
        d.daemon.settings = dataclasses.replace(d.daemon.settings, capture_enabled=True)
        _view(d, "Relu")
        _view(d, "Relu", "Add")
        cap = _wait_made(d, 3)
        time.sleep(0.5)
        cap = _captures(d)
        assert cap["made_total"] == 3 and cap["newest"]["op_type"] == "Add" and cap["pending"] == 0
        a.close()


def _flags(d: InProcess, *keys: tuple[str, str]) -> float:
    """Publish a detector view in which each (service, op_type) was raised now; its time."""
    from aclprofd.detector.engine import DetectorView

    t = time.time()
    flags = tuple({"service": service, "model": "1", "op_type": op, "quantile": "p99", "shift": 1.5, "lower": 1.3,
                   "upper": 1.7, "since_ts": t} for service, op in keys)
    d.daemon.detection.detector.published = DetectorView(ts=t, flags=flags)
    return t


def test_flags_of_one_service_raised_together_share_one_whole_capture():
    """Issue 17: two flags on one service in the same second wrote two captures of the same
    records, each truncated by an estimate ~2.7x too high, and the second deleted the first."""
    with InProcess(capture_max_bytes="4MiB", capture_before_s="2s", capture_after_s="2s",
                   capture_min_interval_s="0s") as d:
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        _send(a, 6000, batch=1000)
        _flags(d, ("svc", "MatMul"), ("svc", "Conv2D"))  # one evaluation, two op types
        time.sleep(0.2)
        _flags(d, ("svc", "MatMul"), ("svc", "Conv2D"), ("svc", "Relu"))  # the next one: Relu raised
        _send(a, 2000, batch=1000)
        cap = _wait_made(d, 1)
        time.sleep(0.5)  # nothing else is written
        cap = _captures(d)
        assert cap["made_total"] == 1 and cap["count"] == 1 and cap["evicted_total"] == 0, cap
        item = cap["newest"]
        doc = json.loads((Path(item["path"]) / "capture.json").read_text())
        assert sorted(f["op_type"] for f in doc["flags"]) == ["Conv2D", "MatMul", "Relu"]
        assert item["name"].endswith("_svc_MatMul-and-2-more") or item["name"].endswith("_svc_Conv2D-and-2-more")
        # all of it: 8000 records, ~2.8 MB in the files, fit 4 MiB (the old estimate said ~6.5 MB)
        assert doc["truncated"] is False and doc["records"]["written"] == doc["records"]["found"] == 8000, doc
        assert cap["truncated_total"] == 0 and item["bytes"] <= 4 << 20
        a.close()


def test_a_capture_of_the_same_event_is_never_deleted_to_make_room():
    with InProcess(capture_max_bytes=str(7 << 19), capture_before_s="2s", capture_after_s="0.5s",
                   capture_min_interval_s="0s") as d:  # 3.5 MiB: one capture (~2.6 MB) and a part of another
        _quiet_detector(d)
        a = agent(d.socket, service="svc")
        b = agent(d.socket, service="other", pid=os.getpid() + 1)
        _send(a, 6000, batch=1000)
        _send(b, 6000, batch=1000)
        t = _flags(d, ("svc", "MatMul"), ("other", "MatMul"))  # two services, one evaluation
        _send(a, 1000, batch=1000)
        _send(b, 1000, batch=1000)
        cap = wait_for(lambda: (c := _captures(d))["made_total"] + c["errors_total"] + c["dropped_total"] >= 2
                       and c, timeout=20, what="two captures")
        assert cap["made_total"] == 2 and cap["evicted_total"] == 0 and cap["count"] == 2, cap
        assert cap["bytes"] <= 7 << 19
        services = sorted(i["service"] for i in cap["items"])
        assert services == ["other", "svc"]
        # the first one written is whole; the second got the room left (truncated, and says so)
        first, second = reversed(cap["items"])
        assert first["truncated"] is False and first["records"] == 7000, first
        assert second["truncated"] is True and 0 < second["records"] < 7000, second
        assert all(abs(i["flag_ts"] - t) < 1e-3 for i in cap["items"])
        a.close()
        b.close()
