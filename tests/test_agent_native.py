"""Issue 21: agent mode without Python per batch. The subscription's reader appends its
decoded rows to the agent's C queue (``aclprof.binding.agentpath.AgentQueue``) from one C
call that lasts until EOF; the sender takes them with one call per wake-up, ordering the
control frames (WATCH, UNWATCH, TRACE_DONE) among them by the queue's sequence numbers.

The queue on its own (bound, drop-oldest counted, wrap-around, take limits, slots, the
wake-up), then the agent in-process against the wire fake daemon: no Python per batch on
the reader, exact accounting, order kept when a chunk is cut short, and the subscription's
own counters (identity, lag) fed from C.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from helpers.agent_worker import FIXED_OPS
from helpers.agentstream import watch_and_run
from helpers.procs import wait_for
from helpers.wiredaemon import FakeDaemon

from aclprof.api.records import OP_DTYPE
from aclprof.binding.agentpath import AgentQueue, SlotNames

pytestmark = pytest.mark.timeout(90)


def _rows(starts) -> np.ndarray:
    d = np.zeros(len(starts), OP_DTYPE)
    d["start"] = starts
    d["model_id"] = 7
    return d


def _take_starts(q: AgentQueue, n: int, limit: int | None = None) -> tuple[list[int], list[int], int]:
    rows, slots, head = q.take(n, limit)
    return rows.view(OP_DTYPE)["start"].tolist(), slots.tolist(), head


def test_queue_keeps_the_newest_counts_the_oldest_and_wraps():
    r, w = os.pipe()
    try:
        q = AgentQueue(5, w)
        a, b = q.add_slot(), q.add_slot()
        assert (a, b) == (0, 1)
        q.push(a, _rows([0, 1, 2]))
        q.push(b, _rows([3, 4, 5]))  # 6 > 5: the oldest (0) is dropped
        assert q.totals() == (6, 1, 5, 1)  # records_in, dropped, held, head
        assert _take_starts(q, 2) == ([1, 2], [a, a], 3)
        q.push(a, _rows([6, 7]))  # wraps around the ring's end
        assert _take_starts(q, 10) == ([3, 4, 5, 6, 7], [b, b, b, a, a], 8)
        q.push(b, _rows(range(10, 22)))  # more than the whole queue at once: the newest 5
        assert q.totals() == (20, 8, 5, 15)
        assert _take_starts(q, 10)[0] == [17, 18, 19, 20, 21]
        q.push(a, _rows([30, 31]))
        assert q.discard() == 2 and q.totals() == (22, 10, 0, 22)
        with pytest.raises(ValueError, match="no slot 9"):
            q.push(9, _rows([1]))
    finally:
        os.close(r)
        os.close(w)


def test_take_stops_at_a_control_items_sequence():
    q = AgentQueue(100, -1)
    s = q.add_slot()
    q.push(s, _rows(range(10)))
    mark = q.tail()  # a control item queued now
    q.push(s, _rows(range(10, 15)))
    assert mark == 10
    assert _take_starts(q, 4, mark) == ([0, 1, 2, 3], [s] * 4, 4)  # the budget first
    assert _take_starts(q, 100, mark) == ([4, 5, 6, 7, 8, 9], [s] * 6, 10)
    assert _take_starts(q, 100, mark) == ([], [], 10)  # nothing more before the mark
    assert _take_starts(q, 100)[0] == [10, 11, 12, 13, 14]


def test_queue_wakes_a_sleeping_sender_once_at_the_threshold():
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        q = AgentQueue(100, w)
        s = q.add_slot()
        assert q.arm(3) is True
        q.push(s, _rows([1, 2]))
        with pytest.raises(BlockingIOError):
            os.read(r, 10)  # 2 < 3: still asleep
        q.push(s, _rows([3]))
        assert os.read(r, 10) == b"q"
        q.push(s, _rows([4]))
        with pytest.raises(BlockingIOError):
            os.read(r, 10)  # once: the sender is awake now
        assert q.arm(3) is False  # 4 held already: no sleep
        q.set_wake_fd(-1)
        q.take(10)
        assert q.arm(1) is True
        q.push(s, _rows([5]))  # no fd: nothing written, nothing fails
        with pytest.raises(BlockingIOError):
            os.read(r, 10)
    finally:
        os.close(r)
        os.close(w)


def test_loss_names_the_full_queue_as_its_reason():
    """Records the C queue dropped (its bound) are the agent's buffer drops: the LOSS
    frame says so (it said "unknown" while only the Python half's drops were looked at)."""
    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.watched import Watched

    buf = RecordBuffer(4, native=True)
    try:
        conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
        buf.sink(Watched(1, 0, {})).push(_rows(range(10)), None)
        assert buf.lost_total() == 6
        with buf.lock:
            assert buf.totals() == (10, 6, 4)
        assert conn._loss_reason() == "agent buffer full or daemon unreachable"
    finally:
        buf.close()


def test_slot_names_read_as_placeholders_until_copied():
    q = AgentQueue(10, -1)
    s = q.add_slot()
    assert q.name(s, 0) is None and SlotNames(q, s)[2] == "?"


def test_slot_names_are_fetched_in_bulk_as_the_one_by_one_getter_reads_them():
    """AgentQueue.names (one C call for a run of names, issue 21) gives what name() gives
    one at a time: invalid UTF-8 escaped, a name longer than its buffer fetched alone, and
    nothing past the copied ones."""
    from aclprof.binding.opdecode import NameTable

    q = AgentQueue(10, -1)
    s = q.add_slot()
    table = NameTable(1 << 10)
    raw = [b"conv", "r\u00e9lu".encode(), b"bad\xff\xfe", b"L" * 300_000, b"", *(f"op{i}".encode() for i in range(200))]
    for r in raw:
        table.add(r)
    q.push(s, np.zeros(1, OP_DTYPE), table)
    raw.insert(0, b"?")  # a table's id 0
    want = [r.decode("utf-8", "backslashreplace") for r in raw]
    assert [q.name(s, i) for i in range(len(raw))] == raw
    assert q.names(s, 0, len(raw) + 5) == want  # stops at the copied ones
    assert q.names(s, 3, 2) == want[3:5]
    assert q.names(s + 1, 0, 3) == [] and q.names(s, len(raw), 3) == []
    names = SlotNames(q, s)
    assert names[1] == want[1] and names.upto(len(raw)) == want
    assert names.upto(len(raw) + 2)[-2:] == ["?", "?"]  # not copied: placeholders


def test_name_map_of_a_run_with_repeated_and_known_texts():
    """NameMap.extend_run: new ids consecutive from the connection's next id, a text met
    again (in the same run or another subscription's table) keeps its first id."""
    from aclprof.agent.names import NameMap
    from aclprof.agent.watched import Watched

    m = NameMap()
    m.reset(1)
    a, b = Watched(1, 0, {}), Watched(2, 0, {})
    assert m.extend_run(a, 2, ["x", "y", "z"]) == (0, ["x", "y", "z"])
    assert a.name_map.tolist() == [0, 1, 2]
    assert m.extend_run(b, 4, ["?", "y", "w", "?", "w"]) == (3, ["?", "w"])
    assert b.name_map.tolist() == [3, 1, 4, 3, 4]
    assert m.extend_run(b, 5, ["?", "y", "w", "?", "w", "x"]) == (5, [])
    assert b.name_map.tolist() == [3, 1, 4, 3, 4, 0]


@pytest.fixture
def sock_path():
    d = tempfile.mkdtemp(prefix="aclp-")
    yield os.path.join(d, "d.sock")
    import shutil

    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def agent():
    from aclprof import agent

    yield agent
    agent.stop(timeout=1.0)


def _reads(a, model_id: int) -> int:
    w = a._watched[model_id]
    return int(a._buffer.native.slot_counts(w.slot).reads)


def test_the_reader_runs_no_python_per_batch(sock_path, agent, monkeypatch):
    """Several pipe reads (the C loop counts them) reach the daemon, while the Python
    delivery path runs at most once (the first batch, decoded in Python for the layout
    check). The old agent ran its batch_callback, in Python, on every read."""
    from aclprof import mock
    from aclprof.api.subscription.reader import Reader

    calls = []
    original = Reader._run_callbacks

    def counting(self, batch):
        calls.append(len(batch))
        return original(self, batch)

    monkeypatch.setattr(Reader, "_run_callbacks", counting)
    fake = FakeDaemon(sock_path)
    try:
        a = agent.start(sock_path)
        model = mock.load_model(FIXED_OPS)
        agent.watch(model)
        emitted = 0
        for _ in range(6):
            mock.execute(model, 50)
            mock.wait_writer_idle()
            emitted += 50 * len(FIXED_OPS)
            n = emitted
            wait_for(lambda n=n: fake.received == n, what="delivery")
        assert _reads(a, model) >= 4
        assert len(calls) <= 1
        sub = a._watched[model].sub
        st = sub.stats
        assert st.records_read == st.delivered + st.dropped + st.queued == emitted
        assert st.bytes_read == emitted * 80 and st.reader_lag_ns is not None
        # nor were the names decoded in Python, not even at the first batch (they reach the
        # daemon from the queue's copy: below)
        assert sub.names == ["?"]  # the table's placeholder, id 0, only
        final = agent.stop()
        assert final.records_in == final.records_sent == emitted and final.dropped == 0
        assert fake.errors() == []
        names = {r[3] for r in fake.conns[0].records} | {r[2] for r in fake.conns[0].records}
        assert names == {op["name"] for op in FIXED_OPS} | {op["type"] for op in FIXED_OPS}
    finally:
        fake.close()


def test_the_agent_reader_gathers_records_longer_than_a_python_consumer(sock_path, agent):
    """An agent's subscription lets a small read gather for AGENT_COALESCE_NS (10 ms), not
    the 2 ms of a Python consumer: its batches wait for the sender (every 25-50 ms) anyway,
    and each of the reader's timed sleeps costs it CPU (issue 21). A realtime model at
    100 k ops/s for 0.4 s: at most one read per 10 ms (2 ms gave ~200), every record
    delivered."""
    import time

    from aclprof import mock
    from aclprof.api.subscription.reader import AGENT_COALESCE_NS, COALESCE_NS

    assert AGENT_COALESCE_NS == 10_000_000 > COALESCE_NS
    fake = FakeDaemon(sock_path)
    try:
        a = agent.start(sock_path)
        model = mock.load_model([{"name": f"op{i}", "type": "Add", "duration_ns": 10_000} for i in range(100)])
        agent.watch(model)
        assert a._watched[model].sub._reader.coalesce_ns == AGENT_COALESCE_NS
        mock.set_realtime(True)
        t0 = time.monotonic()
        mock.execute(model, 400)  # 40,000 ops of 10 us: 0.4 s (longer on a loaded machine)
        mock.wait_writer_idle()
        wall = time.monotonic() - t0
        wait_for(lambda: fake.received == 40_000, what="delivery")
        # a read that starts small then sleeps 10 ms (at most one per 10 ms of the run), one
        # of half the buffer or more (2048 records: a reader held off the CPU) does not
        assert _reads(a, model) <= wall / (AGENT_COALESCE_NS / 1e9) + 40_000 / 2048 + 2
        assert agent.stop().records_sent == 40_000
    finally:
        fake.close()


def test_the_sender_stays_in_c_while_records_flow_and_its_counters_stay_current(sock_path, agent, monkeypatch):
    """While a realtime model streams (~1.5 s), the sender's C loop does not return to
    Python: nothing needs it (it returned every 0.2 s to poll drop counters before: five GIL
    takes a second on the service's host, issue 21). ``stats()`` still follows the records
    as they go out, read live from the loop's counters: it grows between returns, never
    says more than was emitted, never goes back, and is exact at the end."""
    import threading
    import time

    from aclprof import mock
    from aclprof.agent.connection import Connection

    returns: list[float] = []
    original = Connection.pump

    def counting(self, pump, **kw):
        r = original(self, pump, **kw)
        returns.append(time.monotonic())
        return r

    monkeypatch.setattr(Connection, "pump", counting)
    fake = FakeDaemon(sock_path)
    try:
        a = agent.start(sock_path)
        model = mock.load_model([{"name": f"op{i}", "type": "Add", "duration_ns": 10_000} for i in range(100)])
        agent.watch(model)
        mock.set_realtime(True)
        mock.execute(model, 20)  # connected, WATCH and NAMES sent: the steady state follows
        mock.wait_writer_idle()
        wait_for(lambda: fake.received == 2000, what="the first records")
        run = threading.Thread(target=mock.execute, args=(model, 1500))  # 150,000 ops of 10 us
        samples = []
        t0 = time.monotonic()
        run.start()
        while run.is_alive():
            samples.append(a.stats().records_sent)
            time.sleep(0.05)
        run.join()
        t1 = time.monotonic()
        mock.wait_writer_idle()
        during = [t for t in returns if t0 <= t <= t1]
        assert t1 - t0 >= 1.4
        assert len(during) <= 1, f"the sender returned to Python {len(during)} times in {t1 - t0:.1f} s"
        assert samples == sorted(samples) and samples[-1] <= 2000 + 150_000
        assert len(set(samples)) >= 5, "stats() did not follow the records sent by the C loop"
        wait_for(lambda: fake.received == 152_000, what="delivery")
        final = agent.stop()
        assert final.records_in == final.records_sent == 152_000 and final.dropped == 0
        assert fake.errors() == []
    finally:
        fake.close()


def test_control_frames_keep_their_place_when_a_chunk_is_cut_short(sock_path, agent, monkeypatch):
    """Buffered with no daemon: records, UNWATCH, WATCH again, records. With chunks of 64
    records the UNWATCH waits for the records before it over several pumps; the daemon
    gets them all, in order, each model's records after its WATCH and before its UNWATCH."""
    from aclprof import mock
    from aclprof.agent import sender

    monkeypatch.setattr(sender, "MAX_FRAME_RECORDS", 64)
    a = agent.start(sock_path)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    mock.execute(model, 100)
    mock.wait_writer_idle()
    agent.unwatch(model)
    agent.watch(model)
    mock.execute(model, 60)
    mock.wait_writer_idle()
    emitted = 160 * len(FIXED_OPS)
    wait_for(lambda: a.stats().records_in == emitted, what="buffering")
    fake = FakeDaemon(sock_path)
    try:
        wait_for(lambda: fake.received == emitted, what="delivery")
        conn = fake.conns[0]
        kinds = [k.name for k in conn.kinds if k.name not in ("NAMES", "LOSS")]
        first_unwatch = kinds.index("UNWATCH")
        # (the second subscription is live at connect: its WATCH may come first too)
        assert kinds[:2] == ["HELLO", "WATCH"] and "BATCH" in kinds[2:first_unwatch]
        assert set(kinds[2:first_unwatch]) <= {"BATCH", "WATCH"}
        # after the UNWATCH the model is announced again before its next records
        assert kinds[first_unwatch + 1] == "WATCH"
        assert set(kinds[first_unwatch + 2:]) == {"BATCH"}
        # every record arrives once
        starts = [r[5] for r in conn.records]
        assert len(starts) == emitted and fake.errors() == []
        final = agent.stop()
        assert final.records_sent == emitted and final.dropped == 0
    finally:
        fake.close()


def test_a_control_item_follows_the_records_queued_before_it(agent, sock_path):
    """A control item queued by another thread (TRACE_DONE's path) carries the queue's
    tail: the records appended before it go out before it, those after it after it."""
    from aclprof.agent.items import JsonFrame
    from aclprof.agent.watched import Watched
    from aclprof.protocol import wire

    a = agent.start(sock_path)  # no daemon yet: everything waits in the buffer
    buf = a._buffer
    watched = Watched(3, 0, {})
    sink = buf.sink(watched)
    sink.push(_rows(range(5)), None)
    with buf.lock:
        buf.items.append(JsonFrame(wire.Kind.LOSS, {"dropped": 0, "reason": "marker"}, buf.seq()))
    sink.push(_rows(range(5, 8)), None)
    fake = FakeDaemon(sock_path)
    try:
        wait_for(lambda: fake.received == 8 and len(fake.conns[0].kinds) >= 6, what="delivery")
        conn = fake.conns[0]
        kinds = [k.name for k in conn.kinds if k.name != "NAMES"]
        assert kinds[:5] == ["HELLO", "WATCH", "BATCH", "LOSS", "BATCH"]
        assert [r[5] for r in conn.records] == [0] * 8 and fake.errors() == []
        assert agent.stop().records_sent == 8
    finally:
        fake.close()


def test_the_getters_fallback_streams_names_through_the_queue(sock_path, agent):
    """A record layout the binding does not recognise (the mock's "shuffled" one): the
    reader decodes in Python through the getters and pushes each batch; its names reach
    the daemon through the subscription's C table, aligned with the Python list."""
    from aclprof import mock

    mock.set_op_desc_layout("shuffled")
    fake = FakeDaemon(sock_path)
    try:
        a, model, emitted = watch_and_run(agent, sock_path, 30)
        wait_for(lambda: fake.received == emitted, what="delivery")
        assert a._watched[model].sub.stats.layout_mismatch is True
        conn = fake.conns[0]
        assert {(r[3], r[2]) for r in conn.records} == {(op["name"], op["type"]) for op in FIXED_OPS}
        final = agent.stop()
        assert final.records_sent == emitted and final.dropped == 0 and fake.errors() == []
    finally:
        fake.close()


def test_frame_stops_where_python_is_needed_and_converts_like_convert():
    """aclprof_aq_frame: nothing before the slot is announced on this connection, nothing
    past its name map, a stop before a record naming a new device (while the slot learns
    it), and otherwise the same wire records as aclprof.binding.agentpath.convert."""
    from aclprof.binding.agentpath import DEVICE, FRAMED, NEED_NAMES, NEED_WATCH, WIRE_RECORD_SIZE, convert

    q = AgentQueue(100, -1)
    s = q.add_slot()
    rows = _rows(range(6))
    rows["op_name"] = [0, 1, 0, 2, 1, 0]
    rows["op_type"] = [3, 3, 3, 3, 3, 3]
    rows["keypoint"] = [False, True, False, False, False, False]
    rows["device_id"] = [0, 0, 0, 0, 2, 2]
    q.push(s, rows)
    out = np.zeros(6 * WIRE_RECORD_SIZE, np.uint8)
    assert q.frame(1, None, 6, 64, out, 0)[:2] == (NEED_WATCH, 0)
    q.set_slot(s, 1, 0, True)
    assert q.frame(1, None, 6, 64, out, 0) == (NEED_NAMES, 0, 0, s, 3)
    mapping = np.array([10, 11, 12, 13], np.uint32)
    q.set_map(s, 2, mapping)  # another connection's map: not this one's
    assert q.frame(1, None, 6, 64, out, 0)[0] == NEED_NAMES
    q.set_map(s, 1, mapping)
    assert q.frame(1, None, 6, 64, out, 0) == (DEVICE, 4, 4, s, 2)
    q.set_slot(s, 1, 2, False)
    code, n, head, _, _ = q.frame(1, None, 2, 64, out, 4 * WIRE_RECORD_SIZE)
    assert (code, n, head) == (FRAMED, 2, 6)
    want = np.zeros_like(out)
    assert convert(want, 0, rows, mapping) == -1
    assert out.tobytes() == want.tobytes()


def test_a_large_name_table_is_mapped_in_slices_that_give_the_gil_away(monkeypatch):
    """A new connection maps a model's names _NAMES_STEP per GIL hold, with a real sleep
    between holds (issue 21: the C framing call's stops alone gave the GIL away for
    microseconds, and this thread took it straight back: ~1000 names held it for 1.7-3.4 ms
    in one go), and sends them in one NAMES frame, before one BATCH frame of the records
    using them (a NAMES frame per slice cut the records into ~30 small BATCH frames, each a
    slow path in the daemon); every name goes out once."""
    import aclprof.agent.sender as sender_module
    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.sender import Sender
    from aclprof.agent.watched import Watched
    from aclprof.binding.opdecode import NameTable
    from aclprof.protocol import wire

    sleeps: list[float] = []
    monkeypatch.setattr(sender_module.time, "sleep", sleeps.append)
    buf = RecordBuffer(1 << 16, native=True)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    conn.gen = 1
    conn.names.reset(1)
    w = Watched(1, 0, {})
    w.announced = 1
    sink = buf.sink(w)
    sender = Sender(buf, conn, {1: w}, backoff_max=1)
    table = NameTable(1 << 12)
    for i in range(1000):
        table.add(f"layer{i}/op".encode())
    rows = _rows(range(1000))
    rows["op_name"] = np.arange(1, 1001)  # id 0 is the table's "?"
    try:
        sink.push(rows, table)
        sender._pump()
        frames = [(k, bytes(p)) for k, p in wire.FrameReader().feed(bytes(conn.out.pending()))]
    finally:
        buf.close()
    assert [k for k, _ in frames] == [wire.Kind.NAMES, wire.Kind.BATCH]  # (announced already: no WATCH)
    names = wire.decode_json(frames[0][1])["names"]
    assert sorted(names.values()) == sorted(["?", *(f"layer{i}/op" for i in range(1000))])  # with the table's id 0
    assert frames[0][1] == wire.encode_names(names)[0][wire.HEADER.size:]  # encode_names' bytes
    got = wire.decode_batch(frames[1][1])
    assert [names[str(i)] for i in got["op_name"].tolist()] == [f"layer{i}/op" for i in range(1000)]
    # 1001 names (the table's "?" too), _NAMES_STEP per hold: a sleep between every two
    step = sender_module._NAMES_STEP
    assert len(sleeps) == -(-1001 // step) - 1 and all(0 < t <= 0.001 for t in sleeps)


def test_names_learned_later_continue_the_connection_s_map(monkeypatch):
    """A model whose table grows after its first names went out (later ops, a second model
    with some of the same texts): each stop maps only the names not mapped yet, continuing the
    connection's ids, and a text another slot sent already is not sent again."""
    import aclprof.agent.sender as sender_module
    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.sender import Sender
    from aclprof.agent.watched import Watched
    from aclprof.binding.opdecode import NameTable
    from aclprof.protocol import wire

    monkeypatch.setattr(sender_module.time, "sleep", lambda s: None)
    buf = RecordBuffer(1 << 16, native=True)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    conn.gen = 1
    conn.names.reset(1)
    a, b = Watched(1, 0, {}), Watched(2, 0, {})
    a.announced = b.announced = 1
    sink_a, sink_b = buf.sink(a), buf.sink(b)
    sender = Sender(buf, conn, {1: a, 2: b}, backoff_max=1)
    table_a, table_b = NameTable(1 << 12), NameTable(1 << 12)
    frames: list[tuple[wire.Kind, bytes]] = []

    def pump() -> None:
        sender._pump()
        frames.extend((k, bytes(p)) for k, p in wire.FrameReader().feed(bytes(conn.out.pending())))
        conn.out.clear()

    try:
        for i in range(100):
            table_a.add(f"a{i}".encode())
        rows = _rows(range(100))
        rows["op_name"] = np.arange(1, 101)
        sink_a.push(rows, table_a)
        pump()
        for i in range(100, 170):  # the same model's later ops
            table_a.add(f"a{i}".encode())
        for i in range(60):  # another model: half its texts are the first model's
            table_b.add(f"a{i}".encode() if i % 2 else f"b{i}".encode())
        rows = _rows(range(100, 170))
        rows["op_name"] = np.arange(101, 171)
        sink_a.push(rows, table_a)
        rows = _rows(range(170, 230))
        rows["model_id"] = 8
        rows["op_name"] = np.arange(1, 61)
        sink_b.push(rows, table_b)
        pump()
    finally:
        buf.close()
    names: dict[str, str] = {}
    for kind, payload in frames:
        if kind == wire.Kind.NAMES:
            part = wire.decode_json(payload)["names"]
            assert not set(part) & set(names) and not set(part.values()) & set(names.values())  # each once
            names.update(part)
    assert sorted(map(int, names)) == list(range(len(names)))  # the connection's ids, consecutive
    assert set(names.values()) == {"?", *(f"a{i}" for i in range(170)), *(f"b{i}" for i in range(0, 60, 2))}
    got = np.concatenate([wire.decode_batch(p) for k, p in frames if k == wire.Kind.BATCH])
    assert [names[str(i)] for i in got["op_name"].tolist()] == (
        [f"a{i}" for i in range(170)] + [f"a{i}" if i % 2 else f"b{i}" for i in range(60)])


def test_queue_grows_as_rows_are_held_and_keeps_their_order():
    """The queue allocates room as rows are held (8192 at first, doubling up to the bound:
    an agent whose daemon keeps up holds little); growing a wrapped ring keeps the order."""
    q = AgentQueue(20_000, -1)
    s = q.add_slot()
    q.push(s, _rows(range(5000)))
    assert _take_starts(q, 3000)[0] == list(range(3000))
    q.push(s, _rows(range(5000, 11_000)))  # wraps in the first 8192 rows
    q.push(s, _rows(range(11_000, 16_000)))  # 13000 held: grows, unwrapping
    assert q.totals() == (16_000, 0, 13_000, 3000)
    starts, _, head = _take_starts(q, 20_000)
    assert starts == list(range(3000, 16_000)) and head == 16_000
    q.push(s, _rows(range(30_000)))  # more than the bound at once: the newest 20000
    assert q.totals() == (46_000, 10_000, 20_000, 26_000)
    assert _take_starts(q, 30_000)[0] == list(range(10_000, 30_000))


def test_subscribe_refuses_a_sink_with_callbacks_or_a_wrong_sink():
    """``subscribe(sink=)`` is the agent's: with a callback it is refused by name, and so is
    something that is not a QueueSink; nothing is subscribed either way."""
    import aclprof
    from aclprof import mock
    from aclprof.binding.agentpath import QueueSink

    model = mock.load_model(FIXED_OPS)
    sink = QueueSink(AgentQueue(10, -1), 0)
    with pytest.raises(ValueError, match=r"sink= .* excludes callback= and batch_callback="):
        aclprof.subscribe(model, sink=sink, batch_callback=lambda b: None)
    with pytest.raises(TypeError, match=r"sink must be an aclprof\.binding\.agentpath\.QueueSink"):
        aclprof.subscribe(model, sink=object())
    with aclprof.subscribe(model) as sub:  # the model is still free
        mock.execute(model, 1)
        mock.wait_writer_idle()
    assert sub.stats.records_read == len(FIXED_OPS)


def test_queue_accounting_holds_under_random_use():
    """Random pushes (some beyond the bound), takes, frames, limits and discards: every row
    appended is taken, dropped or held, always; rows leave in the order they came (the
    newest kept). The same loop ran clean under ASan/UBSan as a C program."""
    from aclprof.binding.agentpath import WIRE_RECORD_SIZE
    from aclprof.protocol import wire

    rng = np.random.default_rng(1)
    q = AgentQueue(20_000, -1)
    s0, s1 = q.add_slot(), q.add_slot()
    mapping = np.arange(4, dtype=np.uint32)
    for s in (s0, s1):
        q.set_slot(s, 1, 0, False)
        q.set_map(s, 1, mapping)
    out = np.zeros(5000 * WIRE_RECORD_SIZE, np.uint8)
    seq, taken, last = 0, 0, -1
    for it in range(3000):
        n = int(rng.integers(0, 30_000 if it % 100 == 0 else 3000))
        q.push(s0 if it & 1 else s1, _rows(range(seq, seq + n)))
        seq += n
        op = int(rng.integers(0, 4))
        if op == 0:
            starts = _take_starts(q, int(rng.integers(0, 5000)))[0]
        elif op == 1:
            code, k, _, _, _ = q.frame(1, None, int(rng.integers(0, 5000)), 64, out, 0)
            starts = out[:k * WIRE_RECORD_SIZE].view(wire.RECORD_DTYPE)["start"].tolist()
            assert code == 0
        elif op == 2 and it % 50 == 0:
            q.discard()
            starts = []
        else:
            head = q.totals()[3]
            starts = _take_starts(q, 100, head + 50)[0]
        taken += len(starts)
        assert starts == sorted(starts) and (not starts or starts[0] > last)
        last = starts[-1] if starts else last
        records_in, dropped, held, head = q.totals()
        assert records_in == seq and held <= 20_000 and records_in == taken + dropped + held


def test_corrupt_records_in_agent_mode_are_the_subscriptions_drops(sock_path, agent):
    """The C loop's corrupt records are what ``Subscription.dropped`` (read by the sender
    before its LOSS frames and by ``agent.stats()``) and the full stats snapshot count, and
    what the agent reports lost: emitted = sent + lost."""
    from aclprof import mock

    fake = FakeDaemon(sock_path)
    try:
        mock.set_corrupt_every(7)
        a, model, emitted = watch_and_run(agent, sock_path, 70)
        corrupt = mock.stats()["recordsCorrupted"]
        sub = a._watched[model].sub
        wait_for(lambda: sub.stats.records_read == emitted, what="reading")
        assert corrupt == emitted // 7 and sub.dropped == sub.stats.dropped == corrupt
        final = agent.stop()
        assert final.records_sent == emitted - corrupt == fake.received
        assert final.dropped_subscription == corrupt
    finally:
        mock.set_corrupt_every(0)
        fake.close()
