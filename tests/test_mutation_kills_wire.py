"""aclprof.protocol.wire's functions, edge by edge (issue 13: mutants of wire.py that the
golden-byte and daemon unit tests let survive: limits at exactly the boundary, error
messages, frames split at every byte, bytearray/memoryview input, recv_frame)."""

from __future__ import annotations

import itertools
import json
import socket
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aclprof.protocol import wire
from aclprof.protocol.wire import MAX_PAYLOAD, FrameReader, Kind, ProtocolError


def raw_header(magic=b"ACLP", version=1, kind=int(Kind.STATUS), reserved=0, length=0) -> bytes:
    return struct.pack("<4sBBHI", magic, version, kind, reserved, length)


# ---- encoders --------------------------------------------------------------------------------

def test_header_at_and_beyond_the_limit():
    assert wire.header(Kind.BATCH, MAX_PAYLOAD) == raw_header(kind=13, length=MAX_PAYLOAD)
    assert wire.header(13, 5) == b"ACLP\x01\x0d\x00\x00\x05\x00\x00\x00"
    with pytest.raises(ProtocolError, match=rf"^payload of {MAX_PAYLOAD + 1} bytes exceeds {MAX_PAYLOAD}$"):
        wire.header(Kind.BATCH, MAX_PAYLOAD + 1)


def test_encode_default_payload_is_empty():
    assert wire.encode(Kind.STATUS) == raw_header(kind=20, length=0)
    assert wire.encode(Kind.STATUS, b"xy") == raw_header(kind=20, length=2) + b"xy"


def test_encode_json_is_compact_utf8():
    frame = wire.encode_json(Kind.HELLO, {"a": [1, 2], "é": "x"})
    payload = b'{"a":[1,2],"\\u00e9":"x"}'  # json's default ASCII escapes
    assert frame == raw_header(kind=1, length=len(payload)) + payload


def test_encode_batch_converts_and_makes_contiguous():
    recs = np.zeros(4, dtype=wire.RECORD_DTYPE)
    recs["op_name"] = [1, 2, 3, 4]
    recs["end"] = [10, 20, 30, 40]
    every_other = recs[::2]  # right dtype, not contiguous
    assert wire.encode_batch(every_other) == wire.encode(Kind.BATCH, recs[[0, 2]].tobytes())
    big_endian = recs.astype(wire.RECORD_DTYPE.newbyteorder(">"))  # other dtype, same fields
    assert wire.encode_batch(big_endian) == wire.encode(Kind.BATCH, recs.tobytes())


# ---- decoders --------------------------------------------------------------------------------

@pytest.mark.parametrize("payload, message", [
    (b"\xff\xfe", "^payload is not JSON: "),
    (b"{not json", "^payload is not JSON: "),
    (b"[1, 2]", "^payload is JSON list, not an object$"),
    (b"3", "^payload is JSON int, not an object$"),
])
def test_decode_json_rejects(payload, message):
    with pytest.raises(ProtocolError, match=message):
        wire.decode_json(payload)


def test_decode_json_accepts_views():
    assert wire.decode_json(memoryview(b'{"k": 1}')) == {"k": 1}
    assert wire.decode_json(bytearray(b'{"k": 2}')) == {"k": 2}


def test_decode_batch_size_and_no_copy():
    with pytest.raises(ProtocolError, match=r"^batch of 57 bytes is not a whole number of 56-byte records$"):
        wire.decode_batch(b"\0" * 57)
    buf = bytearray(112)
    arr = wire.decode_batch(memoryview(buf))
    assert arr.dtype == wire.RECORD_DTYPE and len(arr) == 2
    buf[0] = 7
    assert arr["model_id"][0] == 7  # a view over the payload, not a copy
    assert len(wire.decode_batch(b"")) == 0


# ---- FrameReader: header checks ----------------------------------------------------------------

@pytest.mark.parametrize("head, message", [
    (raw_header(magic=b"XCLP"), r"^bad magic b'XCLP'$"),
    (raw_header(version=2), r"^unsupported protocol version 2 \(this side speaks 1\)$"),
    (raw_header(reserved=1), "^reserved header field is not 0$"),
    (raw_header(kind=99), "^unknown frame kind 99$"),
])
@pytest.mark.parametrize("split", [None, 3, 11])
def test_bad_header_is_a_protocol_error(head, message, split):
    reader = FrameReader()
    with pytest.raises(ProtocolError, match=message):
        if split is None:
            list(reader.feed(head))
        else:  # the header completes in a later feed
            list(reader.feed(head[:split]))
            list(reader.feed(head[split:]))


