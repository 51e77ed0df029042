"""The storage's record encoding (``ACK3`` chunks) in plain Python, from its description in
daemon/README.md "Encoded records": the reference the C codec (aclprof.protocol._reccodec) is
compared with byte for byte, and the reader the format tests decode the daemon's files with.
Slow (~10 us a record): for tests only."""

from __future__ import annotations

import struct

__all__ = ["encode", "decode", "RefDecodeError"]

_REC = struct.Struct("<6I4Q")  # model_id op_name op_type flag thread_id device_id start end duration execution_time
_M32, _M64 = (1 << 32) - 1, (1 << 64) - 1
_SLOTS = 4096
# tag bits
_MODEL, _FLAG, _THREAD, _DEVICE, _DUR, _TYPE, _EXEC_PLAIN, _START_END = (1 << i for i in range(8))


class RefDecodeError(ValueError):
    pass


def _zz(d: int, bits: int) -> int:
    d &= (1 << bits) - 1
    return ((d << 1) & ((1 << bits) - 1)) ^ (-(d >> (bits - 1)) & ((1 << bits) - 1))


def _unzz(z: int, bits: int) -> int:
    return (z >> 1) ^ (-(z & 1) & ((1 << bits) - 1))


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode(raw: bytes) -> bytes:
    """The encoding of ``raw`` (whole 56-byte records), the choices as the README states them."""
    out = bytearray()
    prev = dict(model=0, name=0, type=0, flag=0, thread=0, device=0, start=0, end=0)
    slots: dict[int, tuple[int, int]] = {}
    for model, name, typ, flag, thread, device, start, end, dur, ex in _REC.iter_unpack(raw):
        tag, body = 0, bytearray()
        for bit, key, v in ((_MODEL, "model", model), (_FLAG, "flag", flag), (_THREAD, "thread", thread),
                            (_DEVICE, "device", device)):
            if v == prev[key]:
                tag |= bit
            else:
                body += _varint(_zz(v - prev[key], 32))
        body += _varint(_zz(name - prev["name"], 32))
        if slots.get(name % _SLOTS) == (name, typ):
            tag |= _TYPE
        else:
            body += _varint(typ)
            slots[name % _SLOTS] = (name, typ)
        a, b = _zz(start - prev["start"], 64), _zz(start - prev["end"], 64)
        if b < a:
            tag |= _START_END
        body += _varint(min(a, b))
        span = (end - start) & _M64
        body += _varint(span)
        if dur == span:
            tag |= _DUR
        else:
            body += _varint(_zz(dur - span, 64))
        rest = (dur - ex) & _M64
        if ex <= rest:
            tag |= _EXEC_PLAIN
        body += _varint(min(ex, rest))
        out.append(tag)
        out += body
        prev = dict(model=model, name=name, type=typ, flag=flag, thread=thread, device=device, start=start, end=end)
    return bytes(out)


def decode(data: bytes, count: int) -> bytes:
    """``count`` records from ``data``; RefDecodeError for anything the format does not allow."""
    pos = 0

    def varint(bits: int) -> int:
        nonlocal pos
        v, shift, first = 0, 0, pos
        while True:
            if pos >= len(data):
                raise RefDecodeError("the data ends")
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                if b == 0 and pos - first > 1:
                    raise RefDecodeError("an overlong varint")
                if v >> bits:
                    raise RefDecodeError("a varint wider than the field")
                return v
            shift += 7
            if shift >= bits:
                raise RefDecodeError("an overlong varint")

    out = bytearray()
    model = name = typ = flag = thread = device = start = end = 0
    slots: dict[int, tuple[int, int]] = {}
    for _ in range(count):
        if pos >= len(data):
            raise RefDecodeError("the data ends")
        tag = data[pos]
        pos += 1
        if not tag & _MODEL:
            model = (model + _unzz(varint(32), 32)) & _M32
        if not tag & _FLAG:
            flag = (flag + _unzz(varint(32), 32)) & _M32
        if not tag & _THREAD:
            thread = (thread + _unzz(varint(32), 32)) & _M32
        if not tag & _DEVICE:
            device = (device + _unzz(varint(32), 32)) & _M32
        name = (name + _unzz(varint(32), 32)) & _M32
        if tag & _TYPE:
            held = slots.get(name % _SLOTS)
            if held is None or held[0] != name:
                raise RefDecodeError("op_type from the table, which has none")
            typ = held[1]
        else:
            typ = varint(32)
            slots[name % _SLOTS] = (name, typ)
        start = ((end if tag & _START_END else start) + _unzz(varint(64), 64)) & _M64
        span = varint(64)
        dur = span if tag & _DUR else (span + _unzz(varint(64), 64)) & _M64
        v = varint(64)
        ex = v if tag & _EXEC_PLAIN else (dur - v) & _M64
        end = (start + span) & _M64
        out += _REC.pack(model, name, typ, flag, thread, device, start, end, dur, ex)
    if pos != len(data):
        raise RefDecodeError("bytes after the last record")
    return bytes(out)
