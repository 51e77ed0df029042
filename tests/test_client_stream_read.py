"""How ``aclprof tail`` reads a STREAM (issue 21): each frame's payload straight from the
socket into one buffer the client keeps (a header read, then its payload), not in 64 KiB
``recv`` pieces joined into a new buffer per frame; frames that arrived with an earlier
reply still come first; EOF and malformed headers are the same errors as before."""

from __future__ import annotations

import socket
import threading

import pytest

from aclprof.cli.client import Client, DaemonClosed, DaemonError
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind


class CountingSock:
    """A socket whose reads are counted (recv and recv_into calls)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.reads = sock, 0

    def recv(self, n: int) -> bytes:
        self.reads += 1
        return self.sock.recv(n)

    def recv_into(self, buf, n: int = 0) -> int:
        self.reads += 1
        return self.sock.recv_into(buf, n)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _client(frames: bytes, *, close: bool = True) -> tuple[Client, CountingSock, threading.Thread]:
    """A Client on one end of a socketpair whose other end sends ``frames`` (after reading
    the STREAM request), then closes."""
    mine, theirs = socket.socketpair()
    c = Client.__new__(Client)
    c._reader, c._pending, c._frame_buf = wire.FrameReader(), [], bytearray()
    c.welcome = {"protocol": 2}
    c._sock = counting = CountingSock(mine)  # type: ignore[assignment]

    def daemon() -> None:
        theirs.recv(1 << 16)  # the STREAM request
        theirs.sendall(frames)
        if close:
            theirs.close()

    t = threading.Thread(target=daemon, daemon=True)
    t.start()
    return c, counting, t


def _records(n_bytes: int, tag: bytes) -> bytes:
    line = b'{"op":"%s"}\n' % tag
    return line * (n_bytes // len(line))


def test_a_large_frame_is_read_in_place_in_a_few_reads():
    big, small = _records(1_000_000, b"a"), _records(300, b"b")
    frames = (wire.header(Kind.STREAM_RECORDS, len(big)) + big + wire.encode_json(Kind.STREAM_SKIPPED, {"skipped": 7})
              + wire.header(Kind.STREAM_RECORDS, len(small)) + small
              + wire.encode_json(Kind.END, {"records": 1, "skipped": 7}))
    c, sock, t = _client(frames)
    got = []
    for payload, skipped in c.stream_jsonl({}):
        got.append((bytes(payload), skipped))
        if len(got) == 1:
            reads_first = sock.reads
    t.join(5)
    assert got == [(big, 0), (b"", 7), (small, 0)]
    # a header read and the payload's (a few, as the kernel hands it over); 64 KiB pieces
    # were 16 or more for this frame
    assert reads_first <= 8, reads_first


def test_frames_that_came_with_an_earlier_reply_come_first():
    first = _records(500, b"p")
    hdr = wire.header(Kind.STREAM_RECORDS, 3)
    # the socket has the rest of a frame whose first 5 header bytes an earlier read took
    c, _sock, t = _client(hdr[5:] + b"x\n\n" + wire.encode_json(Kind.END, {}))
    c._pending.extend(c._reader.feed(wire.header(Kind.STREAM_RECORDS, len(first)) + first + hdr[:5]))
    assert c._reader.buffered == 5
    got = [bytes(p) for p, _ in c.stream_jsonl({})]
    t.join(5)
    assert got == [first, b"x\n\n"]


def test_eof_inside_a_frame_is_a_closed_daemon_and_a_bad_header_an_error():
    payload = _records(10_000, b"z")
    c, _sock, t = _client(wire.header(Kind.STREAM_RECORDS, len(payload)) + payload[:5000])
    with pytest.raises(DaemonClosed):
        list(c.stream_jsonl({}))
    t.join(5)
    c, _sock, t = _client(b"NOPE" + bytes(8))
    with pytest.raises(DaemonError, match="malformed frame"):
        list(c.stream_jsonl({}))
    t.join(5)
