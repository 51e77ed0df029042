"""aclprof.protocol._batchgroup (issue 21): the aggregator's one C pass over a batch gives
exactly what the numpy path gave: groups by (model/device, name/type) with their count,
total, min and max, each op's group and its histogram bin (quantshift.bin_index), step
keypoint records left out."""

from __future__ import annotations

import numpy as np
import pytest

from aclprof.protocol._batchgroup import group
from aclprof.protocol.quantshift import BIN_UPPER_NS, NBINS, bin_index
from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE


def _group(recs: np.ndarray):
    out = np.empty((8, max(1, len(recs))), np.int64)
    ops, g = group(recs, BIN_UPPER_NS, out[0].view(np.uint64), out[1].view(np.uint64), *out[2:])
    return ops, g, out


def _reference(recs: np.ndarray):
    ops = recs[(recs["flag"] & FLAG_KEYPOINT) == 0]
    groups: dict[tuple[int, int], list[int]] = {}
    inv = []
    for r in ops.tolist():
        model, name, typ, _flag, _thread, dev = r[0], r[1], r[2], r[3], r[4], r[5]
        key = ((model << 32) | dev, (name << 32) | typ)
        inv.append(list(groups).index(key) if key in groups else len(groups))
        groups.setdefault(key, []).append(int(np.int64(np.uint64(r[8]).astype(np.int64))))
    return ops, groups, inv


def _random_batch(rng: np.random.Generator, n: int) -> np.ndarray:
    recs = np.zeros(n, RECORD_DTYPE)
    recs["model_id"] = rng.integers(0, 3, n) * 0xFFFF0000
    recs["device_id"] = rng.integers(0, 2, n)
    recs["op_name"] = rng.integers(0, 5, n) * 0x10000001
    recs["op_type"] = rng.integers(0, 3, n)
    recs["flag"] = np.where(rng.random(n) < 0.1, FLAG_KEYPOINT, 0) | rng.integers(0, 4, n)
    edges = BIN_UPPER_NS[rng.integers(0, len(BIN_UPPER_NS), n)].astype(np.uint64)
    picks = rng.integers(0, 5, n)
    recs["duration"] = np.select(
        [picks == 0, picks == 1, picks == 2, picks == 3],
        [edges, edges + np.uint64(1), rng.integers(0, 1 << 45, n).astype(np.uint64),
         np.uint64((1 << 64) - 5)],  # a negative int64: bin 0, like the numpy path
        rng.integers(0, 3, n).astype(np.uint64))
    return recs


@pytest.mark.parametrize("seed", range(6))
def test_group_matches_the_reference_grouping_and_bin_index(seed):
    rng = np.random.default_rng(seed)
    recs = _random_batch(rng, int(rng.integers(1, 3000)))
    ops, g, out = _group(recs)
    want_ops, groups, inv = _reference(recs)
    assert ops == len(want_ops) and g == len(groups)
    keys = list(groups)
    assert out[0, :g].view(np.uint64).tolist() == [k[0] for k in keys]
    assert out[1, :g].view(np.uint64).tolist() == [k[1] for k in keys]
    assert out[2, :g].tolist() == [len(v) for v in groups.values()]
    assert out[3, :g].tolist() == [int(np.sum(np.array(v, np.int64))) for v in groups.values()]
    assert out[4, :g].tolist() == [min(v) for v in groups.values()]
    assert out[5, :g].tolist() == [max(v) for v in groups.values()]
    assert out[6, :ops].tolist() == inv
    assert out[7, :ops].tolist() == bin_index(want_ops["duration"].astype(np.int64)).tolist()
    assert out[7, :ops].max() <= NBINS - 1


def test_group_bins_every_edge_and_power_of_two_as_bin_index_does():
    """The bin search starts from the duration's octave (issue 21): on, beside and between
    every bin edge, around every power of two, and past the last edge it finds bin_index's bin."""
    twos = np.uint64(1) << np.arange(64, dtype=np.uint64)
    edges = BIN_UPPER_NS.astype(np.uint64)
    d = np.unique(np.concatenate([np.arange(0, 2100, dtype=np.uint64), edges, edges + np.uint64(1),
                                  edges - np.uint64(1), twos, twos + np.uint64(1), twos - np.uint64(1)]))
    recs = np.zeros(len(d), RECORD_DTYPE)
    recs["duration"] = d
    ops, _, out = _group(recs)
    assert ops == len(d)
    assert out[7, :ops].tolist() == bin_index(d.astype(np.int64)).tolist()


