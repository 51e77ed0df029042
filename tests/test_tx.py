"""msproftx markers (mark, push/pop, annotate, range) through a Profiler session, checked
against the events the mock wrote to host/msproftx.jsonl and its stamp-pool counters."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import aclprof
from aclprof import DataType, mock

TX = DataType.ACL_API | DataType.MSPROFTX


class Boom(Exception):
    pass


@pytest.fixture
def tx_session(out_dir, tx_events):
    """Run the body inside an msproftx session; ``.events()`` reads the log after it ends."""

    class Session:
        def __init__(self):
            self.prof = aclprof.Profiler(out_dir, devices=(0,), data_types=TX)

        def __enter__(self):
            self.prof.start()
            return self

        def __exit__(self, *exc):
            self.prof.stop()

        def events(self):
            assert not self.prof.running, "the log is complete once the session stopped"
            (result,) = self.prof.result_dirs
            return tx_events(result)

    return Session()


def _pairs(events):
    return [(e["kind"], e.get("message")) for e in events]


def _within(inner, outer):
    return outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]


# ---- each marker --------------------------------------------------------------------------------

def test_mark(tx_session):
    with tx_session:
        aclprof.mark("hello")
        aclprof.mark(b"raw bytes")
        aclprof.mark('quote " backslash \\ newline \n tab \t')
        aclprof.mark("unicode: 日本語 ✓")
    events = tx_session.events()
    assert _pairs(events) == [("mark", "hello"), ("mark", "raw bytes"),
                              ("mark", 'quote " backslash \\ newline \n tab \t'),
                              ("mark", "unicode: 日本語 ✓")]
    me = threading.get_native_id()
    for e in events:
        assert e["tid"] == me and e["start_ns"] == e["end_ns"] > 0
    assert mock.stats()["txEvents"] == 4


def test_push_pop_nesting(tx_session):
    with tx_session:
        aclprof.push("outer")
        aclprof.push("inner")
        aclprof.mark("in the middle")
        aclprof.pop()
        aclprof.push("second inner")
        aclprof.pop()
        aclprof.pop()
    events = tx_session.events()
    # A push/pop pair is written when it is popped: innermost first.
    assert _pairs(events) == [("mark", "in the middle"), ("range", "inner"),
                              ("range", "second inner"), ("range", "outer")]
    mark, inner, second, outer = events
    assert _within(inner, outer) and _within(second, outer) and _within(mark, inner)
    assert inner["end_ns"] <= second["start_ns"]
    assert {e["tid"] for e in events} == {threading.get_native_id()}


def test_pop_without_push_raises_in_a_session(tx_session):
    with tx_session:
        with pytest.raises(aclprof.MsproftxError) as info:
            aclprof.pop()
        assert info.value.code == -1 and info.value.function == "aclprofRangeStop"
        aclprof.push("x")
        aclprof.pop()
        with pytest.raises(aclprof.MsproftxError):
            aclprof.pop()
    assert _pairs(tx_session.events()) == [("range", "x")]


def test_push_and_pop_belong_to_one_thread(tx_session):
    errors = []

    def other_thread_pops():
        try:
            aclprof.pop()
        except aclprof.MsproftxError as exc:
            errors.append(exc)

    with tx_session:
        aclprof.push("main")
        t = threading.Thread(target=other_thread_pops)
        t.start()
        t.join()
        aclprof.pop()
    assert len(errors) == 1  # the other thread had nothing pushed
    assert _pairs(tx_session.events()) == [("range", "main")]


def test_interleaved_annotations_on_two_threads_keep_their_own_durations(tx_session):
    """Audit #3: the library's push/pop stack is process-wide. A enters "short", B enters
    "long", A leaves: with aclprofPush/Pop, A's pop would close B's "long" (the top) and
    B's later pop would close "short". Built on ranges, each thread closes its own.
    Fails before issue 7 (annotate on aclprofPush/Pop, mock with one stack)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    tids = {}

    def thread_a():
        tids["a"] = threading.get_native_id()
        with aclprof.annotate("short"):
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def thread_b():
        tids["b"] = threading.get_native_id()
        a_in.wait(5)
        with aclprof.annotate("long"):
            b_in.set()
            a_out.wait(5)
            aclprof.mark("b still inside")

    with tx_session:
        threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = {e["message"]: e for e in tx_session.events()}
    short, long_, inside = events["short"], events["long"], events["b still inside"]
    # short: [A enters, A leaves]; long: [B enters (after A), B leaves (after its mark)].
    assert short["start_ns"] < long_["start_ns"] < short["end_ns"] < inside["start_ns"] < long_["end_ns"]
    assert (short["tid"], long_["tid"]) == (tids["a"], tids["b"])
    assert short["kind"] == long_["kind"] == "range"
    assert (short["start_tid"], long_["start_tid"]) == (tids["a"], tids["b"])


