"""One C call per agent BATCH frame (issue 21, ``_batchgroup.ingest_frame`` through
``Aggregator.ingest_frame``): a daemon that takes it and one that takes only the Python steps
(``Ingest._batch_steps``, the reference) end every frame in the same state: counters,
rejects by reason, steps, the since-start arrays, the window slots, the detector's cells and
pending rows, the stored records; on random frames with refused records, keypoints, new
keys past the cap, relabels, two senders, window rollovers and (small buffers) merges
between frames. A frame naming an undefined name id is refused with nothing changed on
the new path too; bad arguments to the C call are refused with nothing written."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from aclprofd.aggregate import windows
from aclprofd.aggregate.aggregator import _FINE_OF_BIN, _PROM_OF_BIN
from aclprofd.aggregate.keys import KeySource
from aclprofd.aggregate.quantiles import NFINE, NPROM
from aclprofd.config import Settings
from aclprofd.conn import Conn
from aclprofd.detector import state
from aclprofd.ingest import MAX_DURATION_NS
from aclprofd.server import Daemon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclprof.protocol._batchgroup import ingest_frame
from aclprof.protocol.quantshift import BIN_UPPER_NS
from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE, Kind, ProtocolError

_T0 = 1_700_000_000.0
_ARRAYS = ("count", "total", "min", "max", "hist", "prom", "prom_sum", "fine", "fine_sum", "last_fed")
_NAMES = {i: f"op{i}" for i in range(1, 9)}
_BAD = 0xFFFFFFFF
#: durations on and past the histogram's edges, 0, and past MAX_DURATION_NS (refused)
_EDGY = [0, 1, int(BIN_UPPER_NS[5]), int(BIN_UPPER_NS[5]) + 1, int(BIN_UPPER_NS[-1]) + 1, 12_345,
         MAX_DURATION_NS, MAX_DURATION_NS + 1]

_record = st.tuples(st.sampled_from([0, 1, 2, _BAD]), st.sampled_from([0, 1, _BAD]), st.integers(1, 8),
                    st.integers(1, 8), st.sampled_from(_EDGY) | st.integers(0, 1 << 40), st.booleans(),
                    st.integers(0, 30) | st.just(-5))  # end - start - duration
frames = st.lists(st.tuples(
    st.lists(_record, max_size=40),
    st.booleans(),                                     # refused records kept (else made good)
    st.integers(1, 3),                                 # sent this many times
    st.sampled_from([0.0, 0.0, 0.2, 1.0, 11.0, 61.0]),  # the clock before the frame
    st.integers(0, 1),                                 # which of two agents
    st.sampled_from([None, None, "", "resnet"])), min_size=1, max_size=12)  # a WATCH label of model 1


def _good(rows: list[tuple[int, int, int, int, int, bool, int]]) -> list[tuple[int, int, int, int, int, bool, int]]:
    """The rows with the values Ingest.rejects refuses made good: the usual frame."""
    return [(model % _BAD, dev % _BAD, name, typ, min(dur, MAX_DURATION_NS), kp, abs(slack))
            for model, dev, name, typ, dur, kp, slack in rows]


def _payload(rows: list[tuple[int, int, int, int, int, bool, int]]) -> bytes:
    recs = np.zeros(len(rows), RECORD_DTYPE)
    for i, (model, dev, name, typ, dur, keypoint, slack) in enumerate(rows):
        start = 1_000_000 + 1000 * i
        end = (start + dur + slack) & ((1 << 64) - 1) if dur + slack >= 0 else start - 1
        recs[i] = (model, name, typ, FLAG_KEYPOINT if keypoint else 0, 1, dev, start, end, dur, 0)
    return recs.tobytes()


@contextmanager
def _clock(at: list[float]) -> Iterator[None]:
    real = time.time
    time.time = lambda: at[0]
    try:
        yield
    finally:
        time.time = real


class _Pair:
    """Two daemons fed the same frames: ``new`` as shipped, ``ref`` with the C call per frame
    turned off (every frame through the Python steps)."""

    def __init__(self, root: str, max_keys: int) -> None:
        self.daemons = []
        self.socks: list[socket.socket] = []
        for name in ("new", "ref"):
            d = Daemon(Settings(socket=os.path.join(root, name, "s"), data_dir=os.path.join(root, name, "data"),
                                max_keys=max_keys))
            conns = []
            for i in range(2):
                a, b = socket.socketpair()
                self.socks += [a, b]
                c = Conn(a, f"agent{i}")
                c.role, c.pid, c.host, c.service = "agent", 10 + i, "h", f"svc{i}"
                c.keysrc = KeySource("h", 10 + i, f"svc{i}")
                c.names = dict(_NAMES)
                c.names_order = list(_NAMES.items())
                conns.append(c)
            self.daemons.append((d, conns))
        self.daemons[1][0].aggregator.ingest_frame = lambda *a, **k: None  # type: ignore[method-assign]

    def close(self) -> None:
        for s in self.socks:
            s.close()

    def feed(self, who: int, payload: bytes) -> list[Any]:
        """The frame to both; what each raised (None: nothing)."""
        out = []
        for d, conns in self.daemons:
            try:
                d._handle(conns[who], Kind.BATCH, memoryview(payload))
                out.append(None)
            except ProtocolError as exc:
                out.append(str(exc))
        return out

    def watch(self, who: int, label: str) -> None:
        for _, conns in self.daemons:
            conns[who].keysrc.set_label(1, label)

    def same(self) -> None:
        (new, nconns), (ref, rconns) = self.daemons
        a, b = new.aggregator, ref.aggregator
        assert a.nkeys == b.nkeys
        assert [a.keys.identity(k) for k in range(a.nkeys)] == [b.keys.identity(k) for k in range(b.nkeys)]
        for name in _ARRAYS:
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        assert a.other_records == b.other_records and a.dirty == b.dirty
        for ctr in ("records_total", "steps_total", "records_rejected"):
            assert getattr(new.counters, ctr) == getattr(ref.counters, ctr), ctr
        for c, r in zip(nconns, rconns):
            assert (c.records, c.rejected, c.steps, c.pending_bytes) == (r.records, r.rejected, r.steps,
                                                                         r.pending_bytes)
            assert [bytes(p) for _, p in c.pending_store] == [bytes(p) for _, p in r.pending_store]
            assert c.lag_ns is None if r.lag_ns is None else c.lag_ns is not None
            assert c.clock_offsets.keys() == r.clock_offsets.keys()
        assert [s.second for s in a.sliding.slots] == [s.second for s in b.sliding.slots]
        for x, y in zip(a.sliding.slots, b.sliding.slots):
            x.compact()
            y.compact()
            for col in ("keys", "count", "total", "min", "max", "codes", "hcount"):
                assert np.array_equal(getattr(x, col), getattr(y, col)), col
        now = time.time()
        for window in a.window_names():
            assert all(np.array_equal(x, y) for x, y in zip(a.sliding.figures(window, now),
                                                            b.sliding.figures(window, now))), window
        cs, rs = new.detection.detector.store, ref.detection.detector.store
        assert cs.untracked == rs.untracked and cs.cells == rs.cells
        n = min(len(cs.key_cell), len(rs.key_cell))
        assert np.array_equal(cs.key_cell[:n], rs.key_cell[:n])
        assert (cs.key_cell[n:] == -1).all() and (rs.key_cell[n:] == -1).all()
        pc, pr = cs._merge_pending(), rs._merge_pending()
        assert pc[0].tolist() == pr[0].tolist() and pc[1].tolist() == pr[1].tolist()


def _play(tmp: str, steps: list, max_keys: int) -> _Pair:
    pair = _Pair(tmp, max_keys)
    at = [_T0]
    try:
        with _clock(at):
            for rows, refused, times, step, who, label in steps:
                at[0] += step
                if label is not None:
                    pair.watch(who, label)
                for _ in range(times):
                    got = pair.feed(who, _payload(rows if refused else _good(rows)))
                    assert got[0] == got[1]
                    pair.same()
            for (d, _) in pair.daemons:
                d.detection.detector.tick(at[0] + 1)
            (new, _), (ref, _) = pair.daemons
            cs, rs = new.detection.detector.store, ref.detection.detector.store
            assert np.array_equal(cs.cur, rs.cur) and np.array_equal(cs.gcur, rs.gcur)
            for window in ("all", *new.aggregator.window_names()):
                assert new.aggregator.snapshot(window, "name", now=at[0]) == ref.aggregator.snapshot(window, "name",
                                                                                                    now=at[0])
    finally:
        pair.close()
    return pair


@pytest.fixture(params=["default", "small"])
def buffers(request: pytest.FixtureRequest) -> Iterator[None]:
    """The buffers as shipped, or so small that frames often fill them (merges between
    frames, and frames too large for a whole buffer going the Python way)."""
    if request.param == "default":
        yield
        return
    old = windows.COMPACT_ROWS, state.PENDING_MERGE_ROWS
    windows.COMPACT_ROWS = state.PENDING_MERGE_ROWS = 12
    try:
        yield
    finally:
        windows.COMPACT_ROWS, state.PENDING_MERGE_ROWS = old


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames, st.sampled_from([2, 6, 10_000]))
def test_the_c_call_per_frame_ends_each_frame_as_the_python_steps_do(tmp_path_factory, buffers, steps, max_keys):
    _play(str(tmp_path_factory.mktemp("pair")), steps, max_keys)


def test_the_usual_frame_takes_the_c_call(tmp_path):
    rows = [(1, 0, 1 + i % 8, 1 + i % 3, 1000 + 37 * i, i == 5, 3) for i in range(40)]
    steps = [(rows, False, 6, 0.0, 0, None), (rows, False, 1, 1.0, 0, None), (rows, False, 3, 0.1, 0, None)]
    pair = _play(str(tmp_path), steps, 10_000)
    agg = pair.daemons[0][0].aggregator
    # only the first frame (new keys and cells) took the Python steps
    assert agg.frames_python == 1
    store = pair.daemons[0][0].detection.detector.store
    assert store.cell_buf.shape[1] >= state.PENDING_MERGE_ROWS


def test_room_is_made_before_the_c_call_which_runs_once_a_frame(tmp_path, monkeypatch):
    """A frame that may not fit in the rest of the slot's buffer or of the detector's cell
    buffer (at most one row of each per record) has them merged first, and the C call runs
    once and writes it. It used to refuse such a frame after its records pass and cache
    lookup and run again after the merge: ~20 % of the frames of 5,000 records (issue 21)."""
    from aclprofd.aggregate import aggregator

    monkeypatch.setattr(windows, "COMPACT_ROWS", 64)
    monkeypatch.setattr(state, "PENDING_MERGE_ROWS", 64)
    statuses: list[int] = []
    real = aggregator._ingest_frame

    def counting(*args: Any) -> Any:
        got = real(*args)
        statuses.append(got[0])
        return got

    monkeypatch.setattr(aggregator, "_ingest_frame", counting)
    rows = [(1, 0, 1 + i % 8, 1 + i % 3, 1000 + 37 * i, False, 3) for i in range(40)]
    # 40 records, 24 keys, ~30 histogram rows a frame: the 64-row buffers fill every frame or two
    pair = _play(str(tmp_path), [(rows, False, 1, 0.0, 0, None)] + [(rows, False, 1, 0.1, 0, None)] * 8, 10_000)
    agg = pair.daemons[0][0].aggregator
    assert agg.frames_python == 1  # the first frame: new keys (2), the Python steps
    # then each frame done in one call (4, 5: no room, and called again after a merge)
    assert statuses == [2] + [0] * 8, statuses


def test_an_undefined_name_id_is_refused_with_nothing_changed_on_the_c_path(tmp_path):
    pair = _Pair(str(tmp_path), 10_000)
    at = [_T0]
    warm = _payload([(1, 0, 2, 3, 500, False, 0), (1, 0, 4, 3, 800, False, 0)])
    try:
        with _clock(at):
            pair.feed(0, warm)
            pair.feed(0, warm)  # the C call's: cached keys, this second's slot
            d, conns = pair.daemons[0]
            agg, store = d.aggregator, d.detection.detector.store
            assert agg.frames_python == 1
            before = {k: getattr(agg, k).copy() for k in _ARRAYS}
            buf = agg.sliding.slots[-1].buf
            assert buf is not None
            fills = (buf.gfill, buf.hfill, store.cfill, store.untracked, agg.other_records, agg.nkeys)
            records = (d.counters.records_total, conns[0].records, len(conns[0].pending_store))
            bad = _payload([(1, 0, 2, 3, 500, False, 0), (1, 0, 99, 3, 800, False, 0)])  # name id 99: never defined
            got = pair.feed(0, bad)
            assert got[0] == got[1] and "name id 99" in got[0]
            for k in _ARRAYS:
                assert np.array_equal(getattr(agg, k), before[k]), k
            assert (buf.gfill, buf.hfill, store.cfill, store.untracked, agg.other_records, agg.nkeys) == fills
            assert (d.counters.records_total, conns[0].records, len(conns[0].pending_store)) == records
            pair.same()
    finally:
        pair.close()


def _args(recs: np.ndarray, cap: int = 8) -> list[Any]:
    """ingest_frame's arguments: a cache of the pair (model 1/device 0, name 2/type 3) as key 1."""
    dm, code = np.uint64(1 << 32), np.uint64(2 << 32 | 3)
    with np.errstate(over="ignore"):
        h = dm * np.uint64(0x9E3779B97F4A7C15) ^ code
    nbins = len(BIN_UPPER_NS) + 1
    return [recs.tobytes(), MAX_DURATION_NS, BIN_UPPER_NS, np.array([h], np.uint64), np.array([dm], np.uint64),
            np.array([code], np.uint64), np.array([1], np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
            np.full(cap, 1 << 62, np.int64), np.zeros(cap, np.int64), np.zeros(cap * nbins, np.int64),
            np.zeros(cap * NPROM, np.int64), np.zeros(cap, np.int64), _PROM_OF_BIN, np.zeros(cap * NFINE, np.int64),
            np.zeros(cap, np.int64), _FINE_OF_BIN, np.zeros(cap), 5.5, 0, np.zeros((5, 4), np.int64), 0,
            np.zeros((2, 4), np.int64), 0, np.array([-2, 0], np.int64), np.zeros((2, 4), np.int64), 0, None]


def _recs(n: int = 3) -> np.ndarray:
    recs = np.zeros(n, RECORD_DTYPE)
    recs["model_id"], recs["op_name"], recs["op_type"] = 1, 2, 3
    recs["duration"] = recs["end"] = np.arange(n) * 1000 + 700
    return recs


def test_ingest_frame_folds_a_frame_and_appends_its_rows():
    a = _args(_recs())
    status, ops, groups, m, others, untracked, mc, keypoints, device, max_end = ingest_frame(*a)
    assert (status, ops, groups, keypoints, device, max_end) == (0, 3, 1, 0, 0, 2700)
    assert a[7].tolist()[:2] == [0, 3] and a[8][1] == 700 + 1700 + 2700
    assert a[21][:, 0].tolist() == [1, 3, 5100, 700, 2700]
    codes = a[23][0, :m].tolist()
    assert codes == sorted(codes) and int(a[23][1, :m].sum()) == 3 and (others, untracked) == (0, 0)
    assert mc == m and a[26][0, :mc].tolist() == [c % (len(BIN_UPPER_NS) + 1) for c in codes]  # key 1 -> cell 0


@pytest.mark.parametrize("why, status", [("miss", 2), ("cell", 3), ("slot", 4), ("cells", 5), ("bad", 1),
                                         ("part", 1)])
def test_ingest_frame_leaves_a_frame_it_cannot_take_with_nothing_written(why, status):
    recs = _recs()
    a = _args(recs)
    if why == "miss":
        a[5] = np.array([9], np.uint64)
    elif why == "cell":
        a[25] = np.array([-2, -1], np.int64)
    elif why == "slot":
        a[22] = 4
    elif why == "cells":
        a[27] = 3
    elif why == "bad":
        recs["end"][1] = 0
        recs["start"][1] = 5
        a[0] = recs.tobytes()
    else:
        a[0] = recs.tobytes()[:-1]
    before = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
    assert ingest_frame(*a)[0] == status
    for i, x in enumerate(a):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, before[i]), i


