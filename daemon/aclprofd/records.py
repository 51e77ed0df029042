"""The record format between the daemon and the CLI (daemon/PROTOCOL.md "record"): JSON
Lines, one record object per ``\\n``-terminated line, in STREAM_RECORDS and EXPORT_RECORDS.

Encoding is the per-record cost of STREAM and EXPORT, paid only for records a client gets:
one format string per record, names JSON-escaped once per connection and id. A payload is
built as one ``str`` and encoded once; the frame header is appended to the client's output
buffer apart from it (no header+payload concatenation), so each payload byte is copied once
into the buffer the socket sends from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np

from aclprof.protocol.wire import FLAG_KEYPOINT, FRAME_TARGET, MAX_NAME_BYTES, Kind, header

__all__ = ["FRAME_RECORDS", "encode_records", "name_json", "jsonl_payload", "jsonl_payloads", "append_frame"]

FRAME_RECORDS = 2048  # at most this many records per STREAM_RECORDS / EXPORT_RECORDS frame ...
# ... and at most FRAME_TARGET bytes (plus one line): long names make long lines, and 2048 of
# them once made a frame beyond MAX_PAYLOAD whose encoder raised in the loop (issue 9)


def name_json(names: dict[int, str], cache: dict[int, str]) -> Callable[[int], str]:
    """A name id -> its JSON string literal, cached in ``cache`` (unknown ids: ``"#<id>"``)."""
    def get(nid: int) -> str:
        s = cache.get(nid)
        if s is None:
            name = names.get(nid, f"#{nid}")
            if len(name) > MAX_NAME_BYTES:  # stored before the ingest limit: never a line beyond it
                name = name.encode()[:MAX_NAME_BYTES].decode("utf-8", "ignore")
            s = cache[nid] = json.dumps(name)  # ASCII (ensure_ascii): len() is the byte count
        return s
    return get


def encode_records(records: np.ndarray, ts: np.ndarray | float, host: str, pid: int,
                   service: str | None, names_json: Callable[[int], str]) -> list[str]:
    """Records (RECORD_DTYPE) as JSON object texts, one per record, without newlines.

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
        text = ts_text[t] = '{"ts":%.6f,' % t + head
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
            t, dev, model, names_json(op_type), names_json(op_name))
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


def append_frame(out: bytearray, kind: Kind, payload: bytes) -> None:
    """Append one frame to an output buffer: header, then the payload (one copy of it)."""
    out += header(kind, len(payload))
    out += payload
