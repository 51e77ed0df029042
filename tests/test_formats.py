"""Golden bytes for the on-the-wire and on-disk formats, written from their documents.

Every expected byte string here is built by hand from the layout tables in aclprof/protocol/wire.py's
docstring, daemon/PROTOCOL.md and daemon/README.md (with ``struct`` and explicit offsets),
never with the project's encoders, so that an encoder and a decoder that drift together
(byte order, field order) are caught. A format change must bump its version and keep a
test that reads the old one where the daemon promises to.
"""

from __future__ import annotations

import io
import json
import os
import struct
import time
import zlib

import numpy as np
import pytest
from helpers import reccodec_ref

from aclprof.protocol import wire

# --- frame header (wire.py docstring) -----------------------------------------------------
# offset 0: magic "ACLP"; 4: version u8; 5: kind u8; 6: reserved u16 = 0; 8: length u32 LE.


def _frame(kind: int, payload: bytes) -> bytes:
    return b"ACLP" + bytes([1, kind]) + b"\x00\x00" + len(payload).to_bytes(4, "little") + payload


def test_frame_header_bytes():
    payload = b'{"a":1}'
    assert wire.encode(wire.Kind.STATUS, payload) == _frame(int(wire.Kind.STATUS), payload)
    big = b"x" * 0x010203  # a length whose byte order shows
    assert wire.encode(wire.Kind.ERROR, big)[8:12] == b"\x03\x02\x01\x00"


def test_frame_reader_reads_hand_built_frames():
    data = _frame(int(wire.Kind.STATUS), b"{}") + _frame(int(wire.Kind.HELLO), b'{"role":"control"}')
    reader = wire.FrameReader()
    got = [(k, bytes(p)) for k, p in reader.feed(data[:5])] + [(k, bytes(p)) for k, p in reader.feed(data[5:])]
    assert got == [(wire.Kind.STATUS, b"{}"), (wire.Kind.HELLO, b'{"role":"control"}')]


@pytest.mark.parametrize("bad", [
    b"ACLQ" + bytes([1, 1]) + b"\x00\x00" + (0).to_bytes(4, "little"),           # magic
    b"ACLP" + bytes([2, 1]) + b"\x00\x00" + (0).to_bytes(4, "little"),           # version
    b"ACLP" + bytes([1, 1]) + b"\x01\x00" + (0).to_bytes(4, "little"),           # reserved
    b"ACLP" + bytes([1, 1]) + b"\x00\x00" + ((16 << 20) + 1).to_bytes(4, "little"),  # length
    b"ACLP" + bytes([1, 1]) + b"\x00\x00" + (2).to_bytes(4, "big"),             # big-endian length
])
def test_frame_reader_rejects_bad_headers(bad):
    with pytest.raises(wire.ProtocolError):
        list(wire.FrameReader().feed(bad + b"\x00" * 8))


# --- op record (56 bytes, little-endian) ------------------------------------------------------
# offset: 0 model_id u32, 4 op_name u32, 8 op_type u32, 12 flag u32, 16 thread_id u32,
# 20 device_id u32, 24 start u64, 32 end u64, 40 duration u64, 48 execution_time u64.
_RECORD = struct.Struct("<6I4Q")
assert _RECORD.size == 56


def test_record_layout_bytes():
    fields = (7, 11, 13, 2, 4242, 3, 1_000_000_123, 1_000_005_456, 5_333, 5_000)
    raw = _RECORD.pack(*fields)
    rec = wire.decode_batch(raw)
    assert rec.dtype.itemsize == 56 and len(rec) == 1
    names = ("model_id", "op_name", "op_type", "flag", "thread_id", "device_id", "start", "end",
             "duration", "execution_time")
    assert tuple(int(rec[n][0]) for n in names) == fields
    out = np.zeros(1, wire.RECORD_DTYPE)
    for n, v in zip(names, fields):
        out[n] = v
    assert wire.encode_batch(out) == _frame(int(wire.Kind.BATCH), raw)


def test_batch_of_a_partial_record_is_rejected():
    with pytest.raises(wire.ProtocolError):
        wire.decode_batch(b"\x00" * 55)


