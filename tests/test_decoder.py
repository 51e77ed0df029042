"""The subscription's decoder (``aclprof.api.subscription.decoder.Decoder``) on its own, with hypothesis.

(a) Arbitrary byte streams, in arbitrary chunks: decoding never raises, every whole record
    is accounted as decoded or corrupt, and every record whose signature is valid (checked
    here with an independent pure-Python CRC-32C) is decoded field for field.
(b) Records the mock really emitted (captured raw from a pipe of our own, names NOT
    fetched), re-fed with arbitrary chunk boundaries and with some records' bytes flipped:
    every untouched record decodes exactly as the mock's emit log says, every flipped one
    is counted as corrupt and its names stay in the library's table (fetched afterwards
    from the original bytes, which also proves they were not consumed by mistake).
"""

from __future__ import annotations

import itertools
import struct

import pytest
from helpers.records import capture_records, read_emit_log, record_key
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof import mock
from aclprof.api.records import OP_DTYPE
from aclprof.api.subscription.decoder import Decoder
from aclprof.binding import lowlevel

pytestmark = pytest.mark.usefixtures("no_leaks")

# ---- an independent CRC-32C and record builder (reference section 4) -------------------------


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()
assert CRC_TABLE[1] == 0xF26B8303  # the value the reference quotes


def signature(record: bytes) -> int:
    """Table-driven CRC-32C over bytes [4, len), init 0xFFFFFFFF, no final XOR."""
    s = 0xFFFFFFFF
    for b in record[4:]:
        s = CRC_TABLE[(s ^ b) & 0xFF] ^ (s >> 8)
    return s


def signed(record: bytes) -> bytes:
    return struct.pack("<I", signature(record)) + record[4:]


def is_valid(record: bytes) -> bool:
    return struct.unpack_from("<I", record)[0] == signature(record)


U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
FIELDS = st.fixed_dictionaries({
    "model_id": U32, "flag": U32, "thread_id": U32, "op_index": U64, "duration": U64,
    "start": U64, "end": U64, "execution_time": U64, "cube": U64, "vector": U64,
    "device_id": U32, "tail": U32,
})


def build(fields: dict, size: int) -> bytes:
    body = struct.pack("<IIIIQQQQQQQ", 0, fields["model_id"], fields["flag"], fields["thread_id"],
                       fields["op_index"], fields["duration"], fields["start"], fields["end"],
                       fields["execution_time"], fields["cube"], fields["vector"])
    if size == 80:
        body += struct.pack("<II", fields["device_id"], fields["tail"])
    assert len(body) == size
    return signed(body)


def numeric_view(fields: dict, size: int, default_device: int) -> tuple:
    # devId 0 is CANN's "not filled" (audit row 12): the subscription's device is reported.
    return (fields["model_id"], fields["flag"], fields["thread_id"],
            fields["device_id"] if size == 80 and fields["device_id"] else default_device,
            fields["start"],
            fields["end"], fields["duration"], fields["execution_time"])


def numeric_from_bytes(record: bytes, size: int, default_device: int) -> tuple:
    model_id, flag, thread_id = struct.unpack_from("<III", record, 4)
    duration, start, end, execution_time = struct.unpack_from("<QQQQ", record, 24)
    device = (struct.unpack_from("<I", record, 72)[0] if size == 80 else 0) or default_device
    return (model_id, flag, thread_id, device, start, end, duration, execution_time)


def decoded_numeric(batches) -> list[tuple]:
    out = []
    for batch in batches:
        assert batch.data.dtype == OP_DTYPE
        d = batch.data
        for i in range(len(d)):
            out.append(tuple(int(d[k][i]) for k in ("model_id", "flag", "thread_id", "device_id",
                                                    "start", "end", "duration",
                                                    "execution_time")))
    return out


def feed_in_chunks(decoder: Decoder, data: bytes, chunks: list[int]) -> list:
    batches = []
    pos = 0
    for size in itertools.cycle(chunks):
        if pos >= len(data):
            break
        batches.extend(decoder.feed(data[pos:pos + size]))
        pos += size
    return batches


