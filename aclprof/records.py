"""Op records from operator subscription: the raw pipe layouts, the decoded batch, one record.

The library writes fixed-size ``ProfOpDesc`` records (reference section 4): 80 bytes in
current CANN, 72 in older releases (no ``devId``). Numeric fields are decoded in bulk with
numpy structured dtypes over the raw bytes; names and types are not in the record (the
library keeps them in a side table) and arrive as ids into the subscription's interned
string table.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import numpy as np

__all__ = ["OpRecord", "OpBatch", "OP_DTYPE", "raw_dtype"]

_RAW_COMMON = [
    ("signature", "=u4"),
    ("modelId", "=u4"),
    ("flag", "=u4"),
    ("threadId", "=u4"),
    ("opIndex", "=u8"),
    ("duration", "=u8"),
    ("start", "=u8"),
    ("end", "=u8"),
    ("executionTime", "=u8"),
    ("cubeFops", "=u8"),
    ("vectorFops", "=u8"),
]
RAW_DTYPE_80 = np.dtype(_RAW_COMMON + [("devId", "=u4"), ("_tail", "=u4")])
RAW_DTYPE_72 = np.dtype(_RAW_COMMON)
assert RAW_DTYPE_80.itemsize == 80 and RAW_DTYPE_72.itemsize == 72


def raw_dtype(record_size: int) -> np.dtype | None:
    """The structured dtype of a pipe record of ``record_size`` bytes, or None if unknown."""
    return {80: RAW_DTYPE_80, 72: RAW_DTYPE_72}.get(record_size)


#: One decoded op per element; ``op_name``/``op_type`` index :attr:`OpBatch.names`.
OP_DTYPE = np.dtype([
    ("model_id", "u4"),
    ("op_name", "u4"),
    ("op_type", "u4"),
    ("flag", "u4"),
    ("thread_id", "u4"),
    ("device_id", "u4"),
    ("start", "u8"),
    ("end", "u8"),
    ("duration", "u8"),
    ("execution_time", "u8"),
])


class OpRecord(NamedTuple):
    """One operator execution, as the library reported it (immutable).

    Times are in the library's unit (ns on the mock by default; see ``time_unit``).
    ``op_name``/``op_type`` are decoded as UTF-8 with invalid bytes shown as ``\\xNN``;
    ``"?"`` means the library could not return them. A NamedTuple rather than a dataclass:
    building one is ~3x cheaper, which is most of the cost of iterating a subscription.
    """

    model_id: int
    op_name: str
    op_type: str
    start: int
    end: int
    duration: int
    flag: int
    thread_id: int
    device_id: int
    execution_time: int


class OpBatch:
    """Records decoded from one read of the pipe, as a numpy structured array.

    ``data`` has dtype :data:`OP_DTYPE`; ``names`` is the subscription's interned string
    table (it only grows), shared by every batch of that subscription: ``names[id]``.
    """

    __slots__ = ("data", "names")

    def __init__(self, data: np.ndarray, names: Sequence[str]):
        self.data = data
        self.names = names

    def __len__(self) -> int:
        return len(self.data)

    def op_names(self) -> list[str]:
        names = self.names
        return [names[i] for i in self.data["op_name"].tolist()]

    def op_types(self) -> list[str]:
        names = self.names
        return [names[i] for i in self.data["op_type"].tolist()]

    def records(self) -> list[OpRecord]:
        """The batch as :class:`OpRecord` objects."""
        names = self.names
        d = self.data
        return [
            OpRecord(model_id, names[n], names[t], start, end, duration, flag, tid, dev, ex)
            for model_id, n, t, flag, tid, dev, start, end, duration, ex in zip(
                d["model_id"].tolist(), d["op_name"].tolist(), d["op_type"].tolist(),
                d["flag"].tolist(), d["thread_id"].tolist(), d["device_id"].tolist(),
                d["start"].tolist(), d["end"].tolist(), d["duration"].tolist(),
                d["execution_time"].tolist())
        ]

    def __iter__(self) -> Iterator[OpRecord]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"<aclprof.OpBatch {len(self.data)} records>"
