"""One watched model as the agent sees it: its subscription, its device and where that
came from, and what the current connection knows of it (whether WATCH was sent, its
name-id map)."""

from __future__ import annotations

from typing import Any

__all__ = ["Watched"]


class Watched:
    """A model the agent streams. ``live`` turns False once it is unwatched (its items may
    still sit in the buffer). Fields other than ``live`` and ``sub_dropped_seen`` (guarded
    by the buffer's lock) are the sender thread's."""

    __slots__ = ("model_id", "device", "device_from", "labels", "sub", "live", "_announced", "name_map",
                 "map_gen", "sub_dropped_seen", "slot", "native_names", "queue")

    def __init__(self, model_id: int, device: int | None, labels: dict[str, str], device_from: str = "argument"):
        self.model_id = model_id
        #: the model's device; None while unknown. Changed (under the buffer's lock) by the
        #: sender when a record's devId names another one.
        self.device = device
        #: "argument" (watch(device=)), "thread" (the caller's current device), "records"
        #: (a record's devId), "unknown"
        self.device_from = device_from
        self.labels = labels
        self.sub: Any = None
        self.live = True
        self.queue: Any = None     # agent mode: the C queue (agentpath.AgentQueue) of its slot
        self._announced = -1       # connection generation on which WATCH was sent
        self.name_map: Any = None  # numpy uint32: subscription name id -> connection id
        self.map_gen = -1          # connection generation name_map belongs to
        self.sub_dropped_seen = 0  # the subscription's drop counter already counted
        self.slot = -1             # agent mode: its slot in the agent's C queue
        self.native_names: Any = None  # ... and that slot's names (agentpath.SlotNames)

    @property
    def announced(self) -> int:
        """The connection generation on which WATCH was sent (-1: none)."""
        return self._announced

    @announced.setter
    def announced(self, gen: int) -> None:
        # In agent mode the C queue frames this model's records only once it is announced on
        # the connection (and with its device as known now): every change is passed on.
        self._announced = gen
        if self.queue is not None:
            self.queue.set_slot(self.slot, gen, self.device or 0, self.device_from in ("unknown", "thread"))
