"""Per-request op bills (issue 25): attribution against the mock's ground truth, and the
book's bounds and counters.

Ground truth: 4 threads run requests against 2 models (two threads share each model, so
their executions interleave on the device), each request a known list of executions (one,
several, across both models, or none). The mock stamps each record with the executing
thread's tid, runs in real time, and moves its device clock +-1 h and drifts it 100 ppm.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
from helpers.requestmix import HOUR, MODEL_A, MODEL_B, OPS_OF, expected, run_clients

import aclprof
from aclprof import mock
from aclprof.agent.bills import BillBook
from aclprof.agent.clockmap import ClockMap
from aclprof.api import requests as rq


@pytest.fixture(autouse=True)
def _clean_ring():
    rq.drain()
    yield
    rq.drain()


def _behind() -> int:
    return -min(HOUR, time.monotonic_ns() * 9 // 10)  # a counter cannot go below 0


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(("offset", "ppm"), [(0, 0), (HOUR, 100), (None, -100)],
                         ids=["same-clock", "ahead-1h-fast", "behind-1h-slow"])
def test_bills_reconcile_with_the_ground_truth(offset, ppm):
    mock.set_realtime(True)
    mock.set_stamp_thread(True)
    mock.set_device_clock_offset(_behind() if offset is None else offset)
    mock.set_device_clock_drift(ppm)
    models = {"A": mock.load_model(MODEL_A), "B": mock.load_model(MODEL_B)}
    book = BillBook(by_name=True, hold_ns=100_000_000, grace_ns=200_000_000)
    lock = threading.Lock()

    def on_batch(batch) -> None:
        arrival = time.monotonic_ns()
        with lock:
            book.feed_events(rq.drain())
            book.feed_batch(batch.data, batch.names, arrival)

    bills = {}
    done = threading.Event()

    def collector() -> None:  # as the agent's sender would: every 20 ms, with the real clock
        while not done.wait(0.02):
            with lock:
                book.feed_events(rq.drain())
                bills.update((b.request_id, b) for b in book.collect())

    subs = [aclprof.subscribe(m, batch_callback=on_batch) for m in models.values()]
    collecting = threading.Thread(target=collector)
    collecting.start()
    try:
        truth = run_clients(models, 4, 20)
    finally:
        for s in subs:
            s.close()
        done.set()
        collecting.join()
    with lock:  # the rest, as if the grace had passed
        book.feed_events(rq.drain())
        bills.update((b.request_id, b) for b in book.collect(time.monotonic_ns() + 10 * 10**9))

    st = book.stats
    emitted = sum(len(OPS_OF[m]) for plan in truth.values() for m in plan)
    assert st.ops_seen == emitted
    assert st.ops_attributed + st.unattributed == emitted
    assert st.unattributed == 0, st
    assert set(bills) == set(truth)
    assert st.requests_without_ops == sum(1 for p in truth.values() if not p)
    worst = 0.0
    for rid, plan in truth.items():
        bill = bills[rid]
        want_types, want_ns = expected(plan)
        assert {t: c for t, (_, c) in bill.by_type.items()} == want_types, rid
        assert bill.models == tuple(sorted({models[m] for m in plan}))
        assert bill.complete and bill.attrs == {"thread": rid[1]}
        if want_ns:
            err = abs(bill.device_ns - want_ns) / want_ns
            worst = max(worst, err)
            assert err <= 0.02, (rid, bill.device_ns, want_ns)
            assert bill.slowest is not None and bill.slowest[0] in ("Conv2D", "MatMul")
            assert 0 < bill.device_share <= 1.0
        else:
            assert bill.ops == 0 and bill.slowest is None
    print(f"worst per-request device-time error: {worst:.6%}")


def _events(*evs):
    return [(k, key, tid, t, aclprof.request(f"r{key}") if k == rq.START else None) for k, key, tid, t in evs]


def _batch(rows):
    """A decoded batch with (tid, start, end) rows on the host clock (factor 1, D = 0)."""
    from aclprof.api.records import OP_DTYPE

    data = np.zeros(len(rows), dtype=OP_DTYPE)
    for i, (tid, start, end) in enumerate(rows):
        data[i]["thread_id"], data[i]["start"], data[i]["end"] = tid, start, end
        data[i]["duration"] = end - start
    return data, ["Op"]


def test_overlapping_windows_on_one_thread_are_counted_not_guessed():
    book = BillBook(early_ns=0, late_ns=0, hold_ns=0)
    book.feed_events(_events((rq.START, 1, 7, 1000), (rq.START, 2, 7, 1500),
                             (rq.END, 1, 7, 3000), (rq.END, 2, 7, 4000)))
    data, names = _batch([(7, 2000, 2100), (7, 3500, 3600), (8, 2000, 2100)])
    book.feed_batch(data, names, arrival_ns=3600)
    book.collect(3600)  # attributes; closes nothing yet (grace)
    st = book.stats
    assert (st.unattributed_ambiguous, st.ops_attributed, st.unattributed_no_window) == (1, 1, 1)
    bills = {b.key: b for b in book.collect(10**12)}
    assert bills[2].ops == 1 and bills[1].ops == 0


def test_an_op_after_its_window_closed_is_counted_late():
    book = BillBook(early_ns=0, late_ns=0, grace_ns=100, hold_ns=0)
    book.feed_batch(*_batch([(9, 100, 200)]), arrival_ns=200)  # the clock: D = 0
    book.feed_events(_events((rq.START, 1, 7, 1000), (rq.END, 1, 7, 2000)))
    (bill,) = book.collect(5000)
    assert bill.ops == 0
    data, names = _batch([(7, 1500, 1600)])
    book.feed_batch(data, names, arrival_ns=6000)
    book.collect(6000)
    st = book.stats
    assert (st.unattributed_late, st.unattributed_no_window, st.ops_attributed) == (1, 1, 0)


def test_100k_never_closed_requests_cost_bounded_memory():
    book = BillBook(max_open=1000)
    book.feed_events(_events(*((rq.START, k, 7, k) for k in range(1, 100_001))))
    assert book.pending()["open_windows"] == 1000
    assert book.stats.windows_evicted == 99_000
    bills = book.collect(10**15)
    assert len(bills) == 4096  # max_bills: the newest kept
    assert book.stats.bills_dropped == 99_000 - 4096
    assert not any(b.complete for b in bills)
    assert book.pending()["requests"] == 1000


@pytest.mark.parametrize("ppm", [100, -100])
def test_clock_map_follows_100_ppm_drift_and_an_hour_offset(ppm):
    """Arrivals over 60 s with a 20-120 us delivery delay: the map stays within the
    fastest delivery of the truth. A bound kept for ever (LagClock's) follows a clock that
    gains, but is 100 ppm * 60 s = 6 ms off for one that loses."""
    rng = np.random.default_rng(1)
    cm = ClockMap(bucket_ns=1_000_000_000)
    offset, drift = HOUR, ppm * 1e-6
    fixed_best = None
    for host_end in range(0, 60 * 10**9, 10_000_000):
        dev_end = offset + host_end + round(host_end * drift)
        arrival = host_end + int(rng.integers(20_000, 120_000))
        cm.note(dev_end, arrival)
        fixed_best = max(fixed_best or -(1 << 62), dev_end - arrival)
    host_now = 60 * 10**9
    dev_now = offset + host_now + round(host_now * drift)
    err = int(cm.to_host(np.array([dev_now], dtype=np.uint64))[0]) - host_now
    fixed_err = (dev_now - fixed_best) - host_now
    assert -5_000 <= err <= 150_000, err
    if ppm < 0:
        assert abs(fixed_err) > 1_000_000  # why the map fits drift


@pytest.mark.parametrize("ppm", [0, 100, -100])
def test_clock_map_ignores_stretches_of_late_reads(ppm):
    """Stretches where every read of the pipe came 5-40 ms late (a stalled reader: GC, a
    busy host, coverage) lower those buckets' bounds. The map is set by the fastest
    deliveries, so it stays within them of the truth, now and 2 s back (where bills are
    attributed). A least-squares line through the bounds tilted towards the late stretches:
    2-4 ms off, which left 66 of 204 ops of test_request_bills_agent unattributed in CI."""
    rng = np.random.default_rng(7)
    offset, drift = HOUR, ppm * 1e-6
    worst = 0
    for _ in range(20):
        cm = ClockMap()  # 16 buckets of 250 ms
        late_bucket: dict[int, bool] = {}
        for host_end in range(0, 4 * 10**9, 20_000_000):
            b = host_end // 250_000_000
            late = late_bucket.setdefault(b, bool(rng.random() < 0.3))
            delay = int(rng.integers(5_000_000, 40_000_000)) if late else int(rng.integers(20_000, 120_000))
            cm.note(offset + host_end + round(host_end * drift), host_end + delay)
        for host in (4 * 10**9, 2 * 10**9):
            dev = offset + host + round(host * drift)
            err = int(cm.to_host(np.array([dev], dtype=np.uint64))[0]) - host
            worst = max(worst, abs(err))
    assert worst <= 150_000, worst


def test_thousands_of_windows_on_a_thread_each_get_their_ops():
    book = BillBook(early_ns=0, late_ns=10, hold_ns=0)
    evs = []
    for k in range(1, 3001):
        evs += [(rq.START, k, 7, k * 1000), (rq.END, k, 7, k * 1000 + 500)]
    book.feed_events(_events(*evs))
    data, names = _batch([(7, k * 1000 + 100, k * 1000 + 200) for k in range(1, 3001)])
    book.feed_batch(data, names, arrival_ns=3000 * 1000 + 200)  # D = 0
    bills = book.collect(10**12)
    assert book.stats.ops_attributed == 3000 and all(b.ops == 1 for b in bills)


def test_a_long_open_window_around_later_ones_makes_their_ops_ambiguous():
    """Nesting seen once makes every lookup on that thread a full scan: an op inside both
    the long window and a short one is never silently given to one of them."""
    book = BillBook(early_ns=0, late_ns=0, hold_ns=0)
    evs = [(rq.START, 1, 7, 0)]
    for k in range(2, 40):
        evs += [(rq.START, k, 7, k * 1000), (rq.END, k, 7, k * 1000 + 500)]
    book.feed_events(_events(*evs))
    data, names = _batch([(7, 2100, 2200), (7, 39_900, 39_950)])
    book.feed_batch(data, names, arrival_ns=39_950)
    book.collect(39_950)
    st = book.stats
    assert st.unattributed_ambiguous == 1 and st.ops_attributed == 1  # 39_900: only the long one


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_attribution_is_the_per_op_match(seed):
    """BillBook attributes a thread's ops in one vectorised pass (searchsorted over its
    disjoint windows); each op must get what the per-op walk (``_match``) gives it: the same
    window, or the same unattributed reason. Random windows back to back and apart, some
    open, ops inside, between, before and after them."""
    rng = np.random.default_rng(seed)
    book = BillBook(early_ns=100, late_ns=1_000, hold_ns=0, grace_ns=10**12)
    events, t, key = [], 0, 0
    for tid in (7, 8):
        t = 10_000
        for _ in range(40):
            key += 1
            t += int(rng.choice([0, 200, 900, 5_000]))  # gap: back to back .. far apart
            start, t = t, t + int(rng.integers(1, 4_000))
            events.append((rq.START, key, tid, start, aclprof.request(f"r{key}")))
            if rng.random() > 0.05 or tid == 8:
                events.append((rq.END, key, tid, t, None))
            else:
                break  # an open window: the thread's last
    book.feed_events(sorted(events, key=lambda e: (e[2], e[3], e[0] == rq.START)))
    n = 3000
    tids = rng.choice(np.array([7, 8, 9], np.uint32), n)
    host = rng.integers(0, t + 5_000, n).astype(np.int64)
    got = book._window_keys(tids, host)
    vectorised = dataclasses.asdict(book.stats)
    book.stats = type(book.stats)()
    want = [(acc.key if (acc := book._match(int(tid), int(h))) is not None else 0) for tid, h in zip(tids, host)]
    assert got.tolist() == want
    assert dataclasses.asdict(book.stats) == vectorised
    assert vectorised["unattributed_ambiguous"] and vectorised["unattributed_no_window"] and any(want)
