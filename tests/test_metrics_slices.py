"""Issue 19, the last goal: the /metrics rendering runs on the event loop in bounded slices
(aclprofd.loopjobs), not on the HTTP thread holding the GIL for its whole length while the
loop waits behind it (0.3-1 s per rendering under the soak). No timing: a gate holds a
rendering open while a STATUS is answered, and the thread that ran its steps is named.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
from helpers.daemons import Client, InProcess, agent, count_loop_turns, status
from helpers.procs import free_port, wait_for
from helpers.records import make_records

pytestmark = pytest.mark.timeout(60)


def _scrape(port: int, out: list[Any]) -> None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            out.append((r.status, r.read().decode()))
    except Exception as exc:  # the test thread reports it
        out.append((0, repr(exc)))


def test_a_status_is_answered_between_two_slices_of_one_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    from aclprofd import loopjobs, metrics

    monkeypatch.setattr(loopjobs, "SLICE_S", 0.0)  # one step per loop turn
    gate, entered = threading.Event(), threading.Event()
    threads: set[int] = set()
    real = metrics.detector_families

    def held(view: Any) -> Iterator[Any]:
        # the rendering cannot end before the gate opens: one step (a family) per loop turn
        entered.set()
        while not gate.is_set():
            threads.add(threading.get_ident())
            yield metrics.GaugeMetricFamily("aclprofd_test_held", "a rendering held open by the test")
        yield from real(view)

    monkeypatch.setattr(metrics, "detector_families", held)
    port = free_port()
    with InProcess(prometheus_port=port) as d:
        a = agent(d.socket, names={1: "T", 2: "n", 3: "N", 4: "M"})
        a.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 100, what="the records read")
        got: list[Any] = []
        scraper = threading.Thread(target=_scrape, args=(port, got))
        scraper.start()
        assert entered.wait(20), "the rendering never began"
        st = status(d.socket)  # served by the loop while the rendering is held open
        assert d.daemon.metrics.jobs.pending  # the gate is still shut: the rendering has not ended
        gate.set()
        scraper.join(30)
        a.close()
        loop_thread = d.thread.ident
    assert st["records_total"] == 100
    assert got and got[0][0] == 200, got
    assert "aclprofd_op_duration_seconds_count{" in got[0][1]
    assert "aclprofd_metrics_series " in got[0][1]  # the rendering is whole: its own lines last
    assert threads == {loop_thread}  # main: the HTTP thread ran the whole rendering


def _pump_until(jobs: Any, done: Callable[[], bool]) -> None:
    while not done():
        jobs.pump()


def _run_on_a_thread(jobs: Any, job: Callable[[], Any], limit: float, errors: list[BaseException],
                     expect: type[BaseException]) -> threading.Thread:
    """``jobs.run(job, limit)`` on a thread, as a scrape's thread does, keeping the ``expect``
    exception it raises; returns once the loop has the job."""
    def run() -> None:
        try:
            jobs.run(job, limit)
        except expect as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: jobs.pending, what="the job handed over")
    return t


def test_loop_jobs_hand_back_the_value_and_the_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    from aclprofd import loopjobs
    from aclprofd.loopjobs import LoopJobs

    steps_run: list[int] = []

    def steps() -> Generator[None, None, str]:
        for i in range(5):
            steps_run.append(i)
            yield
        return "text"

    jobs = LoopJobs(wake=lambda: None)
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(jobs.run(steps, 30)))
    t.start()
    wait_for(lambda: jobs.pending, what="the job handed over")
    monkeypatch.setattr(loopjobs, "SLICE_S", 0.0)
    pumps = 0
    while jobs.pending:
        jobs.pump()
        pumps += 1
    t.join(10)
    assert results == ["text"] and steps_run == [0, 1, 2, 3, 4]
    assert pumps == 6  # one step a slice: 5 yields, then the return

    def broken() -> Generator[None, None, str]:
        yield
        raise ValueError("a bug in the rendering")

    errors: list[BaseException] = []
    t = _run_on_a_thread(jobs, broken, 30, errors, ValueError)
    _pump_until(jobs, lambda: not jobs.pending)
    t.join(10)
    assert [str(e) for e in errors] == ["a bug in the rendering"]  # the caller's, not the loop's


def test_a_job_not_done_in_time_or_at_stop_is_dropped_and_its_steps_closed() -> None:
    from aclprofd.loopjobs import JobNotDone, LoopJobs

    closed: list[str] = []

    def endless() -> Generator[None, None, str]:
        try:
            while True:
                yield
        finally:
            closed.append("closed")

    jobs = LoopJobs(wake=lambda: None)
    jobs.pump()  # nothing to do
    stop = threading.Event()
    pumper = threading.Thread(target=lambda: [jobs.pump() for _ in iter(stop.is_set, True)])
    pumper.start()
    try:
        with pytest.raises(JobNotDone, match=r"not done within 0\.2 s"):
            jobs.run(endless, 0.2)
    finally:
        stop.set()
        pumper.join(10)
    assert closed == ["closed"] and not jobs.pending
    # the daemon stops while a scrape waits: it is answered at once, and so is any later one
    waiting: list[BaseException] = []
    t = _run_on_a_thread(jobs, endless, 30, waiting, JobNotDone)
    jobs.close()
    t.join(10)
    assert [str(e) for e in waiting] == ["the daemon is stopping"]
    with pytest.raises(JobNotDone, match="stopping"):
        jobs.run(endless, 30)


def test_the_timers_flush_stores_one_agent_a_step_over_several_loop_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush timer's work is cut into steps, one agent's records each, run a slice per
    loop turn (main: every agent's records, up to 4 MiB each, then the caps and the
    aggregates, in the one turn the timer fell in)."""
    from aclprofd import loopjobs
    from aclprofd.persist import Persistence

    monkeypatch.setattr(loopjobs, "SLICE_S", 0.0)  # one step per loop turn
    armed = threading.Event()
    stored_in: list[int] = []
    turn = [0]
    real_store = Persistence.store

    def store(self: Any, conn: Any) -> None:
        if not armed.is_set():
            return  # held back: every agent's records wait for the same timer flush
        if conn.pending_store:
            stored_in.append(turn[0])
        real_store(self, conn)

    monkeypatch.setattr(Persistence, "store", store)
    with InProcess() as d:  # the timer flushes every 0.1 s
        count_loop_turns(monkeypatch, d, turn)
        agents = [agent(d.socket, names={1: "T", 2: "n", 3: "N", 4: "M"}, service=f"s{i}") for i in range(3)]
        for a in agents:
            a.send_batch(make_records(100))
        wait_for(lambda: sum(1 for c in list(d.daemon.conns.values()) if c.pending_store) == 3,
                 what="three agents' records waiting for a flush")
        armed.set()
        wait_for(lambda: len(stored_in) == 3, what="the three agents stored by the timer's flush")
        for a in agents:
            a.close()
    assert len(set(stored_in)) == 3, stored_in  # main: all three in one turn (or two, armed mid-flush)