def test_length_limit_is_inclusive():
    reader = FrameReader(max_payload=4)
    ((_, payload),) = list(reader.feed(raw_header(length=4) + b"abcd"))
    assert payload.tobytes() == b"abcd"
    with pytest.raises(ProtocolError, match=r"^frame of 5 bytes exceeds the limit of 4$"):
        list(FrameReader(max_payload=4).feed(raw_header(length=5)))
    with pytest.raises(ProtocolError, match="exceeds the limit of 16777216"):
        list(FrameReader().feed(raw_header(length=MAX_PAYLOAD + 1)))
    # A header alone (payload not yet there) is checked at once, not when the payload comes.
    with pytest.raises(ProtocolError):
        list(FrameReader(max_payload=4).feed(raw_header(length=5) + b"x"))


def test_unknown_kinds_are_skipped_when_asked():
    unknown = raw_header(kind=99, length=3) + b"zzz"
    known = wire.encode(Kind.STATUS, b"ok")
    data = unknown + known + unknown
    for step in (1, 2, 5, len(data)):
        reader = FrameReader(ignore_unknown=True)
        got = [(k, bytes(p)) for i in range(0, len(data), step) for k, p in reader.feed(data[i:i + step])]
        assert got == [(Kind.STATUS, b"ok")], step
        assert reader.buffered == 0


# ---- FrameReader: reassembly -------------------------------------------------------------------

FRAMES = [(Kind.HELLO, b'{"a":1}'), (Kind.STATUS, b""), (Kind.BATCH, bytes(range(56))), (Kind.NAMES, b"x" * 300)]
STREAM = b"".join(wire.encode(k, p) for k, p in FRAMES)


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12),
       kind_of_input=st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_any_split_gives_the_same_frames(cuts, kind_of_input):
    bounds = sorted({0, len(STREAM), *cuts})
    reader = FrameReader()
    got = []
    for a, b in itertools.pairwise(bounds):
        chunk = STREAM[a:b]
        chunk = {"bytes": chunk, "bytearray": bytearray(chunk), "memoryview": memoryview(chunk)}[kind_of_input]
        frames = list(reader.feed(chunk))
        assert all(p.format == "B" for _, p in frames)
        got += [(k, bytes(p)) for k, p in frames]
    assert got == FRAMES
    assert reader.buffered == 0


def test_buffered_counts_the_incomplete_frame():
    frame = wire.encode(Kind.NAMES, b"abcdef")  # 18 bytes
    reader = FrameReader()
    assert reader.buffered == 0
    assert list(reader.feed(frame[:5])) == [] and reader.buffered == 5
    assert list(reader.feed(frame[5:12])) == [] and reader.buffered == 12  # header exactly
    assert list(reader.feed(frame[12:15])) == [] and reader.buffered == 15
    (got,) = list(reader.feed(frame[15:] + frame[:12]))  # the end, then a whole next header
    assert got[0] is Kind.NAMES and bytes(got[1]) == b"abcdef"
    assert reader.buffered == 12
    (got,) = list(reader.feed(frame[12:]))
    assert bytes(got[1]) == b"abcdef" and reader.buffered == 0


def test_split_payload_is_delivered_once_complete_and_not_before():
    frame = wire.encode(Kind.NAMES, b"0123456789")
    reader = FrameReader()
    assert list(reader.feed(frame[:13])) == []  # header + 1 payload byte
    assert list(reader.feed(frame[13:21])) == []
    (got,) = list(reader.feed(frame[21:] + wire.encode(Kind.STATUS, b"z")[:3]))
    assert bytes(got[1]) == b"0123456789"
    assert reader.buffered == 3


def test_payload_views_stay_valid_after_more_feeds():
    reader = FrameReader()
    frame = wire.encode(Kind.NAMES, b"keep me")
    assert list(reader.feed(frame[:4])) == []
    ((_, view),) = list(reader.feed(frame[4:]))
    list(reader.feed(wire.encode(Kind.NAMES, b"other")[:9]))
    assert bytes(view) == b"keep me"


# ---- recv_frame ----------------------------------------------------------------------------

def test_recv_frame_returns_frames_in_order_then_none():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(wire.encode(Kind.STATUS, b"1") + wire.encode(Kind.END, b"2") + wire.encode(Kind.STATUS, b"3")[:5])
        reader, pending = FrameReader(), []
        got = wire.recv_frame(b, reader, pending)
        assert got is not None and got[0] is Kind.STATUS and bytes(got[1]) == b"1"
        assert len(pending) == 1  # the second frame waits in pending
        got = wire.recv_frame(b, reader, pending)
        assert got is not None and got[0] is Kind.END and bytes(got[1]) == b"2"
        a.sendall(wire.encode(Kind.STATUS, b"3")[5:])
        got = wire.recv_frame(b, reader, pending)
        assert got is not None and bytes(got[1]) == b"3"
        a.close()
        assert wire.recv_frame(b, reader, pending) is None