def test_group_of_keypoints_only_and_of_nothing():
    recs = np.zeros(3, RECORD_DTYPE)
    recs["flag"] = FLAG_KEYPOINT
    assert _group(recs)[:2] == (0, 0)
    assert _group(recs[:0])[:2] == (0, 0)


def test_group_refuses_bad_buffers():
    recs = np.zeros(4, RECORD_DTYPE)
    short = np.empty((8, 2), np.int64)
    with pytest.raises(ValueError, match="needs 32"):
        group(recs, BIN_UPPER_NS, short[0].view(np.uint64), short[1].view(np.uint64), *short[2:])
    out = np.empty((8, 4), np.int64)
    with pytest.raises(ValueError, match="whole number"):
        group(recs.view(np.uint8)[:-1], BIN_UPPER_NS, out[0].view(np.uint64), out[1].view(np.uint64), *out[2:])
    with pytest.raises(TypeError, match="takes 10 arguments"):
        group(recs, BIN_UPPER_NS)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty(4, np.int64)
        ro.setflags(write=False)
        group(recs, BIN_UPPER_NS, ro, *out[1:])


@pytest.mark.parametrize("seed", range(4))
def test_count_bad_counts_what_the_daemons_rejects_refuses(seed):
    """count_bad (the daemon's pre-check, issue 21) counts exactly the records Ingest.rejects
    refuses: a duration above the limit, an end before the start, a model or device id of
    0xFFFFFFFF; 0 lets the usual batch skip the numpy checks."""
    from aclprof.protocol._batchgroup import count_bad

    rng = np.random.default_rng(seed)
    n = 500
    recs = np.zeros(n, RECORD_DTYPE)
    limit = 1 << 50
    recs["duration"] = np.where(rng.random(n) < 0.05, limit + rng.integers(0, 2, n), rng.integers(0, limit, n))
    recs["start"] = rng.integers(0, 1 << 62, n)
    recs["end"] = np.where(rng.random(n) < 0.05, recs["start"] - 1, recs["start"] + rng.integers(0, 9, n))
    recs["model_id"] = np.where(rng.random(n) < 0.03, 0xFFFFFFFF, rng.integers(0, 0xFFFFFFFF, n))
    recs["device_id"] = np.where(rng.random(n) < 0.03, 0xFFFFFFFF, rng.integers(0, 0xFFFFFFFE, n))
    bad = ((recs["duration"] > np.uint64(limit)) | (recs["end"] < recs["start"])
           | (recs["model_id"] == 0xFFFFFFFF) | (recs["device_id"] == 0xFFFFFFFF))
    assert bad.any() and count_bad(recs, limit) == int(bad.sum())
    assert count_bad(recs[~bad], limit) == 0 and count_bad(recs[:0], limit) == 0
    with pytest.raises(ValueError, match="whole number"):
        count_bad(recs.view(np.uint8)[:-3], limit)