@pytest.mark.parametrize("fine", [False, True])
def test_a_histogram_step_renders_at_most_lines_per_step_lines(fine: bool) -> None:
    """A step of the op histogram and of the fine one (220 lines a label set) is bounded in
    lines, not in label sets: 64 fine label sets a step were 14,000 lines."""
    import numpy as np
    from aclprofd.promtext import (
        FINE_LE,
        LINES_PER_STEP,
        SERIES_PER_FINE_HISTOGRAM,
        SERIES_PER_HISTOGRAM,
        Budget,
        TextBuilder,
        histogram_steps,
        histogram_text,
    )

    les = FINE_LE if fine else None
    per_set = SERIES_PER_FINE_HISTOGRAM if fine else SERIES_PER_HISTOGRAM
    n = 3 * LINES_PER_STEP // per_set + 5
    cum = np.arange(per_set - 2, dtype=np.int64)
    series = [((f"op{i}",), cum, int(cum[-1]), 1000) for i in range(n)]
    owners = [(i, "h", 1) for i in range(n)]
    out = TextBuilder(Budget(max_series=10**8, per_agent=10**8, max_bytes=1 << 34))
    kw: dict[str, Any] = {"les": les} if fine else {}
    lines_at_yield = [out.series for _ in histogram_steps(out, "m", "d", ["host", "op_type"], "x", series, owners,
                                                             over=set(), **kw)]
    steps = np.diff([0, *lines_at_yield, out.series])
    assert out.series == n * per_set  # every label set rendered
    every = LINES_PER_STEP // per_set  # label sets a step: as many as fit (a yield before set i * every)
    assert steps[0] == (every - 1) * per_set and set(steps[1:-1].tolist()) == {every * per_set}, steps
    assert 0 < steps[-1] <= LINES_PER_STEP
    text = out.finish(0.0, 0)
    assert b"".join(text.chunks).count(b"\n") == 2 + n * per_set  # HELP, TYPE, each set's lines
    one = TextBuilder(Budget(max_series=10**8, per_agent=10**8, max_bytes=1 << 34))
    histogram_text(one, "m", "d", ["host", "op_type"], "x", series, owners, **kw)
    assert one.finish(0.0, 0).chunks == text.chunks  # in one piece: the same text