def test_memoryview_of_wider_items_is_read_as_bytes():
    # A memoryview whose items are not bytes (here uint16) is cast: lengths are in bytes.
    data = wire.encode(Kind.NAMES, b"abcd") + wire.encode(Kind.STATUS, b"xy")
    view = memoryview(np.frombuffer(data, dtype="<u2"))
    assert view.format != "B"
    frames = list(FrameReader().feed(view))
    assert [(k, bytes(p)) for k, p in frames] == [(Kind.NAMES, b"abcd"), (Kind.STATUS, b"xy")]
    assert all(p.format == "B" for _, p in frames)  # payloads index as unsigned bytes
    assert frames[0][1][0] == ord("a")


def test_empty_payload_frame_at_the_end_of_a_feed_is_yielded_at_once():
    reader = FrameReader()
    assert [(k, bytes(p)) for k, p in reader.feed(wire.encode(Kind.STATUS))] == [(Kind.STATUS, b"")]
    assert reader.buffered == 0
    got = list(reader.feed(wire.encode(Kind.NAMES, b"q") + wire.encode(Kind.END)))
    assert [k for k, _ in got] == [Kind.NAMES, Kind.END]


# ---- identity and name limits (bytes, not characters) ------------------------------------------

def test_utf8_cut_counts_bytes_not_characters():
    from aclprof.protocol.wire import utf8_cut

    assert utf8_cut("a" * 8, 8) is None and utf8_cut("é" * 4, 8) is None  # 8 bytes: within
    assert utf8_cut("a" * 9, 8) == "a" * 8
    assert utf8_cut("é" * 5, 8) == "é" * 4  # 5 characters, 10 bytes: cut
    assert utf8_cut("é" * 3 + "😀", 8) == "é" * 3  # never half a character
    assert utf8_cut("\ud800" * 3, 8) == "\ud800" * 2  # a lone surrogate is its 3 bytes
    assert utf8_cut("😀" * 2, 8) is None and utf8_cut("😀" * 3, 8) == "😀" * 2
    for before in range(1, 4):  # a 4-byte character cut after 1, 2 or 3 bytes: only it goes
        assert utf8_cut("a" * (8 - before) + "😀", 8) == "a" * (8 - before)


