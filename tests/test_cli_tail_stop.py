"""``aclprof tail`` says one thing when the daemon stops, however the socket reports the stop
(issue 17): END, GOODBYE, EOF, ECONNRESET (the daemon closed with our STREAM unread) or EPIPE
(it closed before we sent STREAM). Which one a real stop causes is a matter of timing, which
made tests/test_cli_tail_follow.py flaky; here a fake daemon forces each way in turn.

A daemon that closes this one connection and still listens is not a stop, and says so."""

from __future__ import annotations

import argparse
import os
import select
import socket
import threading

import pytest
from helpers.procs import short_tmpdir

from aclprof.cli import tail
from aclprof.cli.client import Client
from aclprof.protocol import wire

pytestmark = pytest.mark.timeout(30)

WAYS = ["end", "goodbye", "eof", "reset", "epipe", "killed"]


class FakeDaemon:
    """One connection: the handshake, then the way the stream ends (``way``)."""

    def __init__(self, way: str):
        self.way = way
        self.path = os.path.join(short_tmpdir("aclp-"), "d.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.closed = threading.Event()  # the connection is closed (the stop is done)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _stop_listening(self, unlink: bool = True) -> None:
        self.listener.close()  # as aclprofd: no more connections, socket file removed ...
        if unlink:
            os.unlink(self.path)  # ... unless killed (the file stays, nothing listens)

    def _serve(self) -> None:
        try:
            c, _ = self.listener.accept()
            reader, pending = wire.FrameReader(), []
            wire.recv_frame(c, reader, pending)  # HELLO
            c.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 2, "pid": 1,
                                                            "started_ts": 0.0}))
            way = self.way
            if way == "epipe":  # closes before the client sends STREAM: its send fails
                self._stop_listening()
            elif way == "reset":  # STREAM arrived and is left unread: the close resets
                select.select([c], [], [], 10)
                self._stop_listening()
            elif way == "running":  # closes this connection only, and still listens
                wire.recv_frame(c, reader, pending)
            else:
                kind, _ = wire.recv_frame(c, reader, pending)
                assert kind == wire.Kind.STREAM
                self._stop_listening(unlink=way != "killed")
                if way == "end":
                    c.sendall(wire.encode_json(wire.Kind.END, {"records": 0, "skipped": 0}))
                elif way == "goodbye":
                    c.sendall(wire.encode_json(wire.Kind.GOODBYE, {"records": 0, "dropped": 0}))
            c.close()
        except BaseException as exc:
            self.error = exc
        finally:
            self.closed.set()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


def _ended(way: str) -> str:
    d = FakeDaemon(way)
    try:
        client = Client(d.path, timeout=5.0)
        if way == "epipe":
            assert d.closed.wait(10)
        ended = tail._stream(client, argparse.Namespace(json=True), {})
        assert d.closed.wait(10) and d.error is None
        return ended
    finally:
        d.close()


@pytest.mark.parametrize("way", WAYS)
def test_every_way_a_daemon_stop_reaches_the_socket_gives_one_message(way):
    # the literal, not tail.STOPPED: the message is the interface
    assert _ended(way) == "the daemon ended the stream (it stopped)"


def test_a_daemon_that_closes_the_stream_and_still_listens_is_not_called_stopped():
    assert _ended("running") == ("the daemon closed this stream's connection and is still running "
                                 "(its log says why)")
