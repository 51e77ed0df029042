"""The STREAM fan-out's work per batch and per loop turn (issue 21: the daemon's STREAM
path at most a few us of Python per batch): the memory budget is read once per loop turn,
not once per batch and once more per pump (a pass over every connection each: O(agents)
per batch, O(agents^2) a second with every agent sending), and its charges still add up
within the turn, so every record is queued or skipped and counted as before.

A Fanout on stand-ins (no sockets, no loop): what is counted is calls, not time.
"""

from __future__ import annotations

import numpy as np
import pytest
from aclprofd.conn import Conn
from aclprofd.fanout import EST_RECORD_JSON
from aclprofd.filters import Filter
from helpers.fanstub import stub_fanout

from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind


@pytest.fixture
def fan():
    with stub_fanout() as f:
        yield f


def _agent(conn, i: int) -> Conn:
    a = conn(f"a{i}", "agent")
    a.host, a.pid, a.service = "h", 100 + i, "svc"
    a.names = {0: "op", 1: "Add"}
    return a


def _batch(n: int) -> np.ndarray:
    r = np.zeros(n, RECORD_DTYPE)
    r["op_name"], r["op_type"], r["start"] = 0, 1, np.arange(n)
    return r


def _lines(data: bytes) -> list[bytes]:
    return [line for k, p in FrameReader().feed(data) if k == Kind.STREAM_RECORDS
            for line in bytes(p).splitlines()]


def test_the_budget_is_read_once_per_turn_whatever_the_batches(fan):
    f, conn, mem = fan
    client = conn("c", "control")
    f.start_stream(client, Filter())
    agents = [_agent(conn, i) for i in range(20)]
    for turn in range(3):
        before = mem.reads
        for a in agents:  # every agent's batch of this turn
            f.offer(a, _batch(50), 1.0 + turn)
        f.pump_streams()  # the turn's end
        assert mem.reads - before == 1  # was 21: one per batch and one for the pump
    lines = _lines(f.outbox.sent["c"])
    assert len(lines) == 3 * 20 * 50 and client.stream_sent == len(lines) and client.stream_skipped_all == 0
    assert b'"pid":119,' in lines[-1]  # each sender's own identity head


def test_an_idle_turn_reads_no_budget(fan):
    f, conn, mem = fan
    f.start_stream(conn("c", "control"), Filter())
    before = mem.reads
    for _ in range(100):
        f.pump_streams()
    assert mem.reads == before


def test_charges_within_a_turn_add_up_and_every_record_is_counted(fan):
    """The turn's room is read once and lowered by each batch's charge: the batches past it
    in the same turn are skipped and counted (memory refused "stream"), not admitted on a
    stale figure; the next turn reads it afresh."""
    f, conn, mem = fan
    f.host.settings.stream_buffer_bytes = 1 << 30  # the budget binds, not the client's own limit
    client = conn("c", "control")
    f.start_stream(client, Filter())
    a = _agent(conn, 0)
    room = mem.stream_room()[1]  # the stream share (half the clients' share)
    per = 2000
    fits = room // (per * EST_RECORD_JSON)
    batches = fits + 3
    for _ in range(batches):
        f.offer(a, _batch(per), 1.0)
    assert client.stream_pending_n == fits * per
    assert client.stream_skipped == 3 * per and f.counters.stream_skipped_total == 3 * per
    assert mem.refused.get("stream") == 3
    f.pump_streams()
    # all admitted records went out (the reader took them), the skipped ones are counted
    assert client.stream_sent == fits * per and len(_lines(f.outbox.sent["c"])) == fits * per
    f.offer(a, _batch(per), 2.0)  # a new turn: room read again (the buffers are empty)
    assert client.stream_pending_n == per
