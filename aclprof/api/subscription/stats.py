"""What a subscription counts: :class:`SubscriptionStats`, and the reader-lag estimate.

The counters are kept by the reader thread, the queue and the decoder; a snapshot is
assembled from them by :attr:`aclprof.Subscription.stats`. :class:`LagClock` holds the
two numbers the lag needs (newest record end, smallest host-minus-device gap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["SubscriptionStats", "LagClock", "LAG_CLOCKS", "TIME_UNITS"]

LAG_CLOCKS = ("calibrated", "host")
TIME_UNITS = {"ns": 1, "us": 1000}  # unit of the library's record times -> host ns factor


@dataclass(frozen=True)
class SubscriptionStats:
    """Counters of one subscription; read at any time without waiting on the reader.

    ``records_read == delivered + dropped + queued`` holds in every snapshot: the reader
    publishes its counts under the lock the queue moves records under, and the snapshot
    is read under it. A batch the reader holds (being decoded, or in a callback) is in
    none of these counts until it is delivered or dropped, so ``records_read`` can trail
    ``bytes_read`` by that batch. ``names_missing`` counts delivered records whose name or
    type the library could not return, ``names_overflowed`` those whose name did not fit the
    subscription's interned table (1 M distinct strings); both read ``"?"``. ``names_cut``
    counts delivered names and types longer than 16 KiB (``aclprof.binding.opdecode.NAME_LIMIT``),
    delivered cut to that many bytes (the daemon keeps 4 KiB of a name anyway).

    ``dropped_decode_error`` counts records lost to a failure of the binding itself: a
    batch the decoder raised on, and after any other reader failure, everything the reader
    then discards while it drains the pipe to EOF (so the library's flush never blocks).

    ``reader_lag_ns`` is how far behind the reader is: now minus the newest record end
    seen, with ``lag_clock`` telling how that end was put on the host's clock:

    - ``"calibrated"`` (the default): record times are the device's counter, which need
      not line up with the host's ``CLOCK_MONOTONIC`` (audit row 11), so the reader
      estimates the offset as the smallest (host arrival time - record end) seen so far
      and reports lag beyond that best case. Never negative; 0 means "as fresh as the
      fastest delivery seen", not "no delay".
    - ``"host"``: the caller said the clocks agree (``lag_clock="host"``): plain
      ``monotonic_ns() - end``.
    - ``None``: no record with a time yet (or ``time_info=False``): ``reader_lag_ns`` is
      None too.

    ``keypoints`` counts delivered-or-queued step keypoint records (``kind ==
    "keypoint"``); they are also in every other count.

    ``layout_mismatch`` is true when the first record decoded by offset disagreed with the
    library's getters (an unknown ``ProfOpDesc`` layout of the same size); the rest of the
    subscription is then decoded through the getters, counted in
    ``records_decoded_by_getters`` (also used for a record size the binding does not know).

    ``reader_stuck`` is true while the reader thread outlives a ``close()`` that gave up
    waiting for it (a callback that does not return): it still owns the pipe's fds and
    releases them, and the subscription, when it ends.
    """

    bytes_read: int
    records_read: int
    records_decoded: int
    delivered: int
    queued: int
    dropped_queue_full: int
    dropped_corrupt: int
    dropped_callback_error: int
    dropped_decode_error: int
    callback_errors: int
    names_missing: int
    names_overflowed: int
    truncated_bytes: int
    reader_lag_ns: int | None
    lag_clock: str | None = None
    keypoints: int = 0
    layout_mismatch: bool = False
    records_decoded_by_getters: int = 0
    reader_stuck: bool = False
    names_cut: int = 0

    @property
    def dropped(self) -> int:
        """Every record read and not delivered nor queued, whatever the reason."""
        return (self.dropped_queue_full + self.dropped_corrupt + self.dropped_callback_error
                + self.dropped_decode_error)


class LagClock:
    """Calibrates the device clock against the host's (see :class:`SubscriptionStats`).

    A batch that arrived at host time ``arrival`` holds records that ended at least
    ``arrival - end`` before on the host clock; the smallest such gap is the offset
    estimate (clock difference plus the fastest delivery). Written by the reader only.
    """

    __slots__ = ("_factor", "mode", "_state")

    @property
    def factor(self) -> int:
        """Host ns per library time unit."""
        return self._factor

    def __init__(self, time_unit: str, mode: str):
        self._factor = TIME_UNITS[time_unit]
        self.mode = mode
        # (newest record end in host ns units, min(host arrival - end)): one tuple so that
        # a reader never pairs a new end with an old offset (that could make lag negative).
        self._state: tuple[int, int] | None = None

    def note(self, ends: np.ndarray, arrival: int) -> None:
        """Account a batch's record ``ends`` (library units) that arrived at ``arrival``."""
        self.note_end(int(ends.max()), arrival)

    def note_end(self, newest: int, arrival: int) -> None:
        """:meth:`note` with the batch's largest end already known (library units)."""
        end = newest * self._factor
        if end == 0:
            return  # time_info off: no times to compare
        state = self._state
        if state is None:
            self._state = (end, arrival - end)
        else:
            self._state = (max(state[0], end), min(state[1], arrival - end))

    def merge(self, end: int, offset: int) -> None:
        """Fold in a state kept elsewhere (the agent mode's C loop): the newest end in host
        ns units and the smallest arrival - end."""
        state = self._state
        self._state = (end, offset) if state is None else (max(state[0], end), min(state[1], offset))

    def lag(self) -> tuple[int | None, str | None]:
        """``(reader_lag_ns, lag_clock)`` now; ``(None, None)`` before any timed record."""
        state = self._state
        if state is None:
            return None, None
        newest_end, offset = state
        if self.mode == "host":
            return time.monotonic_ns() - newest_end, self.mode
        return time.monotonic_ns() - newest_end - offset, self.mode