@pytest.mark.parametrize("seed", range(4))
def test_fold_adds_like_the_numpy_ufunc_at_calls_it_replaces(seed):
    """fold (issue 21) leaves the since-start arrays exactly as np.add.at / minimum.at /
    maximum.at and the Prometheus bucket map did, repeated keys (the "other" key) included;
    a bad index changes nothing."""
    from aclprof.protocol._batchgroup import fold

    rng = np.random.default_rng(seed)
    cap, nprom = 50, 29
    prom_of_bin = np.clip(-(-np.arange(NBINS) // 8) - 7, 0, nprom - 1).astype(np.int64)
    acc = [rng.integers(0, 1000, cap), rng.integers(0, 10**6, cap), rng.integers(0, 10**6, cap),
           rng.integers(0, 10**6, cap), rng.integers(0, 99, (cap, NBINS)), rng.integers(0, 99, (cap, nprom)),
           rng.integers(0, 10**6, cap)]
    acc = [a.astype(np.int64) for a in acc]
    g = 40
    keys = rng.integers(0, cap, g).astype(np.int64)
    cols = [rng.integers(1, 50, g), rng.integers(0, 10**7, g), rng.integers(0, 10**6, g), rng.integers(0, 10**7, g)]
    count, total, mn, mx = (c.astype(np.int64) for c in cols)
    hcodes = np.unique(rng.integers(0, cap * NBINS, 200)).astype(np.int64)
    hcount = rng.integers(1, 9, len(hcodes)).astype(np.int64)
    want = [a.copy() for a in acc]
    np.add.at(want[0], keys, count)
    np.add.at(want[1], keys, total)
    np.minimum.at(want[2], keys, mn)
    np.maximum.at(want[3], keys, mx)
    np.add.at(want[4].reshape(-1), hcodes, hcount)
    pk, pb = np.divmod(hcodes, NBINS)
    np.add.at(want[5], (pk, prom_of_bin[pb]), hcount)
    np.add.at(want[6], keys, total)
    fold(keys, count, total, mn, mx, hcodes, hcount, *acc, prom_of_bin)
    for got, w in zip(acc, want):
        assert np.array_equal(got, w)
    before = [a.copy() for a in acc]
    bad_keys = keys.copy()
    bad_keys[-1] = cap
    with pytest.raises(ValueError, match="outside the 50 rows"):
        fold(bad_keys, count, total, mn, mx, hcodes, hcount, *acc, prom_of_bin)
    bad_codes = hcodes.copy()
    bad_codes[-1] = cap * NBINS
    with pytest.raises(ValueError, match="outside the table"):
        fold(keys, count, total, mn, mx, bad_codes, hcount, *acc, prom_of_bin)
    with pytest.raises(ValueError, match="differ in length"):
        fold(keys[:-1], count, total, mn, mx, hcodes, hcount, *acc, prom_of_bin)
    for got, w in zip(acc, before):
        assert np.array_equal(got, w)


def _sum_reference(codes: np.ndarray, counts: np.ndarray | None) -> tuple[list[int], list[int]]:
    sums: dict[int, int] = {}
    for i, c in enumerate(codes.tolist()):
        sums[c] = sums.get(c, 0) + (1 if counts is None else int(counts[i]))
    keys = sorted(sums)
    # int64 wrap, like numpy's sum
    return keys, [int(np.int64(np.uint64(sums[k] % 2**64).astype(np.int64))) for k in keys]


@pytest.mark.parametrize("seed", range(12))
def test_sum_codes_combines_equal_codes_into_sorted_exact_sums(seed):
    """The detector's, the windows' and the aggregator's merges (issue 21: they were
    np.unique + a float bincount): distinct codes ascending, their counts summed exactly,
    negative codes and counts, wide and narrow code ranges, sums that wrap like int64."""
    from aclprof.protocol._batchgroup import sum_codes
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    spread = [3, 200, 5000, 2**40, 2**62][seed % 5]
    codes = rng.integers(-spread, spread, n, dtype=np.int64)
    counts = rng.integers(-5, 2**62 if seed % 3 == 0 else 50, n, dtype=np.int64)
    for cnt in (counts, None):
        oc, os_ = np.empty(n, np.int64), np.empty(n, np.int64)
        m = sum_codes(codes, cnt, oc, os_)
        keys, sums = _sum_reference(codes, cnt)
        assert oc[:m].tolist() == keys
        assert os_[:m].tolist() == sums


def test_sum_codes_of_nothing_and_of_extremes():
    from aclprof.protocol._batchgroup import sum_codes
    out = np.empty((2, 4), np.int64)
    assert sum_codes(np.zeros(0, np.int64), None, out[0], out[1]) == 0
    big = np.array([2**63 - 1, -2**63, 0, -2**63], np.int64)
    m = sum_codes(big, np.array([1, 2, 3, 4], np.int64), out[0], out[1])
    assert out[0, :m].tolist() == [-2**63, 0, 2**63 - 1]
    assert out[1, :m].tolist() == [6, 3, 1]


def test_sum_codes_refuses_bad_buffers():
    from aclprof.protocol._batchgroup import sum_codes
    codes = np.arange(4, dtype=np.int64)
    room = np.empty(4, np.int64)
    with pytest.raises(ValueError, match="counts"):
        sum_codes(codes, np.ones(3, np.int64), room, room.copy())
    with pytest.raises(ValueError, match="room"):
        sum_codes(codes, None, np.empty(3, np.int64), room)
    with pytest.raises(ValueError, match="int64"):
        sum_codes(np.zeros(3, np.int8), None, room, room.copy())
    with pytest.raises(TypeError):
        sum_codes(codes, None, room)


def test_group_sum_gives_what_np_unique_and_bincount_gave():
    """quantiles.group_sum (now sum_codes) against the numpy calls it replaces, on the
    narrowed int32 codes the window slots keep."""
    from aclprofd.aggregate.quantiles import group_sum
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 40_000, 20_000).astype(np.int32)
    counts = rng.integers(1, 1000, 20_000).astype(np.int32)
    u, inv = np.unique(codes, return_inverse=True)
    want = np.bincount(inv, weights=counts, minlength=len(u)).astype(np.int64)
    got_u, got = group_sum(codes, counts)
    assert got_u.dtype == np.int64 and got.dtype == np.int64
    assert np.array_equal(got_u, u) and np.array_equal(got, want)
    got_u, got = group_sum(codes, None)
    assert np.array_equal(got, np.bincount(inv, minlength=len(u)))


@pytest.mark.parametrize("seed", range(8))
def test_cache_lookup_finds_what_the_numpy_search_found(seed):
    """KeyRegistry.resolve's cache search (issue 21: pair_hash, searchsorted and three
    gathers in numpy before): same hashes, same hits and keys, misses in order, including
    pairs whose hash is cached for another pair (a collision: a miss) and an empty cache."""
    from aclprofd.aggregate.keys import pair_hash

    from aclprof.protocol._batchgroup import cache_lookup
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(0, 300)), int(rng.integers(1, 400))
    cdm = rng.integers(0, 6, m).astype(np.uint64) << np.uint64(32) | rng.integers(0, 3, m).astype(np.uint64)
    ccode = rng.integers(0, 2**40, m).astype(np.uint64)
    hashes = pair_hash(cdm, ccode)
    order = np.argsort(hashes, kind="stable")
    hashes, cdm, ccode = hashes[order], cdm[order], ccode[order]
    first = np.r_[True, hashes[1:] != hashes[:-1]] if m else np.zeros(0, bool)
    hashes, cdm, ccode = hashes[first], cdm[first], ccode[first]
    ckeys = rng.integers(0, 10**6, len(hashes)).astype(np.int64)
    # the batch: some cached pairs, some new ones, one that collides with a cached hash
    pick = rng.integers(0, max(1, len(hashes)), n)
    dm = np.where(rng.random(n) < 0.6, cdm[pick] if len(hashes) else 0, rng.integers(0, 2**60, n)).astype(np.uint64)
    code = np.where(rng.random(n) < 0.6, ccode[pick] if len(hashes) else 0,
                    rng.integers(0, 2**40, n)).astype(np.uint64)
    if len(hashes):
        dm[0] = cdm[0] ^ np.uint64(1 << 33)  # same hash as entry 0 once code is matched to it
        code[0] = pair_hash(dm[:1], np.zeros(1, np.uint64))[0] ^ hashes[0]
        assert pair_hash(dm[:1], code[:1])[0] == hashes[0]
    h, out, miss = np.empty(n, np.uint64), np.full(n, -7, np.int64), np.empty(n, np.int64)
    nmiss = cache_lookup(hashes, cdm, ccode, ckeys, dm, code, h, out, miss)
    want_h = pair_hash(dm, code)
    assert np.array_equal(h, want_h)
    if len(hashes):
        pos = np.minimum(np.searchsorted(hashes, want_h), len(hashes) - 1)
        hit = (hashes[pos] == want_h) & (cdm[pos] == dm) & (ccode[pos] == code)
        assert np.array_equal(out[hit], ckeys[pos[hit]])
    else:
        hit = np.zeros(n, bool)
    assert miss[:nmiss].tolist() == np.flatnonzero(~hit).tolist()
    assert (out[~hit] == -7).all()
    if len(hashes):
        assert not hit[0]  # the colliding pair misses


