"""The record format between the daemon and the CLI (daemon/PROTOCOL.md "record"): JSON
Lines, one record object per ``\\n``-terminated line, in STREAM_RECORDS and EXPORT_RECORDS.

Encoding is the per-record cost of STREAM and EXPORT, paid only for records a client gets.
:func:`encode_frames` does it in C (:mod:`aclprof.protocol._jsonl`): wire records in, whole
frames (header + JSON Lines payload) out, in one buffer, ~30x faster than the Python
reference (``tests/bench/bench_tail_encode.py``), which at 250 k records/s would be most of the
daemon's CPU. Names are JSON-escaped once per connection and id (:class:`NameJson`, with
:func:`identity_head` in :mod:`aclprof.protocol.recordtext`, which ``aclprof tail`` renders
binary STREAM records with too), in Python, so the escaping rules are ``json.dumps``'s.
:func:`encode_records_py` is the same text in Python: the specification the C encoder is
tested against byte for byte (tests/test_records_encoder.py) and the baseline of
``tests/bench/bench_tail_encode.py``; the daemon does not use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from aclprof.protocol._jsonl import encode_frames as _encode_frames
from aclprof.protocol.recordtext import NameJson, identity_head
from aclprof.protocol.wire import FLAG_KEYPOINT, FRAME_TARGET, MAX_PAYLOAD, RECORD_DTYPE, Kind, header

__all__ = ["FRAME_RECORDS", "NameJson", "encode_frames", "identity_head", "encode_records_py",
           "jsonl_payload", "jsonl_payloads", "append_frame"]

FRAME_RECORDS = 2048  # at most this many records per STREAM_RECORDS / EXPORT_RECORDS frame ...
# ... and at most FRAME_TARGET bytes (plus one line): long names make long lines, and 2048 of
# them once made a frame beyond MAX_PAYLOAD whose encoder raised in the loop (issue 9)


def encode_frames(records: np.ndarray, ts: np.ndarray | float, head: bytes, names: NameJson,
                  kind: Kind = Kind.STREAM_RECORDS) -> bytes:
    """Records (RECORD_DTYPE) as whole ``kind`` frames, concatenated: a frame ends after
    FRAME_RECORDS lines or after the line that takes its payload to FRAME_TARGET bytes.
    ``ts``: the receive time of all of them, or one float64 per record. C, one pass."""
    dtype = records.dtype
    if dtype is not RECORD_DTYPE and dtype != RECORD_DTYPE:  # the C side reads the wire layout in place
        raise TypeError(f"encode_frames needs RECORD_DTYPE records, not {records.dtype}")
    recs = records if records.flags.c_contiguous else np.ascontiguousarray(records)
    if type(ts) is not float:  # the pump's (a batch's receive time) needs nothing done
        ts = np.ascontiguousarray(ts, dtype=np.float64) if isinstance(ts, np.ndarray) else float(ts)
    return _encode_frames(recs, ts, head, names.cache, names, int(kind), FRAME_RECORDS, FRAME_TARGET,
                          MAX_PAYLOAD)


def _ts_text(t: float) -> str:
    return "%.6f" % t if math.isfinite(t) else "null"


def encode_records_py(records: np.ndarray, ts: np.ndarray | float, host: str, pid: int,
                      service: str | None, names_json: NameJson) -> list[str]:
    """Records (RECORD_DTYPE) as JSON object texts, one per record, without newlines: the
    reference for :func:`encode_frames` (joined by :func:`jsonl_payloads`, the same bytes).

    A record's text is three parts: what it shares with the records of its frame and op
    (ts, source, device, model, type, name), its own numbers (start, end, duration), and
    what it shares with the records of its thread (flag, thread, kind). The shared parts
    are formatted once per distinct value and looked up per record, so each record costs one
    five-field format instead of a twelve-field one with a float (issue 12: the ``%.6f`` of
    ``ts`` and the repeated fields were most of the daemon's encoding time at 250 k rec/s).
    """
    n = len(records)
    if n == 0:
        return []
    head = '"host":%s,"pid":%d,"service":%s,' % (json.dumps(host), pid, json.dumps(service))
    ts_text: dict[float, str] = {}

    def ts_head(t: float) -> str:
        text = '{"ts":%s,' % _ts_text(t) + head
        if t != 0.0:  # 0.0 and -0.0 are one dict key, but "%.6f" (and the C encoder) tell them apart
            ts_text[t] = text
        return text

    if isinstance(ts, np.ndarray):
        get_ts = ts_text.get
        tsl = [get_ts(t) or ts_head(t) for t in ts.tolist()]
    else:
        tsl = [ts_head(float(ts))] * n
    shared: dict[tuple[str, int, int, int, int], str] = {}

    def prefix(key: tuple[str, int, int, int, int]) -> str:
        t, dev, model, op_type, op_name = key
        text = shared[key] = '%s"device":%d,"model":%d,"op_type":%s,"op_name":%s,"start":' % (
            t, dev, model, names_json(op_type).decode("ascii"), names_json(op_name).decode("ascii"))
        return text

    per_thread: dict[tuple[int, int], str] = {}

    def suffix(key: tuple[int, int]) -> str:
        # The agent marks step keypoint records with a bit of `flag` (PROTOCOL.md); the
        # record's own flag is shown without it, and the mark as "kind".
        flag, thread = key
        text = per_thread[key] = ',"flag":%d,"thread_id":%d,"kind":"%s"}' % (
            flag & ~FLAG_KEYPOINT & 0xFFFFFFFF, thread, "keypoint" if flag & FLAG_KEYPOINT else "op")
        return text

    get_prefix, get_suffix = shared.get, per_thread.get
    prefixes = [get_prefix(k) or prefix(k) for k in zip(
        tsl, records["device_id"].tolist(), records["model_id"].tolist(),
        records["op_type"].tolist(), records["op_name"].tolist())]
    suffixes = [get_suffix(k) or suffix(k) for k in zip(records["flag"].tolist(),
                                                        records["thread_id"].tolist())]
    return ['%s%d,"end":%d,"duration_ns":%d%s' % row for row in zip(
        prefixes, records["start"].tolist(), records["end"].tolist(),
        records["duration"].tolist(), suffixes)]


def jsonl_payload(items: list[str]) -> bytes:
    """Record texts as one JSON Lines payload (every line ends with ``\n``)."""
    items.append("")  # the last line ends with "\n" too
    try:
        return "\n".join(items).encode("utf-8")
    finally:
        items.pop()


def jsonl_payloads(items: list[str]) -> Iterator[tuple[int, bytes]]:
    """(record count, JSON Lines payload) per frame of at most FRAME_RECORDS records and
    about FRAME_TARGET bytes (a frame ends after the line that crosses it). Lines are ASCII
    (``json.dumps``) and bounded by the name limits, so every frame is far below MAX_PAYLOAD."""
    start, size = 0, 0
    for i, item in enumerate(items):
        size += len(item) + 1
        if size >= FRAME_TARGET or i + 1 - start >= FRAME_RECORDS:
            yield i + 1 - start, jsonl_payload(items[start:i + 1])
            start, size = i + 1, 0
    if start < len(items):
        yield len(items) - start, jsonl_payload(items[start:])


def append_frame(out: Any, kind: Kind, payload: bytes) -> None:
    """Append one frame to an output buffer (a bytearray or a connection's OutQueue: anything
    with ``+=``): header, then the payload."""
    out += header(kind, len(payload))
    out += payload
