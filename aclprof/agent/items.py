"""The items of the agent's record buffer (:class:`aclprof.agent.buffer.RecordBuffer`), in
arrival order: batches of records and the control items that must keep their place among
them (a WATCH goes before the model's first records on the wire, an UNWATCH after its last,
TRACE_DONE behind the records buffered before the trace ended).

Slotted dataclasses rather than lists read by position: the sender tells them apart with
``isinstance`` and reads named fields, at the same cost per item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aclprof.agent.watched import Watched
from aclprof.protocol import wire

__all__ = ["Batch", "Watch", "Unwatch", "JsonFrame", "Item"]


@dataclass(slots=True, eq=False)
class Batch:
    """Records of one watched model as one subscription callback delivered them."""

    watched: Watched
    #: OP_DTYPE records; replaced by a view of its tail when the buffer drops the oldest
    data: Any
    #: the subscription's name table at delivery (it only grows: the newest maps them all)
    names: Any


@dataclass(slots=True, eq=False, frozen=True)
class Watch:
    """Announce the model (WATCH) before its first records, if this connection has not."""

    watched: Watched
    #: the agent's C queue's tail when queued: its records before this sequence go first
    seq: int = 0


@dataclass(slots=True, eq=False, frozen=True)
class Unwatch:
    """The model's subscription is closed (UNWATCH, if this connection announced it)."""

    watched: Watched
    seq: int = 0  # as Watch.seq


@dataclass(slots=True, eq=False, frozen=True)
class JsonFrame:
    """A JSON control frame sent in order with the records (TRACE_DONE)."""

    kind: wire.Kind
    payload: dict[str, Any]
    seq: int = 0  # as Watch.seq


#: Any buffer item. ``eq=False``: items compare by identity (``deque.remove`` of a
#: WATCH takes out that item, not an equal one).
Item = Batch | Watch | Unwatch | JsonFrame
