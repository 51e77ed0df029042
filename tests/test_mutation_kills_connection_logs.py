"""What the agent's connection (``aclprof.agent.connection``) tells an operator in its log
(issue 20): the survivors of the mutation run there changed only log messages and fields.
The lines are read back with structlog's own capture (``structlog.testing.capture_logs``):
the event text, its level and the fields a user greps for (socket, error, failures,
reason, message, unread)."""

from __future__ import annotations

import pytest
import structlog
import test_mutation_kills_connection as _connection_tests

from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind

#: the fixture: a scripted peer, a Connection to it and its buffer (closed after the test)
make = _connection_tests.make

UNREACHABLE = "aclprof daemon not reachable; buffering"
CONNECTED = "connected to the aclprof daemon"
LOST = "lost the aclprof daemon connection; buffering"


@pytest.fixture(autouse=True)
def fresh_logger(monkeypatch):
    """A logger proxy of this test's own: one cached by an earlier in-process test (structlog
    configured with cache_logger_on_first_use, e.g. by a CLI main()) would bypass the capture."""
    from aclprof.agent import connection

    monkeypatch.setattr(connection, "_log", structlog.get_logger("aclprof.agent.connection"))



def _events(logs, event):
    return [e for e in logs if e["event"] == event]


def test_an_unreachable_daemon_is_logged_at_the_first_failure_and_every_hundredth(tmp_path):
    buf = RecordBuffer(10)
    path = str(tmp_path / "none.sock")
    conn = Connection(path, buf, service=None, labels={}, connect_timeout=1)
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(201):
                assert conn.connect() is False
        lines = _events(logs, UNREACHABLE)
        assert [e["failures"] for e in lines] == [1, 100, 200]
        assert all(e["log_level"] == "info" and e["socket"] == path for e in lines)
        assert "No such file or directory" in lines[0]["error"]
        assert len(logs) == 3  # nothing else: a daemon that is down does not fill the log
    finally:
        conn.close()
        buf.close()


@pytest.mark.parametrize("reply,error", [
    (None, "the daemon closed the connection during the handshake"),
    (wire.encode_json(Kind.ERROR, {"message": "not allowed"}), "the daemon refused: not allowed"),
    (wire.encode_json(Kind.STATUS_REPLY, {}), "unexpected STATUS_REPLY during the handshake"),
])
def test_a_failed_handshake_says_why(make, reply, error):
    peer, conn, _ = make(reply)
    with structlog.testing.capture_logs() as logs:
        assert conn.connect() is False
    (line,) = _events(logs, UNREACHABLE)
    assert (line["error"], line["failures"], line["socket"]) == (error, 1, peer.path)
    assert conn.last_error == error


def test_a_connection_and_its_end_are_logged_with_the_reason(make):
    peer, conn, _ = make()
    with structlog.testing.capture_logs() as logs:
        assert conn.connect()
        peer.thread.join(5)
        peer.conn.close()
        peer.conn = None
        conn.check_incoming()
    assert [(e["event"], e["log_level"]) for e in logs] == [(CONNECTED, "info"), (LOST, "info")]
    assert (logs[0]["socket"], logs[0]["connection"]) == (peer.path, 1)
    assert logs[1]["reason"] == "the daemon closed the connection"


def test_the_daemons_error_is_logged_as_a_warning_with_its_message(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.sendall(wire.encode_json(Kind.ERROR, {"message": "WATCH refused: too many models"}))
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            if conn.receive() is None and logs:
                break
    assert [(e["event"], e["log_level"], e["message"]) for e in logs] == [
        ("the daemon reported an error", "warning", "WATCH refused: too many models")]


def test_a_goodbye_logs_the_unread_records_and_the_stop(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    conn.out.append(b"x" * 10, records=7)
    assert conn.flush()
    peer.conn.sendall(wire.encode_json(Kind.GOODBYE, {"records": 4, "dropped": 0}))
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            if conn.sock is None:
                break
            conn.check_incoming()
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("the aclprof daemon stopped before reading some records; counted as lost", "info"), (LOST, "info")]
    assert logs[0]["unread"] == 3
    assert logs[1]["reason"] == "the daemon is stopping (GOODBYE)"


def test_a_goodbye_with_every_record_read_logs_only_the_stop(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.sendall(wire.encode_json(Kind.GOODBYE, {"records": 0, "dropped": 0}))
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            if conn.sock is None:
                break
            conn.check_incoming()
    assert [(e["event"], e["reason"]) for e in logs] == [(LOST, "the daemon is stopping (GOODBYE)")]


def test_a_bad_frame_and_a_failed_send_are_named_in_the_reason(make):
    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.sendall(b"JUNKJUNKJUNKJUNK")
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            if conn.sock is None:
                break
            conn.check_incoming()
    (line,) = _events(logs, LOST)
    assert line["reason"].startswith("bad frame from the daemon: bad magic")

    peer2, conn2, _ = make()
    assert conn2.connect()
    peer2.thread.join(5)
    peer2.conn.close()
    peer2.conn = None
    conn2.out.append(b"y" * 200_000, records=1)
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            if not conn2.flush():
                break
    (line,) = _events(logs, LOST)
    assert line["reason"].startswith("send failed: ") and "Broken pipe" in line["reason"]


def test_a_hang_up_seen_while_waiting_to_write_is_logged(make):
    import os

    peer, conn, _ = make()
    assert conn.connect()
    peer.thread.join(5)
    peer.conn.close()
    peer.conn = None
    r, w = os.pipe()
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(100):
                if conn.sock is None:
                    break
                conn.wait_writable(r)
        assert [e["reason"] for e in _events(logs, LOST)] == ["the daemon closed the connection"]
    finally:
        os.close(r)
        os.close(w)