def test_python_crc_matches_the_compiled_one():
    from aclprof.binding._fast import ffi, lib

    for size in (72, 80, 5, 4, 200):
        for seed in range(20):
            rec = bytes((seed * 31 + i * 7) & 0xFF for i in range(size))
            assert lib.aclprof_signature(ffi.from_buffer(rec), size) == signature(rec)


@settings(max_examples=50)
@given(data=st.binary(max_size=1200), chunks=st.lists(st.integers(1, 200), min_size=1, max_size=10),
       max_records=st.integers(1, 6), size=st.sampled_from([80, 72]), validate=st.booleans())
def test_arbitrary_bytes_never_raise_and_are_all_accounted(data, chunks, max_records, size,
                                                          validate):
    mock.set_op_desc_size(size)
    decoder = Decoder(size, validate=validate, max_records=max_records)
    batches = feed_in_chunks(decoder, data, chunks)
    whole = len(data) // size
    assert decoder.records_read == whole
    assert decoder.records_read == decoder.records_decoded + decoder.corrupt
    assert decoder.failed == 0
    assert decoder.filled == len(data) % size  # the partial tail is kept for later
    assert sum(len(b) for b in batches) == decoder.records_decoded
    expected_valid = [i for i in range(whole) if is_valid(data[i * size:(i + 1) * size])]
    if validate:
        assert decoder.records_decoded == len(expected_valid)
    else:
        assert decoder.corrupt == 0
    # Nothing here is in the library's name table: no name can be found.
    assert decoder.names_missing == decoder.records_decoded
    assert all(set(b.op_names()) <= {"?"} for b in batches)


@settings(max_examples=50)
@given(items=st.lists(st.one_of(FIELDS, st.binary(min_size=80, max_size=80)), max_size=25),
       tail=st.binary(max_size=79), chunks=st.lists(st.integers(1, 170), min_size=1, max_size=10),
       max_records=st.integers(1, 8), size=st.sampled_from([80, 72]))
def test_valid_records_in_noise_decode_exactly(items, tail, chunks, max_records, size):
    """Records with a valid signature (arbitrary field values) among garbage records."""
    mock.set_op_desc_size(size)
    stream = b""
    expected = []
    bad = 0
    for item in items:
        if isinstance(item, dict):
            record = build(item, size)
            expected.append(numeric_view(item, size, default_device=7))
            assert numeric_from_bytes(record, size, 7) == expected[-1]  # the builder is right
        else:
            record = item[:size]
            if is_valid(record):  # random bytes that happen to be valid decode as such
                expected.append(numeric_from_bytes(record, size, default_device=7))
            else:
                bad += 1
        stream += record
    tail = tail[:size - 1]
    stream += tail
    decoder = Decoder(size, default_device=7, max_records=max_records)
    batches = feed_in_chunks(decoder, stream, chunks)
    assert decoded_numeric(batches) == expected
    assert decoder.corrupt == bad
    assert decoder.records_read == len(items)
    assert decoder.filled == len(tail)


# ---- (b) records the mock emitted --------------------------------------------------------------

DEVICE = 2
OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000, "jitter": 500},
    {"name": "", "type": "", "duration_ns": 10},
    {"name": b"\xff\xfe", "type": "T" * 300, "duration_ns": 30, "flag": 3, "thread_id": 77},
    {"name": "n" * 700, "type": "Relu", "duration_ns": 5, "flag": 1},
    {"name": "conv1", "type": "Conv2D", "duration_ns": 1000, "jitter": 999},
]




def fetch_names(record: bytes) -> tuple[bytes, bytes]:
    name = lowlevel.get_op_name(record, 0, lowlevel.get_op_name_len(record, 0))
    op_type = lowlevel.get_op_type(record, 0, lowlevel.get_op_type_len(record, 0))
    return name, op_type