def test_cache_lookup_refuses_bad_buffers():
    from aclprof.protocol._batchgroup import cache_lookup
    z, one = np.zeros(0, np.uint64), np.ones(2, np.uint64)
    out = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="cache's columns"):
        cache_lookup(one, z, z, np.zeros(0, np.int64), one, one, one.copy(), out, out.copy())
    with pytest.raises(ValueError, match="short"):
        cache_lookup(z, z, z, np.zeros(0, np.int64), one, one, one.copy(), out[:1], out.copy())
    with pytest.raises(ValueError, match="64-bit"):
        cache_lookup(z, z, z, np.zeros(0, np.int64), np.ones(3, np.int32), one, one.copy(), out, out.copy())
    with pytest.raises(BufferError):
        cache_lookup(z, z, z, np.zeros(0, np.int64), one, one, one.copy(), out, bytes(16))


@pytest.mark.parametrize("seed", range(6))
def test_fold_buckets_adds_like_the_divmod_and_ufunc_at_it_replaces(seed):
    """The aggregator's fine buckets (issue 21: a divmod, the bucket map and two ufunc.at
    before): repeated keys and codes add up, sums wrap like int64."""
    from aclprofd.aggregate.quantiles import NFINE, fine_bucket

    from aclprof.protocol._batchgroup import fold_buckets
    rng = np.random.default_rng(seed)
    cap, g, h = 7, int(rng.integers(1, 30)), int(rng.integers(1, 60))
    keys = rng.integers(0, cap, g).astype(np.int64)
    total = rng.integers(-2**62, 2**62, g).astype(np.int64)
    hcodes = (rng.integers(0, cap, h) * NBINS + rng.integers(0, NBINS, h)).astype(np.int64)
    hcount = rng.integers(1, 1000, h).astype(np.int64)
    acc, acc_sum = rng.integers(0, 50, (cap, NFINE)).astype(np.int64), rng.integers(0, 50, cap).astype(np.int64)
    want, want_sum = acc.copy(), acc_sum.copy()
    pk, pb = np.divmod(hcodes, NBINS)
    np.add.at(want, (pk, fine_bucket(pb)), hcount)
    with np.errstate(over="ignore"):
        np.add.at(want_sum, keys, total)
    of_bin = np.ascontiguousarray(fine_bucket(np.arange(NBINS)), dtype=np.int64)
    fold_buckets(keys, total, hcodes, hcount, acc, acc_sum, of_bin)
    assert np.array_equal(acc, want) and np.array_equal(acc_sum, want_sum)


