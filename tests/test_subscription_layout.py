"""Audit row 14: the ProfOpDesc layout is internal to CANN; the binding picks it by size
and checks it once per subscription against the library's getters.

``aclprof.mock.set_op_desc_layout("shuffled")`` keeps the record size but moves modelId and
the three times (the mock's getters follow, as CANN's would)."""

from __future__ import annotations

import pytest

import aclprof
from aclprof import mock
from aclprof.api import subscription

pytestmark = pytest.mark.usefixtures("no_leaks")

OPS = [
    {"name": "conv", "type": "Conv2D", "duration_ns": 2000, "jitter": 100},
    {"name": "relu", "type": "Relu", "duration_ns": 300},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 1500, "flag": 1},
]


def core(rec) -> tuple:
    """The fields both decode paths deliver (the getter path has no thread id)."""
    return (rec.model_id, rec.op_name, rec.op_type, rec.start, rec.end, rec.duration, rec.flag)


def emitted_core(e) -> tuple:
    return (e.model_id, e.name, e.type, e.start, e.end, e.duration, e.flag)


@pytest.mark.parametrize("size", [80, 72])
def test_shuffled_layout_falls_back_to_the_getters(emit_log, size, monkeypatch):
    warnings = []
    real_log = subscription.decoder._log

    class Recorder:
        def warning(self, event, **fields):
            warnings.append((event, fields))
            real_log.warning(event, **fields)

        def __getattr__(self, name):
            return getattr(real_log, name)

    monkeypatch.setattr(subscription.decoder, "_log", Recorder())
    mock.set_op_desc_size(size)
    mock.set_op_desc_layout("shuffled")
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=5)
    mock.execute(model, 20)
    sub.close()
    got = list(sub)
    emitted = emit_log.read()
    assert len(emitted) == 60
    assert [core(r) for r in got] == [emitted_core(e) for e in emitted]
    st = sub.stats
    assert st.layout_mismatch is True
    assert st.records_decoded_by_getters == 60 == st.records_decoded
    assert st.dropped == 0
    assert mock.stats()["nameTableEntries"] == 0  # every name fetched once, none lost
    layout = [fields for event, fields in warnings if "layout differs" in event]
    assert len(layout) == 1  # once per subscription, not per batch
    assert layout[0]["fields"] == ["duration", "end", "model_id", "start"]
    assert layout[0]["by_getter"]["model_id"] == model


def test_shuffled_layout_with_corrupt_first_records(emit_log):
    """The check skips records whose signature is bad (the getters reject them)."""
    mock.set_op_desc_layout("shuffled")
    mock.set_corrupt_every(1)
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=3)
    mock.execute(model, 2)  # all corrupt: nothing to check against yet
    mock.wait_writer_idle()
    mock.set_corrupt_every(0)
    mock.execute(model, 3)
    sub.close()
    got = list(sub)
    good = [e for e in emit_log.read() if not e.corrupt]
    assert [core(r) for r in got] == [emitted_core(e) for e in good]
    assert sub.stats.layout_mismatch is True
    assert sub.stats.dropped_corrupt == 6


def test_standard_layout_uses_the_numpy_path(emit_log):
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 20)
    got = list(sub)
    assert [core(r) for r in got] == [emitted_core(e) for e in emit_log.read()]
    assert sub.stats.layout_mismatch is False
    assert sub.stats.records_decoded_by_getters == 0
    assert sub.stats.records_decoded == 60


def test_mock_layout_switch_is_validated_and_reset():
    with pytest.raises(ValueError):
        mock.set_op_desc_layout("rotated")
    mock.set_op_desc_layout("shuffled")
    mock.reset()
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 1)
    assert sub.stats.layout_mismatch is False
