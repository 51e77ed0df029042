"""Buffers the daemon's loop writes into again and again instead of allocating afresh.

An agent's BATCH frames were each copied into a fresh ``bytes`` (~140 KB a frame at 100 k
ops/s) kept until the storage flush, and each socket read into another: blocks larger
than glibc's mmap threshold, or at a heap top it trims, came back as fresh pages every
time, and on a VM fresh pages are slow (page faults, balloon reporting: issue 21, ~8 % of
the daemon's samples at 100 k ops/s). These buffers are allocated once and rewritten.

The one ownership rule: a buffer is rewritten only while **nothing else references it**
(:func:`unshared`, a reference count). Every view handed out (a ``memoryview`` slice, an
``np.frombuffer`` array over it, a STREAM client's queued chunk) holds a reference to the
buffer for as long as it lives, so a consumer that keeps records past the loop turn (a
STREAM client whose socket is full, storage that has not written them yet) keeps the
buffer from being rewritten: the next write goes to a new buffer instead, and the old one
is freed with the last view. Nothing is ever resized in place (a ``bytearray`` with views
cannot be), and no consumer needs to say when it is done.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["RecordKeep", "RecvBuffers", "unshared", "KEEP_FIRST", "KEEP_MAX"]

#: the smallest kept block: an agent that sends little holds little (4096 agents x 4 KiB)
KEEP_FIRST = 4 << 10
#: the largest kept block; a frame over half of it is copied on its own (rare: the store
#: path writes a connection's records before 4 MiB of them wait, aclprofd.ingest)
KEEP_MAX = 16 << 20


def _refs(obj: object) -> int:
    """``obj``'s reference count as :func:`unshared` sees it (called the same way: one
    function deep, so the call's own references are the same in both)."""
    return sys.getrefcount(obj)


def unshared(obj: object, alone: int) -> bool:
    """Whether ``obj`` has no references beyond the ``alone`` its owner measured with
    :func:`_refs` when it was the only holder (so the count's own conventions cancel out)."""
    return sys.getrefcount(obj) <= alone


class RecordKeep:
    """One connection's received records kept past their frame (for storage until the next
    flush, for STREAM clients until they are sent): each frame's bytes are appended to a
    block that is rewritten from its start once nothing references it (module docstring):
    when its records are stored (:meth:`stored`), or when the next frame does not fit.

    A frame that does not fit a block still referenced starts a new one twice as large (the
    old one lives on while its views do), up to :data:`KEEP_MAX`: after a connection's first
    few flushes, the records of one flush interval fit one block, reused at every flush.
    A block four times larger than the recent intervals' records (the largest, halved at
    each flush) is given back at a flush, so a burst does not stay held; two flushes close
    together (one for ``STORE_PENDING_MAX``, then the tick's) do not shrink it."""

    __slots__ = ("_block", "_fill", "_alone", "_since", "_peak", "reuses", "blocks")

    def __init__(self) -> None:
        self._block: bytearray | None = None
        self._fill = 0
        self._alone = 0
        self._since = 0  # bytes kept since the last stored()
        self._peak = 0  # the largest _since of the recent flushes (halved at each)
        self.reuses = 0  # blocks rewritten from their start (the tests read it)
        self.blocks = 0  # blocks allocated

    @property
    def capacity(self) -> int:
        """Bytes of the current block (0: none)."""
        return len(self._block) if self._block is not None else 0

    @property
    def spare(self) -> int:
        """Bytes of the current block that hold no records (held, charged by ``Conn.held``)."""
        return self.capacity - self._fill

    def _new_block(self, cap: int) -> bytearray:
        block = self._block = bytearray(cap)
        self._fill = 0
        self._alone = _refs(block)  # this slot and the name ``block`` (_rewind counts the same)
        self.blocks += 1
        return block

    def _rewind(self, shrink: bool) -> bool:
        """Rewrite the block from its start if nothing references it; True if so. ``shrink``:
        a block over four times what the records since the last flush took is dropped
        instead (the next :meth:`keep` allocates a smaller one)."""
        block = self._block
        if block is None or not unshared(block, self._alone):
            return False
        if shrink and self._peak * 4 < len(block) and len(block) > KEEP_FIRST:
            self._block, self._fill = None, 0
            return False
        self._fill = 0
        self.reuses += 1
        return True

    def stored(self) -> bool:
        """The records kept so far are written (the storage flush dropped its views): the
        block is rewritten from its start if no STREAM client still holds records of it;
        True if so."""
        self._peak = max(self._since, self._peak // 2)
        done = self._rewind(shrink=True)
        self._since = 0
        return done

    def keep(self, payload: memoryview) -> memoryview:
        """A read-only view of a copy of ``payload`` (bytes, format "B"), valid for as long
        as it is referenced: appended to the block; when it does not fit, the block is
        rewritten from its start if nothing references it, else a new block is begun."""
        n = len(payload)
        self._since += n
        if n * 2 > KEEP_MAX:
            return memoryview(bytes(payload)).toreadonly()  # a very large frame: copied on its own
        if self._block is not None and self._fill + n > len(self._block):
            self._rewind(shrink=False)
        block = self._block
        if block is None or self._fill + n > len(block):
            want = max(2 * len(block) if block is not None else self._peak, 2 * n)
            cap = KEEP_FIRST
            while cap < want:
                cap *= 2
            block = self._new_block(min(cap, KEEP_MAX))
        at = self._fill
        view = memoryview(block)[at:at + n]
        view[:] = payload
        self._fill = at + n
        return view.toreadonly()


class RecvBuffers:
    """The loop's socket read buffers: a read goes into one that nothing references (the
    frames of the last read that used it handled, none of their payloads kept), else into a
    new one (a connection whose frames wait for the next turn holds its buffer). At most
    ``keep`` are kept; the others are freed with their last view."""

    __slots__ = ("size", "keep", "_free", "allocated")

    def __init__(self, size: int, keep: int = 2):
        self.size, self.keep = size, keep
        self._free: list[list[Any]] = []  # [buffer, its count alone]
        self.allocated = 0

    def get(self) -> bytearray:
        """A buffer of :attr:`size` bytes nothing else references; rewrite it freely now."""
        free = self._free
        for entry in free:
            buf = entry[0]
            if unshared(buf, entry[1]):
                return buf
        buf = bytearray(self.size)
        self.allocated += 1
        if len(free) >= self.keep:
            free.pop()  # the oldest: still referenced (its views free it)
        entry = [buf, 0]
        free.insert(0, entry)
        entry[1] = _refs(buf)  # the entry and the name ``buf``, as the loop above counts
        return buf
