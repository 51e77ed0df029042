"""Issue 12: the subscription's reader takes the GIL only in short slices.

Waiting for the pipe, reading it and decoding records run in C with the GIL released
(``aclprof_read_pipe``, ``aclprof_decode_ops``); a trickle of records is gathered for up to
``COALESCE_NS`` so that Python is woken about once per interval, not once per record the
library writes. Speed itself is measured by tests/bench/bench_distortion.py; these tests
check the observable behaviour behind it.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time

import numpy as np
import pytest

import aclprof
from aclprof import mock
from aclprof.api.records import OP_DTYPE
from aclprof.api.subscription.reader import COALESCE_NS
from aclprof.binding.opdecode import READ_EOF, READ_WOKEN, NameTable, read_pipe

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_trickle_of_records_arrives_in_few_large_batches():
    """100 k records/s, as the issue's service: before, every few records the library wrote
    woke the reader, which took the GIL for numpy work and a callback each time."""
    ops = [{"name": f"op{i}", "type": "MatMulV2", "duration_ns": 10_000} for i in range(1000)]
    model = mock.load_model(ops)
    sizes: list[int] = []
    mock.set_realtime(True)
    try:
        sub = aclprof.subscribe(model, batch_callback=lambda b: sizes.append(len(b)))
        mock.execute(model, 10)  # 10 x 10 ms steps, 10,000 records
        mock.wait_writer_idle(30)
        sub.close()
    finally:
        mock.set_realtime(False)
        mock.unload(model)
    st = sub.stats
    assert sum(sizes) == st.delivered == 10_000 and st.dropped == 0
    # COALESCE_NS of records (~200) per batch; a quarter of that leaves room for the step
    # boundaries, and a loaded machine only makes the batches larger. Before: mean 10-13.
    min_mean = 100_000 * COALESCE_NS // 1_000_000_000 // 4
    assert len(sizes) <= 10_000 // min_mean, f"{len(sizes)} batches, mean {10_000 / len(sizes):.0f}"


def test_read_pipe_gathers_a_trickle_with_the_gil_released():
    r, w = os.pipe()
    wake_r, wake_w = os.pipe()
    try:
        buf = bytearray(4096)
        os.write(w, b"a" * 80)
        result: list[tuple[int, int]] = []
        reader = threading.Thread(target=lambda: result.append(
            read_pipe(r, wake_r, buf, 0, len(buf), 300_000_000)))
        reader.start()
        time.sleep(0.02)
        # Python runs here while the reader waits inside C: it does not hold the GIL.
        os.write(w, b"b" * 80)
        reader.join(5)
        assert result == [(160, 0)]
        assert bytes(buf[:160]) == b"a" * 80 + b"b" * 80
    finally:
        for fd in (r, w, wake_r, wake_w):
            os.close(fd)


def test_read_pipe_reports_eof_after_the_last_bytes_and_a_wake():
    r, w = os.pipe()
    wake_r, wake_w = os.pipe()
    try:
        buf = bytearray(1024)
        os.write(w, b"x" * 100)
        os.close(w)
        w = -1
        n, flags = read_pipe(r, wake_r, buf, 10, 1024, 1_000_000)
        assert (n, flags) == (100, READ_EOF) and bytes(buf[10:110]) == b"x" * 100
        assert read_pipe(r, wake_r, buf, 0, 1024, 0) == (0, READ_EOF)
    finally:
        for fd in (r, w, wake_r, wake_w):
            if fd >= 0:
                os.close(fd)
    r, w = os.pipe()
    wake_r, wake_w = os.pipe()
    try:
        os.write(wake_w, b"!")
        assert read_pipe(r, wake_r, bytearray(64), 0, 64, 0) == (0, READ_WOKEN)
    finally:
        for fd in (r, w, wake_r, wake_w):
            os.close(fd)


def test_read_pipe_errors_name_the_call_and_errno():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError, match=r"aclprof_read_pipe\(fd=") as info:
        read_pipe(r, -1, bytearray(64), 0, 64, 0)
    assert info.value.errno == errno.EBADF
    with pytest.raises(ValueError, match="read_pipe: bad range"):
        read_pipe(0, -1, bytearray(64), 0, 65, 0)


def test_decode_ops_rejects_a_record_size_it_has_no_layout_for():
    table = NameTable(16)
    out = np.empty(1, OP_DTYPE)
    with pytest.raises(ValueError, match="record size 96 is not 80 or 72"):
        table.decode_ops(bytearray(96), 1, 96, True, 0, out, table.new_counts())


def test_subscribing_leaves_the_switch_interval_alone():
    before = sys.getswitchinterval()
    model = mock.load_model([{"name": "a", "type": "Add", "duration_ns": 100}])
    sub = aclprof.subscribe(model, batch_callback=lambda b: None)
    mock.execute(model, 5)
    sub.close()
    mock.unload(model)
    assert sys.getswitchinterval() == before


def test_read_ops_rejects_a_bad_size_or_range_before_reading():
    table = NameTable(16)
    out = np.empty(4, OP_DTYPE)
    counts = table.new_counts()
    with pytest.raises(ValueError, match="read_ops: record size 96"):
        table.read_ops(0, -1, bytearray(384), 0, 384, 96, 0, True, 0, out, counts)
    with pytest.raises(ValueError, match="filled 80, room 80"):
        table.read_ops(0, -1, bytearray(320), 80, 80, 80, 0, True, 0, out, counts)


def test_batches_own_their_rows():
    """A batch's rows are copied out of the decoder's reused scratch: a later batch does not
    overwrite an earlier one a consumer still holds."""
    model = mock.load_model([{"name": f"op{i}", "type": "Add", "duration_ns": 100} for i in range(3)])
    sub = aclprof.subscribe(model, read_records=2)
    mock.execute(model, 4)
    sub.close()
    batches = list(sub.batches())
    mock.unload(model)
    assert sum(len(b) for b in batches) == 12
    names = [n for b in batches for n in b.op_names()]
    assert names == [f"op{i}" for _ in range(4) for i in range(3)]
    assert all(b.data.base is None or b.data.base.nbytes == b.data.nbytes for b in batches)
