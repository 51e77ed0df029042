"""Perfetto's native protobuf trace (``.pftrace``: a ``Trace`` of ``TracePacket``s with
``TrackEvent``s) of export records: ``aclprof export --format perfetto``.

The same tracks as the Chrome trace (:mod:`.chrome`, :mod:`.tracks`): a process track per
inference process, a thread track per device and model (and per extra lane of overlapping
ops), one slice per record (a ``SLICE_BEGIN`` and a ``SLICE_END`` packet) named by the op
name with the op type as its category; a step keypoint is a ``step`` slice (category
``step``) on its model's thread, the ops of the step nested under it. Times are the
records' nanoseconds, exact at any value (JSON is read as doubles: exact up to 2^52 ns).
Names and categories are interned (sent once per trace), so a record costs ~20 bytes.

Why this format: exact times and names at any value (Perfetto's JSON importer reads numbers
as doubles and keeps most escapes), ~4.4x smaller files (40 bytes per record against ~175),
and no JSON size limit (MindStudio Insight advises against JSON of more than 1 GB). Not load
speed, measured in the same trace processor (tests/bench/bench_trace_load.py, 300k and 1M
records, load 9-16): 1.0-1.2x faster than the JSON in a fresh engine, 1.0-1.4x in a warm
one; never 5x. Why: a fresh wasm engine spends about half its first load's CPU compiling
itself (V8 tiering the 11 MB wasm up), the same for both formats; once warm, a TrackEvent
slice costs ~3.1-3.4 CPU s per million, its floor (two packets per slice, each tokenized,
sorted and parsed: a bare slice on one track with one interned name and no category costs
the same), against ~1.1-1.2 for a bare JSON ``X`` event and ~3.5-3.8 for our JSON with its
four args. 5x below today's JSON would need ~0.7. Tried, none moved it by more than the
noise (100k-300k records): events in global time order (no sort), one sequence per track
with ``TrackEventDefaults.track_uuid``, no ``sequence_flags``, incremental clocks with delta
timestamps (~1.2x slower), feed chunks of 1-32 MB. Where a warm engine's protobuf time goes
(V8 CPU profile, v52): the sorter's sink ~9 %, protozero field decoding ~10 %, TrackEvent
tokenizing ~5 %, the args reflection pass over each TrackEvent ~3 %, string hashing ~5 %,
the slice tracker ~5 %: spread over the per-packet path, no one hot spot to avoid.

Encoding: the message classes PyPI ``perfetto`` ships (``perfetto_trace_pb2``, generated
from Perfetto's published protos; ``pip install 'aclprof[perfetto]'``), serialized by the
``protobuf`` package, a ``Trace`` of up to :data:`PACKETS_PER_WRITE` packets at a time
(a ``Trace``'s bytes are its packets' field-1 records, so the pieces concatenate into one
trace).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, BinaryIO

from .requests import CATEGORY, REQUEST_TID_BASE, RequestSpan, link, request_lane_name
from .tracks import Gathered, Slice, gather, lane_name

__all__ = ["PACKETS_PER_WRITE", "SEQUENCE_ID", "MissingDependency", "trace_class", "utf8_text", "write_perfetto",
           "write_perfetto_gathered"]

#: packets serialized per write (one Trace message each)
PACKETS_PER_WRITE = 4096
#: our one packet sequence (interned names and categories are per sequence)
SEQUENCE_ID = 1
_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


class MissingDependency(RuntimeError):
    """PyPI ``perfetto`` (its protobuf classes) is not installed."""


def trace_class() -> Any:
    """PyPI perfetto's ``Trace`` message class; :class:`MissingDependency` if it is missing."""
    try:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise MissingDependency(
            "the Perfetto protobuf trace needs PyPI 'perfetto' (its TrackEvent message classes): "
            f"pip install 'aclprof[perfetto]' ({exc})") from None
    return Trace


def write_perfetto(batches: Iterable[list[dict[str, Any]]], out: BinaryIO,
                   requests: list[RequestSpan] | None = None) -> int:
    """Export records (daemon/PROTOCOL.md "record" objects) as one Perfetto protobuf trace;
    the count of records written. Raises :class:`MissingDependency` before reading any
    record if PyPI ``perfetto`` is missing. ``requests``: request windows shown with flows
    to their ops (:mod:`.requests`: the request slice's ``flow_ids``, each op's
    ``terminating_flow_ids``)."""
    trace_class()
    return write_perfetto_gathered(gather(batches), out, requests)


