"""``aclprof tail`` says one thing when the daemon stops, however the socket reports the stop
(issue 17): END, GOODBYE, EOF, ECONNRESET (the daemon closed with our STREAM unread) or EPIPE
(it closed before we sent STREAM). Which one a real stop causes is a matter of timing, which
made tests/test_cli_tail_follow.py flaky; here a fake daemon forces each way in turn.

A daemon that closes this one connection and still listens is not a stop, and says so; a
daemon restarted on the same path is (its socket file may get the old inode number back:
the new daemon's WELCOME, another pid and start time, tells them apart)."""

from __future__ import annotations

import argparse
import select
import socket

import pytest
from helpers.fakedaemon import FakeDaemon

from aclprof.cli import tail
from aclprof.cli.client import Client
from aclprof.protocol import wire

pytestmark = pytest.mark.timeout(30)

WAYS = ["end", "goodbye", "eof", "reset", "epipe", "killed", "restarted"]


def _script(way: str):
    def script(fake, conn, recv):
        if way == "epipe":  # closes before the client sends STREAM: its send fails
            fake.stop_listening()
            return
        if way == "reset":  # STREAM arrived and is left unread: the close resets
            select.select([conn], [], [], 10)
            fake.stop_listening()
            return
        assert recv()[0] == wire.Kind.STREAM
        if way == "running":  # closes this connection only, and still listens
            conn.close()
            fake.answer_one()
            return
        fake.stop_listening(unlink=way != "killed")
        if way == "restarted":  # a new daemon on the same path before the client looks
            new = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            new.bind(fake.path)
            new.listen(4)
            conn.close()
            with new:
                fake.answer_one(new, pid=2)
            return
        if way == "end":
            conn.sendall(wire.encode_json(wire.Kind.END, {"records": 0, "skipped": 0}))
        elif way == "goodbye":
            conn.sendall(wire.encode_json(wire.Kind.GOODBYE, {"records": 0, "dropped": 0}))
    return script


def _ended(way: str) -> str:
    d = FakeDaemon(_script(way))
    try:
        client = Client(d.path, timeout=5.0)
        if way == "epipe":
            assert d.done.wait(10)
        ended = tail._stream(client, argparse.Namespace(json=True), {})
        assert d.done.wait(10) and d.error is None
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


@pytest.mark.parametrize("ended, said", [(tail.STOPPED, tail.RECONNECTED),
                                         (tail.CLOSED_RUNNING, tail.RECONNECTED_SAME)])
def test_follow_says_restarted_only_after_a_stop(monkeypatch, capsys, ended, said):
    """-F reconnects either way, but "daemon restarted" only when it stopped."""
    results = iter([ended])

    def stream(client, args, filt):
        try:
            return next(results)
        except StopIteration:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(tail, "_stream", stream)
    monkeypatch.setattr(tail, "_reconnect", lambda args: object())
    monkeypatch.setattr(tail, "connect", lambda args, timeout=None: object())
    args = argparse.Namespace(follow_restarts=True, json=True, model=None, pid=None, device=None, type=None,
                              name=None, min_duration=None, service=None, host=None, socket=None)
    with pytest.raises(KeyboardInterrupt):
        tail.cmd_tail(args)
    assert capsys.readouterr().err.strip() == said