def test_a_rendering_longer_than_fresh_s_serves_the_scrape_that_follows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rendering serves the scrapes arriving within FRESH_S of its *end*: one that took
    longer than FRESH_S (1 s under load) is not redone for each scraper that waited for it
    (main: within FRESH_S of its start, so every waiting scraper rendered again)."""
    import time

    from aclprofd import metrics

    gate, entered = threading.Event(), threading.Event()
    real = metrics.detector_families

    def held(view: Any) -> Iterator[Any]:
        entered.set()
        gate.wait(10)  # (on the loop thread on the branch: the loop waits, the test only scrapes)
        yield from real(view)

    monkeypatch.setattr(metrics, "detector_families", held)
    port = free_port()
    with InProcess(prometheus_port=port) as d:
        first: list[Any] = []
        scraper = threading.Thread(target=_scrape, args=(port, first))
        scraper.start()
        assert entered.wait(20), "the rendering never began"
        time.sleep(metrics.FRESH_S + 0.3)  # the rendering is now older than FRESH_S from its start
        monkeypatch.setattr(metrics, "detector_families", real)
        gate.set()
        scraper.join(30)
        renders = d.daemon.metrics.renders
        second: list[Any] = []
        _scrape(port, second)  # right after the first: within FRESH_S of the rendering's end
        assert d.daemon.metrics.renders == renders == 1
    assert first[0][0] == second[0][0] == 200
    assert first[0][1] == second[0][1]  # the same rendering


def test_take_encoded_keeps_what_take_keeps_and_its_json_byte_for_byte() -> None:
    import json

    from aclprofd import replyfit

    rows = [{"op": "\x01" * (i * 37 % 3000), "n": i} for i in range(400)]
    largest = max(len(json.dumps(r, separators=(",", ":"))) for r in rows)
    for budget in (2, 50, 10_000, 400_000, 10**9):
        parts: list[str] = []
        steps = replyfit.take_encoded(rows, budget, parts)
        step_bytes: list[int] = []
        while True:
            before = sum(map(len, parts))
            try:
                next(steps)
            except StopIteration as stop:
                kept, left = stop.value
                break
            step_bytes.append(sum(map(len, parts)) - before)
        want, want_left, _ = replyfit.take(rows, budget)
        assert (kept, left) == (len(want), want_left), budget
        assert "[" + ",".join(parts) + "]" == json.dumps(want, separators=(",", ":"))
        # ~3.6 MB of escapes in all: steps of about STEP_BYTES (a chunk sized from the last: items of
        # mixed sizes may make one a few times that; main: all of it in one piece)
        assert max(step_bytes, default=0) <= max(4 * replyfit.STEP_BYTES, largest), step_bytes
        if budget == 10**9:
            assert len(step_bytes) >= len(json.dumps(rows)) // (4 * replyfit.STEP_BYTES)


def test_a_large_snapshot_reply_is_encoded_over_several_loop_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SNAPSHOT whose rows are megabytes of JSON (long labels of control characters; here
    kilobytes, in steps of 2 KiB) is encoded a step at a time over loop turns, each row once
    (main: measured, then encoded again, in the one turn its frame was read: 78 ms of the
    loop's CPU in the soak)."""
    from aclprofd import replyfit, transport

    from aclprof.protocol.wire import Kind

    monkeypatch.setattr(replyfit, "STEP_BYTES", 2 << 10)
    monkeypatch.setattr(transport, "SLICE_S", 0.0)  # every step ends its slice: countable turns
    with InProcess() as d:
        a = agent(d.socket, names={1: "T", 2: "n", 3: "N", 4: "M"})
        ctrl = "\x01\x1b" * 64  # 128 bytes, 768 of JSON escapes
        for m in range(20):
            a.send_json(Kind.WATCH, {"model_id": m, "device": 0, "labels": {"model": f"{m:02d}{ctrl}"}})
            a.send_batch(make_records(10, model=m))
        wait_for(lambda: status(d.socket)["records_total"] == 200, what="the records read")
        turn = [0]
        dumped_in: list[int] = []
        real_dumps = replyfit.json.JSONEncoder.encode

        def encode(self: Any, o: Any) -> str:
            rows = o if isinstance(o, list) else [o]
            if rows and isinstance(rows[0], dict) and "pct_time" in rows[0]:  # SNAPSHOT rows
                dumped_in.append(turn[0])
            return real_dumps(self, o)

        count_loop_turns(monkeypatch, d, turn)
        monkeypatch.setattr(replyfit.json.JSONEncoder, "encode", encode)
        c = Client(d.socket)
        c.send_json(Kind.SNAPSHOT, {"window": "all", "group_by": "model"})
        kind, payload = c.recv()
        monkeypatch.undo()
        c.close()
        a.close()
    import json
    reply = json.loads(bytes(payload))
    assert kind == Kind.SNAPSHOT_REPLY
    assert len(reply["rows"]) == 20 and "truncated" not in reply
    assert sorted(r["model"] for r in reply["rows"]) == [f"{m:02d}{ctrl}" for m in range(20)]
    assert len(set(dumped_in)) >= 5, dumped_in  # ~16 KB of rows in 2 KiB steps


