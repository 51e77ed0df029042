"""The daemon's outgoing queue (aclprofd.conn.OutQueue): chunks sent with sendmsg, never
joined; partial sends resume mid-chunk; what arrives is exactly what was queued, in order;
len() is the bytes still to send; a mutable input is copied (changing it later changes
nothing queued); a full socket raises BlockingIOError and keeps everything."""

from __future__ import annotations

import os
import random
import socket

import pytest
from aclprofd.conn import OutQueue


def _pair(sndbuf: int = 4096) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    a.setblocking(False)
    b.settimeout(5)
    return a, b


def test_partial_sends_deliver_every_byte_in_order():
    rng = random.Random(7)
    a, b = _pair()
    q = OutQueue()
    want = bytearray()
    for _ in range(300):  # many chunks: more than one sendmsg's worth (64)
        chunk = os.urandom(rng.choice([1, 7, 100, 3000, 70_000]))
        want += chunk
        q += chunk
    assert len(q) == len(want) and q
    got = bytearray()
    b.setblocking(False)
    sends = 0
    while q or len(got) < len(want):
        if q:
            before = len(q)
            try:
                n = q.send(a)
                sends += 1
            except BlockingIOError:
                n = 0
            assert len(q) == before - n
        try:
            got += b.recv(1 << 20)
        except BlockingIOError:
            pass
    assert sends > 10  # the small socket buffer made many partial sends
    assert bytes(got) == bytes(want)
    assert q.send(a) == 0 and not q and len(q) == 0
    a.close()
    b.close()


def test_bytes_of_the_rest_after_a_partial_send_and_clear():
    a, b = _pair(sndbuf=1)
    q = OutQueue()
    q += b"A" * 300_000
    q += bytearray(b"B" * 10)
    q += memoryview(b"C" * 5)
    q += b""  # nothing: no empty chunk
    n = q.send(a)
    assert 0 < n < 300_000  # stopped inside the first chunk
    assert bytes(q) == b"A" * (300_000 - n) + b"B" * 10 + b"C" * 5
    assert len(q) == 300_015 - n
    q.clear()
    assert bytes(q) == b"" and not q and q.send(a) == 0
    a.close()
    b.close()


def test_a_mutable_input_is_copied():
    q = OutQueue()
    data = bytearray(b"hello")
    q += data
    data[:] = b"XXXXX"
    assert bytes(q) == b"hello"


def test_full_socket_raises_and_keeps_the_queue():
    a, b = _pair()
    q = OutQueue()
    q += b"x" * (4 << 20)
    with pytest.raises(BlockingIOError):
        while True:
            q.send(a)
    left = len(q)
    assert 0 < left < 4 << 20
    assert len(bytes(q)) == left
    a.close()
    b.close()