# --- segment files (daemon/README.md "Segment files (format version 1)") --------------------
_FILE_HEADER = struct.Struct("<8sHHIdII")   # magic, version, reserved, header size, created, pid, reserved
_CHUNK_HEADER = struct.Struct("<4sIII")     # "ACK1"/"ACK2", M, D, CRC-32/CRC-32C of metadata + data
assert _FILE_HEADER.size == 32


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) bit by bit, as the document states it (reflected 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _chunk_crc(magic: bytes, data: bytes) -> int:
    return zlib.crc32(data) if magic == b"ACK1" else _crc32c(data)


def _records(n: int, start: int = 10_000) -> bytes:
    return b"".join(_RECORD.pack(1, 5, 6, 0, 9, 0, start + i * 100, start + i * 100 + 40, 40, 0) for i in range(n))


@pytest.mark.parametrize("encode", [True, False])
def test_segment_written_by_the_daemon_matches_the_document(tmp_path, encode):
    from aclprofd.storage import Storage

    st = Storage(str(tmp_path), encode=encode)
    ts = time.time()
    identity = {"host": "h", "pid": 42, "service": "svc", "labels": {"k": "v"}}
    st.write("c1", identity, [(5, "conv"), (6, "Conv2D")], [(ts, _records(3)), (ts + 1, _records(2, 50_000))])
    st.flush()
    st.close()
    [path] = [p for p in os.listdir(tmp_path) if p.endswith(".acps")]
    assert path == "seg-00000001.acps" or (path.startswith("seg-") and len(path) == len("seg-00000001.acps"))
    data = (tmp_path / path).read_bytes()
    magic, version, reserved, hsize, created, pid, reserved2 = _FILE_HEADER.unpack_from(data, 0)
    assert (magic, version, reserved, hsize, pid, reserved2) == (b"ACLPSEG\0", 1, 0, 32, os.getpid(), 0)
    assert abs(created - ts) < 60
    cmagic, mlen, dlen, crc = _CHUNK_HEADER.unpack_from(data, hsize)
    from aclprof.protocol._batchgroup import crc32c_fast
    if encode:  # records encoded (the default), CRC-32C on every host
        assert cmagic == b"ACK3"
    else:
        assert cmagic == (b"ACK2" if crc32c_fast() else b"ACK1")  # CRC-32C where the CPU computes it
    meta_bytes = data[hsize + 16:hsize + 16 + mlen]
    body = data[hsize + 16 + mlen:hsize + 16 + mlen + dlen]
    assert crc == _chunk_crc(cmagic, meta_bytes + body)
    want = _records(3) + _records(2, 50_000)
    # decoded as daemon/README.md "Encoded records" describes them (tests/helpers/reccodec_ref.py)
    assert (reccodec_ref.decode(body, 5) if encode else body) == want
    assert not encode or dlen < len(want) / 3
    meta = json.loads(meta_bytes)
    assert meta["host"] == "h" and meta["pid"] == 42 and meta["service"] == "svc" and meta["labels"] == {"k": "v"}
    assert meta["conn"] == "c1"
    assert meta["names"] == {"5": "conv", "6": "Conv2D"}
    assert [c for c, _ in meta["batches"]] == [3, 2]
    assert meta["ts_first"] == pytest.approx(ts) and meta["ts_last"] == pytest.approx(ts + 1)
    assert len(data) == hsize + 16 + mlen + dlen


def _hand_segment(chunks: list[tuple[dict, bytes]], pid: int = 7, magics: tuple[bytes, ...] = (b"ACK1",)) -> bytes:
    out = io.BytesIO()
    out.write(_FILE_HEADER.pack(b"ACLPSEG\0", 1, 0, 32, 1.0e9, pid, 0))
    for i, (meta, body) in enumerate(chunks):
        mb = json.dumps(meta).encode()
        magic = magics[i % len(magics)]
        if magic == b"ACK3":  # the records encoded, as the document describes
            body = reccodec_ref.encode(body)
        out.write(_CHUNK_HEADER.pack(magic, len(mb), len(body), _chunk_crc(magic, mb + body)))
        out.write(mb + body)
    return out.getvalue()


def _meta(names: dict, batches: list) -> dict:
    return {"host": "h", "pid": 1, "service": None, "labels": {}, "conn": "x", "names": names,
            "batches": batches, "ts_first": batches[0][1], "ts_last": batches[-1][1]}


@pytest.mark.parametrize("magics", [(b"ACK1",), (b"ACK2",), (b"ACK2", b"ACK1"), (b"ACK3",), (b"ACK3", b"ACK1"),
                                    (b"ACK2", b"ACK3")])
def test_segment_built_from_the_document_is_read_back(tmp_path, magics):
    from aclprofd.storage import read_segment

    body1, body2 = _records(2), _records(1, 90_000)
    path = tmp_path / "seg-00000009.acps"
    path.write_bytes(_hand_segment([(_meta({"5": "conv", "6": "Conv2D"}, [[2, 100.0]]), body1),
                                    (_meta({}, [[1, 101.0]]), body2)], magics=magics))
    chunks = list(read_segment(str(path)))
    assert len(chunks) == 2
    assert chunks[1].names == {5: "conv", 6: "Conv2D"}  # names carry over within a file, per conn
    assert chunks[0].records["start"].tolist() == [10_000, 10_100]
    assert chunks[0].records["end"].tolist() == [10_040, 10_140]
    assert chunks[1].ts.tolist() == [101.0]


@pytest.mark.parametrize("magic", [b"ACK1", b"ACK2", b"ACK3"])
def test_segment_reader_stops_at_a_bad_crc(tmp_path, magic):
    from aclprofd.storage import read_segment

    seg = bytearray(_hand_segment([(_meta({"5": "a"}, [[1, 1.0]]), _records(1)),
                                   (_meta({}, [[1, 2.0]]), _records(1))], magics=(magic,)))
    seg[-1] ^= 0x01  # last record byte of the second chunk
    path = tmp_path / "seg-00000001.acps"
    path.write_bytes(bytes(seg))
    assert [len(c.records) for c in read_segment(str(path))] == [1]


def test_crc32c_is_the_documented_crc_with_and_without_the_cpu_instruction():
    from aclprof.protocol._batchgroup import crc32c

    rng = np.random.default_rng(5)
    assert crc32c(b"123456789") == crc32c(b"123456789", 0, False) == 0xE3069283  # the standard check value
    for n in (0, 1, 7, 8, 9, 63, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        want = _crc32c(data)
        assert crc32c(data) == crc32c(data, 0, False) == want
        cut = n // 3
        assert crc32c(memoryview(data)[cut:], crc32c(data[:cut])) == want  # continued, any alignment
    with pytest.raises(ValueError, match="crc32c"):
        crc32c(b"x", 1 << 32)


# --- aggregates file (daemon/README.md "aggregates.npz (format version 2)") -----------------

def test_aggregates_file_matches_the_document(tmp_path):
    from aclprofd.aggregate.aggregator import Aggregator, KeySource

    agg = Aggregator(clock=lambda: 1000.0)
    recs = np.zeros(3, wire.RECORD_DTYPE)
    recs["model_id"], recs["device_id"], recs["op_name"], recs["op_type"] = 1, 2, 5, 6
    recs["duration"] = [100, 200, 1024]
    src = KeySource("h", 9, "svc")
    src.set_label(1, "resnet50@v3")
    agg.ingest(src, recs, {5: "conv", 6: "Conv2D"})
    path = tmp_path / "aggregates.npz"
    agg.save(str(path))
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        arrays = {k: z[k] for k in z.files}
    assert meta["format"] == "aclprofd-aggregates" and meta["version"] == 2
    assert meta["nbins"] == 322 and meta["bins_per_octave"] == 8
    assert arrays["meta"].dtype == np.uint8
    keys = [tuple(k) for k in meta["keys"]]
    row = keys.index(("h", 9, 2, 1, "Conv2D", "conv", "svc", "resnet50@v3"))
    assert keys[0] == ("", 0, -1, -1, "(other)", "(other)", None, "")
    for name in ("count", "total", "min", "max"):
        assert arrays[name].dtype == np.int64 and arrays[name].shape == (len(keys),)
    assert (arrays["count"][row], arrays["total"][row]) == (3, 1324)
    assert (arrays["min"][row], arrays["max"][row]) == (100, 1024)
    assert arrays["min"][0] == 2**63 - 1  # a key without records
    assert (arrays["hist_key"].dtype, arrays["hist_bin"].dtype, arrays["hist_count"].dtype) == (
        np.int32, np.int16, np.int64)
    # bin = ceil(log2(d) * 8), upper-inclusive: 100 -> 54, 200 -> 62, 1024 = 2**10 -> 80
    got = sorted(zip(arrays["hist_key"].tolist(), arrays["hist_bin"].tolist(), arrays["hist_count"].tolist()))
    assert got == [(row, 54, 1), (row, 62, 1), (row, 80, 1)]


@pytest.mark.parametrize("version, label", [(1, None), (2, "bert@v1"), (2, "")])
def test_aggregates_file_built_from_the_document_is_loaded(tmp_path, version, label):
    from aclprofd.aggregate.aggregator import Aggregator

    keys = [["", 0, -1, -1, "(other)", "(other)", None], ["h", 3, 0, 7, "MatMul", "mm1", "svc"]]
    if version == 2:
        keys = [keys[0] + [""], keys[1] + [label]]
    meta = {"format": "aclprofd-aggregates", "version": version, "nbins": 322, "bins_per_octave": 8,
            "since_ts": 500.0, "saved_ts": 900.0, "other_records": 4, "keys": keys}
    path = tmp_path / "aggregates.npz"
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             count=np.array([4, 2], np.int64), total=np.array([40, 3000], np.int64),
             min=np.array([10, 1000], np.int64), max=np.array([10, 2000], np.int64),
             hist_key=np.array([0, 1, 1], np.int32), hist_bin=np.array([27, 80, 88], np.int16),
             hist_count=np.array([4, 1, 1], np.int64))
    agg = Aggregator(clock=lambda: 1000.0)
    agg.load(str(path))
    rows = {r["key"]: r for r in agg.snapshot("all", "type")["rows"]}
    assert rows["MatMul"]["count"] == 2 and rows["MatMul"]["total_ns"] == 3000
    assert rows["MatMul"]["min_ns"] == 1000 and rows["MatMul"]["max_ns"] == 2000
    assert rows["(other)"]["count"] == 4
    assert agg.other_records == 4
    models = {r["key"]: r["model"] for r in agg.snapshot("all", "model")["rows"]}
    assert models == ({"svc/bert@v1": "bert@v1"} if label else {"svc/3/7": None}) | {"(other)": None}


def _aggregates_file(path, **meta_changes):
    meta = {"format": "aclprofd-aggregates", "version": 1, "nbins": 322, "bins_per_octave": 8,
            "since_ts": 500.0, "saved_ts": 900.0, "other_records": 0,
            "keys": [["", 0, -1, -1, "(other)", "(other)", None], ["h", 3, 0, 7, "MatMul", "mm1", "svc"]],
            **meta_changes}
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             count=np.array([0, 2], np.int64), total=np.array([0, 3000], np.int64),
             min=np.array([2**63 - 1, 1000], np.int64), max=np.array([0, 2000], np.int64),
             hist_key=np.array([1, 1], np.int32), hist_bin=np.array([80, 88], np.int16),
             hist_count=np.array([1, 1], np.int64))


