"""Op duration streams with exactly known statistics, fed to an aclprofd and read back
through a real Prometheus (tests/test_prometheus_exact.py, tests/bench/bench_fleet_quantiles.py).

The exact figures are computed here from the durations themselves, independently of the
daemon: the nearest-rank quantile, the count, the sum in ns, and each ``le`` bucket's
cumulative count with integer arithmetic (``d <= 2**(j/8)`` as ``d**8 <= 2**j``).

Each workload is sent **twice**, the second copy after Prometheus has scraped the first:
``rate()`` over the window then sees the increase from the first copy to the second in every
bucket, with one extrapolation factor for all of them (they are sampled together, and no
bucket's zero-point clamp applies since each bucket's first sample equals its increase), so
``histogram_quantile`` of the rates is exactly the quantile the buckets give for one copy,
which is what the exact quantile of one copy is compared with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aclprof.cli.fleet.data import METRIC, queries, selector

from .daemons import agent
from .prometheus import Prometheus

__all__ = ["StreamSpec", "durations", "exact_quantile", "exact_le_counts", "feed_twice", "fleet_p99",
           "COARSE_METRIC", "FIXED_STREAMS", "relative_error"]

#: the coarse histogram (28 power-of-two buckets) that `aclprof fleet` read before issue 23
COARSE_METRIC = "aclprofd_op_duration_seconds"
_BATCH = 50_000  # records per BATCH frame (well under wire.MAX_PAYLOAD)


@dataclass(frozen=True)
class StreamSpec:
    """One op type's durations: ``lognormal`` (median, sigma) or ``bimodal`` (a share ``mix``
    of the records from a second lognormal ``ratio`` times slower, same sigma)."""

    shape: str
    median_ns: float
    sigma: float
    n: int
    mix: float = 0.0
    ratio: float = 1.0

    def label(self) -> str:
        if self.shape == "lognormal":
            return f"lognormal sigma={self.sigma:g}"
        return f"bimodal {100 * (1 - self.mix):g}/{100 * self.mix:g} x{self.ratio:g} sigma={self.sigma:g}"


#: the streams of the before/after table (daemon/README.md "Fine buckets")
FIXED_STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec("lognormal", 34_000, 0.05, 20_000),
    StreamSpec("lognormal", 34_000, 0.1, 20_000),
    StreamSpec("lognormal", 34_000, 0.3, 20_000),
    StreamSpec("lognormal", 34_000, 0.6, 20_000),
    StreamSpec("lognormal", 34_000, 1.0, 20_000),
    StreamSpec("bimodal", 20_000, 0.1, 20_000, mix=0.10, ratio=10),
    StreamSpec("bimodal", 20_000, 0.2, 20_000, mix=0.015, ratio=4),
    StreamSpec("bimodal", 300_000, 0.1, 20_000, mix=0.05, ratio=3),
)


def durations(spec: StreamSpec, seed: int) -> np.ndarray:
    """``spec.n`` integer durations (ns, at least 1)."""
    rng = np.random.default_rng(seed)
    d = rng.lognormal(math.log(spec.median_ns), spec.sigma, spec.n)
    if spec.shape == "bimodal":
        slow = rng.random(spec.n) < spec.mix
        d[slow] *= spec.ratio
    elif spec.shape != "lognormal":
        raise ValueError(f"stream shape {spec.shape!r}: lognormal or bimodal")
    return np.maximum(np.rint(d), 1).astype(np.int64)


def exact_quantile(d: np.ndarray, q: float) -> int:
    """The nearest-rank q-quantile: the ceil(q * n)-th smallest duration."""
    s = np.sort(d)
    return int(s[max(math.ceil(q * len(s)), 1) - 1])


def _floor_root8(j: int) -> int:
    """The largest integer t with t**8 <= 2**j (exact, no float)."""
    t = int(2 ** (j / 8))
    while t**8 > 2**j:
        t -= 1
    while (t + 1) ** 8 <= 2**j:
        t += 1
    return t


def exact_le_counts(d: np.ndarray, eighths: Sequence[int]) -> list[int]:
    """Cumulative count of durations <= 2**(j/8) ns for each j."""
    s = np.sort(d)
    return [int(np.searchsorted(s, _floor_root8(j), side="right")) for j in eighths]


def relative_error(got: float, exact: float) -> float:
    return got / exact - 1.0


def _records(op_type: int, d: np.ndarray) -> np.ndarray:
    from .records import make_records
    return make_records(len(d), types=(op_type,), names=(op_type + 1000,), durations=d)


def _counts(prom: Prometheus, service: str) -> dict[str, float]:
    sel = selector(service)
    return {r["metric"]["op_type"]: float(r["value"][1])
            for r in prom.query(f"sum by (op_type) ({METRIC}_count{sel})")}


def _wait_counts(prom: Prometheus, service: str, want: Mapping[str, int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = _counts(prom, service)
        if got == {k: float(v) for k, v in want.items()}:
            return
        if time.monotonic() > deadline:
            health = [(t.get("health"), t.get("lastError")) for t in prom.api("targets")["activeTargets"]]
            raise AssertionError(f"Prometheus has {got} for service {service!r}, not {dict(want)} "
                                 f"after {timeout}s; targets {health}: {prom.log_tail()}")
        time.sleep(0.1)


def feed_twice(socket_path: str, prom: Prometheus, service: str, streams: Mapping[str, np.ndarray]) -> None:
    """Send each op type's durations from one agent of ``service``, wait until Prometheus
    has scraped them all, send them again and wait again (see the module docstring)."""
    types = {name: i + 1 for i, name in enumerate(sorted(streams))}
    names = {i: name for name, i in types.items()} | {i + 1000: f"{name}_op" for name, i in types.items()}
    # its own host name: keys are per (host, pid), and the tests' agents share one pid
    a = agent(socket_path, service=service, names=names, host=f"promexact-{service}")
    try:
        batch = np.concatenate([_records(types[name], d) for name, d in streams.items()])
        for copy in (1, 2):
            for i in range(0, len(batch), _BATCH):
                a.send_batch(batch[i:i + _BATCH])
            _wait_counts(prom, service, {name: copy * len(d) for name, d in streams.items()})
    finally:
        a.close()


def fleet_p99(prom: Prometheus, service: str, metric: str = METRIC, window: str = "1m") -> dict[str, float]:
    """The fleet p99 (seconds) per op type, by the query `aclprof fleet` sends, over
    ``metric``'s buckets (COARSE_METRIC: the query it sent before issue 23)."""
    expr = queries(window, sel=selector(service))["fleet_p99"].replace(METRIC, metric)
    return {r["metric"]["op_type"]: float(r["value"][1]) for r in prom.query(expr)}
