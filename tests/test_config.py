"""Configuration validation: aclprofCreateConfig's device rules (Python first, then the mock
driver's device count), the checks at Start and Stop, and aclprofSetConfig's value ranges
in Python (validate_option) and in C (lowlevel.set_config), down to what the device saw."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aclprof
from aclprof import AicoreMetrics, ConfigType, DataType, mock
from aclprof.api.session import validate_option
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library

PROF_AICPU_MODEL = 1 << 62  # internal bit CreateConfig adds (reference 3.2)

known_masks = st.sets(st.sampled_from(list(DataType)), min_size=1).map(
    lambda ms: DataType(sum(int(m) for m in ms)))


def _assert_fault_still_armed() -> None:
    """The fault armed on aclprofCreateConfig fires now: so the call before never reached C."""
    with pytest.raises(aclprof.InvalidParamError):
        ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)


# ---- aclprofCreateConfig ---------------------------------------------------------------

@settings(max_examples=200)
@given(devices=st.lists(st.integers(min_value=-3, max_value=70), max_size=12),
       data_types=known_masks, count=st.integers(min_value=1, max_value=64))
def test_create_config_device_rules(devices, data_types, count):
    mock.reset()
    mock.set_device_count(count)
    python_rejects = (any(not 0 <= d <= 63 for d in devices) or len(set(devices)) != len(devices)
                      or (not devices and not data_types & DataType.MSPROFTX))
    if python_rejects:
        mock.fail_next("aclprofCreateConfig", 1, 500001)
        with pytest.raises(ValueError) as info:
            ll.create_config(devices, AicoreMetrics.NONE, data_types)
        assert not isinstance(info.value, aclprof.AclError), "must be rejected before C"
        _assert_fault_still_armed()
        return
    if any(d >= count for d in devices):
        with pytest.raises(aclprof.InvalidParamError) as info:
            ll.create_config(devices, AicoreMetrics.NONE, data_types)
        assert info.value.code == 100000 and info.value.function == "aclprofCreateConfig"
        assert f"has {count} device(s)" in str(info.value)
        assert str(min(d for d in devices if d >= count)) in str(info.value)
        return
    config = ll.create_config(devices, AicoreMetrics.NONE, data_types)
    try:
        assert config.devices == tuple(devices)
        assert config.data_types == data_types
        assert config.aicore_metrics is AicoreMetrics.NONE
    finally:
        config.close()
    assert config.closed


@pytest.mark.parametrize("devices, exc", [
    ([0, "1"], TypeError), ([True], TypeError), ([0.0], TypeError), ("01", TypeError),
    (0, TypeError), (None, TypeError), ([-1], ValueError), ([64], ValueError), ([3, 3], ValueError),
])
def test_create_config_bad_device_arguments(devices, exc):
    mock.fail_next("aclprofCreateConfig", 1, 500001)
    with pytest.raises(exc):
        ll.create_config(devices, AicoreMetrics.NONE, DataType.ACL_API)
    _assert_fault_still_armed()


def test_create_config_bad_metrics_and_types():
    with pytest.raises(ValueError):
        ll.create_config((0,), 9, DataType.ACL_API)
    with pytest.raises(ValueError, match="0x400"):
        ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | 0x400)
    with pytest.raises(ValueError):
        ll.create_config((0,), AicoreMetrics.NONE, 0)
    with pytest.raises(ValueError, match="MSPROFTX"):
        ll.create_config((), AicoreMetrics.NONE, DataType.ACL_API)
    # No devices is fine with msproftx only.
    ll.create_config((), AicoreMetrics.NONE, DataType.MSPROFTX).close()


def test_device_count_reaches_c_and_the_message():
    mock.set_device_count(2)
    ll.create_config((0, 1), AicoreMetrics.NONE, DataType.ACL_API).close()
    with pytest.raises(aclprof.InvalidParamError, match=r"devices \[2\] do not exist: this host has 2 device"):
        ll.create_config((0, 2), AicoreMetrics.NONE, DataType.ACL_API)
    mock.set_device_count(64)
    ll.create_config(range(64), AicoreMetrics.NONE, DataType.ACL_API).close()
    assert ll.rt_get_device_count() == 64


@pytest.mark.parametrize("count", [0, 65, 1000])
def test_set_device_count_range(count):
    with pytest.raises(ValueError):
        mock.set_device_count(count)
    assert ll.rt_get_device_count() == 8  # unchanged default


def test_destroy_config_twice_is_harmless():
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    ll.destroy_config(config)
    ll.destroy_config(config)  # idempotent close: C is called once
    with pytest.raises(aclprof.HandleClosedError):
        ll.start(config)


# ---- checks at Start and Stop ------------------------------------------------------------

def _raw_config(devices, data_types, metrics=AicoreMetrics.NONE) -> ll.ProfConfig:
    """A config made by the C function directly, bypassing Python's validation."""
    lib = get_library()
    ids = lib.ffi.new("uint32_t[]", list(devices))
    ptr = lib.fn("aclprofCreateConfig")(ids, len(devices), int(metrics), lib.ffi.NULL, data_types)
    assert ptr != lib.ffi.NULL
    config = ll.ProfConfig(ptr, ll._release_config)
    config.devices, config.data_types, config.aicore_metrics = tuple(devices), data_types, metrics
    return config


