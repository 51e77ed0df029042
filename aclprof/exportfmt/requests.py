"""Request bills in the trace exports (issue 25): each request (``aclprof.request``) as a
slice on a track of its host thread, with a flow to every op attributed to it.

The input is one :class:`RequestSpan` per request window: the process, the host thread
(kernel tid) the window ran on, and its start and end **in the records' clock** (the
device clock the op records carry; the agent maps its host ``CLOCK_MONOTONIC`` windows
there with its clock map: on the mock, without an offset, the two are the same clock).
:func:`link` attributes the export's ops to the spans with the bill's rule
(:mod:`aclprof.agent.bills`): an op belongs to the span of its process whose thread is the
op record's ``thread_id`` and whose window holds the op's start; an op that two spans hold
(overlapping requests on one thread; a window reaches ``early`` before its start and
``late`` after its end, the bill's margins) is linked to neither and counted in
:attr:`Links.ambiguous`, never guessed; ops outside every span stay unlinked.

How the writers show it: a thread per (process, host thread) named ``requests (thread T)``
(overlapping requests of one thread on extra lanes ``#k``, as ops are: :mod:`.tracks`),
one slice per span named by the request id, category ``request``, its args the request id,
attributes, ops linked and their device time; one flow per linked op from the request slice
to the op's slice (Perfetto's ``flow`` table: ``slice_out`` the request, ``slice_in`` the op).
The protobuf names both ends by id (``flow_ids``, ``terminating_flow_ids``); the Chrome JSON
binds a flow's end to the innermost slice open at the op's start on its track, so there an
op that starts at the same ns as a longer op of its lane holding it (equal starts nest) would
take the longer op's flow: the JSON's one inexactness, absent from the protobuf.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .tracks import Gathered, Slice, assign_lanes

__all__ = ["CATEGORY", "REQUEST_TID_BASE", "Links", "RequestSpan", "link", "request_lane_name", "spans_from_bills"]

#: the category of request slices (ops carry their op type, steps ``step``)
CATEGORY = "request"
#: tids of the request threads: REQUEST_TID_BASE + n (the n-th of the process)
REQUEST_TID_BASE = 3 * 2**30


@dataclass(frozen=True)
class RequestSpan:
    """One window of one request: ``thread_id`` is the host thread's kernel tid (what op
    records carry in ``thread_id``); ``start``/``end`` in the records' clock and units. An op
    is held from ``start - early`` to ``end + late`` (the bill's own margins, so the trace
    links what the bill counted); the slice drawn is ``start`` to ``end``."""
    request_id: str
    pid: int
    thread_id: int
    start: int
    end: int
    attrs: dict[str, str] = field(default_factory=dict)
    early: int = 0
    late: int = 0


@dataclass
class Links:
    """What :func:`link` found: per span (same order as given) the op slices it holds,
    the ops two spans held (linked to neither) and the ops no span held."""
    ops_of: list[list[Slice]]
    ambiguous: int = 0
    unlinked: int = 0

    @property
    def linked(self) -> int:
        return sum(len(x) for x in self.ops_of)

    def device_ns(self, i: int) -> int:
        return sum(s.dur for s in self.ops_of[i])

    def drawn(self, spans: list[RequestSpan], i: int) -> tuple[int, int]:
        """(start, end) of span ``i``'s slice: its window, from its first op if that started
        earlier (within the bill's early margin): a flow must leave its slice before it
        arrives, or Perfetto drops it."""
        sp = spans[i]
        start = min([sp.start, *(s.start for s in self.ops_of[i])])
        return start, max(start, sp.end)

    def lanes(self, spans: list[RequestSpan]) -> Iterator[tuple[int, int, int, list[int]]]:
        """(pid, thread id, lane, indexes of its spans sorted by start) for every lane of
        request slices: a lane's spans nest or are disjoint."""
        by: dict[tuple[int, int], list[int]] = {}
        for i, sp in enumerate(spans):
            by.setdefault((sp.pid, sp.thread_id), []).append(i)
        for (pid, tid), idx in by.items():
            lane_of = assign_lanes([self.drawn(spans, i) for i in idx])
            per: dict[int, list[int]] = {}
            for i, k in zip(idx, lane_of):
                per.setdefault(k, []).append(i)
            for k in sorted(per):
                yield pid, tid, k, sorted(per[k], key=lambda i: (self.drawn(spans, i)[0], -self.drawn(spans, i)[1]))


def request_lane_name(thread_id: int, lane: int) -> str:
    """The name of a request track: ``requests (thread T)``, ``#k`` for lane k > 0."""
    return f"requests (thread {thread_id})" + (f" #{lane}" if lane else "")


def link(g: Gathered, spans: list[RequestSpan]) -> Links:
    """The ops of ``g`` each span holds (see the module's doc for the rule)."""
    # (pid, tid) -> its spans' starts (sorted), span indexes, and the latest end so far: the
    # walk back from the op's start stops where no earlier span reaches it
    index: dict[tuple[int, int], tuple[list[int], list[int], list[int]]] = {}
    for i in sorted(range(len(spans)), key=lambda i: spans[i].start - spans[i].early):
        sp = spans[i]
        starts, idx, reach = index.setdefault((sp.pid, sp.thread_id), ([], [], []))
        starts.append(sp.start - sp.early)
        idx.append(i)
        reach.append(max(sp.end + sp.late, reach[-1]) if reach else sp.end + sp.late)
    out = Links([[] for _ in spans])
    for (pid, _device, _model), slices in g.threads.items():
        for s in slices:
            if s.keypoint:
                continue
            hit = None
            try:
                entry = index.get((pid, int(s.thread_id)))
            except (TypeError, ValueError):
                entry = None
            if entry is not None:
                starts, idx, reach = entry
                n = 0
                for j in range(bisect_right(starts, s.start) - 1, -1, -1):
                    if reach[j] < s.start:
                        break
                    if s.start <= spans[idx[j]].end + spans[idx[j]].late:
                        n += 1
                        hit = idx[j]
                if n > 1:
                    out.ambiguous += 1
                    continue
            if hit is None:
                out.unlinked += 1
            else:
                out.ops_of[hit].append(s)
    return out


def spans_from_bills(bills: Iterable[Any]) -> list[RequestSpan]:
    """The spans of request bills as the daemon keeps them (REQUESTS_REPLY's ``bills``:
    ``id``, ``pid``, ``attrs``, ``windows`` [[thread id, start, end]] and ``window_margin``
    [early, late]); a bill without
    windows (an agent without a clock yet, or before they were sent) gives none.
    ValueError naming the bad bill."""
    out = []
    for n, b in enumerate(bills):
        try:
            if not isinstance(b, dict):
                raise TypeError("not an object")
            rid, pid, attrs = b["id"], b.get("pid", 0), b.get("attrs") or {}
            if not isinstance(rid, str) or not isinstance(pid, int) or isinstance(pid, bool):
                raise TypeError("id must be a string, pid an integer")
            if not isinstance(attrs, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in attrs.items()):
                raise TypeError("attrs must be an object of strings")
            margin = b.get("window_margin") or [0, 0]
            if not (isinstance(margin, list) and len(margin) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in margin)):
                raise TypeError("window_margin must be [early, late], integers >= 0")
            for w in b.get("windows") or []:
                if not (isinstance(w, list) and len(w) == 3 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                     for v in w)):
                    raise TypeError("windows must be [thread id, start, end] integer lists")
                if w[2] < w[1]:
                    raise ValueError(f"window {w} ends before it starts")
                out.append(RequestSpan(rid, pid, w[0], w[1], w[2], dict(attrs), margin[0], margin[1]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"request bill #{n} ({str(b)[:200]}): {exc}") from None
    return out