def test_annotate_context_manager_and_decorator(tx_session):
    @aclprof.annotate()
    def work(x):
        aclprof.mark("working")
        return x * 2

    class Model:
        @aclprof.annotate()
        def forward(self):
            return "done"

    @aclprof.annotate("custom name")
    def named():
        return None

    shared = aclprof.annotate("reused")
    with tx_session:
        with aclprof.annotate("block") as entered:
            assert isinstance(entered, aclprof.annotate)
            assert work(21) == 42
        assert Model().forward() == "done"
        named()
        for _ in range(3):
            with shared:
                pass
    events = tx_session.events()
    assert work.__name__ == "work" and work.__wrapped__ is not None  # functools.wraps
    assert _pairs(events) == [
        ("mark", "working"),
        ("range", "test_annotate_context_manager_and_decorator.<locals>.work"),
        ("range", "block"),
        ("range", "test_annotate_context_manager_and_decorator.<locals>.Model.forward"),
        ("range", "custom name"),
        ("range", "reused"), ("range", "reused"), ("range", "reused"),
    ]
    assert _within(events[1], events[2])


def test_annotate_decorator_truncates_long_qualnames(tx_session):
    def f():
        return 1

    f.__qualname__ = "Q" * 300
    g = aclprof.annotate()(f)
    h = lambda: 2  # noqa: E731
    h.__qualname__ = "é" * 100  # 200 bytes in UTF-8
    h = aclprof.annotate()(h)
    with tx_session:
        assert g() == 1 and h() == 2
    first, second = tx_session.events()
    assert first["message"] == "Q" * len(first["message"]) and len(first["message"].encode()) <= 127
    assert second["message"] == "é" * len(second["message"]) and len(second["message"].encode()) <= 127


def test_annotate_needs_a_message_as_context_manager(tx_session):
    with tx_session:
        with pytest.raises(TypeError):
            with aclprof.annotate():
                pass


def test_exception_in_annotated_code_propagates_and_pops(tx_session):
    error = Boom("inside")

    @aclprof.annotate()
    def failing():
        raise error

    with tx_session:
        with pytest.raises(Boom) as info:
            failing()
        assert info.value is error
        with pytest.raises(Boom):
            with aclprof.annotate("block"):
                raise Boom()
        # Both pushes were popped: this thread's stack is empty.
        with pytest.raises(aclprof.MsproftxError):
            aclprof.pop()
    assert _pairs(tx_session.events()) == [
        ("range", "test_exception_in_annotated_code_propagates_and_pops.<locals>.failing"),
        ("range", "block"),
    ]


def test_range_context_manager(tx_session):
    with tx_session:
        with aclprof.range("outer") as outer:
            assert isinstance(outer, aclprof.RangeHandle) and outer.open
            assert 0 <= outer.range_id < 100
            with aclprof.range("inner") as inner:
                assert inner.range_id != outer.range_id
        assert not outer.open and not inner.open
    events = tx_session.events()
    assert _pairs(events) == [("range", "inner"), ("range", "outer")]
    me = threading.get_native_id()
    for e in events:
        assert e["start_tid"] == e["end_tid"] == e["tid"] == me
    assert _within(events[0], events[1])
    assert events[0]["slot"] == inner.range_id and events[1]["slot"] == outer.range_id


