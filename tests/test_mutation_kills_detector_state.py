"""Deterministic unit tests of the detector's cell store (``aclprofd.detector.state``):
duplicate cells within a batch, the pending merge, the refusal count and STATUS fields,
forgetting cells (group counts, group baselines, slot reuse, shares, keys looked up again),
renumbered keys, reads before the first roll. Written against the survivors of the mutation
run of 2026-12-02 night (tests/bench/MUTATION.md); no daemon, explicit clock values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aclprofd.detector.state import PENDING_MERGE_ROWS, CellStore

from aclprof.protocol.quantshift import NBINS


def cell(k: int, name: str | None = None) -> tuple[str, str, str, str]:
    """Key k is op ``op{k}`` of op type ``T{k}`` unless given a name (then of type ``T``)."""
    return ("svc", "m", "T", name) if name is not None else ("svc", "m", f"T{k}", f"op{k}")


def deltas(pairs: list[tuple[int, int, int]], dtype: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """(key, bin, count) triples as the aggregator's (key * NBINS + bin, count) arrays."""
    codes = np.asarray([k * NBINS + b for k, b, _ in pairs], dtype)
    return codes, np.asarray([n for _, _, n in pairs], dtype)


def hist_of(store: CellStore, which: str, ident: tuple[str, str, str, str]) -> np.ndarray:
    cells, h = store.cell_hists(which)
    return h[cells.index(ident)]


def group_hist(store: CellStore, group: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray]:
    cur, base = store.group_hists(np.asarray([store.group_index[group]]))
    return cur[0], base[0]


# ---- ingestion ----------------------------------------------------------------------------------

def test_two_keys_of_one_cell_in_one_batch_add_up() -> None:
    """Two processes of a service (two aggregator keys, one cell) in the same batch and bin:
    the cell and its group count both, in the window and, after it, in the baseline."""
    st = CellStore(lambda k: cell(k, "op"), window_s=1, tau_s=math.inf)
    st.observe(*deltas([(0, 100, 3), (1, 100, 4), (1, 101, 1)]))
    st.roll(10.0)
    assert hist_of(st, "current", cell(0, "op"))[[100, 101]].tolist() == [7.0, 1.0]
    cur, _ = group_hist(st, ("svc", "m", "T"))
    assert cur[[100, 101]].tolist() == [7.0, 1.0] and cur.sum() == 8
    st.roll(11.0)  # the second left the window: the baseline holds all of it
    _, base = group_hist(st, ("svc", "m", "T"))
    assert base[[100, 101]].tolist() == [7.0, 1.0]


