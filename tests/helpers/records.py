"""Records: batches in the wire layout (``RECORD_DTYPE``) for the daemon tests, and the
mock's emit log to compare with the records a subscription delivered."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from aclprof.protocol.wire import RECORD_DTYPE

__all__ = ["make_records", "Emitted", "record_key", "read_emit_log", "EmitLog", "capture_records"]


def make_records(n: int, *, model: int = 1, device: int = 0, types: tuple[int, ...] = (1, 2),
                 names: tuple[int, ...] = (3, 4), durations: Any = 1000, start: int | None = None) -> np.ndarray:
    """``n`` records cycling over (type, name) pairs; end = monotonic now (so lag is sane)."""
    r = np.zeros(n, RECORD_DTYPE)
    r["model_id"] = model
    r["device_id"] = device
    idx = np.arange(n) % len(types)
    r["op_type"] = np.asarray(types)[idx]
    r["op_name"] = np.asarray(names)[idx]
    r["duration"] = durations
    end = time.monotonic_ns() if start is None else start
    r["end"] = end
    r["start"] = r["end"] - r["duration"]
    r["thread_id"] = 7
    return r


class Emitted(NamedTuple):
    """One line of the mock's emit log (format: mock_acl/src/subscribe_log.c ``sub_log_record``)."""

    model_id: int
    op_index: int
    name_bytes: bytes
    type_bytes: bytes
    start: int
    end: int
    duration: int
    flag: int
    thread_id: int
    device_id: int
    corrupt: bool

    @property
    def name(self) -> str:
        return self.name_bytes.decode("utf-8", "backslashreplace")

    @property
    def type(self) -> str:
        return self.type_bytes.decode("utf-8", "backslashreplace")

    def key(self) -> tuple:
        """Comparable with :func:`record_key` of a delivered OpRecord."""
        return (self.model_id, self.name, self.type, self.start, self.end, self.duration,
                self.flag, self.thread_id, self.device_id)


def record_key(rec: Any) -> tuple:
    """An OpRecord as the tuple :meth:`Emitted.key` gives (execution_time is not logged)."""
    return (rec.model_id, rec.op_name, rec.op_type, rec.start, rec.end, rec.duration,
            rec.flag, rec.thread_id, rec.device_id)


def read_emit_log(path: Path) -> list[Emitted]:
    """Every record the mock emitted while the log was on, in emission order."""
    out = []
    for line in Path(path).read_text(encoding="ascii").splitlines():
        f = line.split("\t")
        assert len(f) == 11, f"malformed emit log line {line!r}"
        out.append(Emitted(int(f[0]), int(f[1]), bytes.fromhex(f[2]), bytes.fromhex(f[3]),
                           int(f[4]), int(f[5]), int(f[6]), int(f[7]), int(f[8]), int(f[9]),
                           f[10] == "1"))
    return out


class EmitLog:
    """The mock's own account of the records it emitted (``aclprof.mock.set_emit_log``)."""

    def __init__(self, path: Path):
        self.path = path

    def read(self, model_id: int | None = None) -> list[Emitted]:
        lines = read_emit_log(self.path) if self.path.exists() else []
        return [e for e in lines if model_id is None or e.model_id == model_id]


def capture_records(model: int, iterations: int, *, time_info: bool = True) -> bytes:
    """The raw op records the library writes for ``iterations`` runs of ``model``, read
    from a pipe of our own through the low-level layer; their names are NOT fetched (they
    stay in the library's table until a decoder, or the test, fetches them). Without
    ``time_info`` (times 0) the subscription asks for AI Core metrics: CANN refuses a
    subscription with neither."""
    import os

    from aclprof import mock
    from aclprof.binding import lowlevel
    from aclprof.binding.enums import AicoreMetrics

    r, w = os.pipe()
    cell = lowlevel.FdCell(w)
    metrics = AicoreMetrics.NONE if time_info else AicoreMetrics.PIPE_UTILIZATION
    config = lowlevel.create_subscribe_config(time_info, metrics, cell)
    try:
        lowlevel.model_subscribe(model, config)
        mock.execute(model, iterations)
        lowlevel.model_unsubscribe(model)  # flushes, closes w and writes -1 into the cell
        assert cell.value == -1
        parts = []
        while chunk := os.read(r, 1 << 16):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(r)
        config.close()
        if cell.value >= 0:
            os.close(cell.value)
