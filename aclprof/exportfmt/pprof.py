"""``aclprof export --format pprof``: op time as a gzipped pprof ``Profile`` (google/pprof's
``proto/profile.proto``), for ``go tool pprof``/``pprof``, Pyroscope, Parca, speedscope and the
other readers of that format.

Two sample types: ``calls``/``count`` (the number of op records) and ``device time``/
``nanoseconds`` (the sum of their ``duration_ns``); ``default_sample_type`` is the time. A
sample's stack is, leaf first, op name <- op type <- model <- service: a flame graph shows
services, their models, op types and op names. One sample per (service, pid, device, model, op
type, op name), labelled ``pid`` and ``device`` (for ``-tagfocus``), so the profile's
totals per op type are the csv export's (:mod:`aclprof.exportfmt.opcsv`) to the nanosecond. Each
level's functions have their level as file name (``service``, ``model``, ``op type``, ``op
name``), so an op named like its type stays two frames in a flame graph and in ``-traces``
(``-top`` lists functions by name and adds them up: use ``-filefunctions`` to keep them apart).
Names are escaped as in the csv export (:func:`aclprof.protocol.safetext.safe`). Step keypoints
are not ops: not written.

The encoding is a small protobuf writer (varints, length-delimited fields, packed repeated
fields; :func:`_field` and friends): the profile's messages use only those, and a dependency on
a protobuf runtime for one message type would weigh on every install. Go's pprof, npm's
``pprof-format`` and the protobuf package's parser (with profile.proto compiled at test time)
read it back in tests/test_export_pprof.py.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from typing import Any, BinaryIO

from aclprof.protocol.safetext import safe

__all__ = ["SAMPLE_TYPES", "LEVELS", "profile_bytes", "write_pprof"]

#: (type, unit) of the two values every sample carries, in this order.
SAMPLE_TYPES = (("calls", "count"), ("device time", "nanoseconds"))
#: Each frame's function has its level as file name (leaf first).
LEVELS = ("op name", "op type", "model", "service")

_Key = tuple[str, int, int, int, str, str]  # service, pid, device, model, op type, op name


# -- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ----------------

def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64  # int64 as protobuf writes a negative one: ten bytes, two's complement
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _int(field: int, v: int) -> bytes:
    """A varint field (wire type 0); proto3 leaves a zero out."""
    return _varint(field << 3) + _varint(v) if v else b""


def _bytes(field: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string or an embedded message."""
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _packed(field: int, values: Iterable[int]) -> bytes:
    """A packed repeated varint field."""
    return _bytes(field, b"".join(_varint(v) for v in values))


# -- the profile ---------------------------------------------------------------------------

class _Strings:
    """The profile's string table: index 0 is the empty string, as the format requires."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.index)
        return i


def profile_bytes(groups: dict[_Key, list[int]], time_nanos: int = 0, duration_nanos: int = 0) -> bytes:
    """The serialized (not gzipped) ``Profile`` of ``{key: [calls, total_ns]}``."""
    s = _Strings()
    body = [_bytes(1, _int(1, s(t)) + _int(2, s(u))) for t, u in SAMPLE_TYPES]
    functions: dict[tuple[str, str], int] = {}  # (name, level) -> function id = location id
    pid_key, device_key = s("pid"), s("device")
    for key in sorted(groups):
        service, pid, device, model, op_type, op_name = key
        stack = []
        for name, level in ((op_name, LEVELS[0]), (op_type, LEVELS[1]), (f"model {model}", LEVELS[2]),
                            (service or f"pid {pid}", LEVELS[3])):
            fid = functions.get((name, level))
            if fid is None:
                fid = functions[(name, level)] = len(functions) + 1
            stack.append(fid)
        calls, total = groups[key]
        # string labels: pprof's readers drop a numeric label of 0 (proto3 leaves the 0 out)
        labels = (_bytes(3, _int(1, pid_key) + _int(2, s(str(pid)))) +
                  _bytes(3, _int(1, device_key) + _int(2, s(str(device)))))
        body.append(_bytes(2, _packed(1, stack) + _packed(2, (calls, total)) + labels))
    for (name, level), fid in functions.items():
        # a location per function, its one line naming it (ids equal: both start at 1)
        body.append(_bytes(4, _int(1, fid) + _bytes(4, _int(1, fid))))
        body.append(_bytes(5, _int(1, fid) + _int(2, s(name)) + _int(3, s(name)) + _int(4, s(level))))
    time_type = _bytes(11, _int(1, s(SAMPLE_TYPES[1][0])) + _int(2, s(SAMPLE_TYPES[1][1])))
    tail = [_int(9, time_nanos), _int(10, duration_nanos), time_type, _int(14, s(SAMPLE_TYPES[1][0]))]
    strings = [_bytes(6, t.encode("utf-8")) for t in s.index]  # in index order (dicts keep it)
    return b"".join(body + strings + tail)


def write_pprof(batches: Iterable[list[dict[str, Any]]], out: BinaryIO) -> int:
    """Export records as one gzipped pprof profile; the count of records read (step keypoints
    are read but not written)."""
    groups: dict[_Key, list[int]] = {}
    shown: dict[Any, str] = {}  # raw name -> safe(name): a few distinct names, many records
    n = 0
    first_ts = last_ts = None
    for records in batches:
        for r in records:
            ts = r.get("ts")
            if isinstance(ts, (int, float)):
                first_ts = ts if first_ts is None else min(first_ts, ts)
                last_ts = ts if last_ts is None else max(last_ts, ts)
            if r.get("kind") == "keypoint":
                continue
            start = int(r.get("start", 0))
            d = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
            names = []
            for raw in (r.get("service") or "", r.get("op_type", "?"), r.get("op_name", "?")):
                text = shown.get(raw)
                if text is None:
                    text = shown[raw] = safe(raw)
                names.append(text)
            key = (names[0], int(r.get("pid", 0)), int(r.get("device", 0)), int(r.get("model", 0)), names[1],
                   names[2])
            g = groups.get(key)
            if g is None:
                groups[key] = [1, d]
            else:
                g[0] += 1
                g[1] += d
        n += len(records)
    span = (0, 0) if first_ts is None or last_ts is None else (int(first_ts * 1e9), int((last_ts - first_ts) * 1e9))
    # mtime 0: the same records give the same bytes
    out.write(gzip.compress(profile_bytes(groups, *span), mtime=0))
    return n
