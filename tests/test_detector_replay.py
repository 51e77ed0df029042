"""The detector's targets (issue 11) guarded in CI, reduced from tests/bench/bench_detector.py
(same streams, same functions, default detector settings): a 10 % p99 shift at 10k calls/s
is flagged within 60 s of stream time, and 2 h of a stationary stream raise no flag
(the benchmark runs 24 h per host)."""

from __future__ import annotations

import importlib.util
import os

import pytest

_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench", "bench_detector.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_detector", _BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["scale", "tail"])
def test_ten_percent_p99_shift_is_flagged_within_a_minute(bench, kind):
    r = bench.run_shift(seed=1, kind=kind, limit_s=120)
    assert r["flags_before_shift"] == 0
    assert r["delay_s"] is not None and r["delay_s"] <= 60, r
    assert r["false_flags"] == 0


@pytest.mark.slow
def test_a_stationary_stream_raises_no_flag(bench):
    r = bench.run_stationary(seed=1000, hours=2.0)
    assert r["flags"] == 0, r["raised"]


def test_the_detector_would_flag_with_no_effect_floor(bench):
    """The guard above can fail: with z and the effect floor removed (and no persistence) the
    same stationary stream is flagged, so "no flag" is the thresholds' doing."""
    from aclprofd.detector.engine import DetectorConfig
    r = bench.run_stationary(seed=1000, hours=0.5, config=DetectorConfig(z=0.5, min_effect=1e-6, persistence=1))
    assert r["flags"] > 0


def test_a_steady_load_with_one_slower_replica_raises_no_flag(bench):
    """Two replicas of one op type, one 1.43x slower all along, their shares of the load
    varying second to second: the group's p50 sits between the two populations and a 2 %
    change of share moves it by 40 %. Judged as independent samples, that steady load was
    flagged and cleared 4 times in 10 minutes (7 in 17, the flapping seen on the demo); the
    window's own seconds now measure the overdispersion and widen the intervals."""
    r = bench.run_replicas(seed=1, slow_from=None, observe_s=600, warmup_s=600)
    assert r["raised"] == 0, r


def test_one_replica_slowing_down_is_flagged_once_and_held(bench):
    """The same replica getting slower after the warm-up is a real, lasting shift: flagged
    within a minute and held for the whole 10 minutes (the shipped alert needs 2 minutes
    without a clear). The old rules raised it twice and cleared it once."""
    r = bench.run_replicas(seed=1, slow_from=0, observe_s=600, warmup_s=600)
    assert r["first_s"] is not None and r["first_s"] <= 60, r
    assert (r["raised"], r["cleared"]) == (1, 0), r
