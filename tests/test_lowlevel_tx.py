"""The raw msproftx layer (aclprof.binding.lowlevel): stamps, mark/push/pop, ranges, MarkEx, Str2Id,
RangePushEx/RangePop, with C's return codes (-1 included) and closed-handle checks."""

from __future__ import annotations

import gc
import threading

import pytest

import aclprof
from aclprof import AicoreMetrics, DataType, mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library


@pytest.fixture
def session(tmp_path, tx_events, list_prof_dirs):
    """An msproftx session started through lowlevel; ``.stop()`` ends it, ``.events()``
    reads what was recorded."""

    class Session:
        def __init__(self):
            self.config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | DataType.MSPROFTX)
            ll.init(tmp_path / "p")
            ll.start(self.config)
            self.running = True

        def stop(self):
            if self.running:
                ll.stop(self.config)
                self.running = False

        def events(self):
            self.stop()
            (prof,) = list_prof_dirs(tmp_path / "p")
            return tx_events(prof)

    s = Session()
    yield s
    s.stop()
    ll.finalize()


@pytest.fixture
def stream():
    ll.rt_set_device(0)
    s = ll.rt_create_stream()
    yield s
    s.close()
    ll.rt_reset_device(0)


def _address(handle) -> int:
    return int(get_library().ffi.cast("uintptr_t", handle._get()))


def test_stamp_cycle(session):
    stamp = ll.create_stamp()
    assert isinstance(stamp, ll.Stamp) and not stamp.closed
    assert mock.stats()["stampsInUse"] == 1
    ll.set_stamp_trace_message(stamp, "msg")
    ll.mark(stamp)
    ll.push(stamp)
    ll.pop()
    range_id = ll.range_start(stamp)
    assert 0 <= range_id < 100
    ll.range_stop(range_id)
    ll.destroy_stamp(stamp)
    assert stamp.closed and mock.stats()["stampsInUse"] == 0
    events = session.events()
    assert [(e["kind"], e["message"], e["slot"]) for e in events] == [
        ("mark", "msg", range_id), ("push_pop", "msg", range_id), ("range", "msg", range_id)]


def test_empty_and_changed_messages(session):
    stamp = ll.create_stamp()
    ll.mark(stamp)  # no message set yet
    ll.set_stamp_trace_message(stamp, "")
    ll.mark(stamp)
    ll.set_stamp_trace_message(stamp, b"first")
    ll.mark(stamp)
    ll.set_stamp_trace_message(stamp, "second")
    ll.mark(stamp)
    ll.set_stamp_trace_message(stamp, "x" * 126)
    ll.mark(stamp)
    assert [e["message"] for e in session.events()] == ["", "", "first", "second", "x" * 126]


def test_message_length_limit(session):
    stamp = ll.create_stamp()
    with pytest.raises(ValueError, match="126"):
        ll.set_stamp_trace_message(stamp, "x" * 127)
    with pytest.raises(ValueError):
        ll.set_stamp_trace_message(stamp, "a\0b")
    with pytest.raises(TypeError):
        ll.set_stamp_trace_message(stamp, 5)
    # C itself: msgLen >= 128 is -1 (reference 3.6).
    fn = get_library().fn("aclprofSetStampTraceMessage")
    assert fn(stamp._get(), b"x" * 128, 128) == -1
    assert fn(get_library().ffi.NULL, b"x", 1) == -1


def test_minus_one_returns_are_msproftx_errors(session):
    stamp = ll.create_stamp()
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.pop()  # empty stack
    assert info.value.code == -1 and info.value.function == "aclprofPop"
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.range_stop(99)  # no range open on slot 99
    assert info.value.function == "aclprofRangeStop" and "range id 99" in str(info.value)
    with pytest.raises(aclprof.MsproftxError):
        ll.range_stop(100)  # outside the pool
    with pytest.raises(ValueError):
        ll.range_stop(2**32)
    range_id = ll.range_start(stamp)
    ll.range_stop(range_id)
    ll.range_stop(range_id)  # audit #9: the library never closes a range; it reports again
    stops = [e for e in session.events() if e["kind"] == "range"]
    assert [e["slot"] for e in stops] == [range_id, range_id]
    assert stops[0]["start_ns"] == stops[1]["start_ns"] <= stops[0]["end_ns"] <= stops[1]["end_ns"]
    # msproftx stays initialised after the Stop until Finalize (fidelity audit 3, R6): the
    # calls succeed and nothing records them; after Finalize every call that checks gives -1.
    ll.mark(stamp)
    assert mock.stats()["txEventsUnrecorded"] == 1
    ll.finalize()
    for call in (lambda: ll.mark(stamp), lambda: ll.push(stamp), lambda: ll.pop(),
                 lambda: ll.range_start(stamp), lambda: ll.range_stop(0)):
        with pytest.raises(aclprof.MsproftxError):
            call()
    # SetStampTraceMessage does not check initialisation (reference 3.6).
    ll.set_stamp_trace_message(stamp, "still fine")
    with pytest.raises(aclprof.MsproftxError, match="not running"):
        ll.create_stamp()
    stamp.close()