@pytest.mark.parametrize("bad", ["fill", "rows", "key", "table", "nargs"])
def test_ingest_frame_refuses_bad_arguments_with_nothing_written(bad):
    a = _args(_recs())
    if bad == "fill":
        a[24] = 5
    elif bad == "rows":
        a[23] = np.zeros(7, np.int64)  # not 2 rows
    elif bad == "key":
        a[6] = np.array([8], np.int64)  # past the 8 rows
    elif bad == "table":
        a[17] = _FINE_OF_BIN[:-1].copy()
    before = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
    with pytest.raises(TypeError if bad == "nargs" else ValueError, match="ingest_frame"):
        ingest_frame(*(a[:-1] if bad == "nargs" else a))
    for i, x in enumerate(a):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, before[i]), i


def test_the_cache_index_finds_what_the_binary_search_finds_and_a_stale_one_only_misses():
    src = KeySource("h", 1, "s")
    rng = np.random.default_rng(3)
    dm = rng.integers(0, 1 << 40, 300).astype(np.uint64)
    code = rng.integers(0, 1 << 40, 300).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = dm * np.uint64(0x9E3779B97F4A7C15) ^ code
    order = np.argsort(h)
    src.hashes, src.dms, src.codes = h[order], dm[order], code[order]
    src.keys = np.arange(300, dtype=np.int64)[order]
    index = src.hash_index()
    assert len(index) == 1024 and src.hash_index() is index  # built once per cache
    hits = [int(np.flatnonzero(index == i + 1)[0]) for i in range(300)]
    assert len(set(hits)) == 300
    from aclprof.protocol._batchgroup import cache_index
    stale = np.empty(16, np.int32)
    cache_index(src.hashes[:5], stale)
    recs = _recs()
    for idx, want in ((None, 0), (np.zeros(8, np.int32), 2), (stale, 2)):
        a = _args(recs)
        a[28] = idx
        assert ingest_frame(*a)[0] == want
    a = _args(recs)
    a[28] = np.empty(4, np.int32)
    cache_index(a[3], a[28])  # the args' cache: its one pair found through the index
    assert ingest_frame(*a)[0] == 0 and a[7][1] == 3


