"""aclprof.agent.connection.Connection's handshake and accounting, in-process (issue 13: the
agent suites drive it from worker processes, where mutants of connection.py cannot be seen;
here a scripted peer on a Unix socket says exactly what the test wants)."""

from __future__ import annotations

import socket
import threading

import pytest
from helpers.scriptedpeer import Peer

from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind


@pytest.fixture
def make(tmp_path):
    made = []

    def make(reply: bytes | None = wire.encode_json(Kind.WELCOME, {})):
        path = str(tmp_path / f"d{len(made)}.sock")
        peer = Peer(path, reply)
        buf = RecordBuffer(100)
        conn = Connection(path, buf, service="svc", labels={"a": "b"}, connect_timeout=5)
        made.append((peer, conn, buf))
        return peer, conn, buf

    yield make
    for peer, conn, buf in made:
        conn.close()
        peer.close()
        buf.close()


def test_handshake_sends_hello_and_counts_the_connection(make):
    peer, conn, _ = make()
    assert conn.connect() is True
    peer.thread.join(5)
    assert peer.hello is not None
    assert (peer.hello["role"], peer.hello["service"], peer.hello["labels"]) == ("agent", "svc", {"a": "b"})
    assert peer.hello["pid"] > 0 and peer.hello["host"] == socket.gethostname()
    assert (conn.gen, conn.connections, conn.connect_failures) == (1, 1, 0)
    assert conn.sock is not None and conn.sock.getblocking() is False


@pytest.mark.parametrize("reply", [
    None,                                                  # EOF during the handshake
    wire.encode_json(Kind.ERROR, {"message": "no"}),       # refused
    wire.encode_json(Kind.STATUS_REPLY, {}),               # something else
    b"JUNKJUNKJUNKJUNK",                                   # not the protocol
])
def test_failed_handshakes_are_counted(make, reply):
    _, conn, _ = make(reply)
    assert conn.connect() is False
    assert (conn.sock, conn.gen, conn.connections, conn.connect_failures) == (None, 0, 0, 1)


def test_no_daemon_is_a_counted_failure(tmp_path):
    buf = RecordBuffer(10)
    conn = Connection(str(tmp_path / "none.sock"), buf, service=None, labels={}, connect_timeout=1)
    assert conn.connect() is False and conn.connect() is False
    assert conn.connect_failures == 2 and conn.sock is None
    assert conn.flush() is False and conn.receive() == "not connected"
    conn.disconnect("x")  # harmless
    conn.close()
    buf.close()


def test_flush_counts_a_chunk_once_written(make):
    _peer, conn, _ = make()
    assert conn.connect()
    conn.out.append(wire.encode(Kind.BATCH, b"\0" * 56), records=1)
    conn.out.append(wire.encode_json(Kind.LOSS, {"dropped": 2}), loss=2)
    size = len(conn.out)
    assert conn.flush() is True
    assert (conn.records_sent, conn.loss_reported, conn.frames_sent, conn.bytes_sent) == (1, 2, 2, size)
    assert not conn.out and conn.out.records == 0
    assert conn.flush() is True  # nothing pending
    assert conn.bytes_sent == size