def test_range_ended_on_another_thread(tx_session):
    with tx_session:
        handle = aclprof.range("request").start()
        ender = threading.Thread(target=handle.end)
        ender.start()
        ender.join()
        handle.end()  # idempotent
        assert not handle.open
    (event,) = tx_session.events()
    assert event["kind"] == "range" and event["message"] == "request"
    assert event["start_tid"] == threading.get_native_id()
    assert event["end_tid"] == ender.native_id != event["start_tid"]
    assert event["start_ns"] <= event["end_ns"]


def test_range_end_twice_reports_once(tx_session):
    """The library reports a range again at every RangeStop of its id (audit #9); the
    binding stops each range once, in RangeHandle and in the C helper below it."""
    from aclprof.api import markers as tx

    with tx_session:
        handle = aclprof.range("once").start()
        handle.end()
        handle.end()
        assert tx._range_end(handle._handle) == tx._EMPTY  # the helper de-duplicates too
        assert mock.stats()["txEvents"] == 1
    assert _pairs(tx_session.events()) == [("range", "once")]


def test_range_started_on_another_thread_ended_here(tx_session):
    handles = []
    with tx_session:
        t = threading.Thread(target=lambda: handles.append(aclprof.range("bg").start()))
        t.start()
        t.join()
        handles[0].end()
    (event,) = tx_session.events()
    assert (event["start_tid"], event["end_tid"]) == (t.native_id, threading.get_native_id())


# ---- the stamp pool -----------------------------------------------------------------------------

def test_stamps_are_reused_for_one_message(tx_session):
    with tx_session:
        for _ in range(10_000):
            with aclprof.annotate("hot loop"):
                pass
        for _ in range(1000):
            aclprof.mark("hot mark")
        with aclprof.range("r"):
            pass
        assert mock.stats()["stampsInUse"] <= 3
    events = tx_session.events()
    assert Counter(_pairs(events)) == {("range", "hot loop"): 10_000, ("mark", "hot mark"): 1000,
                                       ("range", "r"): 1}
    assert mock.stats()["stampsInUse"] == 0


def test_more_than_100_distinct_messages(tx_session):
    messages = [f"message {i}" for i in range(350)]
    with tx_session:
        for _round in range(2):
            for m in messages:
                aclprof.mark(m)
                with aclprof.annotate(m):
                    pass
            assert mock.stats()["stampsInUse"] <= 100
    events = tx_session.events()
    expected = []
    for _ in range(2):
        for m in messages:
            expected += [("mark", m), ("range", m)]
    assert _pairs(events) == expected
    assert mock.stats()["stampsInUse"] == 0


def test_100_open_ranges_then_the_101st(tx_session):
    with tx_session:
        aclprof.mark("warm")  # an idle cached stamp: it gets evicted to make room
        handles = [aclprof.range(f"r{i % 7}").start() for i in range(100)]
        assert {h.range_id for h in handles} == set(range(100))
        assert mock.stats()["stampsInUse"] == 100
        with pytest.raises(aclprof.MsproftxError) as info:
            aclprof.range("one too many").start()
        text = str(info.value)
        assert "100" in text and "open use" in text and info.value.function == "aclprofCreateStamp"
        with pytest.raises(aclprof.MsproftxError):
            aclprof.mark("also no room")
        with pytest.raises(aclprof.MsproftxError):
            aclprof.push("nor here")
        # Ending them (on another thread) makes room again.
        t = threading.Thread(target=lambda: [h.end() for h in handles])
        t.start()
        t.join()
        aclprof.mark("after")
        with aclprof.range("after range"):
            pass
        more = [aclprof.range("again").start() for _ in range(100)]
        for h in more:
            h.end()
    events = tx_session.events()
    kinds = Counter(e["kind"] for e in events)
    assert kinds == {"mark": 2, "range": 201}
    assert mock.stats()["stampsInUse"] == 0


