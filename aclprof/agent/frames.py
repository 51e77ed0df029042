"""The agent's outgoing bytes: one reusable buffer that frames are written into in place.

"One record format, one copy per hop": a BATCH frame's header is reserved, the records
are converted straight into the buffer behind it (:mod:`aclprof.agent.names`), and the
header is filled in when the frame closes; the pending bytes go to ``socket.send`` as a
``memoryview``. Nothing is concatenated per batch and the buffer is reused (it only
grows, for a frame larger than any before).
"""

from __future__ import annotations

import numpy as np

from aclprof.protocol import wire

__all__ = ["FrameBuffer"]

_REC = wire.RECORD_DTYPE.itemsize
_HDR = wire.HEADER.size


class FrameBuffer:
    """Pending frames: bytes ``[start, end)`` of a numpy byte array (numpy, not bytearray:
    record views into it may be alive, and a bytearray with exported views cannot be
    resized). ``records``/``loss``/``frames`` count what the pending bytes carry (BATCH
    records, LOSS ``dropped``, whole frames) for the connection's accounting."""

    def __init__(self, capacity: int = 1 << 16):
        self._buf = np.empty(capacity, np.uint8)
        self._mv = self._buf.data
        self.start = self.end = 0
        self.records = 0
        self.loss = 0
        self.frames = 0
        self._batch_at = -1  # offset of the open BATCH frame's header, -1 if none
        self._batch_n = 0

    def __len__(self) -> int:
        return self.end - self.start

    def __bool__(self) -> bool:
        return self.end > self.start

    def _reserve(self, n: int) -> int:
        """Room for ``n`` more bytes at the end; returns where they go."""
        end = self.end
        if end + n > len(self._buf):
            pending = end - self.start
            grown = np.empty(max(2 * len(self._buf), pending + n), np.uint8)
            grown[:pending] = self._buf[self.start:end]
            if self._batch_at >= 0:
                self._batch_at -= self.start
            self._buf, self._mv = grown, grown.data
            self.start, end = 0, pending
            self.end = end
        return end

    def append(self, frame: bytes, records: int = 0, loss: int = 0) -> None:
        """A whole encoded frame (control frames: WATCH, NAMES, LOSS...); closes an open batch."""
        self.end_batch()
        at = self._reserve(len(frame))
        self._mv[at:at + len(frame)] = frame
        self.end = at + len(frame)
        self.records += records
        self.loss += loss
        self.frames += 1

    @property
    def buf(self) -> np.ndarray:
        """The whole byte array (replaced when it grows: take it after :meth:`reserve_records`)."""
        return self._buf

    def reserve_records(self, n: int) -> int:
        """Room for ``n`` more records of the open BATCH frame (and for its header if none
        is open); returns the byte offset of :attr:`buf` where they go. Nothing is added
        until :meth:`commit_records`: a caller that must first append another frame (the
        NAMES the records need) reserves again afterwards."""
        hdr = _HDR if self._batch_at < 0 else 0
        at = self._reserve(hdr + n * _REC)
        return at + hdr

    def commit_records(self, n: int) -> None:
        """The ``n`` records at the offset :meth:`reserve_records` returned are written."""
        if self._batch_at < 0:
            self._batch_at = self.end
            self.end += _HDR
            self._batch_n = 0
        self.end += n * _REC
        self._batch_n += n

    def end_batch(self) -> None:
        """Close the open BATCH frame: write its header now that its length is known."""
        if self._batch_at < 0:
            return
        at, n = self._batch_at, self._batch_n
        self._mv[at:at + _HDR] = wire.header(wire.Kind.BATCH, n * _REC)
        self._batch_at = -1
        self.records += n
        self.frames += 1

    def pending(self) -> memoryview:
        """The bytes still to write (valid until the next change to the buffer)."""
        return self._mv[self.start:self.end]

    def consume(self, n: int) -> None:
        """``n`` pending bytes were written."""
        self.start += n

    def clear(self) -> None:
        """Forget the pending bytes and what they carry (sent, or lost with the connection)."""
        self.start = self.end = 0
        self.records = self.loss = self.frames = 0
        self._batch_at = -1
        self._batch_n = 0