@pytest.mark.parametrize("bit", [0x400, 1 << 40, 1 << 63])
def test_unknown_bit_at_start_is_modules_unsupported(tmp_path, bit, list_prof_dirs):
    # Unreachable through aclprof's public API: create_config rejects unknown bits in
    # Python. Only a config made by the raw C function can carry one to aclprofStart.
    with pytest.raises(ValueError):
        ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | bit)
    config = _raw_config((0,), DataType.ACL_API | bit)
    ll.init(tmp_path / "p")
    with pytest.raises(aclprof.ModulesUnsupportedError) as info:
        ll.start(config)
    assert info.value.code == 200007 and info.value.function == "aclprofStart"
    assert mock.mode() == "API_CTRL"
    assert list_prof_dirs(tmp_path / "p") == []


def test_internal_aicpu_model_bit_is_accepted_by_c_but_not_by_python(tmp_path, list_prof_dirs, device_config):
    # PROF_AICPU_MODEL is in PROF_SWITCH_SUPPORT but not in the public header: aclprof
    # rejects it (it validates against acl_prof.h), the library accepts it.
    with pytest.raises(ValueError):
        ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | PROF_AICPU_MODEL)
    config = _raw_config((0,), DataType.ACL_API | PROF_AICPU_MODEL)
    ll.init(tmp_path / "p")
    ll.start(config)
    ll.stop(config)
    ll.finalize()
    (prof,) = list_prof_dirs(tmp_path / "p")
    seen = device_config(prof, 0)
    assert seen["dataTypeConfig"] == int(DataType.ACL_API | PROF_AICPU_MODEL)
    assert seen["dataTypeConfigStored"] == int(DataType.ACL_API | PROF_AICPU_MODEL)


def test_zero_data_types_at_start_is_invalid_param(tmp_path):
    config = _raw_config((0,), 0)  # CreateConfig does not check the bits; Start does
    ll.init(tmp_path / "p")
    with pytest.raises(aclprof.InvalidParamError) as info:
        ll.start(config)
    assert info.value.function == "aclprofStart"


def test_bad_aicore_metrics_at_start_is_invalid_param(tmp_path, list_prof_dirs, device_config):
    config = _raw_config((0,), DataType.AICORE_METRICS, metrics=9)
    ll.init(tmp_path / "p")
    with pytest.raises(aclprof.InvalidParamError):
        ll.start(config)
    assert list_prof_dirs(tmp_path / "p") == []
    # The same value without the AICORE_METRICS bit is not looked at. (On a fresh library:
    # after the failed Start above, 2026 would succeed but start nothing, see
    # test_state_machine's g_isRepeatInvoking tests.)
    mock.reset()
    ll.init(tmp_path / "p")
    ll.start(_raw_config((0,), DataType.ACL_API, metrics=9))
    (prof,) = list_prof_dirs(tmp_path / "p")
    assert device_config(prof, 0)["dataTypeConfig"] == int(DataType.ACL_API)
    assert device_config(prof, 0)["aicoreMetrics"] == 9


