"""The agent's request-bill tap in the compiled helper (``_fast_billtap.c``, issue 25).

In agent mode the op rows go from the subscription's reader to the C queue and out as wire
records without reaching Python. The queue's readers also hand each read to a
:class:`BillTap`: per op the columns request attribution needs, per read one clock note
(host arrival, newest end). The agent's sender takes both with one call per wake-up, as
numpy arrays (:meth:`BillTap.take`), for :meth:`aclprof.agent.bills.BillBook.feed_columns`.

The tap is off until a request is marked in the process (:func:`note_requests_marked`,
called by :mod:`aclprof.api.requests` on the first window): a service that never marks a
request pays one relaxed atomic load per read and no memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aclprof.binding.built import import_built

__all__ = ["BillTap", "TAP_OP_DTYPE", "TAP_NOTE_DTYPE", "TapCounts", "note_requests_marked",
           "requests_marked"]

_fast: Any = import_built("_fast")
_ffi, _lib = _fast.ffi, _fast.lib


_INTS = {f"{u}int{b}_t" for u in ("", "u") for b in (8, 16, 32, 64)}


def _dtype(ctype: str, names: tuple[str, ...]) -> np.dtype:
    """A numpy dtype laid out as the C struct ``ctype``: offsets, integer types and size all
    from cffi (nothing kept by hand beside the header)."""
    c_fields = dict(_ffi.typeof(ctype).fields)
    formats = []
    for name in names:
        cname = c_fields[name].type.cname  # "uint64_t", "int64_t", "uint32_t"
        if cname not in _INTS:
            raise TypeError(f"aclprof.binding.billtap: field {name} of {ctype} is {cname}, not a fixed-width integer")
        formats.append(np.dtype(cname[:-2]))
    return np.dtype({"names": list(names), "formats": formats,
                     "offsets": [c_fields[f].offset for f in names], "itemsize": _ffi.sizeof(ctype)})


#: one op of the tap (``aclprof_tap_op``)
TAP_OP_DTYPE = _dtype("aclprof_tap_op", ("start", "end", "thread_id", "model_id", "op_type", "op_name", "slot"))
#: one clock note (``aclprof_tap_note``)
TAP_NOTE_DTYPE = _dtype("aclprof_tap_note", ("arrival", "newest_end", "ops"))


def note_requests_marked() -> None:
    """A request was marked in this process: taps start keeping ops (for ever after)."""
    _lib.aclprof_requests_note_marked()


def requests_marked() -> bool:
    return bool(_lib.aclprof_requests_marked())


class TapCounts:
    """A snapshot of a tap's counters."""

    __slots__ = ("ops_in", "dropped", "notes_dropped", "taken", "held", "notes_held")

    def __init__(self, c: Any):
        self.ops_in, self.dropped, self.notes_dropped = int(c.ops_in), int(c.dropped), int(c.notes_dropped)
        self.taken, self.held, self.notes_held = int(c.taken), int(c.held), int(c.notes_held)


class BillTap:
    """A bounded tap: at most ``max_ops`` ops and ``max_notes`` notes held between takes
    (the newest beyond are dropped and counted). Attach it with ``AgentQueue.set_tap``."""

    def __init__(self, max_ops: int = 1 << 18, max_notes: int = 1 << 14):
        for name, v in (("max_ops", max_ops), ("max_notes", max_notes)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 26:
                raise ValueError(f"BillTap: {name} must be an int in [1, {1 << 26}], got {v!r}")
        t = _lib.aclprof_tap_new(max_ops, max_notes)
        if t == _ffi.NULL:
            raise MemoryError("BillTap: could not allocate a tap")
        self._t = _ffi.gc(t, _lib.aclprof_tap_free)
        self.max_ops, self.max_notes = max_ops, max_notes
        self._n_notes = _ffi.new("uint32_t *")
        self._counts = _ffi.new("aclprof_tap_counts *")

    @property
    def cdata(self) -> Any:
        return self._t

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """Everything held: ``(ops as TAP_OP_DTYPE, notes as TAP_NOTE_DTYPE)``, fresh arrays
        sized to what was taken (one C call, one lock)."""
        c = self.counts()
        # sized to what is held now (ops fed meanwhile wait for the next take)
        ops = np.empty(min(c.held, self.max_ops), TAP_OP_DTYPE)
        notes = np.empty(min(c.notes_held, self.max_notes), TAP_NOTE_DTYPE)
        if not len(ops) and not len(notes):
            return ops, notes
        n = int(_lib.aclprof_tap_take(self._t, _ffi.from_buffer("aclprof_tap_op[]", ops, require_writable=True),
                                      len(ops), _ffi.from_buffer("aclprof_tap_note[]", notes, require_writable=True),
                                      len(notes), self._n_notes))
        return ops[:n], notes[:int(self._n_notes[0])]

    def counts(self) -> TapCounts:
        _lib.aclprof_tap_counts_get(self._t, self._counts)
        return TapCounts(self._counts)
