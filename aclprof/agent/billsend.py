"""The agent's request-bill reporter: each finished :class:`~aclprof.agent.bills.Bill` as one
compact REQUEST_BILL frame to the daemon (issue 25; daemon/PROTOCOL.md "REQUEST_BILL").

A bill is a summary, not per-op copies: the request's id, attributes and traceparent, its start
on the unix clock, wall and device time, op count, the ``wire.REQUEST_BILL_MAX_TYPES`` op types with the most device
time (the rest folded into one ``"(other)"`` entry), the slowest op and the models. Frames
go into the agent's buffer as control items, in order with the records; at most
``MAX_PENDING`` wait at once (more are dropped and counted, and the newest waiting frame says
how many in ``dropped_before``: :meth:`RecordBuffer.add_frames`). Only a daemon whose WELCOME says protocol >= 4
is sent them (the sender counts the others as ``bills_unsent``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aclprof.agent.buffer import RecordBuffer
from aclprof.protocol import wire

if TYPE_CHECKING:  # the agent imports this module; bills (numpy, api.requests) only when used
    from aclprof.agent.bills import Bill

__all__ = ["BillReporter", "MAX_PENDING", "bill_payload", "start_unix_ns", "OTHER"]

#: bill frames that may wait in the agent's buffer at once
MAX_PENDING = 1024
OTHER = "(other)"
_TEXT = wire.REQUEST_BILL_MAX_TEXT


def start_unix_ns(monotonic_ns: int) -> int:
    """A host ``CLOCK_MONOTONIC`` time (a bill's start) on the unix clock, for the request's
    span in the OTLP trace export: read now, so the offset includes any clock step since."""
    return max(0, monotonic_ns + time.time_ns() - time.monotonic_ns())


def bill_payload(bill: Bill, dropped_before: int = 0) -> dict[str, Any]:
    """The REQUEST_BILL frame's JSON for ``bill`` (cut to the daemon's limits)."""
    ranked = sorted(bill.by_type.items(), key=lambda kv: -kv[1][0])
    top = ranked[:wire.REQUEST_BILL_MAX_TYPES]
    types: list[list[Any]] = [[t[:_TEXT], ns, n] for t, (ns, n) in top]
    rest = ranked[wire.REQUEST_BILL_MAX_TYPES:]
    if rest:
        types.append([OTHER, sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)])
    attrs = dict(list(bill.attrs.items())[:wire.REQUEST_BILL_MAX_ATTRS])
    slowest = None if bill.slowest is None else [bill.slowest[0][:_TEXT], bill.slowest[1][:_TEXT], bill.slowest[2]]
    payload = {"id": bill.request_id[:_TEXT], "attrs": {k[:_TEXT]: v[:_TEXT] for k, v in attrs.items()},
               "traceparent": bill.traceparent, "start_unix_ns": start_unix_ns(bill.start_ns),
               "wall_ns": bill.wall_ns, "device_ns": bill.device_ns,
               "ops": bill.ops, "models": list(bill.models[:wire.REQUEST_BILL_MAX_MODELS]), "types": types,
               "slowest": slowest, "complete": bill.complete, "dropped_before": dropped_before}
    if bill.windows or bill.windows_cut:  # for the trace exports (aclprof/exportfmt/requests.py)
        payload["windows"] = [list(w) for w in bill.windows[:wire.REQUEST_BILL_MAX_WINDOWS]]
        payload["windows_cut"] = bill.windows_cut + max(0, len(bill.windows) - wire.REQUEST_BILL_MAX_WINDOWS)
        payload["window_margin"] = list(bill.window_margin)
    return payload


class BillReporter:
    """Turns bills into REQUEST_BILL items of the agent's buffer."""

    def __init__(self, buffer: RecordBuffer):
        self.buffer = buffer
        self.queued = 0
        self.dropped = 0

    def submit(self, bills: Iterable[Bill]) -> None:
        bills = list(bills)
        dropped = self.buffer.add_frames(wire.Kind.REQUEST_BILL, (bill_payload(b) for b in bills), MAX_PENDING)
        with self.buffer.lock:  # the agent's counters' lock: bills come from the feeder and from report_bills
            self.dropped += dropped
            self.queued += len(bills) - dropped