def test_nesting_is_bounded_by_the_pool(tx_session):
    # Every open push holds a stamp of its own (the library keeps the start time in the
    # stamp), so at most 100 pushes and ranges can be open at once, process-wide.
    @aclprof.annotate("recursive")
    def recurse(depth):
        return 0 if depth == 0 else 1 + recurse(depth - 1)

    with tx_session:
        assert recurse(99) == 99  # 100 nested annotations
        with pytest.raises(aclprof.MsproftxError, match="all 100 stamps"):
            recurse(100)
        # Unwinding popped every level: the thread's stack is empty again.
        with pytest.raises(aclprof.MsproftxError, match="no open push"):
            aclprof.pop()
        assert recurse(5) == 5
    events = tx_session.events()
    assert Counter(_pairs(events)) == {("range", "recursive"): 100 + 100 + 6}


def test_no_slot_leaks_when_a_session_ends_with_open_markers(out_dir):
    for i in range(3):  # three sessions: a leak would accumulate
        with aclprof.Profiler(out_dir, data_types=TX):
            for j in range(60):
                aclprof.range(f"left open {j}").start()  # never ended
            aclprof.push("never popped")
            aclprof.mark("idle")
            assert mock.stats()["stampsInUse"] == 62
        assert mock.stats()["stampsInUse"] == 0, f"session {i} leaked stamps"


def test_markers_after_the_session_ended_are_noops(out_dir):
    with aclprof.Profiler(out_dir, data_types=TX):
        handle = aclprof.range("spans the stop").start()
        aclprof.push("pushed")
    handle.end()  # the session is gone: nothing to stop, no error
    aclprof.pop()
    aclprof.mark("late")
    assert mock.stats()["stampsInUse"] == 0


def test_a_push_left_from_an_ended_session_is_not_popped_later(out_dir):
    with aclprof.Profiler(out_dir, data_types=TX):
        aclprof.push("left over")
    with aclprof.Profiler(out_dir, data_types=TX) as prof:
        with pytest.raises(aclprof.MsproftxError, match="no open push"):
            aclprof.pop()  # this session pushed nothing on this thread
        aclprof.push("new")
        aclprof.pop()
    assert mock.stats()["stampsInUse"] == 0
    events = (prof.result_dirs[0] / "host" / "msproftx.jsonl").read_text().splitlines()
    assert [json.loads(e)["message"] for e in events] == ["new"]


def test_markers_keep_working_after_a_rejected_stop(tmp_path, tx_events, list_prof_dirs):
    from aclprof import AicoreMetrics
    from aclprof.binding import lowlevel as ll

    config = ll.create_config((0,), AicoreMetrics.NONE, TX)
    # Other data types: a Stop is refused only on a data-type mismatch (audit row 5).
    other = ll.create_config((1,), AicoreMetrics.NONE, TX | aclprof.DataType.AICPU)
    ll.init(tmp_path / "p")
    ll.start(config)
    aclprof.mark("before")
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.stop(other)  # rejected: the session runs on
    aclprof.mark("after a rejected stop")
    mock.fail_next("aclprofStop", 1, 500005)
    with pytest.raises(aclprof.ProfilingFailureError):
        ll.stop(config)
    with aclprof.annotate("after a failed stop"):
        pass
    ll.stop(config)
    aclprof.mark("after the stop")  # a no-op now
    ll.finalize()
    (prof,) = list_prof_dirs(tmp_path / "p")
    assert _pairs(tx_events(prof)) == [("mark", "before"), ("mark", "after a rejected stop"),
                                       ("range", "after a failed stop")]
    assert mock.stats()["stampsInUse"] == 0


