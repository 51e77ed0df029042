"""Fidelity audit 3, msproftx rows through the binding, in the 2025 era (R8-R11).

The 2025 library dereferences ``aclprofRangeStart``'s NULL range id (R9: a crash, which the
mock now reproduces with abort()), so every binding path to RangeStart runs here in that era:
any of them passing NULL would kill the test process. MarkEx: 127 bytes is the limit every
release accepts (R11); the binding refuses more before C, naming the limit.
"""

from __future__ import annotations

import pytest

import aclprof
from aclprof import AicoreMetrics, DataType, mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library
from aclprof.compat.acl import prof as compat_prof


@pytest.fixture
def tx_2025(tmp_path):
    mock.set_cann_era(2025)
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | DataType.MSPROFTX)
    ll.init(tmp_path / "p")
    ll.start(config)
    yield
    ll.stop(config)
    ll.finalize()


def test_range_start_never_gets_a_null_range_id(tx_2025):
    stamp = ll.create_stamp()
    ll.range_stop(ll.range_start(stamp))
    stamp.close()
    handle = compat_prof.create_stamp()
    range_id, ret = compat_prof.range_start(handle)
    assert ret == 0 and compat_prof.range_stop(range_id) == 0
    assert compat_prof.range_start(0)[1] == -1  # NULL stamp: RT0 gives -1 (R8), no crash
    compat_prof.destroy_stamp(handle)


def test_mark_ex_limit_is_127_bytes(tx_2025):
    ll.rt_set_device(0)
    stream = ll.rt_create_stream()
    ll.mark_ex("x" * 127, stream)
    with pytest.raises(ValueError, match=r"aclprofMarkEx: .*128 bytes.*limit is 127 bytes"):
        ll.mark_ex("x" * 128, stream)
    with pytest.raises(ValueError, match="limit is 127"):
        ll.mark_ex("é" * 64, stream)  # 128 bytes encoded: the limit is in bytes
    # what the 2025 library itself answers, which the binding spares its caller
    assert get_library().fn("aclprofMarkEx")(b"x" * 128, 128, stream._get()) == -1
    stream.close()
    ll.rt_reset_device(0)
    assert aclprof.binding.lowlevel.MAX_MARK_EX_BYTES == 127
