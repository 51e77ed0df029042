"""The Chrome trace (Trace Event Format; opens in Perfetto and chrome://tracing) of export
records: ``aclprof export --format chrome`` and the daemon's flight recorder write it.

One complete event (``ph: "X"``, ``ts``/``dur`` in microseconds of the library's clock,
written exactly: three decimals) per record; one process per inference process (``pid``),
one thread per device and model (``tid = device * TID_STRIDE + model``), named by metadata
events; a step keypoint is a ``step`` slice on its model's thread, so the ops of the step
nest under it. Ops that overlap without nesting go on extra threads of their model
(:mod:`aclprof.exportfmt.tracks`; ``tid = LANE_TID_BASE + n``, the process's n-th extra
thread, named ``device d / model m #k``): a viewer drops the rest. Perfetto keeps 32 bits of
a tid (measured: tid 2^32 + 1 merged with tid 1), so every tid stays below 2^32.

Perfetto reads JSON times as doubles: they are exact there up to 2^52 ns (52 days of the
device clock), off by a few ns beyond. ``--format perfetto`` (:mod:`.perfetto`) is exact.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from .requests import REQUEST_TID_BASE, RequestSpan
from .tracks import Gathered, gather, lane_name

__all__ = ["LANE_TID_BASE", "REQUEST_TID_BASE", "TID_STRIDE", "format_us", "json_string", "meta_json", "short_us",
           "write_chrome", "write_chrome_gathered"]

TID_STRIDE = 100000
#: tids of the extra threads of overlapping ops: LANE_TID_BASE + n (n-th of the process)
LANE_TID_BASE = 2**31


def format_us(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals (``1234567`` -> ``"1234.567"``):
    no float rounding of large device timestamps."""
    if ns >= 0:
        return f"{ns // 1000}.{ns % 1000:03d}"
    return "-" + format_us(-ns)


def short_us(ns: int) -> str:
    """:func:`format_us` without trailing zeros (a JSON number as short as json.dumps writes
    it: ``10``, ``2000.5``), for the trace's ``ts`` and ``dur`` (ns >= 0)."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}".rstrip("0") if r else str(q)


def meta_json(m: dict[str, Any]) -> str:
    """A metadata event, its name as :func:`json_string` writes it."""
    try:
        j = json.dumps(m, separators=(",", ":"), ensure_ascii=False)
        j.encode("utf-8")
        return j
    except UnicodeEncodeError:
        return json.dumps(m, separators=(",", ":"))


def _scalar(v: Any) -> str:
    """A record's number (or null) as json.dumps writes it, without its cost (half of the
    writer's time went to json.dumps of three numbers per event)."""
    t = type(v)
    if t is int:
        return str(v)
    if t is float and v - v == 0:  # finite: repr is what json.dumps writes
        return repr(v)
    if v is None:
        return "null"
    return json.dumps(v)


def json_string(s: str, memo: dict[str, str]) -> str:
    """``s`` as a JSON string with non-ASCII characters as UTF-8, not ``\\uXXXX``: Perfetto's
    JSON importer (v52) keeps ``\\u`` escapes in a ``cat`` as the six characters (measured:
    ``\\u00dcbersetzung``). A string with a lone surrogate (a peer's undecodable name) is not
    UTF-8: it keeps the escape. ``memo`` caches the names of one trace (they repeat)."""
    j = memo.get(s)
    if j is None:
        try:
            s.encode("utf-8")
            j = json.dumps(s, ensure_ascii=False)
        except UnicodeEncodeError:
            j = json.dumps(s)
        memo[s] = j
    return j


def write_chrome(batches: Iterable[list[dict[str, Any]]], out: TextIO, generator: str = "aclprof export",
                 extra: Callable[[], list[dict[str, Any]]] | None = None,
                 requests: list[RequestSpan] | None = None) -> int:
    """Export records (daemon/PROTOCOL.md "record" objects) as one Trace Event Format file;
    the count of records written. Names are written as given (JSON-escaped, UTF-8:
    :func:`json_string`). ``extra``: called once the records are written, more trace events to
    add (the flight recorder's op failures: instant events placed by the records it saw).
    ``requests``: request windows shown with flows to their ops (:mod:`.requests`)."""
    return write_chrome_gathered(gather(batches), out, generator, extra, requests)


def write_chrome_gathered(g: Gathered, out: TextIO, generator: str = "aclprof export",
                          extra: Callable[[], list[dict[str, Any]]] | None = None,
                          requests: list[RequestSpan] | None = None) -> int:
    """:func:`write_chrome` of records already read by :func:`.tracks.gather` (the flight
    recorder writes two traces of them)."""
    out.write('{"displayTimeUnit":"ns","otherData":{"generator":%s,' % json.dumps(generator) +
              '"clock":"the ACL library\'s op timestamps (the device clock; CLOCK_MONOTONIC on the mock)"},'
              '"traceEvents":[\n')
    first = True
    threads: list[tuple[int, int, str]] = []
    lanes_of: dict[int, int] = {}  # pid -> extra threads so far
    memo: dict[str, str] = {}
    op_tid: dict[int, int] = {}  # id(slice) -> its thread's tid, for the request flows
    for pid, device, model, lane, slices in g.lanes():
        if lane:
            lanes_of[pid] = lanes_of.get(pid, 0) + 1
            tid = LANE_TID_BASE + lanes_of[pid]
        else:
            tid = device * TID_STRIDE + model
        threads.append((pid, tid, lane_name(device, model, lane)))
        if requests:
            op_tid.update((id(s), tid) for s in slices)
        head = ',"ph":"X","ts":'
        tail = ',"pid":%d,"tid":%d,"args":' % (pid, tid)
        parts = []
        for s in slices:
            name = '"step","cat":"step"' if s.keypoint else (
                json_string(s.name, memo) + ',"cat":' + json_string(s.op_type, memo))
            parts.append('{"name":' + name + head + short_us(s.start) + ',"dur":' + short_us(s.dur) + tail +
                         '{"op_type":' + json_string(s.op_type, memo) + ',"flag":' + _scalar(s.flag) +
                         ',"thread_id":' + _scalar(s.thread_id) + ',"received_ts":' + _scalar(s.received_ts) + "}}")
        if parts:
            out.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
    if requests:
        from .chrome_requests import request_events  # it uses this module's helpers

        text = request_events(g, requests, threads, memo, op_tid)
        if text:
            out.write(("" if first else ",\n") + text)
            first = False
    events = extra() if extra is not None else []
    if events:
        out.write(("" if first else ",\n") + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
        first = False
    meta = []
    for pid, name in g.processes.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
    for pid, tid, name in threads:
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    if meta:
        out.write(("" if first else ",\n") + ",\n".join(meta_json(m) for m in meta))
    out.write("\n]}\n")
    return g.count