def test_profiler_whose_stop_fails_leaves_no_marker_running(out_dir):
    prof = aclprof.Profiler(out_dir, data_types=TX).start()
    aclprof.mark("m")
    mock.fail_next("aclprofStop", 1, 500005)
    with pytest.raises(aclprof.ProfilingFailureError):
        prof.stop()
    assert mock.mode() == "OFF"
    aclprof.mark("after")  # no session: a no-op, not an error
    assert mock.stats()["stampsInUse"] == 0 and mock.stats()["txEvents"] == 1


# ---- outside a session ------------------------------------------------------------------------

def _all_markers():
    aclprof.mark("m")
    aclprof.push("p")
    aclprof.pop()
    aclprof.pop()  # nothing pushed: still a no-op outside a session
    with aclprof.annotate("a"):
        pass

    @aclprof.annotate()
    def f():
        return 5

    assert f() == 5
    with aclprof.range("r") as h:
        assert h.range_id is None
    aclprof.range("r2").start().end()


def test_markers_outside_a_session_are_noops():
    _all_markers()
    stats = mock.stats()
    assert stats["txEvents"] == 0 and stats["stampsInUse"] == 0


def test_markers_in_a_session_without_msproftx_are_noops(out_dir, list_prof_dirs):
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API) as prof:
        _all_markers()
    assert mock.stats()["txEvents"] == 0 and mock.stats()["stampsInUse"] == 0
    log = prof.result_dirs[0] / "host" / "msproftx.jsonl"
    assert not log.exists() or log.read_text() == ""


@pytest.mark.parametrize("call", [
    lambda: aclprof.mark("m"),
    lambda: aclprof.push("p"),
    lambda: aclprof.pop(),
    lambda: aclprof.range("r").start(),
    lambda: aclprof.range("r").__enter__(),
    lambda: aclprof.annotate("a").__enter__(),
    lambda: aclprof.annotate()(lambda: pytest.fail("must not run"))(),
], ids=["mark", "push", "pop", "range.start", "range.enter", "annotate.enter", "annotate.call"])
def test_strict_mode_raises_outside_a_session(call, out_dir):
    aclprof.set_strict(True)
    with pytest.raises(aclprof.MsproftxError) as info:
        call()
    assert info.value.code == -1 and "MSPROFTX" in str(info.value)
    # In a session, strict mode changes nothing.
    with aclprof.Profiler(out_dir, data_types=TX):
        aclprof.push("p")
        aclprof.pop()
    aclprof.set_strict(False)
    _all_markers()
    assert mock.stats()["txEvents"] == 1


# ---- message validation -----------------------------------------------------------------------

@pytest.mark.parametrize("message, exc", [
    ("x" * 128, ValueError), ("é" * 64, ValueError), ("", ValueError), ("a\0b", ValueError),
    (123, TypeError), (None, TypeError),
])
@pytest.mark.parametrize("in_session", [False, True])
def test_bad_messages_raise(out_dir, message, exc, in_session):
    calls = [lambda: aclprof.mark(message), lambda: aclprof.push(message),
             lambda: aclprof.range(message), lambda: aclprof.annotate(message).__enter__()]
    if message is None:
        calls = calls[:3]  # annotate(None) is the decorator form
    prof = aclprof.Profiler(out_dir, data_types=TX)
    if in_session:
        prof.start()
    for call in calls:
        with pytest.raises(exc):
            call()
    prof.close()
    assert mock.stats()["txEvents"] == 0 and mock.stats()["stampsInUse"] == 0


def test_message_of_126_bytes(tx_session):
    message = "é" * 63  # 126 bytes of UTF-8
    with tx_session:
        aclprof.mark(message)
        with aclprof.range(message):
            pass
    assert _pairs(tx_session.events()) == [("mark", message), ("range", message)]


