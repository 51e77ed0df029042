"""aclprof.api.records.OpBatch's accessors, field by field (issue 13: mutants of records.py
that survived the decoder suites: op_names/op_types/__iter__ were never called there, and
no test looked at ``kind`` of both an op and a keypoint in one batch)."""

from __future__ import annotations

import numpy as np

from aclprof.api.records import OP_DTYPE, OpBatch, OpRecord, raw_dtype

NAMES = ["conv1", "Conv2D", "keypoint_op", "na"]


def sample() -> OpBatch:
    data = np.zeros(2, dtype=OP_DTYPE)
    data[0] = (7, 0, 1, 3, 11, 2, 100, 150, 50, 40, False)
    data[1] = (8, 2, 3, 0, 12, 1, 200, 260, 60, 0, True)
    return OpBatch(data, NAMES)


def test_records_every_field_and_kind():
    assert sample().records() == [
        OpRecord(model_id=7, op_name="conv1", op_type="Conv2D", start=100, end=150, duration=50, flag=3,
                 thread_id=11, device_id=2, execution_time=40, kind="op"),
        OpRecord(model_id=8, op_name="keypoint_op", op_type="na", start=200, end=260, duration=60, flag=0,
                 thread_id=12, device_id=1, execution_time=0, kind="keypoint"),
    ]


def test_iteration_gives_the_records():
    b = sample()
    assert list(b) == b.records() and len(b) == 2


def test_op_names_and_types():
    b = sample()
    assert b.op_names() == ["conv1", "keypoint_op"]
    assert b.op_types() == ["Conv2D", "na"]
    assert repr(b) == "<aclprof.OpBatch 2 records>"


def test_raw_dtype_by_size():
    assert raw_dtype(80).itemsize == 80 and "devId" in raw_dtype(80).names
    assert raw_dtype(72).itemsize == 72 and "devId" not in raw_dtype(72).names
    assert raw_dtype(64) is None
