"""The subscription decoder's counters and defaults, exactly (issue 13: mutants of
subscription/decoder.py that test_decoder's hypothesis runs let survive: devId 0 with a
non-zero default device, counters that must add up over several chunks, a failing decode)."""

from __future__ import annotations

import struct

import pytest

from aclprof.api.subscription.decoder import Decoder
from aclprof.binding.opdecode import signature


def build(size: int = 80, *, model_id: int = 5, device_id: int = 0, start: int = 10, end: int = 20) -> bytes:
    body = struct.pack("<IIIIQQQQQQQ", 0, model_id, 1, 2, 3, end - start, start, end, 4, 0, 0)
    if size == 80:
        body += struct.pack("<II", device_id, 0)
    return struct.pack("<I", signature(body, size)) + body[4:]


def test_default_device_replaces_only_a_zero_dev_id():
    dec = Decoder(80, default_device=3)
    (batch,) = dec.feed(build(device_id=0) + build(device_id=6))
    assert batch.data["device_id"].tolist() == [3, 6]


def test_defaults():
    dec = Decoder(80)
    assert (dec.default_device, dec.capacity, dec.keypoints, dec.failed) == (0, 4096, 0, 0)
    assert len(dec.buffer) == 80 * 4097
    (batch,) = dec.feed(build(device_id=0))
    assert batch.data["device_id"].tolist() == [0]
    assert batch.data["keypoint"].tolist() == [False]


def test_counters_add_up_over_chunks():
    dec = Decoder(80)
    good, bad = build(), b"\xff" * 80
    dec.feed(good + bad)
    dec.feed(bad + good + good)
    assert (dec.records_read, dec.records_decoded, dec.corrupt) == (5, 3, 2)
    assert dec.names_missing == 3  # hand-made records: the library has no names for them


def test_free_space_is_whole_records_minus_leftover():
    dec = Decoder(80, max_records=3)
    assert len(dec.free_space()) == 80 * 3
    assert dec.feed(build()[:50]) == []
    assert len(dec.free_space()) == 80 * 3 - 50 and dec.filled == 50
    (batch,) = dec.feed(build()[50:] + build()[:1])
    assert len(batch) == 1 and dec.filled == 1


def test_a_failing_decode_counts_its_records_every_time(monkeypatch):
    dec = Decoder(80)

    def boom(count):
        raise RuntimeError("bug")

    monkeypatch.setattr(dec, "_decode", boom)
    for expected in (2, 4):
        with pytest.raises(RuntimeError):
            dec.feed(build() + build())
        assert dec.failed == expected and dec.filled == 0