@pytest.mark.parametrize("changes,message", [
    ({"version": 3}, "version 1 or 2"),
    ({"format": "something-else"}, "version 1 or 2"),
    ({"nbins": 321}, "histogram layout"),
    ({"bins_per_octave": 4}, "histogram layout"),
    ({"keys": [["", 0, -1, -1, "(other)", "(other)", None]]}, "differ in length"),
])
def test_aggregates_file_of_another_layout_is_refused_untouched(tmp_path, changes, message):
    from aclprofd.aggregate.aggregator import Aggregator

    path = tmp_path / "aggregates.npz"
    _aggregates_file(path, **changes)
    agg = Aggregator(clock=lambda: 1000.0)
    with pytest.raises(ValueError, match=message):
        agg.load(str(path))
    assert agg.snapshot("all", "type")["rows"] == [] and agg.nkeys == 1 and agg.reset_ts == 1000.0


def test_aggregates_save_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from aclprofd.aggregate import npzfile as aggregate_file
    from aclprofd.aggregate.aggregator import Aggregator

    path = tmp_path / "aggregates.npz"
    _aggregates_file(path)
    before = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(aggregate_file.np, "savez", disk_full)
    agg = Aggregator(clock=lambda: 1000.0)
    agg.reset()  # something to save
    with pytest.raises(OSError, match="No space"):
        agg.save(str(path))
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["aggregates.npz"]
    assert agg.dirty  # the failed save is not taken for a saved state