def test_a_batch_of_pending_merge_rows_is_merged_on_arrival_and_rolled_whole() -> None:
    """A batch of PENDING_MERGE_ROWS rows is merged as it comes (the merged entry is then the
    only pending one); the next roll folds exactly it in."""
    keys = -(-PENDING_MERGE_ROWS // NBINS)
    codes = np.arange(keys * NBINS, dtype=np.int64)[:PENDING_MERGE_ROWS]
    counts = (codes % 7 + 1).astype(np.int64)
    st = CellStore(cell, window_s=1, tau_s=math.inf)
    st.observe(codes, counts)
    st.roll(10.0)
    cells, h = st.cell_hists("current")
    assert len(cells) == keys
    got = np.zeros(keys * NBINS)
    for ident, row in zip(cells, h):
        k = int(ident[3][2:])
        got[k * NBINS:(k + 1) * NBINS] = row
    np.testing.assert_array_equal(got[:PENDING_MERGE_ROWS], counts)
    assert got[PENDING_MERGE_ROWS:].sum() == 0
    assert st.group_counts()[0].sum() == counts.sum()


def test_observe_takes_codes_and_counts_of_any_integer_width() -> None:
    """int32 codes and counts (a smaller aggregator dtype) count as the int64 ones do."""
    for dtype in (np.int32, np.int64):
        st = CellStore(cell, window_s=1, tau_s=math.inf)
        st.observe(*deltas([(0, 5, 2), (3, 9, 4)], dtype))
        st.roll(1.0)
        assert hist_of(st, "current", cell(3))[9] == 4 and hist_of(st, "current", cell(0))[5] == 2, dtype


def test_a_cell_read_before_the_first_roll_has_empty_histograms() -> None:
    """A baseline saved between the first records and the first tick: the cells are known,
    their histograms empty (nothing was folded in yet), in every view."""
    st = CellStore(cell, window_s=1, tau_s=60)
    st.observe(*deltas([(0, 5, 2)]))
    for which in ("current", "trailing", "recent"):
        cells, h = st.cell_hists(which)
        assert cells == [cell(0)] and h.shape == (1, NBINS) and h.sum() == 0, which


# ---- refusals and STATUS ------------------------------------------------------------------------

def test_refused_cells_are_counted_once_per_key_and_status_names_its_fields() -> None:
    st = CellStore(cell, window_s=1, tau_s=60, max_cells=1)
    assert st.stats() == {"cap": 1, "in_use": 0, "refused_full": 0, "per_agent": 1, "largest_agent": 0,
                          "per_uid": 0, "largest_uid": 0, "refused": 0, "evicted": 0}
    st.observe(*deltas([(0, 5, 1), (1, 5, 2), (2, 5, 3)]))
    st.observe(*deltas([(1, 5, 2), (2, 5, 3)]))  # refused keys stay refused: not counted again
    st.roll(1.0)
    assert st.stats()["refused_full"] == 2 and st.stats()["in_use"] == 1
    assert st.untracked == 10


# ---- forgetting cells -----------------------------------------------------------------------------

GONE, LIVE = (1000, 1), (1000, 2)


def _two_cell_group(window_s: float = 2) -> CellStore:
    """Ops "a" (key 0, agent GONE) and "b" (key 1, agent LIVE) of one op type, fed at 100-104,
    rolled to 110: both in the baseline, nothing in the window."""
    names = {0: "a", 1: "b"}
    owners = {0: GONE, 1: LIVE, 2: LIVE, 3: GONE, 4: LIVE}
    st = CellStore(lambda k: cell(k, names[k]) if k in names else cell(k), window_s=window_s, tau_s=math.inf,
                   owner=owners.get)
    for t in range(100, 105):
        st.observe(*deltas([(0, 10, 5), (0, 11, 1), (1, 10, 2), (1, 20, 3)]))
        st.roll(float(t))
    for t in range(105, 111):
        st.roll(float(t))
    return st


def test_forgetting_one_cell_of_a_group_keeps_the_group_and_the_others_baseline() -> None:
    st = _two_cell_group()
    group = ("svc", "m", "T")
    assert group_hist(st, group)[1][[10, 11, 20]].tolist() == [35.0, 5.0, 15.0]
    assert st.age_out(110.0, 5.0, {LIVE}.__contains__) == 1  # "a" went quiet at 104, its agent is gone
    assert group in st.group_index and st.freed_groups == []
    cur, base = group_hist(st, group)
    np.testing.assert_array_equal(base, hist_of(st, "trailing", cell(1, "b")))
    assert base[[10, 11, 20]].tolist() == [10.0, 0.0, 15.0] and base.sum() == 25 and cur.sum() == 0
    for which in ("current", "trailing", "recent"):
        cells, h = st.cell_hists(which)
        assert cells == [cell(1, "b")] and h.shape == (1, NBINS), which
    assert st.stats()["in_use"] == 1 and st.stats()["evicted"] == 1


def test_a_reused_cell_slot_and_group_slot_start_empty() -> None:
    """Key 3 (its own group, agent GONE) is forgotten with its group; key 2 then takes both
    freed slots: its histograms hold its own records only."""
    st = CellStore(cell, window_s=1, tau_s=math.inf, owner={2: LIVE, 3: GONE}.get)
    for t in range(100, 103):
        st.observe(*deltas([(3, 10, 5), (3, 40, 2)]))
        st.roll(float(t))
    st.roll(200.0)
    assert st.age_out(200.0, 10.0, {LIVE}.__contains__) == 1
    assert st.freed_groups == [0] and st.group_index == {}
    st.observe(*deltas([(2, 7, 4)]))
    st.roll(201.0)
    assert st.cells == [cell(2)] and st.group_index == {("svc", "m", "T2"): 0}
    for which, want in (("current", 4.0), ("trailing", 0.0)):
        h = hist_of(st, which, cell(2))
        assert h[7] == want and h.sum() == want, which
    cur, base = group_hist(st, ("svc", "m", "T2"))
    assert cur[7] == 4 and cur.sum() == 4 and base.sum() == 0
    assert st.group_counts()[0].tolist() == [4] and st.group_counts()[1].tolist() == [0.0]


def test_a_forgotten_keys_records_get_a_cell_of_their_own_again() -> None:
    """Key 0's cell is forgotten and its slot taken by key 2: key 0's next records make a
    new cell for op "a", not counts in key 2's cell."""
    st = _two_cell_group()
    st.age_out(110.0, 5.0, {LIVE}.__contains__)
    st.observe(*deltas([(2, 30, 6)]))
    st.roll(111.0)
    st.observe(*deltas([(0, 50, 9)]))
    st.roll(112.0)
    assert sorted(st.cell_hists("current")[0]) == sorted([cell(1, "b"), cell(2), cell(0, "a")])
    assert hist_of(st, "current", cell(2)).tolist() == hist_of(st, "recent", cell(2)).tolist()
    assert hist_of(st, "current", cell(2))[30] == 6 and hist_of(st, "current", cell(2)).sum() == 6
    h = hist_of(st, "current", cell(0, "a"))
    assert h[50] == 9 and h.sum() == 9


def test_a_key_refused_for_want_of_room_gets_the_room_a_forgotten_cell_frees() -> None:
    st = CellStore(cell, window_s=1, tau_s=math.inf, max_cells=1, owner={0: GONE, 1: LIVE}.get)
    st.observe(*deltas([(0, 10, 1), (1, 10, 2)]))
    st.roll(100.0)
    assert st.cells == [cell(0)] and st.stats()["refused_full"] == 1
    st.roll(150.0)  # (age_out right after a roll, as the detector calls it)
    assert st.age_out(150.0, 10.0, {LIVE}.__contains__) == 1
    st.observe(*deltas([(1, 10, 2)]))
    st.roll(151.0)
    assert st.cell_hists("current")[0] == [cell(1)] and hist_of(st, "current", cell(1))[10] == 2


def test_a_cell_idle_for_exactly_the_timeout_is_forgotten_and_evictions_add_up() -> None:
    st = CellStore(cell, window_s=1, tau_s=math.inf, owner=lambda k: GONE)
    st.observe(*deltas([(0, 10, 1)]))
    st.roll(100.0)
    st.observe(*deltas([(1, 10, 1)]))
    st.roll(101.0)
    nobody = set().__contains__
    st.roll(129.99)
    assert st.age_out(129.99, 30.0, nobody) == 0
    st.roll(130.0)
    assert st.age_out(130.0, 30.0, nobody) == 1  # fed at 100: idle exactly 30 s
    assert st.cells[0] is None and st.cells[1] == cell(1)
    st.roll(131.0)
    assert st.age_out(131.0, 30.0, nobody) == 1
    assert st.stats()["evicted"] == 2 and st.stats()["in_use"] == 0


def test_a_forgotten_cell_gives_its_agents_uid_share_back() -> None:
    """One cell per uid: agent (1000, 1)'s cell is forgotten; agent (1000, 2) of the same
    uid then gets one."""
    st = CellStore(cell, window_s=1, tau_s=math.inf, owner={0: GONE, 1: LIVE}.get, max_per_uid=1)
    st.observe(*deltas([(0, 10, 1), (1, 10, 1)]))
    st.roll(100.0)
    assert st.cells == [cell(0)] and st.stats()["refused"] == 1
    st.roll(200.0)
    st.age_out(200.0, 10.0, {LIVE}.__contains__)
    st.observe(*deltas([(1, 10, 1)]))
    st.roll(201.0)
    assert st.cell_hists("current")[0] == [cell(1)]


# ---- renumbered keys ------------------------------------------------------------------------------

def test_renumbered_keys_keep_their_cells_and_refusals_without_a_new_lookup() -> None:
    """The aggregator drops key 0 and renumbers 1 -> 0, 2 -> 1, 3 -> 2 (its remap is longer
    than the keys the store has seen): the records of the renumbered keys go to their old
    cells without asking the identity again, and a refused key stays refused (not counted
    again); a kept key the store never saw is looked up at its first records."""
    names = {0: cell(0), 1: cell(1), 2: cell(2), 3: cell(3)}
    asked: list[int] = []

    def identity(k: int) -> tuple[str, str, str, str]:
        asked.append(k)
        return names[k]

    st = CellStore(identity, window_s=1, tau_s=math.inf, max_cells=3)
    st.observe(*deltas([(0, 10, 1), (1, 10, 1), (2, 10, 1), (3, 10, 1)]))
    st.roll(100.0)
    assert st.stats()["refused_full"] == 1 and asked == [0, 1, 2, 3]
    remap = np.full(200, -1, np.int64)
    remap[[1, 2, 3, 150]] = [0, 1, 2, 3]  # key 150: one the store never saw (nothing looked up)
    st.renumber_keys(remap)
    names.clear()
    names.update({0: cell(1), 1: cell(2), 2: cell(3), 3: cell(150)})
    asked.clear()
    st.observe(*deltas([(0, 20, 5), (1, 20, 6), (2, 20, 7), (3, 20, 8)]))
    st.roll(101.0)
    assert asked == [3] and st.stats()["refused_full"] == 2  # key 3 (was 150) is new: looked up, refused
    assert hist_of(st, "current", cell(1))[20] == 5 and hist_of(st, "current", cell(2))[20] == 6
    assert cell(3) not in st.cell_hists("current")[0] and st.untracked == 1 + 7 + 8


# ---- the decayed baseline -----------------------------------------------------------------------

def test_the_groups_baseline_count_decays_like_its_histogram() -> None:
    tau = 10.0
    st = CellStore(cell, window_s=1, tau_s=tau)
    st.observe(*deltas([(0, 10, 100)]))
    st.roll(100.0)
    st.roll(101.0)  # the second left the window at 101, decayed from then on
    st.roll(105.0)
    n_cur, n_base = st.group_counts()
    _, base = st.group_hists()
    assert n_cur.tolist() == [0]
    assert n_base[0] == pytest.approx(100 * math.exp(-4 / tau), rel=1e-12)
    assert n_base[0] == pytest.approx(base.sum(), rel=1e-12)