def write_perfetto_gathered(g: Gathered, out: BinaryIO, requests: list[RequestSpan] | None = None) -> int:
    """:func:`write_perfetto` of records already read by :func:`.tracks.gather`."""
    trace_cls = trace_class()
    trace = trace_cls()
    packets = trace.packet

    def flush() -> None:
        nonlocal trace, packets
        if len(packets):
            out.write(trace.SerializeToString())
            trace = trace_cls()
            packets = trace.packet

    first = packets.add()
    first.trusted_packet_sequence_id = SEQUENCE_ID
    first.sequence_flags = _CLEARED
    process_uuid: dict[int, int] = {}
    for pid, name in g.processes.items():
        p = packets.add()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        td = p.track_descriptor
        td.uuid = process_uuid[pid] = len(process_uuid) + 1
        td.process.pid = pid
        td.process.process_name = utf8_text(name)
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    next_uuid = len(process_uuid) + 1
    tid_of: dict[tuple[int, int, int, int], int] = {}
    flow_of: dict[int, int] = {}  # id(op slice) -> the flow from its request
    links = link(g, requests) if requests else None
    if links is not None:
        n = 0
        for ops in links.ops_of:
            for op in ops:
                n += 1
                flow_of[id(op)] = n
    # requests first: at an equal time the sorter keeps file order, and an op's
    # terminating flow must come after the request slice that begins it
    if links is not None and requests:
        tids = REQUEST_TID_BASE  # a tid per request track, apart from the op tracks' (1, 2, ...)
        for pid, thread_id, lane, idx in links.lanes(requests):
            next_uuid += 1
            uuid = next_uuid
            if pid not in process_uuid:
                process_uuid[pid] = _process(packets, pid, next_uuid)
            p = packets.add()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            td = p.track_descriptor
            td.uuid, td.parent_uuid = uuid, process_uuid[pid]
            tids += 1
            td.thread.pid, td.thread.tid, td.thread.thread_name = pid, tids, request_lane_name(thread_id, lane)
            stack: list[int] = []
            for i in idx:
                sp = requests[i]
                start, end = links.drawn(requests, i)
                while stack and stack[-1] <= start:
                    _end(packets.add(), stack.pop(), uuid)
                r = Slice(start, end - start, sp.request_id, CATEGORY, False, None, None, None)
                _begin(packets.add(), r, uuid, names, cats)
                te = packets[-1].track_event
                te.flow_ids.extend(flow_of[id(op)] for op in links.ops_of[i])
                args: dict[str, int | str] = {
                    "request_id": sp.request_id, "thread_id": sp.thread_id, "ops": len(links.ops_of[i]),
                    "device_ns": links.device_ns(i), **{f"attr.{k}": v for k, v in sp.attrs.items()}}
                for k, v in args.items():
                    a = te.debug_annotations.add()
                    a.name = k
                    if isinstance(v, int):
                        a.int_value = v
                    else:
                        a.string_value = utf8_text(v)
                stack.append(r.start + r.dur)
                if len(packets) >= PACKETS_PER_WRITE:
                    flush()
            while stack:
                _end(packets.add(), stack.pop(), uuid)
    for pid, device, model, lane, slices in g.lanes():
        next_uuid += 1
        uuid = next_uuid
        p = packets.add()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        td = p.track_descriptor
        td.uuid = uuid
        td.parent_uuid = process_uuid[pid]
        td.thread.pid = pid
        # a tid unique in the process: Perfetto merges threads by (pid, tid)
        td.thread.tid = tid_of.setdefault((pid, device, model, lane), len(tid_of) + 1)
        td.thread.thread_name = lane_name(device, model, lane)
        stack = []  # ends of the open slices (the lane nests properly)
        for s in slices:
            while stack and stack[-1] <= s.start:
                _end(packets.add(), stack.pop(), uuid)
            _begin(packets.add(), s, uuid, names, cats)
            if flow_of:
                f = flow_of.get(id(s))
                if f is not None:
                    packets[-1].track_event.terminating_flow_ids.append(f)
            stack.append(s.start + s.dur)
            if len(packets) >= PACKETS_PER_WRITE:
                flush()
        while stack:
            _end(packets.add(), stack.pop(), uuid)
        if len(packets) >= PACKETS_PER_WRITE:
            flush()
    flush()
    return g.count


def _process(packets: Any, pid: int, uuid: int) -> int:
    """A process track for requests of a process that sent no records; its uuid."""
    p = packets.add()
    p.trusted_packet_sequence_id = SEQUENCE_ID
    p.track_descriptor.uuid = uuid + (1 << 40)  # apart from the thread tracks' uuids
    p.track_descriptor.process.pid = pid
    return int(p.track_descriptor.uuid)


def utf8_text(s: str) -> str:
    """``s`` as a protobuf string may hold it (valid UTF-8): a lone surrogate (a peer's
    undecodable name) becomes its ``\\udXXX`` escape, as the other outputs write it."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _begin(p: Any, s: Slice, uuid: int, names: dict[str, int], cats: dict[str, int]) -> None:
    p.timestamp = s.start
    p.trusted_packet_sequence_id = SEQUENCE_ID
    p.sequence_flags = _NEEDS_STATE
    te = p.track_event
    te.type = 1  # TYPE_SLICE_BEGIN
    te.track_uuid = uuid
    name = "step" if s.keypoint else s.name
    cat = "step" if s.keypoint else s.op_type
    iid = names.get(name)
    if iid is None:
        iid = names[name] = len(names) + 1
        e = p.interned_data.event_names.add()
        e.iid, e.name = iid, utf8_text(name)
    te.name_iid = iid
    cid = cats.get(cat)
    if cid is None:
        cid = cats[cat] = len(cats) + 1
        c = p.interned_data.event_categories.add()
        c.iid, c.name = cid, utf8_text(cat)
    te.category_iids.append(cid)


def _end(p: Any, ts: int, uuid: int) -> None:
    p.timestamp = ts
    p.trusted_packet_sequence_id = SEQUENCE_ID
    p.sequence_flags = _NEEDS_STATE
    te = p.track_event
    te.type = 2  # TYPE_SLICE_END
    te.track_uuid = uuid
