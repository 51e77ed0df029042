"""Request bills in agent mode (issue 25): op records never reach Python there (C reader ->
C queue -> C framing), so the queue's readers feed a C tap (``_fast_billtap.c``) that the
sender takes per wake-up and attributes vectorised. End to end: a service in agent mode
marks requests against the mock's ground truth, and the daemon's ``aclprof requests`` shows
bills that reconcile with it. The tap alone: off until a request is marked (a fresh
process), bounded and counted, keypoints left out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers.daemons import InProcess
from helpers.procs import wait_for
from helpers.requestmix import HOUR, MODEL_A, MODEL_B, OPS_OF, expected, run_clients

import aclprof
import aclprof.agent as agent
from aclprof import mock
from aclprof.api import requests as rq
from aclprof.api.records import OP_DTYPE
from aclprof.binding.agentpath import AgentQueue
from aclprof.binding.billtap import BillTap, note_requests_marked

pytestmark = pytest.mark.timeout(90)



def _rows(starts, keypoint_at=()) -> np.ndarray:
    d = np.zeros(len(starts), OP_DTYPE)
    d["start"] = starts
    d["end"] = np.asarray(starts) + 10
    d["thread_id"] = 77
    d["model_id"] = 5
    d["op_type"], d["op_name"] = 1, 2
    for i in keypoint_at:
        d["keypoint"][i] = True
    return d


def _book_stats() -> object:
    """The agent's bill book counters, unattributed ops by reason (no_window, late, ambiguous,
    no_clock): what a failure of the reconcile needs to say (it failed once in CI, 2026-12-03,
    with 66 of 204 ops unattributed, and never in ~20 runs alone or under load and coverage)."""
    import aclprof.agent as a

    running = a._agent
    feeder = getattr(running, "_bill_feeder", None)
    book = getattr(feeder, "book", None)
    return getattr(book, "stats", None)


@pytest.fixture
def daemon():
    rq.drain()
    with InProcess() as d:
        yield d
    agent.stop(2)
    rq.drain()


@pytest.mark.parametrize(("offset", "ppm"), [(0, 0), (HOUR, 100)], ids=["same-clock", "ahead-1h-fast"])
def test_agent_mode_bills_reach_aclprof_requests_and_reconcile(daemon, capsys, offset, ppm):
    from aclprof.cli.main import main

    mock.set_realtime(True)
    mock.set_stamp_thread(True)
    mock.set_device_clock_offset(offset)
    mock.set_device_clock_drift(ppm)
    models = {"A": mock.load_model(MODEL_A), "B": mock.load_model(MODEL_B)}
    agent.start(daemon.socket, service="svc-wired")
    for m in models.values():
        agent.watch(m)
    wait_for(lambda: agent.stats().connected, 10, what="the agent connected")
    truth = run_clients(models, 4, 15)
    emitted = sum(len(OPS_OF[m]) for plan in truth.values() for m in plan)
    # bills close grace_ns (2 s) after their request: wait for all of them at the daemon
    wait_for(lambda: agent.stats().bills_queued == len(truth), 20, what="every request billed")

    def kept() -> list[dict]:
        assert main(["requests", "--socket", daemon.socket, "--service", "svc-wired", "--top", "200",
                     "--json"]) == 0
        return [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]

    wait_for(lambda: len(kept()) == len(truth), 10, what="the bills at the daemon")
    bills = {b["id"]: b for b in kept()}
    st = agent.stats()
    assert st.bill_ops_tapped == emitted and st.bill_ops_dropped == 0
    assert st.bill_ops_attributed == emitted and st.bill_ops_unattributed == 0, (st, _book_stats())
    assert set(bills) == set(truth)
    worst = 0.0
    for rid, plan in truth.items():
        bill = bills[rid]
        want_types, want_ns = expected(plan)
        assert {t: n for t, _, n in bill["types"]} == want_types, rid
        assert bill["ops"] == sum(want_types.values()) and bill["complete"]
        assert sorted(bill["models"]) == sorted({models[m] for m in plan})
        assert bill["attrs"] == {"thread": rid[1]}
        if want_ns:
            err = abs(bill["device_ns"] - want_ns) / want_ns
            worst = max(worst, err)
            assert err <= 0.02, (rid, bill["device_ns"], want_ns)
            assert bill["slowest"][0] in ("Conv2D", "MatMul")
        else:
            assert bill["ops"] == 0 and bill["slowest"] is None
    print(f"agent mode: {len(truth)} requests, {emitted} ops, worst device-time error {worst:.6%}")


def test_the_tap_keeps_nothing_until_a_request_is_marked():
    # a fresh process: the "marked" switch is per process and never turns off
    code = textwrap.dedent("""
        import os
        import numpy as np
        from aclprof.api.records import OP_DTYPE
        from aclprof.binding.agentpath import AgentQueue
        from aclprof.binding.billtap import BillTap, requests_marked
        r, w = os.pipe()
        q, tap = AgentQueue(100, w), BillTap()
        q.set_tap(tap)
        slot = q.add_slot()
        rows = np.zeros(4, OP_DTYPE)
        rows["end"] = 5
        q.push(slot, rows)
        before = (requests_marked(), tap.counts().ops_in, len(tap.take()[1]))
        import aclprof
        with aclprof.request("first"):
            q.push(slot, rows)
        after = (requests_marked(), tap.counts().ops_in, len(tap.take()[1]))
        print(before, after)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split("\n")[0] == "(False, 0, 0) (True, 4, 1)", out.stderr


