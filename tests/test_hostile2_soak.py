"""Issue 19, the soak's loop stalls: the work the loop thread did in one piece once a second
(the detector's tick over every group, the sort of a second's histogram deltas, the merge of
a window slot) is bounded by what can be judged or merged in pieces as it comes.

Each test checks the size of the work, not its time (no timed assertions): on main the
detector judged every group (4096 x 322 bins, 50-90 ms of CPU a second), sorted a whole
second's deltas at the tick and merged a slot's parts at the next second's first batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aclprof.protocol.quantshift import NBINS


def _detector(groups: int, **cfg: Any) -> Any:
    from aclprofd.detector.engine import Detector, DetectorConfig

    return Detector(lambda k: ("svc", f"m{k}", "T", "n"), DetectorConfig(window_s=10, trailing_s=60, **cfg))


@pytest.fixture
def shift_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every shift() the detector's tick computes."""
    from aclprofd.detector import engine

    seen: list[int] = []
    real = engine.shift

    def counting(base: np.ndarray, cur: np.ndarray, *a: Any, **k: Any) -> Any:
        seen.append(len(cur))
        return real(base, cur, *a, **k)

    monkeypatch.setattr(engine, "shift", counting)
    return seen


def test_the_tick_judges_only_the_groups_with_samples_or_a_flag(shift_rows: list[int]) -> None:
    """4000 groups (one relabelled model each, like the 10,050-relabels attack) of one call
    a second and 3 busy groups: each tick judges the 3, and their verdicts are those of a
    judgement of every group (a flag is raised, held and cleared the same way)."""
    det = _detector(4003, min_count=200, persistence=2)
    rng = np.random.default_rng(1)
    raised_at = cleared_at = None
    for t in range(80):
        busy = rng.integers(0, 3, 3000)
        slow = 6 if 30 <= t < 55 else 0  # group 0 slows down for 25 s, then recovers
        bins = 100 + rng.integers(0, 4, 3000) + np.where(busy == 0, slow, 0)
        codes = np.concatenate([busy * NBINS + bins, (3 + np.arange(4000)) * NBINS + 100])
        u, n = np.unique(codes, return_counts=True)
        det.observe(u, n.astype(np.int64))
        shift_rows.clear()
        view = det.tick(1000.0 + t)
        assert max(shift_rows) <= 3, shift_rows  # main: 4003 rows, twice a tick
        flagged = [f["model"] for f in view.flags]
        if flagged and raised_at is None:
            raised_at = t
            assert flagged == ["m0"]
        if raised_at is not None and not flagged and cleared_at is None:
            cleared_at = t
    assert raised_at is not None and 30 < raised_at < 40
    assert cleared_at is not None and cleared_at > 55
    assert det.published.groups == 4003


def test_a_group_that_loses_its_samples_restarts_its_streak() -> None:
    """A group left out of the judgement (too few samples now) is "not regressed" as before:
    its streak restarts, so a later regression needs `persistence` evaluations again."""
    det = _detector(1, min_count=200, persistence=3)
    rng = np.random.default_rng(2)
    for t in range(40):
        bins = 100 + rng.integers(0, 4, 2000) + (6 if t >= 30 else 0)
        u, n = np.unique(bins, return_counts=True)
        det.observe(u, n.astype(np.int64))
        det.tick(1000.0 + t)
    assert det.streak[0].max() >= 1  # regressing, not flagged yet (or flagged: then calm)
    for t in range(40, 60):  # silence: the window empties, the group cannot be judged
        det.tick(1000.0 + t)
    assert not det.streak[0].any() and not det.calm[0].any() and not det.flagged[0].any()


def test_a_seconds_deltas_are_merged_as_they_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 batches of 1000 distinct (cell, bin) codes in one second: the tick sorts a merged
    table, not 300,000 rows (main: one np.unique of them all on the loop at the tick)."""
    from aclprofd.detector.state import CellStore

    st = CellStore(lambda k: ("s", "m", "T", f"n{k}"), 10.0, 60.0)
    rng = np.random.default_rng(3)
    total = 0
    for _ in range(300):
        keys = rng.integers(0, 500, 1000)
        u = np.unique(keys * NBINS + rng.integers(90, 110, 1000))
        st.observe(u, np.ones(len(u), np.int64))
        total += len(u)
    sizes: list[int] = []
    real = np.unique

    def sized(a: np.ndarray, *args: Any, **kw: Any) -> Any:
        sizes.append(len(a))
        return real(a, *args, **kw)

    monkeypatch.setattr(np, "unique", sized)
    st.roll(1000.0)
    monkeypatch.undo()
    assert max(sizes) <= 2 * 500 * 20 + (1 << 15) + 1000, sizes
    cur, _ = st.group_hists()
    assert int(cur.sum()) == total and int(st.cur.sum()) == total  # nothing lost in the merges


def test_a_window_slot_merges_its_parts_as_they_come() -> None:
    """A slot given 200 batches of 1000 histogram rows holds them merged before its second
    ends (main: 200 parts merged in one sort at the next second's first batch)."""
    from aclprofd.aggregate.windows import Slot

    slot = Slot(1)
    rng = np.random.default_rng(4)
    total = 0
    for _ in range(200):
        keys = np.arange(10, dtype=np.int64)
        codes = np.unique(rng.integers(0, 100, 1000) * NBINS + rng.integers(0, 50, 1000))
        ones = np.ones(len(codes), np.int64)
        total += len(codes)
        slot.add(keys, np.ones(10, np.int64), np.ones(10, np.int64), np.ones(10, np.int64), np.ones(10, np.int64),
                 codes, ones)
    merged = len(slot.codes)
    assert merged > 0  # main: 0 until compact()
    slot.compact()
    assert int(slot.hcount.sum()) == total and len(slot.codes) <= 100 * 50
    assert int(slot.count.sum()) == 2000
