"""Op records from operator subscription: the raw pipe layouts, the decoded batch, one record.

The library writes fixed-size ``ProfOpDesc`` records: 80 bytes in
current CANN, 72 in older releases (no ``devId``). Numeric fields are decoded in bulk with
numpy structured dtypes over the raw bytes; names and types are not in the record (the
library keeps them in a side table) and arrive as ids into the subscription's interned
string table.

What the fields mean, from CANN's sources (``mock_acl/README.md``, audit rows 11-13):

- ``start``/``end``/``duration`` are device-counter time, in ns in the code (the headers
  and docs say µs): not the host's clock. Compare them with each other, not with
  ``time.monotonic_ns()``; :attr:`aclprof.SubscriptionStats.reader_lag_ns` calibrates.
- ``device_id``: CANN leaves ``devId`` 0 on its main path (``ConstructAndUploadData``),
  so 0 means "unknown" and the decoder reports the subscription's device instead. For a
  model on device 0 that is the same answer.
- Step keypoints: CANN also writes one record per step (``aclprofGetStepTimestamp``
  start to end) named ``keypoint_op`` with type ``na``. They are marked ``kind ==
  "keypoint"`` (:class:`OpRecord`) and by the ``keypoint`` column (:class:`OpBatch`). The
  mark is decided by name AND type, as the record has nothing else to tell them apart: a
  real op literally named ``keypoint_op`` of type ``na`` would be taken for a keypoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from aclprof.binding import layout

__all__ = ["OpRecord", "OpBatch", "OP_DTYPE", "raw_dtype", "KEYPOINT_NAME", "KEYPOINT_TYPE"]

#: Name and type of CANN's step keypoint records (``config.h`` KEYPOINT_OP_NAME/TYPE).
KEYPOINT_NAME = "keypoint_op"
KEYPOINT_TYPE = "na"

#: The pipe record's dtypes (``ProfOpDesc`` of ``cdefs/aclprof_records.h``): 80 bytes, and
#: older CANN's 72 (no ``devId``). Built from the header (aclprof.binding.layout).
RAW_DTYPE_80 = layout.RAW_DTYPE_80
RAW_DTYPE_72 = layout.RAW_DTYPE_72
raw_dtype = layout.raw_dtype

#: One decoded op per element; ``op_name``/``op_type`` index :attr:`OpBatch.names`;
#: ``keypoint`` marks step keypoint records (name ``keypoint_op`` and type ``na``).
#: Fields: ``model_id``, ``op_name``, ``op_type``, ``flag``, ``thread_id``, ``device_id``
#: (uint32), ``start``, ``end``, ``duration``, ``execution_time`` (uint64), ``keypoint``
#: (bool); native-endian, packed (57 bytes). It is ``aclprof_op_row`` of
#: ``cdefs/aclprof_records.h``, the row the C decoder writes, built from that header
#: (aclprof.binding.layout): a field added there appears here.
OP_DTYPE = layout.OP_ROW_DTYPE


class OpRecord(NamedTuple):
    """One operator execution, as the library reported it (immutable).

    Times are in the library's unit (ns on the mock by default; see ``time_unit``), on the
    device's clock. ``op_name``/``op_type`` are decoded as UTF-8 with invalid bytes shown
    as ``\\xNN``; ``"?"`` means the library could not return them. ``device_id`` is the
    record's ``devId``, or the subscription's device when the library left it 0 (unknown).
    ``kind`` is ``"op"``, or ``"keypoint"`` for a step keypoint record (``keypoint_op``/
    ``na``: ``start``/``end`` are the step's, ``model_id`` the id the library stamped).
    A NamedTuple rather than a dataclass: building one is ~3x cheaper, which is most of
    the cost of iterating a subscription.
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
    kind: str = "op"


class OpBatch:
    """Records decoded from one read of the pipe, as a numpy structured array.

    ``data`` has dtype :data:`OP_DTYPE`; ``names`` is the subscription's interned string
    table (it only grows), shared by every batch of that subscription: ``names[id]``.
    ``data["keypoint"]`` marks step keypoint records; ``data[~data["keypoint"]]`` keeps
    the ops only. ``device_id`` is already resolved (never the library's "unknown" 0
    unless the subscription's device is 0).
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
            OpRecord(model_id, names[n], names[t], start, end, duration, flag, tid, dev, ex,
                     "keypoint" if kp else "op")
            for model_id, n, t, flag, tid, dev, start, end, duration, ex, kp in zip(
                d["model_id"].tolist(), d["op_name"].tolist(), d["op_type"].tolist(),
                d["flag"].tolist(), d["thread_id"].tolist(), d["device_id"].tolist(),
                d["start"].tolist(), d["end"].tolist(), d["duration"].tolist(),
                d["execution_time"].tolist(), d["keypoint"].tolist())
        ]

    def __iter__(self) -> Iterator[OpRecord]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"<aclprof.OpBatch {len(self.data)} records>"