def test_check_identity_limits_and_messages():
    from aclprof.protocol.wire import MAX_IDENT_BYTES, MAX_LABELS, check_identity

    check_identity("HELLO")
    at = "h" * MAX_IDENT_BYTES
    check_identity("HELLO", host=at, service=at, labels={at: at})  # exactly at the limit
    over = "h" * (MAX_IDENT_BYTES + 1)
    wide = "é" * (MAX_IDENT_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    for field in ("host", "service"):
        for v in (over, wide):
            with pytest.raises(ProtocolError, match=rf"^WATCH {field} is longer than {MAX_IDENT_BYTES} bytes$"):
                check_identity("WATCH", **{field: v})
    check_identity("HELLO", host=None, service=5)  # types are the caller's check
    labels = {str(i): "v" for i in range(MAX_LABELS)}
    check_identity("HELLO", labels=labels)
    with pytest.raises(ProtocolError, match=rf"^HELLO has {MAX_LABELS + 1} labels; at most {MAX_LABELS}$"):
        check_identity("HELLO", labels={**labels, "x": "v"})
    key = "k" * 50 + "é" * MAX_IDENT_BYTES
    msg = rf"^HELLO label {key[:40]!r}\.\.\.: key and value are at most {MAX_IDENT_BYTES} bytes each$"
    with pytest.raises(ProtocolError, match=msg):
        check_identity("HELLO", labels={key: "v"})
    with pytest.raises(ProtocolError, match=r"^HELLO label 'k'\.\.\.: key and value"):
        check_identity("HELLO", labels={"k": wide})


# ---- NAMES frames are packed up to the limit -------------------------------------------------------

def test_names_frames_are_filled_exactly_to_the_limit():
    from aclprof.protocol.wire import HEADER, MAX_NAMES_PAYLOAD, encode_names

    # entries '"1000":"xx..."' of k + 9 bytes; n of them take 12 + n * (k + 9) + (n - 1) bytes
    n, rest = divmod(MAX_NAMES_PAYLOAD - 11, 5)
    assert rest == 0 and n - 10 > 0
    k = n - 10  # five entries of k + 10 bytes (comma included) fill a payload exactly
    full = {1000 + i: "x" * k for i in range(5)}
    (frame,) = encode_names(full)
    assert len(frame) - HEADER.size == MAX_NAMES_PAYLOAD
    two = encode_names({**full, **{2000 + i: "y" * k for i in range(5)}})  # two exactly full frames
    assert [len(f) - HEADER.size for f in two] == [MAX_NAMES_PAYLOAD] * 2
    over = encode_names({**full, 1004: "x" * (k + 1)})  # one byte more: the last entry moves on
    assert [len(f) - HEADER.size for f in over] == [MAX_NAMES_PAYLOAD - k - 10, 12 + k + 10]
    # the same at the second frame's limit (its size is counted afresh, head and tail included)
    third = encode_names({**full, **{2000 + i: "y" * k for i in range(4)}, 2004: "y" * (k + 1)})
    assert [len(f) - HEADER.size for f in third] == [MAX_NAMES_PAYLOAD, MAX_NAMES_PAYLOAD - k - 10, 12 + k + 10]


# ---- 2026-12-03: the record layout's function, decode_json's messages, a name run at the limit ---

def test_the_record_layout_function_gives_the_c_headers_record_in_list_form():
    """``_record_dtype`` runs once, at import (where no mutant is live): called again here,
    it must give ``aclprof_record`` (cdefs/aclprof_records.h) as the plain list form."""
    want = np.dtype([("model_id", "<u4"), ("op_name", "<u4"), ("op_type", "<u4"), ("flag", "<u4"),
                     ("thread_id", "<u4"), ("device_id", "<u4"), ("start", "<u8"), ("end", "<u8"),
                     ("duration", "<u8"), ("execution_time", "<u8")])
    got = wire._record_dtype()
    assert got == want and repr(got) == repr(want) and got.itemsize == 56
    assert [got.fields[n][1] for n in got.names] == [0, 4, 8, 12, 16, 20, 24, 32, 40, 48]


def test_a_record_layout_with_padding_keeps_the_c_offsets_and_size(monkeypatch):
    """The list form only when the C struct has no padding (today's); a field table with a
    gap and a tail keeps both (as the C encoder would read the struct), not packed fields."""
    from aclprof.protocol import _jsonl

    monkeypatch.setattr(_jsonl, "RECORD_FIELDS", (("a", 0, 4), ("b", 8, 8)))
    monkeypatch.setattr(_jsonl, "RECORD_SIZE", 24)
    got = wire._record_dtype()
    assert got.names == ("a", "b") and got.itemsize == 24
    assert [got.fields[n][1] for n in got.names] == [0, 8]
    assert got.fields["a"][0] == np.dtype("<u4") and got.fields["b"][0] == np.dtype("<u8")


@pytest.mark.parametrize("payload", [b"[" * 200_000, b'{"a":' * 200_000])
def test_decode_json_names_a_payload_nested_too_deeply(payload):
    with pytest.raises(ProtocolError, match=r"^payload is not JSON this side accepts: nested too deeply$"):
        wire.decode_json(payload)


@pytest.mark.parametrize("payload", [b"{not json", b'{"n": ' + b"7" * 5000 + b"}", b'{"k": "\xff"}'])
def test_decode_json_says_why_a_payload_is_not_json(payload):
    with pytest.raises(ValueError) as cause:  # JSONDecodeError, the digit limit, UnicodeDecodeError
        json.loads(str(payload, "utf-8"))
    why = str(cause.value)
    assert 0 < len(why) < 200  # every such message is short: the cut at 200 never applies
    with pytest.raises(ProtocolError) as info:
        wire.decode_json(payload)
    assert str(info.value) == "payload is not JSON: " + why


def test_a_name_run_of_exactly_the_limit_is_one_frame_and_one_byte_more_is_two():
    """The same packing as test_names_frames_are_filled_exactly_to_the_limit, through the
    agent's fast path: the frames are encode_names' either way."""
    from aclprof.protocol.wire import HEADER, MAX_NAMES_PAYLOAD, encode_name_run, encode_names

    k = (MAX_NAMES_PAYLOAD - 11) // 5 - 10  # five entries '"1000":"x..."' fill a payload exactly
    (frame,) = encode_name_run(1000, ["x" * k] * 5)
    assert len(frame) - HEADER.size == MAX_NAMES_PAYLOAD
    assert [frame] == encode_names({1000 + i: "x" * k for i in range(5)})
    over = encode_name_run(1000, ["x" * k] * 4 + ["x" * (k + 1)])
    assert [len(f) - HEADER.size for f in over] == [MAX_NAMES_PAYLOAD - k - 10, 12 + k + 10]
