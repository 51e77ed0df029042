"""Fidelity audit 3, session rows, through the binding: the mock is no kinder than CANN.

Row 7b (SetConfig types by chip), 6b (R1: a refused Start before Init initialises), 7c (R3:
SetConfig while only subscriptions exist) and 20 (helper host). Each failed on the mock of
main before this change (it accepted every type, stayed OFF, accepted SetConfig).
"""

from __future__ import annotations

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