def test_loss_frame_and_reason(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    assert conn.send_loss() is True and conn.frames_sent == 0  # nothing lost: no frame
    buf.dropped, buf.dropped_subscription, buf.dropped_unread = 3, 4, 5
    assert conn.send_loss() is True
    assert conn.loss_reported == 12 and conn.frames_sent == 1
    reader, pending = wire.FrameReader(), []
    kind, payload = wire.recv_frame(peer.conn, reader, pending)
    assert kind is Kind.LOSS
    assert wire.decode_json(payload) == {"dropped": 12, "reason": "agent buffer full or daemon unreachable; "
                                         "subscription drops; daemon stopped before reading them"}
    assert conn.send_loss() is True and conn.frames_sent == 1  # all reported: no new frame
    buf.dropped_unread += 1
    conn.send_loss()
    kind, payload = wire.recv_frame(peer.conn, reader, pending)
    assert wire.decode_json(payload)["dropped"] == 1


@pytest.mark.parametrize("counters, reason", [
    ((1, 0, 0), "agent buffer full or daemon unreachable"),
    ((0, 1, 0), "subscription drops"),
    ((0, 0, 1), "daemon stopped before reading them"),
    ((0, 0, 0), "unknown"),
])
def test_loss_reason_names_each_cause(make, counters, reason):
    _, conn, buf = make()
    buf.dropped, buf.dropped_subscription, buf.dropped_unread = counters
    assert conn._loss_reason() == reason


def test_goodbye_counts_what_the_daemon_did_not_read(make):
    _peer, conn, buf = make()
    assert conn.connect()
    conn.out.append(b"x" * 10, records=7, loss=0)
    assert conn.flush()
    conn.out.append(b"y" * 10, records=5, loss=3)  # in flight
    conn._goodbye({"records": 9, "dropped": 1})
    # written: 7 + 5 = 12, read 9: 3 unread
    assert buf.dropped_unread == 3 and conn.goodbyes == 1
    assert conn.records_sent == 7 + 5 - 3
    assert conn.loss_reported == 3 - 2  # 3 in flight, the daemon read 1 of the 3
    assert not conn.out and conn.out.records == 0 and conn.out.loss == 0


@pytest.mark.parametrize("obj", [{"records": -1}, {"records": True}, {"records": "3"}, {}])
def test_goodbye_not_understood_changes_nothing(make, obj):
    _, conn, buf = make()
    assert conn.connect()
    conn.out.append(b"x", records=2)
    conn._goodbye(obj)
    assert conn.goodbyes == 0 and buf.dropped_unread == 0 and conn.out.records == 2


def test_goodbye_without_dropped_keeps_loss_pending(make):
    _, conn, buf = make()
    assert conn.connect()
    conn.out.append(b"x", records=1, loss=4)
    conn._goodbye({"records": 1, "dropped": True})
    assert conn.loss_reported == 0 and buf.dropped_unread == 0 and conn.records_sent == 1


def test_goodbye_on_the_socket_ends_the_connection(make):
    peer, conn, _buf = make(wire.encode_json(Kind.WELCOME, {}) + wire.encode_json(Kind.GOODBYE, {"records": 0}))
    assert conn.connect()
    peer.thread.join(5)
    assert conn.receive() == "the daemon is stopping (GOODBYE)"
    assert conn.goodbyes == 1


def test_eof_and_bad_frames_end_the_connection(make):
    peer, conn, _buf = make()
    assert conn.connect()
    peer.thread.join(5)
    assert conn.receive() is None  # nothing yet
    peer.conn.sendall(wire.encode_json(Kind.ERROR, {"message": "m"}) + b"JUNKJUNKJUNKJUNK")
    assert conn.receive().startswith("bad frame from the daemon: bad magic")
    peer.conn.close()
    peer.conn = None
    assert conn.receive() == "the daemon closed the connection"
    conn.check_incoming()
    assert conn.sock is None


def test_disconnect_counts_the_unwritten_chunk(make):
    _peer, conn, buf = make()
    assert conn.connect()
    conn.out.append(b"x", records=6)
    conn.disconnect("test")
    assert conn.sock is None and buf.dropped == 6 and not conn.out
    conn.disconnect("again")
    assert buf.dropped == 6


def test_close_half_closes_so_the_daemon_reads_to_eof(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    conn.close()
    assert conn.sock is None
    assert peer.conn.recv(10) == b""


# ---- second round: the survivors of the first mutation run ---------------------------------------

class MultiPeer:
    """Accepts connections one after another on ``path``, answering each HELLO with WELCOME."""

    def __init__(self, path: str, count: int):
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(count)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, args=(count,), daemon=True)
        self.thread.start()

    def _run(self, count: int) -> None:
        for _ in range(count):
            conn, _ = self.server.accept()
            reader, pending = wire.FrameReader(), []
            wire.recv_frame(conn, reader, pending)
            conn.sendall(wire.encode_json(Kind.WELCOME, {}))
            self.conns.append(conn)

    def close(self) -> None:
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.server.close()


def test_counters_accumulate_over_connections_and_flushes(tmp_path):
    path = str(tmp_path / "m.sock")
    peer = MultiPeer(path, 2)
    buf = RecordBuffer(100)
    conn = Connection(path, buf, service=None, labels={}, connect_timeout=5)
    try:
        assert conn.connect()
        for records, loss in ((3, 1), (4, 2)):
            conn.out.append(b"r" * 10, records=records, loss=loss)
            assert conn.flush()
        assert (conn.records_sent, conn.loss_reported, conn.frames_sent, conn.bytes_sent) == (7, 3, 2, 20)
        conn._goodbye({"records": 5, "dropped": 2})  # 7 written, 5 read: 2 unread; 1 of 3 loss unread
        assert (conn.goodbyes, buf.dropped_unread, conn.records_sent, conn.loss_reported) == (1, 2, 5, 2)
        conn.disconnect("test")
        assert conn.connect()
        assert (conn.gen, conn.connections) == (2, 2)
        conn.out.append(b"r" * 10, records=6, loss=4)
        conn.flush()
        conn._goodbye({"records": 5, "dropped": 0})  # this connection: 6 written, 5 read
        assert (conn.goodbyes, buf.dropped_unread) == (2, 3)
        assert conn.loss_reported == 2  # the 4 flushed were not read: taken back, reported again
    finally:
        conn.close()
        peer.close()
        buf.close()


def test_hello_carries_the_version(make):
    from aclprof.protocol.version import __version__

    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    assert peer.hello["version"] == __version__


def test_handshake_ignores_kinds_it_does_not_know(make):
    _, conn, _ = make(wire.encode_json(Kind.WELCOME, {}) + struct_frame(99, b"{}"))
    assert conn.connect() is True


def struct_frame(kind: int, payload: bytes) -> bytes:
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, kind, 0, len(payload)) + payload


