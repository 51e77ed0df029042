"""Tracks of the trace exports (Chrome JSON, Kineto JSON, Perfetto protobuf): which thread
("lane") of its (process, device, model) each record's slice goes on, so that every track
holds properly nested slices only.

A trace viewer draws a thread's slices as a stack: a slice must either end before the next
begins or contain it. Perfetto drops the rest (``stats``
``slice_drop_overlapping_complete_event``): measured on its trace processor, two partly
overlapping ops of one model (two streams, or two host threads executing the model) lost
one of them, and an op ending after its step keypoint's end was dropped too. So the
records of a (process, device, model) are sorted by start (longer first on a tie, so a step
comes before the ops it contains) and each goes on the first lane where it nests: lane 0 is
the (device, model) thread of before; an op that overlaps without nesting goes to lane 1, 2,
... (threads of their own, named ``#k``). Steps and the ops inside them share lane 0, so
Perfetto shows the ops under their step (depth 1).

Sorting needs the records of a thread before writing any: the writers keep one small tuple
per record (its values, not the daemon's dict).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Gathered", "Slice", "assign_lanes", "gather", "lane_name"]


def lane_name(device: int, model: int, lane: int) -> str:
    """The thread name of a lane: ``device d / model m``, ``#k`` added for lane k > 0."""
    return f"device {device} / model {model}" + (f" #{lane}" if lane else "")


def assign_lanes(spans: list[tuple[int, int]]) -> list[int]:
    """For spans ``(start, end)`` (end >= start) of one thread, the lane of each (same order
    as given): every lane's spans are pairwise disjoint or nested. Equal spans nest."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], -spans[i][1], i))
    lanes: list[list[int]] = []  # per lane: the stack of open span ends
    out = [0] * len(spans)
    for i in order:
        start, end = spans[i]
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:  # after everything open, or inside the innermost
                stack.append(end)
                out[i] = k
                break
        else:
            lanes.append([end])
            out[i] = len(lanes) - 1
    return out


@dataclass(slots=True)
class Slice:
    """One record as the trace writers need it (times in ns)."""
    start: int
    dur: int
    name: str
    op_type: str
    keypoint: bool
    flag: Any
    thread_id: Any
    received_ts: Any


@dataclass
class Gathered:
    """Every record of an export, by thread: ``processes`` pid -> its name;
    ``threads`` (pid, device, model) -> its slices in arrival order (dicts keep the order
    of first appearance); ``count`` records read."""
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int, int], list[Slice]] = field(default_factory=dict)
    count: int = 0

    def lanes(self) -> Iterator[tuple[int, int, int, int, list[Slice]]]:
        """(pid, device, model, lane, slices sorted by start) for every lane of every thread."""
        for (pid, device, model), slices in self.threads.items():
            lane_of = assign_lanes([(s.start, s.start + s.dur) for s in slices])
            per: dict[int, list[Slice]] = {}
            for s, k in zip(slices, lane_of):
                per.setdefault(k, []).append(s)
            for k in sorted(per):
                yield pid, device, model, k, sorted(per[k], key=lambda s: (s.start, -s.dur))


def gather(batches: Iterable[list[dict[str, Any]]]) -> Gathered:
    """Read export records (daemon/PROTOCOL.md "record" objects) into a :class:`Gathered`.
    A record without ``duration_ns`` lasts ``end - start`` (0 if negative)."""
    g = Gathered()
    for records in batches:
        for r in records:
            pid = int(r.get("pid", 0))
            key = (pid, int(r.get("device", 0)), int(r.get("model", 0)))
            if pid not in g.processes:
                g.processes[pid] = f"{r.get('service') or 'process'} (pid {pid}) @{r.get('host', '?')}"
            start = int(r.get("start", 0))
            dur = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
            s = Slice(start, dur, r.get("op_name", "?"), r.get("op_type", "?"), r.get("kind") == "keypoint",
                      r.get("flag"), r.get("thread_id"), r.get("ts"))
            lst = g.threads.get(key)
            if lst is None:
                g.threads[key] = [s]
            else:
                lst.append(s)
        g.count += len(records)
    return g
