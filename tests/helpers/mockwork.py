"""Randomised workloads run on the mock, as export records: what ``aclprof export`` would
give for them (daemon/PROTOCOL.md "record" objects), for the trace readers' property tests
(tests/test_trace_readers.py) and benchmark (tests/bench/bench_trace_load.py).

A :class:`Workload` is models (ops, device, iterations) and steps around some executions;
:func:`run` executes it on the mock in this process (subscriptions read the records the
mock emits, step keypoints included) and returns the records stamped with a process id,
service and host of the caller's choosing: many workloads then share one trace as many
processes, so one trace-processor load checks them all.

The expectations (:func:`totals`) are plain sums over the records: no aclprof export code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aclprof
from aclprof import mock

__all__ = ["ModelSpec", "Workload", "run", "totals", "us_to_ns"]


@dataclass(frozen=True)
class ModelSpec:
    ops: tuple[tuple[str, str, int, int], ...]  # (name, type, duration_ns, jitter_ns)
    device: int
    iterations: int
    steps: int  # executions wrapped in a step (keypoints carry this model's id), <= iterations
    seed: int = 1


@dataclass(frozen=True)
class Workload:
    models: tuple[ModelSpec, ...]


def run(w: Workload, pid: int, service: str, host: str = "mockhost") -> list[dict[str, Any]]:
    """Execute ``w`` on the mock; its records as export records of process ``pid``."""
    out: list[dict[str, Any]] = []
    for m in w.models:
        ops = [{"name": n, "type": t, "duration_ns": d, "jitter": j} for n, t, d, j in m.ops]
        model = mock.load_model(ops, device=m.device, seed=m.seed)
        try:
            mock.set_step_keypoints(m.steps > 0, model)
            with aclprof.subscribe(model, device=m.device) as sub:
                for i in range(m.iterations):
                    if i < m.steps:
                        step = aclprof.StepInfo()
                        step.start()
                        mock.execute(model, 1)
                        # the mock's model clock runs ahead of the host's: let the step end
                        # after the simulated ops (sum of durations + jitter, < 1 ms here)
                        time.sleep(0.0015)
                        step.end()
                        step.close()
                    else:
                        mock.execute(model, 1)
            for r in sub:
                out.append({"ts": 1.0, "host": host, "pid": pid, "service": service, "device": r.device_id,
                            "model": r.model_id, "op_type": r.op_type, "op_name": r.op_name, "start": r.start,
                            "end": r.end, "duration_ns": r.duration, "flag": r.flag, "thread_id": r.thread_id,
                            "kind": r.kind})
        finally:
            mock.set_step_keypoints(False, model)
            mock.unload(model)
    return out


def totals(records: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, int]]:
    """(pid, op type) -> (count, total ns) of the op records (steps left out)."""
    t: dict[tuple[int, str], tuple[int, int]] = {}
    for r in records:
        if r["kind"] == "op":
            c, s = t.get((r["pid"], r["op_type"]), (0, 0))
            t[(r["pid"], r["op_type"])] = (c + 1, s + r["duration_ns"])
    return t


def us_to_ns(text: str) -> int:
    """An exact "x.yyy" microseconds string (the csv's) as integer nanoseconds."""
    whole, _, frac = text.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])
