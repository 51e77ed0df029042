"""Request marking (issue 25): ``aclprof.request`` windows, threads, asyncio, the bounded ring."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

import aclprof
from aclprof.api import requests as rq


@pytest.fixture(autouse=True)
def _clean_ring():
    rq.drain()
    yield
    rq.drain()
    rq.set_ring_capacity(rq.DEFAULT_RING_CAPACITY)


def _windows(events):
    """{(key, tid): (start, end)} and {key: Request} from drained events."""
    starts, windows, requests = {}, {}, {}
    for e in events:
        if e.kind == rq.START:
            starts[(e.key, e.tid)] = e.t_ns
            if e.request is not None:
                requests[e.key] = e.request
        else:
            windows[(e.key, e.tid)] = (starts.pop((e.key, e.tid)), e.t_ns)
    assert not starts
    return windows, requests


def test_a_request_records_its_thread_window_and_attributes():
    t0 = time.monotonic_ns()
    with aclprof.request("req-1", route="/v1/chat", version="B") as req:
        assert rq.current() is req
    t1 = time.monotonic_ns()
    assert rq.current() is None
    windows, requests = _windows(rq.drain())
    ((key, tid), (start, end)), = windows.items()
    assert tid == threading.get_native_id()
    assert t0 <= start <= end <= t1
    assert requests[key].id == "req-1" and dict(requests[key].attrs) == {"route": "/v1/chat", "version": "B"}


def test_four_threads_get_their_own_kernel_tids_and_windows():
    barrier = threading.Barrier(4)
    tids = {}

    def work(i: int) -> None:
        barrier.wait()
        for j in range(50):
            with aclprof.request(f"t{i}-{j}"):
                pass
        tids[i] = threading.get_native_id()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    windows, requests = _windows(rq.drain())
    assert len(windows) == 200 and len(requests) == 200
    by_id = {requests[k].id: tid for (k, tid) in windows}
    assert all(by_id[f"t{i}-{j}"] == tids[i] for i in range(4) for j in range(50))


def test_work_on_another_thread_joins_the_request():
    with aclprof.request("split") as req:
        def worker() -> None:
            with rq.current().on_this_thread():  # asyncio.to_thread copies the context
                pass
        asyncio.run(asyncio.to_thread(worker))
    windows, _ = _windows(rq.drain())
    assert {k for k, _ in windows} == {req.key} and len(windows) == 2


def test_asyncio_tasks_see_their_own_request():
    seen = {}

    async def handle(i: int) -> None:
        with aclprof.request(f"a{i}") as req:
            await asyncio.sleep(0)
            seen[i] = rq.current() is req

    async def main() -> None:
        await asyncio.gather(*(handle(i) for i in range(10)))

    asyncio.run(main())
    assert seen == {i: True for i in range(10)}


def test_decorator_makes_one_request_per_call():
    @aclprof.request("handler", kind="x")
    def handler(n: int) -> int:
        return n + 1

    assert [handler(i) for i in range(3)] == [1, 2, 3]
    windows, requests = _windows(rq.drain())
    assert len(windows) == 3 and {r.id for r in requests.values()} == {"handler"}


def test_traceparent_is_kept_and_checked():
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with aclprof.request("t", traceparent=tp) as req:
        pass
    assert req.traceparent == tp
    with pytest.raises(ValueError, match="traceparent"):
        aclprof.request("t", traceparent="00-xyz")
    with pytest.raises(TypeError, match="id must be a str"):
        aclprof.request(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="attribute 'v'"):
        aclprof.request("x", v=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="events must be"):
        rq.set_ring_capacity(1)


def test_entering_twice_is_an_error():
    req = aclprof.request("twice")
    with req, pytest.raises(RuntimeError, match="already entered"):
        req.__enter__()


def test_a_full_ring_drops_and_counts_never_grows():
    rq.set_ring_capacity(16)
    before = rq.stats()
    for i in range(100):
        with aclprof.request(f"r{i}"):
            pass
    st = rq.stats()
    assert st.queued <= 16
    assert (st.started - before.started) + (st.ended - before.ended) == 200
    assert st.dropped - before.dropped == 200 - st.queued


def test_100k_open_requests_cost_only_the_ring():
    """Never-closed requests: no table of open requests, the ring stays bounded, counted."""
    rq.set_ring_capacity(1024)
    before = rq.stats()
    held = [aclprof.request(f"open{i}") for i in range(100_000)]

    def leak() -> None:
        for r in held:
            r.__enter__()

    contextvars.copy_context().run(leak)  # the leaked "current request" stays in that copy
    st = rq.stats()
    assert st.queued <= 1024
    assert st.started - before.started == 100_000 and st.ended == before.ended
    assert st.dropped - before.dropped == 100_000 - st.queued


def test_a_request_is_an_msproftx_range_in_a_profiling_session(out_dir, tx_events):
    from aclprof import DataType

    prof = aclprof.Profiler(out_dir, devices=(0,), data_types=DataType.ACL_API | DataType.MSPROFTX)
    prof.start()
    try:
        with aclprof.request("in-session"):
            aclprof.mark("inside")
    finally:
        prof.stop()
    with aclprof.request("after"):  # no session: no range, no error
        pass
    (result,) = prof.result_dirs
    events = tx_events(result)
    ranges = [e for e in events if e["kind"] == "range"]
    assert [r["message"] for r in ranges] == ["aclprof request"]
    (mark,) = [e for e in events if e["kind"] == "mark"]
    assert ranges[0]["start_ns"] <= mark["start_ns"] <= ranges[0]["end_ns"]
    windows, _ = _windows(rq.drain())
    assert len(windows) == 2


def test_a_request_whose_first_start_was_dropped_announces_itself_on_the_next_window():
    """The request (id, attributes) rides on its first START the ring kept: with that START
    dropped on a full ring, the next window's START carries it, so the bill keeps its id."""
    rq.set_ring_capacity(2)
    with aclprof.request("filler"):
        pass  # the ring is full now
    req = aclprof.request("late", route="/r")
    with req:
        pass  # START and END dropped, counted
    rq.drain()
    with req.on_this_thread():
        pass
    (start, end) = rq.drain()
    assert start.kind == rq.START and start.request is req and start.key == req.key
    assert end.kind == rq.END and end.request is None


def test_attributes_are_copied_and_the_checks_name_the_argument():
    attrs = {"route": "/a"}
    req = aclprof.request("x", **attrs)
    attrs["route"] = "/b"
    assert dict(req.attrs) == {"route": "/a"}
    assert dict(aclprof.request("y").attrs) == {} and aclprof.request("y").traceparent is None
    with pytest.raises(ValueError, match="at most 16 attributes"):
        aclprof.request("x", **{f"k{i}": "v" for i in range(17)})
    with pytest.raises(ValueError, match="id is longer than 256 bytes"):
        aclprof.request("é" * 129)
    with pytest.raises(ValueError, match="attribute 'k' is longer than 256 bytes"):
        aclprof.request("x", k="v" * 257)
    assert len(aclprof.request("i" * 256).id) == 256  # at the limit: fine


def test_a_forked_child_records_its_own_thread_id():
    import os

    with aclprof.request("parent"):
        pass
    rq.drain()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            with aclprof.request("child"):
                pass
            got = [(e.kind, e.tid) for e in rq.drain()]
            os.write(w, repr(got == [(rq.START, os.getpid()), (rq.END, os.getpid())]).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 100) == b"True"
    finally:
        os.close(r)
        os.waitpid(pid, 0)