def test_a_stepped_snapshot_still_carries_each_rows_failures_for_its_filter() -> None:
    """The rows' failures (issue 24) are counted with the request's filter before the rows
    are encoded in steps: a service's SNAPSHOT shows its failures, another service's none."""
    from helpers.opfailures import OPS, execute

    import aclprof.agent as agent
    from aclprof import mock
    from aclprof.protocol.wire import Kind

    try:
        with InProcess() as d:
            model = mock.load_model(OPS)
            agent.start(d.socket, service="svc-a", failures=True)
            agent.watch(model, labels={"model": "resnet"})
            execute(model)
            wait_for(lambda: status(d.socket)["records_total"] == 2, 10, what="records")
            mock.inject_op_failure(model, "relu1")
            assert execute(model) == 1
            wait_for(lambda: status(d.socket)["failures"].get("total") == 1, 10, what="the failure in STATUS")
            c = Client(d.socket)
            got = {svc: c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type", "filter": {"service": svc}})
                   for svc in ("svc-a", "svc-b")}
            c.close()
    finally:
        agent.stop(2)
    mine = {r["key"]: r["failures"] for r in got["svc-a"]["rows"]}
    assert mine.get("Relu") == 1 and sum(mine.values()) == 1, mine
    assert got["svc-b"]["rows"] == []