def test_disconnect_reads_a_queued_goodbye_first(make):
    peer, conn, buf = make(wire.encode_json(Kind.WELCOME, {}) + wire.encode_json(Kind.GOODBYE, {"records": 0}))
    assert conn.connect()
    peer.thread.join(5)
    conn.out.append(b"x", records=2)
    conn.disconnect("send failed")
    assert conn.goodbyes == 1 and buf.dropped_unread == 2 and buf.dropped == 0


def test_queue_json_and_announce(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)

    class W:
        model_id, device, labels, announced = 7, 2, {"k": "v"}, 0

    w = W()
    conn.announce(w)
    assert w.announced == conn.gen == 1 and conn.out.loss == 0
    assert conn.flush()
    kind, payload = wire.recv_frame(peer.conn, wire.FrameReader(), [])
    assert kind is Kind.WATCH and wire.decode_json(payload) == {"model_id": 7, "device": 2, "labels": {"k": "v"}}


def test_send_loss_leaves_out_what_is_already_queued(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    conn.out.append(b"", loss=2)  # a LOSS of 2 queued, not yet written
    buf.dropped = 5
    conn.send_loss()
    reader, pending = wire.FrameReader(), []
    wire.recv_frame(peer.conn, reader, pending)  # the b"" frame's bytes are nothing: LOSS is first
    assert conn.loss_reported == 5


def test_flush_to_a_closed_peer_fails_and_disconnects(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.close()
    peer.conn = None
    conn.out.append(b"x" * 1000, records=3)
    for _ in range(3):
        ok = conn.flush()
        if conn.sock is None:  # the flush that found the connection broken says so
            assert ok is False
            break
    assert conn.sock is None and buf.dropped == 3


def test_wait_writable_keeps_a_healthy_connection_and_drains_wakes(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    buf.wake()
    conn.wait_writable(buf.wake_r)
    assert conn.sock is not None
    conn.wait_writable(buf.wake_r)
    assert conn.sock is not None


def test_wait_writable_notices_a_hang_up(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.close()
    peer.conn = None
    conn.wait_writable(buf.wake_r)
    assert conn.sock is None


def test_other_kinds_from_the_daemon_are_ignored(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.sendall(wire.encode_json(Kind.STATUS_REPLY, {"records": 1}) + wire.encode(Kind.ERROR, b"not json"))
    assert conn.receive() is None and conn.goodbyes == 0


def test_a_second_goodbye_is_not_counted_again(make):
    peer, conn, buf = make()
    assert conn.connect()
    peer.thread.join(5)
    conn.out.append(b"x", records=4)
    peer.conn.sendall(wire.encode_json(Kind.GOODBYE, {"records": 1}) * 2)
    assert conn.receive() == "the daemon is stopping (GOODBYE)"
    assert conn.goodbyes == 1 and buf.dropped_unread == 3


def test_goodbye_adds_to_earlier_counts(make):
    _, conn, buf = make()
    assert conn.connect()
    buf.dropped_unread = 10
    conn.loss_reported = 100
    conn.out.append(b"x", records=4, loss=5)
    conn._goodbye({"records": 1, "dropped": 5})  # all 5 loss read
    assert buf.dropped_unread == 13 and conn.loss_reported == 105


def test_trace_start_reaches_the_callback_and_live_follows_the_daemon(make):
    """TRACE_START (aclprof trace) goes to the agent's callback with its object; LIVE says
    whether a daemon streams this agent's records now (issue 20: both were seen only from
    worker processes)."""
    peer, conn, _ = make()
    started = []
    conn.on_trace_start = started.append
    assert conn.connect() and conn.live is False
    peer.thread.join(5)
    peer.conn.sendall(wire.encode_json(Kind.LIVE, {"live": True}) + wire.encode_json(Kind.TRACE_START, {"id": 7}))
    for _ in range(100):
        if started:
            break
        assert conn.receive() is None
    assert started == [{"id": 7}] and conn.live is True
    peer.conn.sendall(wire.encode_json(Kind.LIVE, {"live": False}))
    for _ in range(100):
        conn.receive()
        if conn.live is False:
            break
    assert conn.live is False
    peer.conn.sendall(wire.encode_json(Kind.LIVE, {"live": "yes"}))  # only true is true
    conn.live = True
    for _ in range(100):
        conn.receive()
        if conn.live is False:
            break
    assert conn.live is False and started == [{"id": 7}]


def test_trace_start_without_a_callback_is_ignored(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.sendall(wire.encode_json(Kind.TRACE_START, {"id": 1}) + wire.encode_json(Kind.LIVE, {"live": True}))
    for _ in range(100):
        assert conn.receive() is None
        if conn.live:
            break
    assert conn.live is True


@pytest.mark.parametrize("live,want", [(True, True), (False, False), ("yes", False)])
def test_a_live_frame_right_after_welcome_is_read_by_connect(make, live, want):
    peer, conn, _ = make(wire.encode_json(Kind.WELCOME, {}) + wire.encode_json(Kind.LIVE, {"live": live}))
    conn.live = not want
    assert conn.connect()
    peer.thread.join(5)
    assert conn.live is want
