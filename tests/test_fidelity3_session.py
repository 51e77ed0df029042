"""Fidelity audit 3, session rows, through the binding: the mock is no kinder than CANN.

Row 7b (SetConfig types by chip), 6b (R1: a refused Start before Init initialises), 7c (R3:
SetConfig while only subscriptions exist) and 20 (helper host). Each failed on the mock of
main before this change (it accepted every type, stayed OFF, accepted SetConfig).
"""

from __future__ import annotations

import os

import pytest

import aclprof
from aclprof import ConfigType, mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library


def test_910b_is_the_default_chip_and_any_is_selectable(tmp_path, monkeypatch):
    ll.init(tmp_path)
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.set_config(ConfigType.SYS_CPU_FREQ, "10")  # a valid value: the chip refuses the type
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.set_config(ConfigType.LOW_POWER_FREQ, "10")
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.set_config(ConfigType.OPTYPE, "MatMul")
    with pytest.raises(aclprof.InvalidParamError):
        ll.set_config(ConfigType.NTS_METRICS, "PipeUtilization")
    mock.set_chip("any")
    ll.set_config(ConfigType.SYS_CPU_FREQ, "10")
    ll.set_config(ConfigType.NTS_METRICS, "PipeUtilization")
    with pytest.raises(ValueError, match="chip"):
        mock.set_chip("910")
    ll.finalize()
    monkeypatch.setenv("ACLMOCK_CHIP", "any")
    mock.reset()
    ll.set_config(ConfigType.LOW_POWER_FREQ, "10")
    monkeypatch.delenv("ACLMOCK_CHIP")
    mock.reset()
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.set_config(ConfigType.LOW_POWER_FREQ, "10")


def test_refused_start_before_init_leaves_it_initialised(tmp_path):
    """R1: the 2026 profapi layer auto-initialises before the preCheck refuses the config."""
    mock.set_cann_era(2026)
    ll.set_config(ConfigType.PATH, str(tmp_path))
    lib = get_library()
    devices = lib.ffi.new("uint32_t[1]", [0])
    # a bit outside PROF_SWITCH_SUPPORT, which the binding itself would refuse before C
    cfg = lib.fn("aclprofCreateConfig")(devices, 1, 255, lib.ffi.NULL, 1 << 40)
    assert cfg != lib.ffi.NULL
    try:
        assert lib.fn("aclprofStart")(cfg) == 200007
        assert mock.mode() == "API_CTRL"
        with pytest.raises(aclprof.RepeatInitializeError):
            ll.init(tmp_path)
        ll.finalize()
    finally:
        lib.fn("aclprofDestroyConfig")(cfg)


def test_set_config_while_subscribed_is_refused():
    model = mock.load_model([{"name": "conv", "type": "Conv2D", "duration_ns": 1000}])
    with aclprof.subscribe(model):
        assert mock.mode() == "SUBSCRIBE"
        with pytest.raises(aclprof.InvalidProfilingConfigError):
            ll.set_config(ConfigType.STORAGE_LIMIT, "500MB")
    mock.unload(model)


def test_compat_keeps_the_int_of_a_refused_subscribe_alive():
    """R4 (row 18b): CANN keeps the caller's ``int*`` of a subscribe refused with 100010 on an
    idle device (it inserted the model as subscribed before the host check failed): a retry
    gives 148046, and the library writes -1 into the int when the model is unsubscribed.
    aclprof.compat.acl's decision: a destroyed subscribe config whose cell does not hold -1
    is retired, never freed, so that write lands in live memory; the caller unsubscribes the
    model as if the subscribe had worked. (aclprof.subscribe cannot reach this: its
    subscriptions share one config.)"""
    from aclprof.compat.acl import prof

    first = mock.load_model([{"name": "a", "type": "A", "duration_ns": 100}], device=0)
    second = mock.load_model([{"name": "b", "type": "B", "duration_ns": 100}], device=1)
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        cfg1 = prof.create_subscribe_config(1, int(aclprof.AicoreMetrics.NONE), w1)
        cfg2 = prof.create_subscribe_config(1, int(aclprof.AicoreMetrics.PIPE_UTILIZATION), w2)
        assert prof.model_subscribe(first, cfg1) == 0
        assert prof.model_subscribe(second, cfg2) == 100010
        retired = len(prof._retired_cells)
        assert prof.destroy_subscribe_config(cfg2) == 0
        assert len(prof._retired_cells) == retired + 1  # kept: CANN still holds the int*
        cell = prof._retired_cells[-1]
        assert cell.value == w2
        assert prof.model_subscribe(second, cfg1) == 148046  # half subscribed
        assert prof.model_unsubscribe(second) == 0
        assert cell.value == -1  # written by the library, into memory that is still ours
        assert prof.model_unsubscribe(first) == 0
        assert prof.destroy_subscribe_config(cfg1) == 0
    finally:
        os.close(r1)
        os.close(r2)
    mock.unload(first)
    mock.unload(second)


def test_subscribe_refused_by_another_components_config_keeps_its_cell():
    """R4 through aclprof.subscribe: its own subscriptions share one config, but another
    component of the process (here compat.acl) may have subscribed with other metrics. The
    library then refuses with 100010 after keeping the model subscribed on its idle device
    with the Subscription's int*: the cell gets -1 (the library drops the model's records)
    and outlives the Subscription, so no later read or -1 write of the library hits freed
    memory; the model stays held by the library (148046)."""
    from aclprof.api.subscription.lifetime import _orphaned_cells
    from aclprof.compat.acl import prof

    other = mock.load_model([{"name": "a", "type": "A", "duration_ns": 100}], device=0)
    model = mock.load_model([{"name": "b", "type": "B", "duration_ns": 100}], device=1)
    r, w = os.pipe()
    before = len(_orphaned_cells)
    try:
        cfg = prof.create_subscribe_config(1, int(aclprof.AicoreMetrics.PIPE_UTILIZATION), w)
        assert prof.model_subscribe(other, cfg) == 0
        with pytest.raises(aclprof.InvalidProfilingConfigError):
            aclprof.subscribe(model, device=1)
        assert len(_orphaned_cells) == before + 1 and _orphaned_cells[-1].value == -1
        dropped = mock.stats()["recordsDropped"]
        mock.execute(model, 3)
        mock.wait_writer_idle()
        assert mock.stats()["recordsDropped"] == dropped + 3  # *fd < 0: dropped, not written
        with pytest.raises(aclprof.RepeatSubscribeError):
            aclprof.subscribe(model, device=1)
        assert prof.model_unsubscribe(model) == 0  # the half subscription ends
        assert prof.model_unsubscribe(other) == 0
        assert prof.destroy_subscribe_config(cfg) == 0
    finally:
        os.close(r)
        del _orphaned_cells[before:]
    mock.unload(model)
    mock.unload(other)
