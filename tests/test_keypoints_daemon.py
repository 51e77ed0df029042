"""Step keypoint records (audit row 13) and the device clock (row 11) past the binding:
the agent marks keypoints with ``wire.FLAG_KEYPOINT``, the daemon keeps them out of the op
aggregates, counts steps in STATUS, streams them with ``"kind": "keypoint"``, and
``aclprof tail`` prints them as step lines; the daemon's lag is calibrated per device."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from helpers.daemons import Client, Daemon, InProcess, agent
from helpers.procs import Worker, env, wait_for
from helpers.records import make_records

from aclprof.cli.tail import tail_line
from aclprof.protocol.wire import FLAG_KEYPOINT, Kind

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1", 5: "na", 6: "keypoint_op"}


def _with_keypoints(n_ops: int, n_steps: int, **kw) -> np.ndarray:
    ops = make_records(n_ops, **kw)
    steps = make_records(n_steps, types=(5,), names=(6,), durations=10**9, **kw)
    steps["flag"] = FLAG_KEYPOINT
    return np.concatenate([ops, steps])


def test_aggregates_leave_keypoints_out():
    agg = Aggregator(clock=lambda: 1_000_000.0)
    src = KeySource("h", 1, "svc")
    agg.ingest(src, _with_keypoints(10, 3), NAMES)
    agg.ingest(src, _with_keypoints(0, 2), NAMES)  # a batch of keypoints only
    for window in ("10s", "all"):
        snap = agg.snapshot(window, "type")
        assert {r["key"] for r in snap["rows"]} == {"Conv2D", "MatMul"}
        assert sum(r["count"] for r in snap["rows"]) == 10
        assert snap["total_ns"] == 10 * 1000
    assert agg.nkeys - 1 == 2  # no key was made for keypoint_op/na


def test_daemon_counts_steps_and_streams_them_marked():
    with InProcess() as d:
        a = agent(d.socket, service="svc", names=NAMES)
        a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {}})
        s = Client(d.socket)
        s.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
        a.send_batch(_with_keypoints(4, 1))
        got: list[dict] = []
        while len(got) < 5:
            records, _, kind = s.stream_frames()
            assert kind == Kind.STREAM_RECORDS
            got += records
        assert [r["kind"] for r in got] == ["op"] * 4 + ["keypoint"]
        assert got[-1]["flag"] == 0 and got[-1]["op_name"] == "keypoint_op"  # the bit is not shown
        assert "-- step" in tail_line(got[-1], False) and "-- step" not in tail_line(got[0], False)
        c = Client(d.socket)
        st = wait_for(lambda: (x := c.request(Kind.STATUS))["records_total"] == 5 and x)
        assert st["steps_total"] == 1 and st["agents"][0]["steps"] == 1
        rows = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type"})["rows"]
        assert sum(r["count"] for r in rows) == 4


def test_daemon_lag_is_calibrated_per_device():
    """Device 1's clock is an hour ahead of device 0's: both lags stay small, where the
    old plain difference gave None (or an hour) for device 1."""
    with InProcess() as d:
        a = agent(d.socket, service="svc", names=NAMES)
        c = Client(d.socket)
        for _ in range(3):
            now = time.monotonic_ns()
            a.send_batch(np.concatenate([make_records(5, device=0, start=now),
                                         make_records(5, device=1, start=now + 3600 * 10**9)]))
            time.sleep(0.05)
        st = wait_for(lambda: (x := c.request(Kind.STATUS))["records_total"] == 30 and x)
        lag = st["agents"][0]["lag_ns"]
        assert lag is not None and 0 <= lag < 2 * 10**9


@pytest.mark.timeout(90)
def test_tail_prints_steps_from_a_real_agent():
    daemon = Daemon()
    daemon.start()
    w = tail = None
    try:
        w = Worker(daemon.socket, "--service", "steps")
        tail = subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "--socket", daemon.socket,
                                 "--pid", str(w.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env())
        lines: list[str] = []
        threading.Thread(target=lambda: [lines.append(x) for x in tail.stdout], daemon=True).start()
        deadline = time.monotonic() + 30
        steps = 0
        while not any("-- step" in x for x in lines):
            assert time.monotonic() < deadline, lines[-5:]
            w.cmd("step 1")
            steps += 1
            time.sleep(0.05)
        step_lines = [x for x in lines if "-- step" in x]
        assert f"pid {w.pid}" in step_lines[0] and f"model {w.model}" in step_lines[0]
        assert "keypoint_op" not in step_lines[0]
        st = wait_for(lambda: (x := daemon.status())["steps_total"] >= steps and x, what="steps counted")
        assert st["steps_total"] == steps and st["agents"][0]["steps"] == steps
        w.stop()
    finally:
        if w is not None:
            w.kill()
        if tail is not None:
            tail.send_signal(signal.SIGKILL)
            tail.wait()
            for f in (tail.stdout, tail.stderr):
                f.close()
        daemon.cleanup()


def test_export_summary_skips_steps_and_trace_names_them():
    import io
    import json

    from aclprof.exportfmt.chrome import write_chrome
    from aclprof.exportfmt.opcsv import write_csv

    base = {"pid": 1, "device": 0, "model": 1, "start": 1000, "flag": 0, "thread_id": 0}
    records = [dict(base, op_type="Conv2D", op_name="conv1", duration_ns=500, end=1500, kind="op"),
               dict(base, op_type="na", op_name="keypoint_op", duration_ns=10**9, end=10**9 + 1000,
                    kind="keypoint")]
    out = io.StringIO()
    assert write_csv([records], out) == 2
    rows = out.getvalue().splitlines()[1:]
    assert len(rows) == 1 and ",Conv2D," in rows[0] and rows[0].endswith(",100.00")
    out = io.StringIO()
    write_chrome([records], out)
    events = [e for e in json.loads(out.getvalue())["traceEvents"] if e["ph"] == "X"]
    # the step contains the op (same start, longer): it comes first, the op nests under it
    assert [(e["name"], e["cat"]) for e in events] == [("step", "step"), ("conv1", "Conv2D")]
