"""Randomised workloads for the property tests of the exports read by independent readers
(issue 23): export records (daemon/PROTOCOL.md "record" objects) as the daemon sends them for
a few inference processes, each with its models, op types, op names and durations.

Durations are lognormal, bimodal, or a mix of zeros, 1 ns, exact powers of two (the histogram edges)
and uniform values, up to 2**40 ns (the top of our histogram's range); names include csv quoting,
spaces, non-ASCII and control characters. Step keypoints are mixed in: every export must skip them
as the csv does.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = ["durations", "names", "process_records", "workload", "examples"]


def examples(n: int) -> int:
    """A property test's example count: ``n`` in CI, times ``$ACLPROF_READER_CASES_SCALE`` for a
    longer run (``ACLPROF_READER_CASES_SCALE=10 pytest tests/test_otlp.py ...``)."""
    return n * max(1, int(os.environ.get("ACLPROF_READER_CASES_SCALE", "1")))

names = st.one_of(st.sampled_from(["Conv2D", "MatMul", 'Add,"odd"', "Relu", "trans data", "算子", "a\tb", "cr\rlf\n"]),
                  st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8))
_EDGES = np.array([0, 1, 2, 3, 255, 256, 257] + [2**k for k in range(41)], np.int64)


def durations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` durations (ns) in [0, 2**40]: a lognormal op (median 1 µs .. 1 s), a bimodal one,
    or a mix with zeros, 1 ns and exact powers of two (histogram edges) and uniform values."""
    kind = rng.integers(3)
    if kind == 0:
        d = rng.lognormal(np.log(10 ** rng.uniform(3, 9)), rng.uniform(0.05, 2.0), n)
    elif kind == 1:
        fast, slow = 10 ** rng.uniform(3, 6), 10 ** rng.uniform(6, 9)
        d = np.where(rng.random(n) < rng.uniform(0.5, 0.99), rng.lognormal(np.log(fast), 0.2, n),
                     rng.lognormal(np.log(slow), 0.2, n))
    else:
        d = np.where(rng.random(n) < 0.5, rng.choice(_EDGES, n), rng.integers(0, 2**40, n, endpoint=True))
    return np.clip(np.rint(d), 0, 2**40).astype(np.int64)


@st.composite
def process_records(draw: Any, pid: int, host: str = "h") -> list[dict[str, Any]]:
    """One process's records: 1-3 models, 1-4 op types, 1-6 op names, 1-200 ops, 0-3 keypoints.
    The structure is drawn by hypothesis, the per-op values from a seeded generator (few
    draws: many processes fit in one example)."""
    service = draw(st.sampled_from(["resnet", "bert svc", "", 'x,"y"', "服务"]))
    types = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    ops = draw(st.lists(st.tuples(names, st.sampled_from(types)), min_size=1, max_size=6))
    devices = draw(st.lists(st.integers(0, 7), min_size=1, max_size=2, unique=True))
    models = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
    n = draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = durations(rng, n)
    which, dev, mod = rng.integers(len(ops), size=n), rng.choice(devices, n), rng.choice(models, n)
    starts = np.int64(draw(st.integers(0, 2**50))) + np.cumsum(np.r_[0, d[:-1] + rng.integers(0, 10_000, n - 1)])
    ts = 1764400000.0 + pid % 1000
    out: list[dict[str, Any]] = []
    for i in range(n):
        name, op_type = ops[which[i]]
        out.append({"ts": ts + i * 1e-3, "host": host, "pid": pid, "service": service, "device": int(dev[i]),
                    "model": int(mod[i]), "op_type": op_type, "op_name": name, "start": int(starts[i]),
                    "end": int(starts[i] + d[i]), "duration_ns": int(d[i]), "flag": 0, "thread_id": 7})
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(out)))
        out.insert(at, {"ts": ts, "host": host, "pid": pid, "service": service, "device": devices[0], "model": 0,
                        "kind": "keypoint", "op_type": "step", "op_name": "step", "start": 0, "end": 5,
                        "duration_ns": 5, "flag": 1 << 31, "thread_id": 7})
    return out


@st.composite
def workload(draw: Any, max_processes: int = 3) -> list[dict[str, Any]]:
    """Records of 1..max_processes processes (distinct pids), interleaved as one export."""
    pids = draw(st.lists(st.integers(1, 4_000_000), min_size=1, max_size=max_processes, unique=True))
    per = [draw(process_records(pid)) for pid in pids]
    order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(
        np.repeat(np.arange(len(per)), [len(p) for p in per]))
    merged = [per[i].pop(0) for i in order]  # interleaved, each process's records in order
    return merged
