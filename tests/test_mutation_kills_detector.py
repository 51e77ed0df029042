"""The regression detector (``aclprofd.detector``) with deterministic streams (issue 20).

The persistence rule was caught only by timing-dependent end-to-end tests and random
replays. Here each second's histogram is exact (no random draws), the window is one
second and the baseline is pinned, so every evaluation's verdict is chosen by the test:
R (+20 %: regressed), D (+4 %: the dead band, neither regressed nor calm) or N (the
baseline: calm). The flag times, the log lines an operator reads, which quantile is
flagged and the SNAPSHOT annotation's order follow exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import structlog
from aclprofd.detector.dispersion import MIN_SECONDS, WindowIndex, dispersion
from aclprofd.detector.engine import CLEAR_FRACTION, Detector, DetectorConfig
from aclprofd.detector.state import MAX_CELLS, CellStore
from helpers.streams import bin_probabilities, dispersion_and_definition

from aclprof.protocol import baselinefmt
from aclprof.protocol.quantshift import NBINS

PER_SECOND = 20_000
MEDIAN = 100_000
#: the op of each aggregator key (key 3: the "(other)" key, never judged)
CELLS = {0: ("svc", "m1", "MatMul", "l1/mm"), 1: ("svc", "m1", "MatMul", "l2/mm"), 2: ("svc", "m1", "Add", "a"),
         4: ("other", "m1", "MatMul", "l1/mm")}


def _hist(median: float = MEDIAN, sigma: float = 0.3, n: int = PER_SECOND) -> np.ndarray:
    h = np.floor(bin_probabilities(median, sigma) * n)
    h[np.argmax(h)] += n - h.sum()
    return h.astype(np.int64)


def _deltas(per_key: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One batch's ``(key * NBINS + bin, count)`` pairs, as the aggregator hands them over."""
    codes, counts = [], []
    for key, h in per_key.items():
        nz = np.flatnonzero(h)
        codes.append(key * NBINS + nz)
        counts.append(h[nz])
    return np.concatenate(codes).astype(np.int64), np.concatenate(counts).astype(np.int64)


STEP = {"N": _hist(), "R": _hist(MEDIAN * 1.2), "D": _hist(MEDIAN * 1.04)}


def _pinned_detector(persistence: int = 3, keys=(0,), **kw) -> Detector:
    det = Detector(CELLS.get, DetectorConfig(window_s=1, trailing_s=60, persistence=persistence,
                                             min_count=1000, **kw))
    cells = [CELLS[k] for k in keys]
    doc = baselinefmt.encode("good", cells, np.stack([_hist(n=10 * PER_SECOND) for _ in keys]), {"saved_ts": 1.0})
    det.pin("good", json.loads(json.dumps(doc)))
    return det


def _play(det: Detector, pattern: str, t0: float = 1000.0, key: int = 0):
    views = []
    for i, step in enumerate(pattern):
        det.observe(*_deltas({key: STEP[step]}))
        views.append(det.tick(t0 + i))
    return views


def _flagged(views, quantile: str = "p50") -> list[int]:
    return [i for i, v in enumerate(views) if any(f["quantile"] == quantile for f in v.flags)]


def test_the_steps_are_regressed_dead_band_and_calm():
    """The three steps' shifts, as the detector measured them (what the rule is fed)."""
    det = _pinned_detector()
    for t, (step, low, high) in enumerate((("N", 0.99, 1.01), ("R", 1.18, 1.22), ("D", 1.03, 1.05))):
        v = _play(det, step, t0=1000.0 + t)[-1]
        for q in ("p50", "p99"):
            assert low < v.rows[0][q]["shift"] < high, (step, q, v.rows[0][q])
        assert (v.rows[0]["p50"]["lower"] > 1.0) == (step != "N")
    assert 1.0 + CLEAR_FRACTION * 0.05 < 1.03  # D is above the calm line: it holds a flag