@pytest.mark.parametrize("size", [3, 1, 0])
def test_cache_index_refuses_a_table_too_small_or_not_a_power_of_two(size):
    from aclprof.protocol._batchgroup import cache_index
    with pytest.raises(ValueError, match="cache_index"):
        cache_index(np.arange(2, dtype=np.uint64), np.zeros(size, np.int32))


def test_the_aggregator_does_not_count_the_detectors_store_as_its_memory(tmp_path):
    """aclprofd.memory counts each table's arrays from its owner; the aggregator only refers
    to the detector's cell store (a weak reference): counted there, not twice."""
    from aclprofd.memory import array_bytes
    pair = _Pair(str(tmp_path), 10_000)
    try:
        d = pair.daemons[0][0]
        store = d.detection.detector.store
        assert d.aggregator.cells is store
        before = array_bytes(d.aggregator)
        store.cell_buf = np.empty((2, 1 << 16), np.int64)
        assert array_bytes(d.aggregator) == before
        assert array_bytes(d.detection.detector) >= store.cell_buf.nbytes
    finally:
        pair.close()


def test_rows_written_in_c_alone_are_folded_at_the_roll():
    """A second whose only detector rows came from the C call (no Python ``observe`` since the
    last roll) still reaches the window: the roll folds ``cell_buf``'s rows by themselves."""
    store = state.CellStore(lambda k: ("svc", "1", f"T{k}", "n"), window_s=5, tau_s=10)
    cell = store.add_cell(("svc", "1", "MatMul", "n"))
    buf = store.cell_room()
    buf[0, 0], buf[1, 0] = cell * state.NBINS + 7, 3
    store.fed(1, 0)
    store.roll(100.0)
    assert store.cur[cell, 7] == 3 and store.cfill == 0
    assert store.group_counts()[0].tolist() == [3.0]
