"""The flight recorder around op failures (issue 24): a capture of the failing service with
the ops before the failure, the failure itself as an instant event in trace.json, its
capture.json naming the failure; one per (service, op) per capture_min_interval."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from helpers.daemons import Client, InProcess, status
from helpers.daemons import agent as raw_agent
from helpers.procs import wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind

FAILURE = {"device": 0, "stream": 1, "task": 9, "thread": 3, "code": 507015, "op_name": "fc1",
           "inputs": [[1, 2, [16, 64]]], "outputs": [[1, 2, [16, 8]]]}


def _captures(d: InProcess) -> dict:
    c = Client(d.socket)
    try:
        return c.request(Kind.STATUS)["captures"]
    finally:
        c.close()


def test_a_failure_makes_one_capture_with_the_ops_before_it_and_the_failure_in_its_trace():
    with InProcess(capture_before_s="2s", capture_after_s="0.3s", capture_min_interval_s="1h") as d:
        d.daemon.detection.tick = lambda mono: None  # type: ignore[method-assign]  # no regression flags
        a = raw_agent(d.socket, service="svc")
        other = raw_agent(d.socket, service="other", pid=os.getpid() + 1)
        for _ in range(3):
            a.send_batch(make_records(100))  # conv1 (Conv2D) and fc1 (MatMul), model 1
            other.send_batch(make_records(100))
            time.sleep(0.05)
        wait_for(lambda: status(d.socket)["records_total"] == 600, 10, what="the records")
        a.send_json(Kind.OP_FAILURE, FAILURE)
        # a storm of the same op's failures: counted, no second capture
        for i in range(20):
            a.send_json(Kind.OP_FAILURE, {**FAILURE, "task": 100 + i})
        cap = wait_for(lambda: (lambda c: c if c["made_total"] + c["errors_total"] >= 1 else None)(_captures(d)),
                       timeout=15, what="the capture")
        assert cap["made_total"] == 1 and cap["errors_total"] == 0
        assert cap["failures_joined_total"] + cap["failures_rate_limited_total"] == 20
        item = cap["newest"]
        assert item["trigger"] == "failure" and item["service"] == "svc" and item["op_type"] == "MatMul"
        assert item["failure"] == {"op_name": "fc1", "op_type": "MatMul", "device": 0, "code": 507015,
                                   "code_name": "ACL_ERROR_RT_AICORE_EXCEPTION"}
        doc = json.loads((Path(item["path"]) / "capture.json").read_text())
        assert doc["trigger"] == "failure" and doc["flags"] == []
        assert (doc["failure"]["op_name"], doc["failure"]["task"], doc["failure"]["model"]) == ("fc1", 9, "1")
        assert doc["records"]["found"] == 300  # the ops before it, of its service only
        trace = json.loads((Path(item["path"]) / "trace.json").read_text())["traceEvents"]
        marks = [e for e in trace if e.get("cat") == "op_failure"]
        assert marks[0]["name"] == "FAILED fc1" and marks[0]["ph"] == "i"
        assert marks[0]["args"]["code"] == 507015 and marks[0]["args"]["inputs"] == [
            {"dtype": 1, "format": 2, "shape": [16, 64]}]
        ops = [e for e in trace if e.get("ph") == "X"]
        # placed at the end of the last op its process sent before it, on that op's thread
        last = max(ops, key=lambda e: e["ts"] + e["dur"])
        assert marks[0]["ts"] == last["ts"] + last["dur"] and marks[0]["tid"] == last["tid"]
        assert marks[0]["args"]["placed"].startswith("after the last op of its process and device")
        # another op of the same service later: a capture of its own
        a.send_json(Kind.OP_FAILURE, {**FAILURE, "op_name": "conv1"})
        cap = wait_for(lambda: (lambda c: c if c["made_total"] >= 2 else None)(_captures(d)), timeout=15,
                       what="the second capture")
        assert cap["newest"]["failure"]["op_name"] == "conv1" and cap["newest"]["op_type"] == "Conv2D"
        from aclprof.cli.capturefmt import format_captures

        text = format_captures(cap)
        assert "svc Conv2D FAILED conv1 dev 0 507015 ACL_ERROR_RT_AICORE_EXCEPTION" in text, text
        a.close()
        other.close()
