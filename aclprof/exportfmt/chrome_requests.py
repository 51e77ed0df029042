"""The request slices and flows of the Chrome trace (:mod:`.requests`; written by
:func:`.chrome.write_chrome_gathered` when it is given request windows)."""

from __future__ import annotations

from .chrome import REQUEST_TID_BASE, json_string, meta_json, short_us
from .requests import CATEGORY, RequestSpan, link, request_lane_name
from .tracks import Gathered

__all__ = ["request_events"]

_FLOW = '{"name":"bill","cat":"' + CATEGORY + '","ph":'


def request_events(g: Gathered, spans: list[RequestSpan], threads: list[tuple[int, int, str]],
                   memo: dict[str, str], op_tid: dict[int, int]) -> str:
    """The request slices and their flows (Trace Event Format flow events ``s``/``f``, the
    ``f`` bound to the enclosing slice: the op, which starts at the flow's time; written
    after every slice, so an op starting with its step still takes it). Adds the request
    threads to ``threads`` (named with the others)."""
    links = link(g, spans)
    parts = []
    flows = []
    flow_id = 0
    per_pid: dict[int, int] = {}
    for pid, thread_id, lane, idx in links.lanes(spans):
        per_pid[pid] = per_pid.get(pid, 0) + 1
        tid = REQUEST_TID_BASE + per_pid[pid]
        threads.append((pid, tid, request_lane_name(thread_id, lane)))
        where = ',"pid":%d,"tid":%d' % (pid, tid)
        for i in idx:
            sp = spans[i]
            args = {"request_id": sp.request_id, "thread_id": sp.thread_id, "ops": len(links.ops_of[i]),
                    "device_ns": links.device_ns(i), **{f"attr.{k}": v for k, v in sp.attrs.items()}}
            start, end = links.drawn(spans, i)
            ts = short_us(start)
            parts.append('{"name":' + json_string(sp.request_id, memo) + ',"cat":"' + CATEGORY + '","ph":"X","ts":' +
                         ts + ',"dur":' + short_us(end - start) + where + ',"args":' + meta_json(args) +
                         "}")
            for s in links.ops_of[i]:
                flow_id += 1
                flows.append(_FLOW + '"s","id":%d,"ts":%s%s}' % (flow_id, ts, where))
                flows.append(_FLOW + '"f","bp":"e","id":%d,"ts":%s,"pid":%d,"tid":%d}'
                             % (flow_id, short_us(s.start), pid, op_tid[id(s)]))
    return ",\n".join(parts + flows)