def test_persistence_flags_on_the_kth_regressed_second_and_clears_on_the_kth_calm_one(monkeypatch):
    from aclprofd.detector import engine

    det = _pinned_detector(persistence=3)
    pattern = "NNRRNRRRRDDNNDNNNR"
    #          0123456789...
    with structlog.testing.capture_logs() as logs:
        # a fresh logger: the module's may be bound, cached, to an earlier test's configuration
        # (an in-process aclprofd or CLI configured structlog with cache_logger_on_first_use)
        monkeypatch.setattr(engine, "_log", structlog.get_logger("aclprofd"))
        views = _play(det, pattern)
    # raised at the third R in a row (t7), held through the dead band and the interrupted
    # calm run (t13's D restarts it), cleared at the third calm second in a row (t16)
    assert _flagged(views, "p50") == list(range(7, 16))
    assert _flagged(views, "p99") == list(range(7, 16))
    assert det.flagged_total == 2  # p50 and p99 of one group, once each
    assert all(f["since_ts"] == 1007.0 for v in views[7:16] for f in v.flags)
    row = views[10].rows[0]
    assert row["p50"]["flagged"] and row["p50"]["since_ts"] == 1007.0
    assert views[16].rows[0]["p50"] == {**views[16].rows[0]["p50"], "flagged": False, "since_ts": None}
    # the log lines an operator reads: one warning when raised, one info when cleared, per quantile
    events = [(e["event"], e["log_level"], e.get("quantile")) for e in logs]
    assert events == [("op latency regression", "warning", "p50"), ("op latency regression", "warning", "p99"),
                      ("op latency regression cleared", "info", "p50"),
                      ("op latency regression cleared", "info", "p99")]
    assert {k: logs[0][k] for k in ("service", "model", "op_type", "baseline")} == {
        "service": "svc", "model": "m1", "op_type": "MatMul", "baseline": "good"}
    assert {k: logs[2][k] for k in ("service", "model", "op_type")} == {
        "service": "svc", "model": "m1", "op_type": "MatMul"}


@pytest.mark.parametrize("k,pattern,flagged", [
    (1, "NRNN", [1]),              # persistence 1: flagged at once, cleared at the next calm second
    (2, "RNRRDNNN", [3, 4, 5]),    # an isolated R raises nothing; cleared at the 2nd calm second
    (2, "RRNDNNNN", [1, 2, 3, 4]),  # the D between two calm seconds restarts the count
    (4, "RRRNRRRRNNNNN", [7, 8, 9, 10]),
    (3, "RRDRRNN", []),            # the dead band is not regressed either: the streak restarts
])
def test_persistence_counts_consecutive_evaluations(k, pattern, flagged):
    views = _play(_pinned_detector(persistence=k), pattern)
    assert _flagged(views, "p50") == flagged
    assert _flagged(views, "p99") == flagged


def test_a_new_baseline_restarts_flags_and_streaks():
    det = _pinned_detector(persistence=2)
    _play(det, "RR")
    assert det.published.flags
    doc = baselinefmt.encode("slow", [CELLS[0]], _hist(MEDIAN * 1.2, n=10 * PER_SECOND)[None, :], {})
    det.pin("slow", doc)  # the slowed latency is now the reference: nothing left to flag
    v = _play(det, "R", t0=2000)[-1]
    assert not v.flags and det.status()["baseline"] == "slow"
    det.unpin()
    assert det.status()["baseline"] == "trailing"


def test_only_the_quantile_that_moved_is_flagged_and_faster_is_never_flagged():
    det = _pinned_detector(persistence=2)
    tail = _hist(MEDIAN, sigma=0.36)  # the same median, a longer tail: p99 +12 %
    faster = _hist(MEDIAN * 0.7)       # everything faster: an improvement, not an alert
    views = []
    for i, h in enumerate([tail, tail, tail, faster, faster, faster]):
        det.observe(*_deltas({0: h}))
        views.append(det.tick(1000.0 + i))
    assert _flagged(views, "p99") == [1, 2, 3]  # cleared by the 2nd faster second (below the calm line)
    assert _flagged(views, "p50") == []
    assert views[4].rows[0]["p50"]["shift"] < 0.75 and not views[4].flags


def test_groups_merge_op_names_and_the_other_key_is_counted_not_judged():
    det = Detector(CELLS.get, DetectorConfig(window_s=1, trailing_s=60, persistence=1, min_count=1000))
    det.observe(*_deltas({0: _hist(n=600), 1: _hist(n=600), 2: _hist(n=900), 3: _hist(n=5000)}))
    det.store.base[:] = 0
    v = det.tick(1.0)
    assert det.store.untracked == 5000
    assert [(c[0], c[2]) for c in det.store.cells] == [("svc", "MatMul"), ("svc", "MatMul"), ("svc", "Add")]
    assert det.store.groups == [("svc", "m1", "MatMul"), ("svc", "m1", "Add")]
    cur, _ = det.store.group_hists()
    assert cur.sum(axis=1).tolist() == [1200.0, 900.0]  # 600 + 600 from two op names: 1200 >= min_count
    assert v.groups == 2 and v.untracked == 5000
    st = det.status()
    assert (st["groups"], st["untracked_records"], st["min_count"], st["persistence"], st["window_s"]) == (
        2, 5000, 1000, 1, 1)


