"""aclprof.agent.connection.Connection, in-process against a scripted daemon: the WELCOME's
protocol (what the sender may send: OP_FAILURE needs 3, REQUEST_BILL 4), why an attempt
failed (refused, permission denied), name ids per connection, drops over connections,
partial writes, SIGPIPE, a reset connection. Written against the survivors of the mutation
run of 2026-12-02 night (tests/bench/MUTATION.md)."""

from __future__ import annotations

import signal
import socket
import types
from typing import Any

import pytest
from helpers.scriptedpeer import Peer

from aclprof.agent import connection as connection_mod
from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.agent.watched import Watched
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind


@pytest.fixture
def daemon(tmp_path):
    """``daemon(reply)``: a scripted daemon answering HELLO with ``reply``; returns its Peer
    and its socket path. The first call also makes the Connection (``daemon.conn``)."""
    peers: list[Peer] = []
    state: dict[str, Any] = {}

    def make(reply: bytes | None = wire.encode_json(Kind.WELCOME, {})) -> Peer:
        path = str(tmp_path / f"d{len(peers)}.sock")
        peer = Peer(path, reply)
        peers.append(peer)
        if "conn" not in state:
            state["buf"] = RecordBuffer(100)
            state["conn"] = Connection(path, state["buf"], service="svc", labels={}, connect_timeout=5)
        state["conn"].socket_path = path
        return peer

    make.state = state  # type: ignore[attr-defined]
    yield make
    if "conn" in state:
        state["conn"].close()
        state["buf"].close()
    for peer in peers:
        peer.close()


@pytest.mark.parametrize("obj, want", [
    ({"protocol": 4}, 4),
    ({"protocol": 3}, 3),
    ({}, 1),                 # a daemon before the field: protocol 1
    ({"protocol": "3"}, 1),  # not an integer
    ({"protocol": True}, 1),  # JSON true is not a protocol number
    ({"protocol": None}, 1),
])
def test_the_daemons_protocol_is_read_from_its_welcome(daemon, obj, want):
    daemon(wire.encode_json(Kind.WELCOME, obj))
    conn = daemon.state["conn"]
    assert conn.connect() is True
    assert conn.daemon_protocol == want and type(conn.daemon_protocol) is int


def test_a_reconnection_to_an_older_daemon_forgets_the_newer_protocol(daemon):
    daemon(wire.encode_json(Kind.WELCOME, {"protocol": 4}))
    conn = daemon.state["conn"]
    assert conn.connect() and conn.daemon_protocol == 4
    conn.disconnect("test")
    daemon(wire.encode_json(Kind.WELCOME, {}))
    assert conn.connect() and conn.daemon_protocol == 1


@pytest.mark.parametrize("reply, refused", [
    (wire.encode_json(Kind.ERROR, {"message": "too many agents for uid 1000"}), True),
    (None, False),  # EOF during the handshake: not a refusal
])
def test_a_refusal_is_told_apart_from_a_lost_handshake(daemon, reply, refused):
    daemon(reply)
    conn = daemon.state["conn"]
    assert conn.connect() is False
    assert conn.last_refused is refused and conn.last_denied is False
    assert ("too many agents for uid 1000" in conn.last_error) is refused


def test_permission_denied_on_the_socket_is_said_as_such(tmp_path, monkeypatch):
    """EACCES from connect() (the agent's user not in the daemon's group; root cannot be
    refused by file permissions, so the socket's connect is faked here)."""

    class Denied:
        def __init__(self, *a: Any) -> None:
            self.closed = False

        def settimeout(self, t: float) -> None:
            pass

        def connect(self, path: str) -> None:
            raise PermissionError(13, "Permission denied")

        def close(self) -> None:
            self.closed = True

    fake = types.SimpleNamespace(**{k: getattr(socket, k) for k in ("AF_UNIX", "SOCK_STREAM", "SOCK_CLOEXEC")},
                                 socket=Denied, gethostname=socket.gethostname)
    monkeypatch.setattr(connection_mod, "socket", fake)
    buf = RecordBuffer(10)
    conn = Connection(str(tmp_path / "x.sock"), buf, service=None, labels={}, connect_timeout=1)
    assert conn.connect() is False
    assert conn.last_denied is True and conn.last_refused is False
    assert "Permission denied" in conn.last_error and conn.connect_failures == 1
    buf.close()


