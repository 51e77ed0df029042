"""A synthetic request mix on the mock for the request-bill tests (issue 25): two models,
request plans (which models a request runs, in order) and client threads that mark each
request with ``aclprof.request`` and run its plan; the ground truth a bill must match."""

from __future__ import annotations

import threading
import time
from typing import Any

import aclprof
from aclprof import mock

MODEL_A = [{"name": "conv1", "type": "Conv2D", "duration_ns": 300_000},
           {"name": "relu1", "type": "Relu", "duration_ns": 50_000}]
MODEL_B = [{"name": "mm", "type": "MatMul", "duration_ns": 400_000},
           {"name": "add", "type": "Add", "duration_ns": 30_000},
           {"name": "sm", "type": "Softmax", "duration_ns": 70_000}]
OPS_OF = {"A": MODEL_A, "B": MODEL_B}
#: what request j of thread i runs: PLANS[(i + j) % len(PLANS)] (the last one: no op at all)
PLANS = [["A"], ["B"], ["A", "B"], ["A", "A", "B"], []]
HOUR = 3600 * 10**9


def run_clients(models: dict[str, int], threads: int, per_thread: int, *, attr: str = "thread",
                plans: list[list[str]] = PLANS) -> dict[str, list[str]]:
    """``threads`` threads each run ``per_thread`` requests ``t{i}-r{j}`` (attribute
    ``attr`` = the thread's number), 1.5 ms apart on a thread (more than BillBook's
    ``late_ns``); returns each request's plan."""
    truth: dict[str, list[str]] = {}

    def client(i: int) -> None:
        for j in range(per_thread):
            plan = plans[(i + j) % len(plans)]
            rid = f"t{i}-r{j}"
            truth[rid] = plan
            with aclprof.request(rid, **{attr: str(i)}):
                for name in plan:
                    mock.execute(models[name])
            time.sleep(0.0015)

    running = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return truth


def expected(plan: list[str], ops_of: dict[str, list[dict[str, Any]]] = OPS_OF) -> tuple[dict[str, int], int]:
    """A plan's op count by op type and its total device ns (the mock's durations)."""
    types: dict[str, int] = {}
    ns = 0
    for m in plan:
        for op in ops_of[m]:
            types[op["type"]] = types.get(op["type"], 0) + 1
            ns += op["duration_ns"]
    return types, ns