def test_create_stamp_outside_a_session():
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.create_stamp()
    assert info.value.function == "aclprofCreateStamp" and "100" in str(info.value)
    assert mock.stats()["stampsInUse"] == 0


def test_pool_exhaustion(session):
    stamps = [ll.create_stamp() for _ in range(100)]
    assert mock.stats()["stampsInUse"] == 100
    ids = [ll.range_start(s) for s in stamps]
    assert sorted(ids) == list(range(100))  # rangeId = pool slot
    with pytest.raises(aclprof.MsproftxError, match="all 100 stamps are in use"):
        ll.create_stamp()
    for range_id in ids:
        ll.range_stop(range_id)
    stamps[42].close()
    again = ll.create_stamp()
    assert ll.range_start(again) == ids[42]  # the freed slot is reused
    for s in [*stamps, again]:
        s.close()
    assert mock.stats()["stampsInUse"] == 0
    assert sum(e["kind"] == "range" for e in session.events()) == 100


def test_closed_stamp_raises_handle_closed(session):
    stamp = ll.create_stamp()
    ll.destroy_stamp(stamp)
    ll.destroy_stamp(stamp)  # idempotent
    for call in (lambda: ll.mark(stamp), lambda: ll.push(stamp), lambda: ll.range_start(stamp),
                 lambda: ll.set_stamp_trace_message(stamp, "x")):
        with pytest.raises(aclprof.HandleClosedError):
            call()
    with pytest.raises(TypeError):
        ll.mark("not a stamp")
    with pytest.raises(TypeError):
        ll.destroy_stamp(object())
    with ll.create_stamp() as scoped:
        ll.mark(scoped)
    assert scoped.closed and mock.stats()["stampsInUse"] == 0


def test_faults_reach_the_right_class(session):
    mock.fail_next("aclprofCreateStamp", 1, 0)
    with pytest.raises(aclprof.MsproftxError):
        ll.create_stamp()
    stamp = ll.create_stamp()
    mock.fail_next("aclprofPush", 1, 100000)
    with pytest.raises(aclprof.InvalidParamError):
        ll.push(stamp)
    mock.fail_next("aclprofMark", 1, 500005)
    with pytest.raises(aclprof.ProfilingFailureError):
        ll.mark(stamp)


# ---- MarkEx ---------------------------------------------------------------------------------

def test_mark_ex(session, stream):
    ll.mark_ex("on a stream", stream)
    ll.mark_ex(b"x" * 127, stream)  # 1..127 bytes: every CANN release (audit 3, R11)
    events = session.events()
    assert [(e["kind"], e["message"]) for e in events] == [("mark_ex", "on a stream"), ("mark_ex", "x" * 127)]
    assert {e["stream"] for e in events} == {_address(stream)}
    assert events[0]["mark_id"] < events[1]["mark_id"]


def test_mark_ex_rules(session, stream):
    with pytest.raises(ValueError):
        ll.mark_ex("", stream)
    with pytest.raises(ValueError, match=r"aclprofMarkEx.* 128 bytes.*limit is 127"):
        ll.mark_ex("x" * 128, stream)
    assert get_library().fn("aclprofMarkEx")(b"x" * 156, 156, stream._get()) == -1
    with pytest.raises(TypeError):
        ll.mark_ex("x", None)
    with pytest.raises(TypeError):
        ll.mark_ex("x", object())
    fn = get_library().fn("aclprofMarkEx")
    ffi = get_library().ffi
    assert fn(b"x", 1, ffi.NULL) == -1       # stream required
    assert fn(b"abc", 2, stream._get()) == -1  # strlen != msgLen
    assert fn(ffi.NULL, 0, stream._get()) == -1
    closed = ll.rt_create_stream()
    closed.close()
    with pytest.raises(aclprof.HandleClosedError):
        ll.mark_ex("x", closed)
    session.stop()
    ll.mark_ex("after stop", stream)  # initialised until Finalize (audit 3, R6)
    ll.finalize()
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.mark_ex("after finalize", stream)
    assert info.value.function == "aclprofMarkEx"


# ---- Str2Id -----------------------------------------------------------------------------------

def _fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h


def test_str2id():
    # No session needed; stable per string (the mock: FNV-1a 64, see mock_acl/README.md).
    a = ll.str2id("Conv2D")
    assert a == ll.str2id(b"Conv2D") == _fnv1a(b"Conv2D")
    assert a != ll.str2id("MatMul")
    assert ll.str2id("日本") == _fnv1a("日本".encode())
    with pytest.raises(ValueError):
        ll.str2id("")
    with pytest.raises(TypeError):
        ll.str2id(5)


def test_str2id_failure_value():
    mock.fail_next("aclprofStr2Id", 1, 0)  # UINT64_MAX: the documented failure
    with pytest.raises(aclprof.OtherAclError) as info:
        ll.str2id("x")
    assert info.value.function == "aclprofStr2Id" and info.value.code == 500001