def test_device_gone_since_create_is_invalid_param(tmp_path):
    config = ll.create_config((0, 5), AicoreMetrics.NONE, DataType.ACL_API)
    mock.set_device_count(4)
    ll.init(tmp_path / "p")
    with pytest.raises(aclprof.InvalidParamError):
        ll.start(config)
    assert mock.mode() == "API_CTRL"


def test_repeated_device_at_start_is_already_run_2025(tmp_path, list_prof_dirs, session_info):
    mock.set_cann_era(2025)  # RT0 CheckDeviceTask (audit row 4)
    first = ll.create_config((0, 1), AicoreMetrics.NONE, DataType.ACL_API)
    second = ll.create_config((1, 2), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(tmp_path / "p")
    ll.start(first)
    with pytest.raises(aclprof.ProfAlreadyRunError) as info:
        ll.start(second)
    assert info.value.code == 100042
    # The first session keeps running.
    (prof,) = list_prof_dirs(tmp_path / "p")
    assert session_info(prof)["stopMonotonicNs"] is None
    assert session_info(prof)["devices"] == [0, 1]
    assert not (prof / "device_2").exists()
    ll.stop(first)
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_repeated_device_at_start_starts_nothing_2026(tmp_path, list_prof_dirs, session_info):
    # RT CheckConfigConsistency (audit row 4): same types on the running devices -> success,
    # but device 2 is silently not started; a Stop with the other config stops everything.
    first = ll.create_config((0, 1), AicoreMetrics.NONE, DataType.ACL_API)
    second = ll.create_config((1, 2), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(tmp_path / "p")
    ll.start(first)
    ll.start(second)
    (prof,) = list_prof_dirs(tmp_path / "p")
    assert not (prof / "device_2").exists()
    assert session_info(prof)["stopMonotonicNs"] is None
    ll.stop(second)
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_second_start_with_the_same_config_is_ok(tmp_path, list_prof_dirs, device_config, session_info):
    config = ll.create_config((0, 1), AicoreMetrics.NONE, DataType.ACL_API | DataType.TASK_TIME)
    twin = ll.create_config((1, 0), AicoreMetrics.NONE, DataType.ACL_API | DataType.TASK_TIME)
    ll.init(tmp_path / "p")
    ll.start(config)
    ll.start(config)  # starts nothing, succeeds
    ll.start(twin)    # same devices and data types: the same
    (prof,) = list_prof_dirs(tmp_path / "p")
    for device in (0, 1):
        assert sorted(device_config(prof, device)["devices"]) == [0, 1]
        assert device_config(prof, device)["dataTypeConfig"] == int(DataType.ACL_API | DataType.TASK_TIME)
    assert session_info(prof)["stopMonotonicNs"] is None
    ll.stop(config)
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_same_devices_other_types_at_start_is_invalid_config(tmp_path):
    a = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    b = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API | DataType.AICPU)
    ll.init(tmp_path / "p")
    ll.start(a)
    with pytest.raises(aclprof.InvalidProfilingConfigError) as info:
        ll.start(b)
    assert info.value.code == 100010


@pytest.mark.parametrize("other", [((0,), DataType.ACL_API | DataType.TASK_TIME),
                                   ((0, 1), DataType.ACL_API | DataType.AICPU),
                                   ((3,), DataType.MSPROFTX)])  # only the host compares
def test_stop_with_another_config_is_invalid_config(tmp_path, other, list_prof_dirs, session_info):
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    wrong = ll.create_config(other[0], AicoreMetrics.NONE, other[1])
    ll.init(tmp_path / "p")
    ll.start(config)
    with pytest.raises(aclprof.InvalidProfilingConfigError) as info:
        ll.stop(wrong)
    assert info.value.code == 100010 and info.value.function == "aclprofStop"
    (prof,) = list_prof_dirs(tmp_path / "p")
    assert session_info(prof)["stopMonotonicNs"] is None  # still running
    ll.stop(config)
    assert session_info(prof)["stopMonotonicNs"] is not None


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_stop_with_other_devices_same_types_succeeds(tmp_path, era, list_prof_dirs, session_info):
    # Audit row 5: devices that do not run are skipped, only data types are compared.
    # 2026 then stops every running device; 2025 only the config's (and one host user).
    mock.set_cann_era(era)
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    other = ll.create_config((0, 1), AicoreMetrics.NONE, DataType.ACL_API)
    elsewhere = ll.create_config((2,), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(tmp_path / "p")
    ll.start(config)
    (prof,) = list_prof_dirs(tmp_path / "p")
    ll.stop(elsewhere)  # device 2 never ran; the host's types match
    if era == "2026":
        assert session_info(prof)["stopMonotonicNs"] is not None
        ll.start(config)
        (prof,) = set(list_prof_dirs(tmp_path / "p")) - {prof}
    else:
        assert session_info(prof)["stopMonotonicNs"] is None  # device 0 still runs
    ll.stop(other)
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_stop_with_destroyed_config_object(tmp_path, list_prof_dirs, session_info):
    # The running session keeps its own copy: the caller's object may go away, and Stop
    # with NULL ("the running config") still works.
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(tmp_path / "p")
    ll.start(config)
    config.close()
    (prof,) = list_prof_dirs(tmp_path / "p")
    with pytest.raises(aclprof.HandleClosedError):
        ll.stop(config)
    assert session_info(prof)["stopMonotonicNs"] is None
    ll.stop(None)
    assert session_info(prof)["stopMonotonicNs"] is not None
    ll.finalize()
    assert mock.mode() == "OFF"


@pytest.mark.parametrize("given_types, stored", [
    (DataType.ACL_API, DataType.ACL_API | PROF_AICPU_MODEL),
    (DataType.TASK_TIME, 0x2 | 0x800 | 0x40 | PROF_AICPU_MODEL),
    (DataType.TASK_TIME_L2, 0x2000 | 0x800 | 0x2 | 0x40 | PROF_AICPU_MODEL),
    (DataType.TASK_TIME_L3, 0x8000 | 0x2000 | 0x800 | 0x2 | 0x40 | PROF_AICPU_MODEL),
    (DataType.API_STATS | DataType.TASK_TIME | DataType.MSPROFTX, DataType.ACL_API | DataType.API_STATS),
])
def test_config_reaches_the_device(out_dir, given_types, stored, device_config):
    with aclprof.Profiler(out_dir, devices=(3, 1), data_types=given_types,
                          aicore_metrics=AicoreMetrics.PIPE_UTILIZATION) as prof:
        pass
    (prof_dir,) = prof.result_dirs
    for device in (1, 3):
        seen = device_config(prof_dir, device)
        assert seen["deviceId"] == device
        assert sorted(seen["devices"]) == [1, 3]
        assert seen["dataTypeConfig"] == int(given_types)
        assert seen["dataTypeConfigStored"] == int(stored)
        assert seen["aicoreMetrics"] == int(AicoreMetrics.PIPE_UTILIZATION)


# ---- aclprofSetConfig (audit row 7) --------------------------------------------------------


@pytest.fixture(autouse=True)
def _chip_with_every_type():
    """These tests check the value rules of every type, so they run on a chip that supports
    them all; a 910B (the mock's default) refuses types 11, 13, 14 and 15 whatever the value
    (fidelity audit 3 row 7b, tests/test_fidelity3_session.py)."""
    mock.set_chip("any")

# The library's value rules (RT prof_params_adapter.cpp CheckApiConfigIsValid*, and
# param_validation.cpp), checked twice: lowlevel.set_config refuses a bad value in Python
# (ValueError, C not called) and the mock's C refuses it too (the mock is the 2026 library
# on a chip without PLATFORM_SYS_DEVICE_US).

# (type, value, accepted)
RULE_CASES = [
    (ConfigType.STORAGE_LIMIT, "200MB", True),
    (ConfigType.STORAGE_LIMIT, "4294967295MB", True),
    (ConfigType.STORAGE_LIMIT, "0000000250MB", True),    # 10 digits
    (ConfigType.STORAGE_LIMIT, "", True),                # no limit
    (ConfigType.STORAGE_LIMIT, "500", False),            # the unit is required
    (ConfigType.STORAGE_LIMIT, "199MB", False),
    (ConfigType.STORAGE_LIMIT, "4294967296MB", False),
    (ConfigType.STORAGE_LIMIT, "00000000250MB", False),  # 11 digits
    (ConfigType.STORAGE_LIMIT, "300GB", False),
    (ConfigType.STORAGE_LIMIT, "300mb", False),
    (ConfigType.STORAGE_LIMIT, "MB", False),
    (ConfigType.SYS_CPU_FREQ, "50", True),
    (ConfigType.SYS_CPU_FREQ, "51", False),
    (ConfigType.SYS_CPU_FREQ, "80", False),
    (ConfigType.SYS_CPU_FREQ, "05", True),
    (ConfigType.SYS_CPU_FREQ, "050", False),             # longer than "50"
    (ConfigType.SYS_IO_FREQ, "010", True),
    (ConfigType.SYS_IO_FREQ, "0100", False),
    (ConfigType.SYS_IO_FREQ, " 5", False),
    (ConfigType.SYS_IO_FREQ, "", False),
    (ConfigType.LOW_POWER_FREQ, "0", False),
    (ConfigType.LOW_POWER_FREQ, "100", True),
    (ConfigType.LLC_MODE, "read", True),
    (ConfigType.LLC_MODE, "write", True),
    (ConfigType.LLC_MODE, "Read", False),
    (ConfigType.LLC_MODE, "read,write", False),
    (ConfigType.HOST_SYS, "cpu", True),
    (ConfigType.HOST_SYS, "cpu,mem,disk,network,osrt,numa", True),
    (ConfigType.HOST_SYS, "numa", True),
    (ConfigType.HOST_SYS, "cpu,cpu", True),              # duplicates pass
    (ConfigType.HOST_SYS, "", True),                     # no item at all
    (ConfigType.HOST_SYS, "gpu", False),
    (ConfigType.HOST_SYS, "cpu,", False),
    (ConfigType.HOST_SYS, "cpu, mem", False),
    (ConfigType.HOST_SYS_USAGE, "mem,cpu", True),
    (ConfigType.HOST_SYS_USAGE, "disk", False),
    (ConfigType.NTS_METRICS, "PipeUtilization", True),
    (ConfigType.NTS_METRICS, "MemoryBandwidth", False),
    (ConfigType.OPTYPE, "Conv2D,MatMul", True),
    (ConfigType.OPTYPE, "Conv 2D", True),                # any characters
    (ConfigType.OPTYPE, "Conv2D,,MatMul", False),
    (ConfigType.OPTYPE, "", False),
    (ConfigType.SYS_MEM_SERVICEFLOW, "a b", True),
    (ConfigType.SYS_MEM_SERVICEFLOW, "", False),
    (ConfigType.PATH, "/tmp/some/where", True),
    (ConfigType.PATH, "", True),
    (ConfigType.PATH, "/tmp/a|b", True),                 # C: checked only after init
]


def _c_code_for(ctype: ConfigType) -> int:
    return 100000 if ctype is ConfigType.NTS_METRICS else 100010


def _raw_set_config(ctype: ConfigType, text: str) -> int:
    data = text.encode()
    return get_library().fn("aclprofSetConfig")(int(ctype), data, len(data))


@pytest.mark.parametrize("ctype, value, ok", RULE_CASES,
                         ids=[f"{c.name}={v!r}" for c, v, _ in RULE_CASES])
def test_set_config_rules_python_and_c_agree(ctype, value, ok):
    assert _raw_set_config(ctype, value) == (0 if ok else _c_code_for(ctype))
    python_ok = ok and not (ctype is ConfigType.PATH and "|" in value)
    if python_ok:
        ll.set_config(ctype, value)
        return
    mock.fail_next("aclprofSetConfig", 1, 500001)
    with pytest.raises(ValueError) as info:
        ll.set_config(ctype, value)
    assert not isinstance(info.value, aclprof.AclError), "must be refused before C"
    assert "aclprofSetConfig" in str(info.value) and ctype.name in str(info.value)
    with pytest.raises(aclprof.OtherAclError):  # the fault is still armed: C was not called
        ll.set_config(ConfigType.SYS_IO_FREQ, "1")


def test_path_with_invalid_characters(tmp_path):
    # ACL_PROF_PATH after init: 100010 from C; Python refuses it up front.
    ll.init(tmp_path / "p")
    for ch in lowlevel_invalid_chars():
        assert _raw_set_config(ConfigType.PATH, f"/tmp/x{ch}y") == 100010, repr(ch)
        with pytest.raises(ValueError, match="PATH"):
            ll.set_config(ConfigType.PATH, f"/tmp/x{ch}y")
    ll.finalize()


def lowlevel_invalid_chars() -> str:
    return ll.INVALID_PATH_CHARS


def test_hardware_mem_freq_depends_on_the_chip():
    # Python lets 1..10000 through (PLATFORM_SYS_DEVICE_US chips); the mock's chip says 100.
    ll.set_config(ConfigType.SYS_HARDWARE_MEM_FREQ, "100")
    with pytest.raises(aclprof.InvalidProfilingConfigError):
        ll.set_config(ConfigType.SYS_HARDWARE_MEM_FREQ, "10000")
    with pytest.raises(ValueError, match=r"\[1, 10000\]"):
        ll.set_config(ConfigType.SYS_HARDWARE_MEM_FREQ, "10001")


@given(ctype=st.sampled_from([c for c in ll.SET_CONFIG_RANGES if c is not ConfigType.SYS_HARDWARE_MEM_FREQ]),
       value=st.integers(min_value=-10**3, max_value=2**33))
def test_int_options_python_and_c_agree(ctype, value):
    lo, hi = ll.SET_CONFIG_RANGES[ctype]
    ok = lo <= value <= hi
    if ok:
        _, text = validate_option(ctype, value)
        ll.set_config(ctype, text)  # what Python produces, C accepts
    else:
        with pytest.raises(ValueError, match=ctype.name):
            validate_option(ctype, value)
        with pytest.raises(ValueError, match=ctype.name):
            ll.set_config(ctype, str(value))
    assert _raw_set_config(ctype, str(value)) == (0 if ok else 100010)


def test_storage_limit_unit():
    assert validate_option(ConfigType.STORAGE_LIMIT, 300) == (ConfigType.STORAGE_LIMIT, "300MB")
    assert validate_option(ConfigType.STORAGE_LIMIT, "300MB") == (ConfigType.STORAGE_LIMIT, "300MB")
    assert validate_option(ConfigType.STORAGE_LIMIT, " 250 ") == (ConfigType.STORAGE_LIMIT, "250MB")
    assert validate_option(ConfigType.STORAGE_LIMIT, "") == (ConfigType.STORAGE_LIMIT, "")
    with pytest.raises(ValueError, match="STORAGE_LIMIT"):
        validate_option(ConfigType.STORAGE_LIMIT, "199MB")
    ll.set_config(ConfigType.STORAGE_LIMIT, "300MB")
    with pytest.raises(ValueError, match="MB"):  # the bare number is the library's 100010
        ll.set_config(ConfigType.STORAGE_LIMIT, "300")
    assert _raw_set_config(ConfigType.STORAGE_LIMIT, "300") == 100010


@pytest.mark.parametrize("ctype, value, normalised", [
    (ConfigType.SYS_CPU_FREQ, "050", "50"),
    (ConfigType.SYS_IO_FREQ, 7, "7"),
    (ConfigType.HOST_SYS, "cpu, mem", "cpu,mem"),
    (ConfigType.HOST_SYS, "cpu,cpu", "cpu,cpu"),
    (ConfigType.HOST_SYS, "numa", "numa"),
    (ConfigType.PATH, "", ""),
    (ConfigType.PATH, " /tmp/with space ", " /tmp/with space "),
    (ConfigType.OPTYPE, "Conv 2D", "Conv 2D"),
])
def test_validate_option_normalises(ctype, value, normalised, out_dir, device_config):
    assert validate_option(ctype, value) == (ctype, normalised)
    if ctype is ConfigType.PATH:  # a session would write there: C accepting it is the check
        assert _raw_set_config(ctype, normalised) == 0
        return
    # What the device runs with is the normalised text.
    with aclprof.Profiler(out_dir, options={ctype: value}) as prof:
        pass
    assert device_config(prof.result_dirs[0], 0)["options"] == {f"ACL_PROF_{ctype.name}": normalised}


@pytest.mark.parametrize("ctype, value", [
    (ConfigType.SYS_CPU_FREQ, 80), (ConfigType.LOW_POWER_FREQ, 0), (ConfigType.HOST_SYS, "gpu"),
    (ConfigType.OPTYPE, "a,,b"), (ConfigType.SYS_MEM_SERVICEFLOW, ""), (ConfigType.PATH, "/x;y"),
])
def test_profiler_options_refused_before_any_c_call(out_dir, ctype, value):
    with pytest.raises(ValueError, match=ctype.name):
        aclprof.Profiler(out_dir, options={ctype: value})
    assert mock.mode() == "OFF"


@pytest.mark.parametrize("ctype, value, exc", [
    (2, "1", ValueError),           # the retired ACL_PROF_AIV_METRICS
    (0, "1", ValueError),
    (17, "1", ValueError),
    ("SYS_IO_FREQ", "1", ValueError),
    (ConfigType.SYS_IO_FREQ, True, TypeError),
    (ConfigType.SYS_IO_FREQ, 1.5, TypeError),
    (ConfigType.SYS_IO_FREQ, None, TypeError),
    (ConfigType.PATH, "a" * 257, ValueError),
    (ConfigType.SYS_IO_FREQ, "\u00b2", ValueError),   # a digit int() does not take
])
def test_validate_option_rejects(ctype, value, exc):
    with pytest.raises(exc):
        validate_option(ctype, value)


@pytest.mark.parametrize("value", ["\u00b2", "1e2", "0x10", "+5", "5.0", "", "fifty"])
def test_bad_int_option_message_names_option_and_range(value):
    with pytest.raises(ValueError) as info:
        validate_option(ConfigType.SYS_IO_FREQ, value)
    assert "SYS_IO_FREQ" in str(info.value) and "[1, 100]" in str(info.value)


@pytest.mark.parametrize("ctype, value, exc", [
    (2, "1", ValueError), (0, "1", ValueError), (17, "1", ValueError), (True, "1", TypeError),
    (ConfigType.SYS_IO_FREQ, "", ValueError), (ConfigType.PATH, "a" * 257, ValueError),
    (ConfigType.PATH, "a\0b", ValueError), (ConfigType.SYS_IO_FREQ, 5, TypeError),
])
def test_lowlevel_set_config_checks_arguments_before_c(ctype, value, exc):
    mock.fail_next("aclprofSetConfig", 1, 500001)
    with pytest.raises(exc):
        ll.set_config(ctype, value)
    with pytest.raises(aclprof.OtherAclError):  # the fault is still armed: C was not called
        ll.set_config(ConfigType.SYS_IO_FREQ, "1")


@pytest.mark.parametrize("ch", list(ll.INVALID_PATH_CHARS))
def test_init_path_characters(tmp_path, ch):
    # Utils::CheckPathWithInvalidChar (audit row 8): 100003 from C, ValueError from Python.
    bad = f"{tmp_path}/a{ch}b"
    data = bad.encode()
    assert get_library().fn("aclprofInit")(data, len(data)) == 100003
    mock.fail_next("aclprofInit", 1, 500001)
    with pytest.raises(ValueError, match=r"aclprofInit.*CANN refuses"):
        ll.init(bad)
    with pytest.raises(ValueError, match="output_dir"):
        aclprof.Profiler(bad)
    with pytest.raises(aclprof.OtherAclError):  # still armed: C was not called
        ll.init(tmp_path)
    assert mock.mode() == "OFF"


def test_init_path_other_control_bytes_are_allowed(tmp_path, list_prof_dirs, session_info):
    odd = tmp_path / "a\x01b c(1)#!"
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(odd)
    ll.start(config)
    ll.stop(config)
    ll.finalize()
    (prof,) = list_prof_dirs(odd)  # the session's output went exactly there
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_set_config_c_argument_checks():
    # What lowlevel.set_config never lets through, straight to C (reference 3.2).
    fn = get_library().fn("aclprofSetConfig")
    assert fn(0, b"1", 1) == 100000
    assert fn(17, b"1", 1) == 100000
    assert fn(2, b"1", 1) == 100010          # inside the range, but no such option
    assert fn(int(ConfigType.PATH), b"a" * 257, 257) == 100000
    assert fn(int(ConfigType.PATH), b"abc", 2) == 100000  # strlen != length
    assert fn(int(ConfigType.PATH), get_library().ffi.NULL, 0) == 100000
    assert fn(int(ConfigType.PATH), b"a" * 256, 256) == 0


def test_option_values_reach_the_device(out_dir, device_config):
    options = {
        ConfigType.STORAGE_LIMIT: 300,
        ConfigType.SYS_HARDWARE_MEM_FREQ: "100",
        ConfigType.LLC_MODE: "write",
        ConfigType.SYS_IO_FREQ: 1,
        ConfigType.SYS_INTERCONNECTION_FREQ: 50,
        ConfigType.DVPP_FREQ: " 7 ",
        ConfigType.HOST_SYS: "cpu, numa",
        ConfigType.HOST_SYS_USAGE: "mem",
        ConfigType.HOST_SYS_USAGE_FREQ: 20,
        ConfigType.NTS_METRICS: "PipeUtilization",
        int(ConfigType.OPTYPE): "Conv2D,MatMul",
    }
    with aclprof.Profiler(out_dir, devices=(0, 2), options=options) as prof:
        pass
    (prof_dir,) = prof.result_dirs
    expected = {
        "ACL_PROF_STORAGE_LIMIT": "300MB",
        "ACL_PROF_SYS_HARDWARE_MEM_FREQ": "100",
        "ACL_PROF_LLC_MODE": "write",
        "ACL_PROF_SYS_IO_FREQ": "1",
        "ACL_PROF_SYS_INTERCONNECTION_FREQ": "50",
        "ACL_PROF_DVPP_FREQ": "7",
        "ACL_PROF_HOST_SYS": "cpu,numa",
        "ACL_PROF_HOST_SYS_USAGE": "mem",
        "ACL_PROF_HOST_SYS_USAGE_FREQ": "20",
        "ACL_PROF_NTS_METRICS": "PipeUtilization",
        "ACL_PROF_OPTYPE": "Conv2D,MatMul",
    }
    assert device_config(prof_dir, 0)["options"] == expected
    assert device_config(prof_dir, 2)["options"] == expected