def test_message_of_127_bytes_is_rejected_before_c(tx_session):
    # The library's 127-byte message field needs room for the NUL (mock_acl/README.md):
    # aclprof rejects what the library would turn into a -1, with a ValueError naming the limit.
    too_long = "m" * 127
    with tx_session:
        with pytest.raises(ValueError, match="126"):
            aclprof.mark(too_long)
        with pytest.raises(ValueError, match="126"):
            aclprof.annotate(too_long)
    assert tx_session.events() == []


# ---- many threads --------------------------------------------------------------------------

def test_many_threads_at_once(tx_session):
    n_threads, outer_per_thread = 8, 1000  # 2000 annotations per thread, nested
    barrier = threading.Barrier(n_threads)
    tids = {}
    failures = []

    def worker(i):
        try:
            tids[i] = threading.get_native_id()
            inner = aclprof.annotate("inner")
            barrier.wait()
            for _ in range(outer_per_thread):
                with aclprof.annotate(f"outer {i}"):
                    with inner:
                        pass
        except BaseException as exc:  # reported below
            failures.append(exc)

    with tx_session:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert mock.stats()["stampsInUse"] <= 2 * n_threads
    assert failures == []
    events = tx_session.events()
    assert len(events) == n_threads * outer_per_thread * 2
    assert mock.stats()["txEvents"] == len(events)
    by_tid = defaultdict(list)
    for e in events:
        assert e["kind"] == "range" and e["start_tid"] == e["end_tid"]
        by_tid[e["tid"]].append(e)
    assert set(by_tid) == set(tids.values())
    for i, tid in tids.items():
        mine = by_tid[tid]
        assert len(mine) == 2 * outer_per_thread
        # Per thread, in log order: inner, outer, inner, outer ... each inner inside its outer.
        for inner, outer in zip(mine[0::2], mine[1::2]):
            assert inner["message"] == "inner" and outer["message"] == f"outer {i}"
            assert _within(inner, outer)
        for a, b in zip(mine[1::2], mine[2::2]):
            assert a["end_ns"] <= b["start_ns"]  # one outer after the other


def test_many_threads_marks_and_ranges(tx_session):
    n_threads, per_thread = 8, 500
    barrier = threading.Barrier(n_threads)
    failures = []

    def worker(i):
        try:
            barrier.wait()
            for _ in range(per_thread):
                aclprof.mark(f"t{i}")
                with aclprof.range(f"t{i} range"):
                    pass
        except BaseException as exc:
            failures.append(exc)

    with tx_session:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    counts = Counter(_pairs(tx_session.events()))
    assert counts == {**{("mark", f"t{i}"): per_thread for i in range(n_threads)},
                      **{("range", f"t{i} range"): per_thread for i in range(n_threads)}}


# ---- ACLPROF_TX_DISABLE ---------------------------------------------------------------------

DISABLED_SCRIPT = r"""
import json, sys
import aclprof
import aclprof.api.markers
import aclprof.mock
from aclprof import DataType

def f():
    return 1

assert aclprof.api.markers.DISABLED
assert aclprof.annotate()(f) is f  # the decorator returns the function unchanged
with aclprof.Profiler(sys.argv[1], data_types=DataType.ACL_API | DataType.MSPROFTX) as prof:
    aclprof.mark("m")
    aclprof.push("p")
    aclprof.pop()
    aclprof.pop()
    with aclprof.annotate("a"):
        pass
    with aclprof.range("r"):
        pass
    aclprof.range("r2").start().end()
    stats = aclprof.mock.stats()
print(json.dumps({"dir": str(prof.result_dirs[0]), "stats": stats}))
"""


def test_tx_disable_env_makes_markers_noops(run_python, make_env, tmp_path, tx_events):
    env = make_env(ACLPROF_BACKEND="mock", ACLPROF_TX_DISABLE="1")
    proc = run_python("", env=env, args=["-c", DISABLED_SCRIPT, str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stats"]["txEvents"] == 0 and result["stats"]["stampsInUse"] == 0
    assert tx_events(Path(result["dir"])) == []  # the session ran, with an empty log