# ---- RangePushEx / RangePop ------------------------------------------------------------------

def test_range_push_ex_and_pop(session, stream):
    name_id, type_id = ll.str2id("conv1"), ll.str2id("Conv2D")
    with pytest.raises(aclprof.InvalidParamError) as info:
        ll.range_pop()  # nothing pushed yet: the library's 100000
    assert info.value.function == "aclprofRangePop" and "range_push_ex first" in str(info.value)
    ll.range_push_ex(name_id, type_id, [
        {"type": 0, "format": 2, "data_type": 1, "shape": [1, 3, 224, 224]},
        {"type": 1, "format": 2, "data_type": 1, "shape": [1, 64, 112, 112]},
    ], stream=stream)
    ll.range_pop()
    ll.range_pop()  # the slot is not cleared: reported again
    ll.range_push_ex(7, 8)  # replaces the first (one slot, no nesting); default stream
    ll.range_pop()
    first, again, second = session.events()
    assert (first["op_name_id"], first["op_type_id"], first["tensor_num"]) == (name_id, type_id, 2)
    assert first["tensors"] == [[0, 2, 1, [1, 3, 224, 224]], [1, 2, 1, [1, 64, 112, 112]]]
    assert first["stream"] == _address(stream) and first["message_type"] == 0
    assert again["op_name_id"] == name_id and again["start_ns"] == first["start_ns"]
    assert (second["kind"], second["op_name_id"], second["op_type_id"], second["tensor_num"]) == ("push_ex", 7, 8, 0)
    assert second["stream"] == 0 and second["start_ns"] > first["end_ns"]


def test_range_push_ex_buffers_survive_until_pop(session, stream):
    """The library reads the pushed buffers at RangePop. Before issue 7 they were freed
    when range_push_ex returned, and same-size allocations reused them: the pop then
    reported the new owner's values (fails before: op ids 0xBAD... in the log)."""
    ffi = get_library().ffi
    ll.range_push_ex(11, 22, [{"type": 1, "format": 3, "data_type": 4, "shape": [5, 6]}], stream=stream)
    gc.collect()
    junk = []
    for _ in range(3000):  # reuse whatever was freed, with values that stand out
        info = ffi.new("aclprofTensorInfo *", {"opNameId": 0xBAD0, "opTypeId": 0xBAD1, "tensorNum": 0})
        attr = ffi.new("aclprofEventAttributes *", {"messageType": 7})
        attr.message.tensorInfo = info
        arr = ffi.new("aclprofTensor[]", 1)
        arr[0].type = 0xBAD2
        junk.append((info, attr, arr))
    ll.range_pop()
    (event,) = session.events()
    assert (event["op_name_id"], event["op_type_id"], event["tensor_num"]) == (11, 22, 1)
    assert event["tensors"] == [[1, 3, 4, [5, 6]]]


def test_range_push_ex_rejected_keeps_the_previous_buffers(session, stream):
    ll.range_push_ex(1, 2, stream=stream)
    kept = ll.msproftx._push_ex_buffers
    mock.fail_next("aclprofRangePushEx", 1, -1)
    with pytest.raises(aclprof.MsproftxError):
        ll.range_push_ex(3, 4, stream=stream)
    assert ll.msproftx._push_ex_buffers is kept  # the library still points at them
    gc.collect()
    ll.range_pop()
    assert [e["op_name_id"] for e in session.events()] == [1]


def test_range_pop_needs_a_usable_stream(session):
    ll.range_push_ex(1, 2)  # NULL stream: the current context's default stream, at Pop
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.range_pop()  # no current context: rtsStreamGetAttribute fails
    assert info.value.code == -1 and info.value.function == "aclprofRangePop"
    ll.rt_set_device(0)
    try:
        ll.range_pop()
    finally:
        ll.rt_reset_device(0)
    assert [e["stream"] for e in session.events()] == [0]


def test_range_push_ex_is_process_wide(session, stream):
    """One slot for every thread: a push_ex on another thread replaces this thread's."""
    ll.range_push_ex(1, 1, stream=stream)
    t = threading.Thread(target=lambda: ll.range_push_ex(2, 2, stream=stream))
    t.start()
    t.join()
    ll.range_pop()
    assert [e["op_name_id"] for e in session.events()] == [2]


def test_range_push_ex_arguments(session):
    with pytest.raises(ValueError, match="at most 8"):
        ll.range_push_ex(1, 2, [{"shape": list(range(9))}])
    with pytest.raises(ValueError):
        ll.range_push_ex(-1, 2)
    with pytest.raises(ValueError):
        ll.range_push_ex(1, 2**64)
    with pytest.raises(ValueError):
        ll.range_push_ex(1, 2, [{"type": -1}])
    assert session.events() == []


def test_range_push_ex_outside_a_session(stream):
    ll.range_push_ex(1, 2, stream=stream)  # PushEx checks no initialisation
    with pytest.raises(aclprof.MsproftxError) as info:
        ll.range_pop()  # nothing to report into (mock: -1, UNVERIFIED)
    assert info.value.code == -1