def test_fold_buckets_writes_nothing_on_a_bad_index():
    from aclprof.protocol._batchgroup import fold_buckets
    acc, acc_sum, of_bin = np.zeros((3, 4), np.int64), np.zeros(3, np.int64), np.array([0, 1, 3], np.int64)
    one = np.ones(1, np.int64)
    with pytest.raises(ValueError, match="key 3"):
        fold_buckets(np.array([0, 3], np.int64), np.ones(2, np.int64), one * 2, one, acc, acc_sum, of_bin)
    with pytest.raises(ValueError, match="code 9"):
        fold_buckets(np.array([0], np.int64), one, np.array([1, 9], np.int64), np.ones(2, np.int64), acc,
                     acc_sum, of_bin)
    with pytest.raises(ValueError, match="code 2"):  # bin 2 maps past the 4 buckets
        fold_buckets(np.array([0], np.int64), one, one * 2, one, acc, acc_sum, np.array([0, 1, 4], np.int64))
    with pytest.raises(ValueError, match="one row per key"):
        fold_buckets(one * 0, one, one, one, np.zeros(7, np.int64), acc_sum, of_bin)
    assert not acc.any() and not acc_sum.any()


@pytest.mark.parametrize("seed", range(6))
def test_map_cells_maps_keys_to_cells_like_the_numpy_steps(seed):
    """The detector's per-batch step (issue 21: ~12 numpy calls before): known keys become
    cell codes in order, keys not judged or refused (-2, -3) are summed as untracked."""
    from aclprof.protocol._batchgroup import map_cells
    rng = np.random.default_rng(seed)
    nkeys, n = 40, int(rng.integers(1, 200))
    key_cell = rng.choice(np.array([-3, -2, 0, 1, 2, 5, 9, 17], np.int64), nkeys)
    hcodes = (rng.integers(0, nkeys, n) * NBINS + rng.integers(0, NBINS, n)).astype(np.int64)
    hcount = rng.integers(1, 10**12, n).astype(np.int64)
    out = np.empty((2, n), np.int64)
    m, untracked = map_cells(hcodes, hcount, key_cell, NBINS, out[0], out[1])
    cells = key_cell[hcodes // NBINS]
    ok = cells >= 0
    assert untracked == int(hcount[~ok].sum())
    assert out[0, :m].tolist() == (cells[ok] * NBINS + hcodes[ok] % NBINS).tolist()
    assert out[1, :m].tolist() == hcount[ok].tolist()


def test_map_cells_asks_for_unknown_keys_first_and_refuses_bad_input():
    from aclprof.protocol._batchgroup import map_cells
    key_cell = np.array([0, -1, 1], np.int64)
    out = np.zeros((2, 2), np.int64)
    # key 1 unknown, key 7 past the table: -1, nothing written
    assert map_cells(np.array([0, NBINS], np.int64), np.ones(2, np.int64), key_cell, NBINS, out[0], out[1]) \
        == (-1, 0)
    assert map_cells(np.array([7 * NBINS], np.int64), np.ones(1, np.int64), key_cell, NBINS, out[0], out[1]) \
        == (-1, 0)
    assert not out.any()
    with pytest.raises(ValueError, match="negative"):
        map_cells(np.array([-1], np.int64), np.ones(1, np.int64), key_cell, NBINS, out[0], out[1])
    with pytest.raises(ValueError, match="short"):
        map_cells(np.zeros(3, np.int64), np.ones(3, np.int64), key_cell, NBINS, out[0], out[1])
    with pytest.raises(ValueError, match="nbins"):
        map_cells(np.zeros(1, np.int64), np.ones(1, np.int64), key_cell, 0, out[0], out[1])


@pytest.mark.parametrize("seed", range(6))
def test_batch_facts_gives_the_steps_device_and_newest_end_the_numpy_calls_gave(seed):
    """batch_facts (Ingest.batch's one pass for the steps count and the lag clock) gives what
    count_nonzero(keypoint_mask), the one-device check and ends.max() gave; and note_lag fed
    with it leaves a connection's clock offsets and lag as its numpy path does."""
    from types import SimpleNamespace

    import aclprofd.ingest as ingest

    from aclprof.protocol._batchgroup import batch_facts
    from aclprof.protocol.wire import keypoint_mask

    rng = np.random.default_rng(seed)
    conns = [SimpleNamespace(clock_offsets={}, lag_ns=None) for _ in range(2)]
    now = [10**18]
    for n in (1, 7, 300, 2600):
        recs = _random_batch(rng, n)
        recs["end"] = rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(rng.integers(1, 3))
        if rng.random() < 0.5:
            recs["device_id"] = recs["device_id"][0]
        if rng.random() < 0.3:
            recs["end"][rng.integers(0, n)] = np.uint64((1 << 64) - 1)
        dev = recs["device_id"]
        one = bool((dev == dev[0]).all())
        want = (int(np.count_nonzero(keypoint_mask(recs))), int(dev[0]) if one else -1, int(recs["end"].max()))
        facts = batch_facts(recs)
        assert facts == want
        now[0] += int(rng.integers(0, 10**9))
        mp = pytest.MonkeyPatch()
        mp.setattr(ingest.time, "monotonic_ns", lambda: now[0])
        try:
            ingest.note_lag(conns[0], recs)
            ingest.note_lag(conns[1], recs, facts[1], facts[2])
        finally:
            mp.undo()
        assert vars(conns[0]) == vars(conns[1])
    assert batch_facts(np.zeros(0, RECORD_DTYPE)) == (0, 0, 0)


def test_batch_facts_refuses_bad_buffers():
    from aclprof.protocol._batchgroup import batch_facts

    recs = np.zeros(4, RECORD_DTYPE)
    with pytest.raises(ValueError, match="whole number"):
        batch_facts(recs.view(np.uint8)[:-1])
    with pytest.raises(TypeError, match="takes 1 argument"):
        batch_facts(recs, 1)
    with pytest.raises(ValueError, match="not C-contiguous"):
        batch_facts(recs[::2])


@pytest.mark.parametrize("fn, extra", [("count_bad", (1,)), ("batch_facts", ())])
def test_a_buffer_that_is_not_whole_records_is_refused_by_name(fn: str, extra: tuple) -> None:
    from aclprof.protocol import _batchgroup

    with pytest.raises(ValueError, match=rf"^{fn}: 57 bytes of records is not a whole number of 56-byte records$"):
        getattr(_batchgroup, fn)(b"\0" * 57, *extra)
    assert getattr(_batchgroup, fn)(b"\0" * 56, *extra) is not None  # one record: accepted