def test_the_tap_is_bounded_counted_and_leaves_keypoints_out():
    import os

    note_requests_marked()
    r, w = os.pipe()
    try:
        q, tap = AgentQueue(100, w), BillTap(max_ops=3, max_notes=1)
        q.set_tap(tap)
        slot = q.add_slot()
        q.push(slot, _rows([10, 20, 30], keypoint_at=[1]))  # 2 ops, 1 keypoint
        q.push(slot, _rows([40, 50]))  # the tap holds 3: 50 is dropped; its note too
        c = tap.counts()
        assert (c.ops_in, c.dropped, c.notes_dropped, c.held) == (4, 1, 1, 3)
        ops, notes = tap.take()
        assert ops["start"].tolist() == [10, 30, 40] and set(ops["slot"].tolist()) == {slot}
        assert ops["thread_id"].tolist() == [77] * 3 and ops["end"].tolist() == [20, 40, 50]
        assert notes["newest_end"].tolist() == [40] and notes["ops"].tolist() == [2]
        assert tap.counts().held == 0 and tap.counts().taken == 3
        assert q.totals()[0] == 5  # the queue itself keeps every row (keypoints too)
        with pytest.raises(ValueError, match="max_ops"):
            BillTap(max_ops=0)
    finally:
        os.close(r)
        os.close(w)


def test_the_agent_bills_the_ended_requests_at_stop_and_counts_the_open_ones(daemon):
    import contextvars

    from helpers.daemons import status

    mock.set_realtime(True)
    mock.set_stamp_thread(True)
    model = mock.load_model(MODEL_A)
    agent.start(daemon.socket, service="svc-stop")
    agent.watch(model)
    wait_for(lambda: agent.stats().connected, 10, what="the agent connected")
    for i in range(3):
        with aclprof.request(f"done-{i}"):
            mock.execute(model)
        time.sleep(0.0015)  # apart by more than late_ns: back to back, ops would be ambiguous
    left_open = aclprof.request("never-ended")
    contextvars.copy_context().run(left_open.__enter__)
    mock.execute(model)
    st = agent.stop(5)  # well within the bills' 2 s grace: billed at the stop, not dropped
    assert st.bills_queued == 3 and st.bills_unfinished_at_stop == 1, st
    # every op settled at the stop, none left held (which ones are billed is the clock's
    # accuracy with only a few reads on a loaded host: the ground-truth tests check that)
    assert st.bill_ops_attributed + st.bill_ops_unattributed == st.bill_ops_tapped == 8, st
    got = status(daemon.socket)["request_bills"]
    assert got["total"] == 3 and {b["id"] for b in got["slowest"]} == {"done-0", "done-1", "done-2"}


def test_the_demo_service_bills_slow_requests_with_their_rerank_ops(daemon, run_python):
    """``aclprof demo --requests``'s service: every 10th request also runs the re-ranking
    model; the daemon's bills say so, and the summary sets the two side by side."""
    from aclprof.cli.client import Client as ControlClient
    from aclprof.cli.demo import bills_side_by_side
    from aclprof.protocol import wire

    proc = run_python("", args=["-m", "aclprof.demo.service", "--socket", daemon.socket, "--model", "resnet",
                                "--service", "svc-demo", "--rate", "200", "--duration", "1.2", "--requests"])
    assert proc.returncode == 0, proc.stderr
    with ControlClient(daemon.socket, timeout=5.0) as c:
        def bills(kind: str) -> list[dict]:
            return c.request(wire.Kind.REQUESTS, {"attrs": {"kind": kind}, "top": 1000},
                             wire.Kind.REQUESTS_REPLY).get("bills") or []

        slow, fast = bills("slow"), bills("fast")
    assert slow and len(fast) >= 5 * len(slow)

    def with_topk(bs: list[dict]) -> int:
        return sum(1 for b in bs if "TopKV2" in {t for t, _, _ in b["types"]})

    # the re-rank's TopKV2 is billed to the slow requests (a loaded host may leave an op of a
    # few unattributed, counted, never billed to a neighbour: the gap is ~5 ms)
    assert with_topk(slow) >= 0.8 * len(slow) and with_topk(fast) == 0
    slowest = next(b for b in slow if "TopKV2" in {t for t, _, _ in b["types"]})
    text = bills_side_by_side(slowest, fast[len(fast) // 2])
    lines = text.splitlines()
    assert "SLOW" in lines[2] and "FAST" in lines[2]
    (topk,) = [ln for ln in lines if ln.lstrip().startswith("TopKV2")]
    assert topk.rstrip().endswith("-") and " x3 " in topk  # three re-ranks in the slow one, none in the fast


def test_a_failure_in_attribution_turns_bills_off_and_records_still_stream(daemon, monkeypatch):
    from aclprof.agent.bills import BillBook

    def broken(self, *a, **k):
        raise RuntimeError("a bug in attribution")

    monkeypatch.setattr(BillBook, "feed_columns", broken)
    mock.set_realtime(True)
    model = mock.load_model(MODEL_A)
    agent.start(daemon.socket, service="svc-broken")
    agent.watch(model)
    with aclprof.request("r"):
        mock.execute(model)
    wait_for(lambda: agent.stats().bills_failed, 10, what="bills turned off")
    mock.execute(model)
    wait_for(lambda: agent.stats().records_sent == 4, 10, what="the records still sent")
    assert agent.stats().connected
