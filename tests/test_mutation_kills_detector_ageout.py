"""Deterministic unit tests of the detector's shares and ageing (issue 19's per-agent and
per-uid cell shares, table ageing, RESET's forget_gone), written against the survivors of
the mutation run of 2026-12-02 evening (tests/bench/MUTATION.md). A fake clock, no daemon."""

from __future__ import annotations

from typing import Any

import numpy as np
from aclprofd.detector.engine import AGE_EVERY_S, Detector, DetectorConfig

from aclprof.protocol.quantshift import NBINS

CFG = DetectorConfig(window_s=10, trailing_s=60)


def identity(k: int) -> tuple[str, str, str, str]:
    """Key k is op ``opk`` of op type ``Tk`` (a group of its own)."""
    return ("svc", "m", f"T{k}", f"op{k}")


def feed(det: Detector, keys: list[int], n: int = 5, b: int = 100) -> None:
    codes = np.asarray(keys, np.int64) * NBINS + b
    det.observe(codes, np.full(len(keys), n, np.int64))


def test_the_detector_gives_its_cell_store_the_agent_and_uid_shares() -> None:
    """Keys 0-2 of agent (uid 1000, pid 1), keys 3-5 of (uid 1000, pid 2); 2 cells an agent,
    3 a uid: agent 1 gets 2 cells, agent 2 the uid's last one, the rest are refused."""
    owners = {k: (1000, 1 if k < 3 else 2) for k in range(6)}
    det = Detector(identity, CFG, owner=owners.get, max_cells_per_owner=2, max_cells_per_uid=3)
    feed(det, list(range(6)))
    det.tick(1000.0)
    held = [det.store.cell_owner.count((1000, 1)), det.store.cell_owner.count((1000, 2))]
    assert held == [2, 1] and det.store.live_cells == 3
    assert det.store.stats()["per_agent"] == 2 and det.store.stats()["per_uid"] == 3


def test_cells_of_a_gone_agent_stay_for_the_idle_timeout_unless_reset_forgets_them() -> None:
    """An agent's cell fed at T, the agent gone: the cell stays while it is younger than
    table_idle_s (here 300 s), though older than the window; forget_gone (RESET) drops it at
    the next tick."""
    owners = {0: (1000, 1), 1: (1000, 2)}
    live = {(1000, 2)}
    det = Detector(identity, CFG, owner=owners.get, live_owners=lambda: live, table_idle_s=300)
    feed(det, [0, 1])
    det.tick(1000.0)
    for t in range(1001, 1040):
        det.tick(float(t))
    assert det.store.live_cells == 2  # 39 s: beyond the 10 s window, within 300 s
    det.forget_gone()
    det.tick(1040.0)
    assert det.store.live_cells == 1 and det.store.cell_owner.count((1000, 2)) == 1


def test_the_ageing_pass_runs_once_every_age_every_s() -> None:
    """The scan for gone agents' cells runs at the first tick, then once every AGE_EVERY_S
    of ticks (not at every tick), and at once when the clock stepped back."""
    det = Detector(identity, CFG, owner=lambda k: (1000, 1), live_owners=lambda: set(), table_idle_s=300)
    calls: list[float] = []
    real = det.store.age_out

    def counting(now: float, *a: Any) -> int:
        calls.append(now)
        return real(now, *a)

    det.store.age_out = counting  # type: ignore[method-assign]
    for t in range(1000, 1031):
        det.tick(float(t))
    assert AGE_EVERY_S == 10.0 and calls == [1000.0, 1010.0, 1020.0, 1030.0]
    det.tick(900.0)  # stepped back
    assert calls[-1] == 900.0


def test_a_new_baseline_restarts_streaks_calm_counts_and_flags() -> None:
    det = Detector(identity, DetectorConfig(window_s=10, trailing_s=60, min_count=50, persistence=2))
    rng = np.random.default_rng(5)
    for t in range(90):
        bins = 100 + rng.integers(0, 4, 400) + (8 if t >= 70 else 0)
        u, n = np.unique(bins, return_counts=True)
        det.observe(u, n.astype(np.int64))
        det.tick(1000.0 + t)
    assert det.flagged.any() and det.streak.any()
    det.calm[:] = 1  # as after a calm evaluation
    det.unpin()
    assert not det.flagged.any() and not det.streak.any() and not det.calm.any()


def test_before_its_first_tick_the_detector_publishes_an_empty_view() -> None:
    det = Detector(identity, CFG)
    assert det.published.groups == 0 and det.published.flags == () and det.published.rows == ()


def test_a_group_with_exactly_min_count_calls_on_each_side_is_judged() -> None:
    """min_count is inclusive: 5 calls a second for 100 s puts exactly 50 (min_count) in the
    10 s window; the group is judged and published with n_cur = 50."""
    det = Detector(identity, DetectorConfig(window_s=10, trailing_s=60, min_count=50))
    det.host = "node-a"
    for t in range(100):
        feed(det, [0], n=5)
        det.tick(1000.0 + t)
    (row,) = det.published.rows
    assert row["p50"]["n_cur"] == 50 and row["p50"]["n_base"] >= 50
    assert (det.published.ts, det.published.host, det.published.baseline) == (1099.0, "node-a", None)


def test_a_group_without_baseline_samples_is_not_judged(monkeypatch: Any) -> None:
    """A new op type with current samples but no baseline yet is left out of the judgement
    (a judgement of it would be "not regressed": work for nothing, issue 19), as is a group
    whose current window emptied while its baseline holds samples."""
    from aclprofd.detector import engine

    rows: list[int] = []
    real = engine.shifts

    def counting(base: np.ndarray, cur: np.ndarray, *a: Any, **k: Any) -> Any:
        rows.append(len(cur))
        return real(base, cur, *a, **k)

    monkeypatch.setattr(engine, "shifts", counting)
    det = Detector(identity, DetectorConfig(window_s=10, trailing_s=60, min_count=50))
    for t in range(100):
        feed(det, [0], n=10)           # old: both sides
        if t >= 95:
            feed(det, [1], n=60)       # new: current samples only
        if t < 30:
            feed(det, [2], n=10)       # gone quiet: baseline only
        rows.clear()
        det.tick(1000.0 + t)
    assert rows and max(rows) == 1
    assert [r["op_type"] for r in det.published.rows] == ["T0"] and det.published.groups == 3