def test_name_ids_start_afresh_on_each_connection(daemon):
    """A new daemon connection has an empty name table: every name goes out again, from id 0."""
    daemon()
    conn = daemon.state["conn"]
    w = Watched(7, 0, {})
    names = ["MatMul", "Add", "Relu"]
    assert conn.connect()
    assert conn.names.extend(w, 2, names) == {"0": "MatMul", "1": "Add", "2": "Relu"}
    assert conn.names.extend(w, 2, names) == {}
    conn.disconnect("test")
    daemon()
    assert conn.connect()
    assert conn.names.extend(w, 2, names) == {"0": "MatMul", "1": "Add", "2": "Relu"}


def test_unwritten_chunks_of_two_connections_add_up_in_the_drops(daemon):
    daemon()
    conn, buf = daemon.state["conn"], daemon.state["buf"]
    assert conn.connect()
    conn.out.append(b"x", records=6)
    conn.disconnect("first")
    daemon()
    assert conn.connect()
    conn.out.append(b"y", records=4)
    conn.disconnect("second")
    assert buf.dropped == 10


class Trickle:
    """The connection's socket taking at most ``size`` bytes per send (a daemon reading slowly)."""

    def __init__(self, sock: socket.socket, size: int) -> None:
        self.sock, self.size, self.calls = sock, size, 0

    def send(self, data: Any, flags: int = 0) -> int:
        self.calls += 1
        return self.sock.send(bytes(memoryview(data)[:self.size]), flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.mark.parametrize("size", [1, 7])
def test_a_flush_keeps_writing_while_the_socket_takes_bytes(daemon, size):
    peer = daemon()
    conn = daemon.state["conn"]
    assert conn.connect()
    peer.thread.join(5)
    frame = wire.encode_json(Kind.LOSS, {"dropped": 3, "reason": "x" * 40})
    conn.out.append(frame, records=0)
    conn.sock = trickle = Trickle(conn.sock, size)  # type: ignore[assignment]
    assert conn.flush() is True
    assert not conn.out and conn.bytes_sent == len(frame) and conn.frames_sent == 1
    assert trickle.calls == -(-len(frame) // size)
    conn.sock = trickle.sock
    got = b""
    peer.conn.settimeout(5)
    while len(got) < len(frame):
        got += peer.conn.recv(65536)
    assert got == frame


def test_a_send_to_a_closed_daemon_raises_no_sigpipe(daemon):
    """A host program may run with SIGPIPE at a handler or its default (which kills the
    process): a write to a daemon that went away must fail with EPIPE, never signal."""
    peer = daemon()
    conn, buf = daemon.state["conn"], daemon.state["buf"]
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.close()
    peer.conn = None
    caught: list[int] = []
    old = signal.signal(signal.SIGPIPE, lambda signum, frame: caught.append(signum))
    try:
        conn.out.append(b"x" * 1000, records=3)
        for _ in range(3):
            if not conn.flush():
                break
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a point where a pending handler has run
    finally:
        signal.signal(signal.SIGPIPE, old)
    assert conn.sock is None and buf.dropped == 3
    assert caught == []


def test_a_connection_reset_by_the_daemon_ends_it_with_the_reason(daemon):
    """The daemon's socket closed with our bytes unread: Linux resets the connection; the
    agent says so and drops the connection."""
    peer = daemon()
    conn = daemon.state["conn"]
    assert conn.connect()
    peer.thread.join(5)
    conn.out.append(wire.encode_json(Kind.LOSS, {"dropped": 1, "reason": "x"}), records=0)
    assert conn.flush() and not conn.out
    peer.conn.close()  # without reading the LOSS frame
    peer.conn = None
    reason = conn.receive()
    assert reason is not None and reason.startswith("receive failed:") and "reset" in reason.lower()
    conn.check_incoming()
    assert conn.sock is None