# ---- annotate: top's shift column ---------------------------------------------------------------

def _two_services(p99_factor_svc: float, p99_factor_other: float, pattern_len: int = 3) -> Detector:
    det = _pinned_detector(persistence=2, keys=(0, 4))
    for i in range(pattern_len):
        det.observe(*_deltas({0: _hist(MEDIAN * p99_factor_svc), 4: _hist(MEDIAN * p99_factor_other)}))
        det.tick(1000.0 + i)
    return det


def test_annotate_shows_the_worst_p99_of_the_op_types_services_or_the_filtered_ones():
    det = _two_services(1.3, 1.1)
    reply = {"group_by": "type", "rows": [{"key": "MatMul"}, {"key": "Add"}]}
    det.annotate(reply)
    mm = reply["rows"][0]
    assert mm["shift_p99"] == pytest.approx(1.3, abs=0.02)
    assert reply["rows"][1] == {"key": "Add", "shift_p99": None, "regression": False, "flagged": []}
    assert mm["regression"] is True
    # per flagged quantile its largest shift, the largest first
    assert [f["quantile"] for f in mm["flagged"]] == ([f["quantile"] for f in sorted(
        mm["flagged"], key=lambda f: -f["shift"])])
    assert {f["quantile"] for f in mm["flagged"]} == {"p50", "p99"}
    assert all(f["shift"] == pytest.approx(1.3, abs=0.02) for f in mm["flagged"])
    only = {"group_by": "type", "rows": [{"key": "MatMul"}]}
    det.annotate(only, service="other")
    assert only["rows"][0]["shift_p99"] == pytest.approx(1.1, abs=0.02)
    assert sorted(f["quantile"] for f in only["rows"][0]["flagged"]) == ["p50", "p99"]  # the other service's flags
    assert all(f["shift"] == pytest.approx(1.1, abs=0.02) for f in only["rows"][0]["flagged"])


def test_annotate_orders_flagged_quantiles_by_their_shift():
    """A group whose p50 moved more than its p99 lists p50 first: the screen shows the
    quantile that is flagged the most, not always the p99."""
    det = _pinned_detector(persistence=1)
    narrow = _hist(MEDIAN * 1.5, sigma=0.2)  # p50 x1.5, p99 x ~1.18
    det.observe(*_deltas({0: narrow}))
    det.tick(1000.0)
    reply = {"group_by": "type", "rows": [{"key": "MatMul"}]}
    det.annotate(reply)
    fl = reply["rows"][0]["flagged"]
    assert [f["quantile"] for f in fl] == ["p50", "p99"]
    assert fl[0]["shift"] > fl[1]["shift"] > 1.05
    assert reply["rows"][0]["shift_p99"] == fl[1]["shift"]


# ---- the cell store ---------------------------------------------------------------------------

def test_cell_store_window_slides_by_whole_seconds_into_the_baseline():
    st = CellStore(CELLS.get, window_s=3, tau_s=1e9)
    for t in range(5):
        st.observe(*_deltas({0: _hist(n=1000 * (t + 1))}))
        st.roll(100.0 + t)
    cur, base = st.group_hists()
    # seconds 102, 103, 104 in the window (3 s); 100 and 101 moved to the baseline
    assert cur.sum() == 3000 + 4000 + 5000
    assert base.sum() == pytest.approx(1000 + 2000, rel=1e-6)
    cells, h = st.cell_hists("recent")
    assert cells == [CELLS[0]] and h.sum() == pytest.approx(15000, rel=1e-6)
    assert st.cell_hists("current")[1].sum() == 12000
    with pytest.raises(ValueError, match="which must be current, trailing or recent, not 'x'"):
        st.cell_hists("x")


def test_cell_store_cap_counts_what_it_cannot_track():
    st = CellStore(lambda k: ("s", "m", f"t{k}", "n"), window_s=1, tau_s=60, max_cells=2)
    st.observe(*_deltas({0: _hist(n=10), 1: _hist(n=20), 2: _hist(n=30)}))
    assert len(st.cells) == 2 and st.untracked == 30
    assert st.add_cell(("s", "m", "t9", "n")) == -3  # _FULL: the table (or a share) is full, counted
    assert st.add_cell(("s", "m", "t0", "n")) == 0
    assert MAX_CELLS == 4096


