"""aclprof.agent.buffer.RecordBuffer's JSON frames (OP_FAILURE, REQUEST_BILL): the cap per
kind, the drops counted in the newest waiting frame, their order with the other items, and
the frames discarded at the sender's exit counted per kind. Written against the survivors of
the mutation run of 2026-12-02 night (tests/bench/MUTATION.md)."""

from __future__ import annotations

import numpy as np
import pytest

from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.items import JsonFrame
from aclprof.api.records import OP_DTYPE
from aclprof.protocol.wire import Kind


@pytest.fixture
def buf():
    b = RecordBuffer(100)
    yield b
    b.close()


def frames(b: RecordBuffer, kind: Kind) -> list[JsonFrame]:
    return [it for it in b.items if isinstance(it, JsonFrame) and it.kind == kind]


def test_a_limit_of_one_keeps_one_frame_and_counts_the_rest_in_it(buf):
    assert buf.add_frames(Kind.OP_FAILURE, [{"code": 1}, {"code": 2}, {"code": 3}], limit=1) == 2
    (f,) = frames(buf, Kind.OP_FAILURE)
    assert f.payload == {"code": 1, "dropped_before": 2}
    with pytest.raises(ValueError, match="limit must be at least 1"):
        buf.add_frames(Kind.OP_FAILURE, [{"code": 4}], limit=0)


def test_drops_add_to_a_frames_own_dropped_before(buf):
    """A frame that already carries the agent's earlier drops (dropped_before 5) gets one more
    per payload dropped after it."""
    buf.add_frames(Kind.OP_FAILURE, [{"code": 1, "dropped_before": 5}], limit=1)
    assert buf.add_frames(Kind.OP_FAILURE, [{"code": 2}], limit=1) == 1
    assert frames(buf, Kind.OP_FAILURE)[0].payload == {"code": 1, "dropped_before": 6}


def test_the_cap_counts_every_frame_queued_in_one_call_and_per_kind(buf):
    assert buf.add_frames(Kind.OP_FAILURE, [{"i": i} for i in range(5)], limit=3) == 2
    assert buf.add_frames(Kind.REQUEST_BILL, [{"i": i} for i in range(2)], limit=3) == 0
    fs = frames(buf, Kind.OP_FAILURE)
    assert [f.payload["i"] for f in fs] == [0, 1, 2] and fs[-1].payload["dropped_before"] == 2
    assert "dropped_before" not in fs[0].payload and len(frames(buf, Kind.REQUEST_BILL)) == 2


def test_in_agent_mode_a_frame_goes_after_the_records_queued_before_it():
    """The C queue holds the records: a frame's seq is the queue's tail when it was queued,
    so the sender sends it after exactly those records."""
    from aclprof.agent.watched import Watched

    rows = np.zeros(3, OP_DTYPE)
    b = RecordBuffer(100, native=True)
    try:
        sink = b.sink(Watched(1, 0, {}))
        sink.push(rows, None)
        b.add_frames(Kind.OP_FAILURE, [{"i": 0}], limit=5)
        sink.push(rows[:2], None)
        b.add_frames(Kind.OP_FAILURE, [{"i": 1}], limit=5)
        assert [f.seq for f in frames(b, Kind.OP_FAILURE)] == [3, 5]
    finally:
        b.close()


def test_frames_discarded_at_exit_are_counted_per_kind(buf):
    buf.add_frames(Kind.OP_FAILURE, [{"i": i} for i in range(3)], limit=10)
    buf.add_frames(Kind.REQUEST_BILL, [{"i": 0}], limit=10)
    assert buf.frames_discarded == {}
    buf.discard_all()
    assert buf.frames_discarded == {Kind.OP_FAILURE: 3, Kind.REQUEST_BILL: 1}
    buf.add_frames(Kind.OP_FAILURE, [{"i": 9}], limit=10)
    buf.discard_all()
    assert buf.frames_discarded == {Kind.OP_FAILURE: 4, Kind.REQUEST_BILL: 1} and not buf.items
