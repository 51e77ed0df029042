"""The mock's switches for request attribution (issue 25): the executing thread stamped as
a record's ``threadId``, and a drifting device clock."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import aclprof
from aclprof import mock

pytestmark = pytest.mark.usefixtures("no_leaks")

OPS = [{"name": "mm", "type": "MatMul", "duration_ns": 1_000_000}]


def _collect(sub, n: int) -> np.ndarray:
    deadline = time.monotonic() + 10
    got: list[np.ndarray] = []
    while sum(len(a) for a in got) < n and time.monotonic() < deadline:
        got.extend(b.data for b in sub.batches(timeout=0.2))
    return np.concatenate(got) if got else np.zeros(0)


def test_records_carry_the_executing_threads_tid_when_switched_on():
    mock.set_stamp_thread(True)
    model = mock.load_model(OPS)
    tids: list[int] = []
    with aclprof.subscribe(model) as sub:
        def run() -> None:
            tids.append(threading.get_native_id())
            mock.execute(model, 3)
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        data = _collect(sub, 6)
    mock.unload(model)
    assert len(data) == 6
    assert sorted(data["thread_id"].tolist()) == sorted(tids * 3)


def test_records_carry_the_model_files_thread_id_by_default():
    model = mock.load_model([dict(OPS[0], thread_id=4242)])
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 2)
        data = _collect(sub, 2)
    mock.unload(model)
    assert data["thread_id"].tolist() == [4242, 4242]


def test_a_drifting_device_clock_stretches_device_durations():
    mock.set_device_clock_drift(1000)  # 1000 ppm: a 1 ms op lasts 1.001 ms on the device
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 4)
        data = _collect(sub, 4)
    mock.unload(model)
    durations = (data["end"] - data["start"]).astype(np.int64)
    assert np.all(np.abs(durations - 1_001_000) <= 1)


def test_drift_is_checked_and_reset():
    with pytest.raises(ValueError, match="set_device_clock_drift"):
        mock.set_device_clock_drift(1001)
    with pytest.raises(ValueError, match="set_device_clock_drift"):
        mock.set_device_clock_drift(True)  # type: ignore[arg-type]
    mock.set_device_clock_drift(-1000)
    mock.reset()
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 2)
        data = _collect(sub, 2)
    mock.unload(model)
    assert ((data["end"] - data["start"]).astype(np.int64) == 1_000_000).all()