def test_dispersion_needs_min_seconds_and_is_one_for_identical_seconds():
    h = _hist(n=1000).astype(np.float64)
    codes = np.flatnonzero(h)
    seconds = [(codes.astype(np.int64), h[codes])] * MIN_SECONDS
    cur = h[None, :] * MIN_SECONDS
    phi = dispersion(WindowIndex(seconds, 1), cur, np.cumsum(cur, axis=1), 0.5)
    assert phi.tolist() == [1.0]  # identical seconds: no more spread than binomial (clipped at 1)
    few = dispersion(WindowIndex(seconds[:MIN_SECONDS - 1], 1), cur, np.cumsum(cur, axis=1), 0.5)
    assert few.tolist() == [1.0]
    # seconds alternating between two latencies: the fraction below the median wanders from 0 to 1
    slow = _hist(MEDIAN * 2, n=1000).astype(np.float64)
    both = [(np.flatnonzero(x).astype(np.int64), x[np.flatnonzero(x)]) for x in [h, slow] * (MIN_SECONDS // 2)]
    mix = (h + slow)[None, :] * (MIN_SECONDS // 2)
    phi_mix = dispersion(WindowIndex(both, 1), mix, np.cumsum(mix, axis=1), 0.5)
    assert phi_mix[0] > 100


def test_dispersion_matches_its_definition_on_small_counts_the_overflow_bin_and_an_empty_group():
    """Against the definition (helpers.streams.dispersion_and_definition): groups whose
    quantile bin holds a single call, whose calls sit in the overflow bin, and one with no
    call at all (phi 1, without a numpy warning: 0/0 stays inside)."""
    import warnings

    s = MIN_SECONDS + 2
    dense = np.zeros((s, 4, NBINS))
    for t in range(s):
        dense[t, 0, 40 + (t % 3)] = 1 + (t % 2)        # few calls, the median's bin often holds one
        dense[t, 0, 60] = 1 if t % 4 == 0 else 0
        dense[t, 1, NBINS - 1] = 12 - 9 * (t % 2)      # the overflow bin (durations beyond 2**40 ns)
        dense[t, 1, 100] = 1 + 11 * (t % 2)            # 78 of 168 calls: the median is in the overflow bin
        dense[t, 3, 200 + (t % 2)] = 1                 # one call a second alternating between 2 bins
    wanted = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for q in (0.5, 0.99):
            got, want = wanted[q] = dispersion_and_definition(dense[:, [0, 1, 3]], q)
            np.testing.assert_allclose(got, want, rtol=1e-12)
            hist = dense.sum(axis=0)
            seconds = [(np.flatnonzero(x.reshape(-1)), x.reshape(-1)[np.flatnonzero(x.reshape(-1))]) for x in dense]
            phi = dispersion(WindowIndex(seconds, 4), hist, np.cumsum(hist, axis=1), q)
            assert phi[2] == 1.0 and np.isfinite(phi).all()
            np.testing.assert_allclose(phi[[0, 1, 3]], want, rtol=1e-12)
    # the inputs do wander: phi is computed, not clipped to 1 everywhere
    assert (wanted[0.5][1] > 1.0).all(), wanted


def test_cell_store_first_key_far_above_zero_and_cell_hists_rows():
    st = CellStore(lambda k: ("s", "m", "t", f"n{k}"), window_s=1, tau_s=60)
    st.observe(*_deltas({1000: _hist(n=10)}))  # the first key the aggregator hands over may be any id
    st.observe(*_deltas({100: _hist(n=5)}))
    st.roll(1.0)
    cells, h = st.cell_hists("current")
    assert cells == [("s", "m", "t", "n1000"), ("s", "m", "t", "n100")]
    assert h.shape == (2, NBINS) and h.sum(axis=1).tolist() == [10.0, 5.0]


def test_the_baseline_read_right_after_a_renormalisation_is_not_rescaled():
    """Every ~14 time constants the decay factor is folded into the rows (factor back to 1):
    a read in the same tick sees the same baseline as before the fold."""
    st = CellStore(CELLS.get, window_s=1, tau_s=1.0)
    st.observe(*_deltas({0: _hist(n=1000)}))
    st.roll(0.0)
    st.roll(15.0)  # the second at 0 leaves the window now; exp(-15) < 1e-6: folded
    _, base = st.group_hists()
    assert base.sum() == pytest.approx(1000.0)
    st.roll(16.0)
    assert st.group_hists()[1].sum() == pytest.approx(1000.0 * np.exp(-1.0))


def test_a_sub_second_window_decays_the_baseline_from_the_first_second_on():
    """detector_window takes durations such as 500ms: what leaves such a window in the
    daemon's first second decays from then on, not from one second later."""
    st = CellStore(CELLS.get, window_s=0.5, tau_s=1.0)
    st.observe(*_deltas({0: _hist(n=1000)}))
    st.roll(100.0)
    st.roll(100.5)  # the second at 100.0 leaves the window: baseline, weight 1 now
    assert st.group_hists()[1].sum() == pytest.approx(1000.0)
    st.roll(101.0)
    assert st.group_hists()[1].sum() == pytest.approx(1000.0 * np.exp(-0.5))


def test_status_and_document_say_what_the_detector_runs_with():
    det = _pinned_detector(persistence=2)
    _play(det, "RRR")
    st = det.status()
    flags = st.pop("flags")
    assert st == {"baseline": "good", "window_s": 1, "trailing_s": 60, "min_effect": 0.05, "min_count": 1000,
                  "persistence": 2, "z": 4.0, "groups": 1, "evaluated": 1, "flagged_total": 2,
                  "untracked_records": 0, "flags_count": 2}
    assert sorted(f["quantile"] for f in flags) == ["p50", "p99"]
    doc = det.document("saved", "current", {"saved_ts": 5.0})
    assert (doc["name"], doc["source"], doc["saved_ts"]) == ("saved", "current", 5.0)


def test_rows_carry_both_windows_figures_and_only_judgeable_groups_are_listed():
    """A row gives each quantile's current and baseline values (0.1 ns) and counts; a group
    that appears later gets its own persistence state; a group under min_count is not listed.
    The pinned baseline of a group sums its op names' histograms."""
    det = Detector(CELLS.get, DetectorConfig(window_s=1, trailing_s=60, persistence=1, min_count=1000))
    half = _hist(n=5 * PER_SECOND)
    doc = baselinefmt.encode("two", [CELLS[0], CELLS[1]], np.stack([half, half]), {})
    det.pin("two", doc)
    det.observe(*_deltas({0: STEP["N"]}))
    v = det.tick(1000.0)
    row = v.rows[0]["p50"]
    assert row["n_base"] == 10 * PER_SECOND and row["n_cur"] == PER_SECOND  # both op names of the group
    assert row["base_ns"] == pytest.approx(MEDIAN, rel=0.02) and row["cur_ns"] == pytest.approx(MEDIAN, rel=0.02)
    assert row["base_ns"] == round(row["base_ns"], 1) and row["shift"] == round(row["shift"], 4)
    # a second group (Add) appears at the next tick, under min_count: evaluated, not listed
    det.observe(*_deltas({0: STEP["R"], 2: _hist(n=999)}))
    v = det.tick(1001.0)
    assert v.groups == 2 and [r["op_type"] for r in v.rows] == ["MatMul"]
    assert [(f["op_type"], f["quantile"]) for f in v.flags] == [("MatMul", "p50"), ("MatMul", "p99")]
    # Add has no pinned baseline: not judged, not listed, its persistence state clean
    det.observe(*_deltas({0: STEP["N"], 2: _hist(n=1000)}))
    v = det.tick(1002.0)
    assert [r["op_type"] for r in v.rows] == ["MatMul"] and det.flagged[1].tolist() == [False, False]


@pytest.mark.parametrize("quiet", ["fewer", "none", "thin_tail"])
def test_a_flag_clears_when_the_group_can_no_longer_be_judged(quiet):
    """Calm is also "no evidence left": a flagged group whose window drops below min_count,
    stops (no ratio), or keeps too few calls beyond the p99 to read it, clears after
    `persistence` such evaluations, even though its last estimate was high."""
    det = _pinned_detector(persistence=2)
    views = _play(det, "RR")
    assert _flagged(views, "p99") == [1]
    slow = {"fewer": _hist(MEDIAN * 1.2, n=999), "none": None, "thin_tail": _hist(MEDIAN * 1.2, n=1999)}[quiet]
    for i in range(3):
        if slow is not None:
            det.observe(*_deltas({0: slow}))
        views.append(det.tick(1002.0 + i))
    p99 = _flagged(views, "p99")
    assert p99 == [1, 2], p99  # one calm evaluation keeps it, the second clears it
    if quiet == "thin_tail":  # 1999 calls: the p50 is still judged, and still regressed
        assert _flagged(views, "p50") == [1, 2, 3, 4]
    assert det.flagged_total == 2