def test_mock_records_rechunked_and_flipped_decode_exactly(tmp_path):
    model = mock.load_model(OPS, device=DEVICE)
    counter = itertools.count()

    @settings(max_examples=40)
    @given(iterations=st.integers(1, 6), size=st.sampled_from([80, 72]),
           chunks=st.lists(st.integers(1, 250), min_size=1, max_size=12),
           max_records=st.integers(1, 9),
           flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 79),
                                    st.integers(1, 255)), max_size=6))
    def check(iterations, size, chunks, max_records, flips):
        mock.set_op_desc_size(size)
        log = tmp_path / f"emit-{next(counter)}.log"
        mock.set_emit_log(log)
        raw = capture_records(model, iterations)
        mock.set_emit_log(None)
        emitted = read_emit_log(log)
        n = len(emitted)
        assert n == iterations * len(OPS) and len(raw) == n * size
        assert mock.stats()["nameTableEntries"] == n  # nothing fetched yet
        assert all(is_valid(raw[i * size:(i + 1) * size]) for i in range(n))

        # At most one changed byte per record: CRC-32C detects every such change.
        data = bytearray(raw)
        flipped = set()
        for index, offset, mask in flips:
            i = index % n
            if i not in flipped:
                data[i * size + offset % size] ^= mask
                flipped.add(i)

        decoder = Decoder(size, default_device=DEVICE, max_records=max_records)
        batches = feed_in_chunks(decoder, bytes(data), chunks)
        records = [r for b in batches for r in b.records()]
        assert [record_key(r) for r in records] == [
            e.key() for i, e in enumerate(emitted) if i not in flipped]
        for r in records:
            assert r.duration * 80 // 100 <= r.execution_time <= r.duration * 95 // 100 + 1
        assert decoder.corrupt == len(flipped)
        assert decoder.records_read == n
        assert decoder.records_decoded == n - len(flipped)
        assert decoder.names_missing == 0 and decoder.failed == 0 and decoder.filled == 0

        # The flipped records' names were never fetched: still in the table, intact.
        assert mock.stats()["nameTableEntries"] == len(flipped)
        for i in sorted(flipped):
            record = raw[i * size:(i + 1) * size]
            assert fetch_names(record) == (emitted[i].name_bytes, emitted[i].type_bytes)
        assert mock.stats()["nameTableEntries"] == 0

    check()
    assert next(counter) >= 20  # hypothesis really ran the examples


def test_mock_records_through_the_getter_fallback():
    """An unknown record layout makes the decoder read every field through the library's
    getters (one-record slices): names, types and times still come out right."""
    model = mock.load_model(OPS, device=DEVICE)
    mock.set_emit_log(None)
    raw = capture_records(model, 2)
    decoder = Decoder(80, default_device=DEVICE)
    decoder._raw = None  # as if aclprofGetOpDescSize had returned a size we do not know
    corrupt = bytearray(raw)
    corrupt[80 + 40] ^= 1  # record 1 is corrupt: its getters fail
    batches = decoder.feed(bytes(corrupt))
    records = [r for b in batches for r in b.records()]
    assert len(records) == 2 * len(OPS) - 1
    assert decoder.corrupt == 1
    expected = [(op["name"] if isinstance(op["name"], str) else
                 op["name"].decode("utf-8", "backslashreplace"), op["type"]) for op in OPS] * 2
    del expected[1]
    assert [(r.op_name, r.op_type) for r in records] == expected
    assert all(r.duration == r.end - r.start > 0 and r.model_id == model for r in records)
    assert {r.device_id for r in records} == {DEVICE}
    fetch_names(raw[80:160])  # free the corrupt record's entry
    assert mock.stats()["nameTableEntries"] == 0


def test_interner_overflow_names_read_as_placeholder(monkeypatch):
    """Past the interner's capacity names read "?"; the library's entries are still
    fetched (and so freed), and the decoder counts the overflow."""
    from aclprof.api.subscription import decoder as decoder_module

    monkeypatch.setattr(decoder_module, "_MAX_NAMES", 4)  # "?" + 3 strings
    ops = [{"name": f"op{i}", "type": "T", "duration_ns": 10} for i in range(4)]
    model = mock.load_model(ops)
    raw = capture_records(model, 1)
    decoder = Decoder(80)
    records = [r for b in decoder.feed(raw) for r in b.records()]
    assert [(r.op_name, r.op_type) for r in records] == [
        ("op0", "T"), ("op1", "T"), ("?", "T"), ("?", "T")]
    assert decoder.names_overflowed == 2
    assert decoder.names_missing == 0  # the library did return them
    assert mock.stats()["nameTableEntries"] == 0
