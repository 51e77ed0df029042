"""aclprof.Profiler: the session lifecycle, its output directories, exception safety, fault
handling and argument validation, checked against the mock's state and files."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import pytest

import aclprof
from aclprof import AicoreMetrics, ConfigType, DataType, mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library

PROF_RE = re.compile(r"PROF_(\d{6})_(\d{17})_(\d{8})([A-R]{8})")


class Boom(Exception):
    pass


class HardStop(BaseException):
    pass


def _check_prof_dir(path: Path, devices, counter: int | None = None) -> None:
    m = PROF_RE.fullmatch(path.name)
    assert m, f"bad PROF_* name: {path.name}"
    if counter is not None:
        assert int(m.group(1)) == counter
    assert int(m.group(3)) == os.getpid()
    stamp = dt.datetime.strptime(m.group(2)[:14], "%Y%m%d%H%M%S")
    assert abs((dt.datetime.now() - stamp).total_seconds()) < 600
    assert sorted(p.name for p in path.iterdir()) == sorted(["host"] + [f"device_{d}" for d in devices])
    assert all((path / p).is_dir() for p in ["host"] + [f"device_{d}" for d in devices])


@pytest.fixture
def config_spy(monkeypatch):
    """Records the raw C pointer of every config a Profiler creates."""
    pointers = []
    original = ll.create_config

    def spy(*args, **kwargs):
        config = original(*args, **kwargs)
        pointers.append(config._ptr)
        return config

    monkeypatch.setattr(ll, "create_config", spy)
    return pointers


def _assert_destroyed(pointer) -> None:
    # The mock rejects a pointer it no longer knows: the config was destroyed.
    assert get_library().fn("aclprofDestroyConfig")(pointer) == 100000


# ---- lifecycle -------------------------------------------------------------------------------

def test_context_manager_runs_a_full_session(out_dir, session_info, config_spy):
    prof = aclprof.Profiler(out_dir, devices=(0, 1))
    assert mock.mode() == "OFF" and not out_dir.exists()  # the constructor calls nothing
    with prof as entered:
        assert entered is prof and prof.running
        assert mock.mode() == "API_CTRL"
        (running_dir,) = prof.result_dirs  # visible while running
        assert session_info(running_dir)["stopMonotonicNs"] is None
    assert not prof.running
    assert mock.mode() == "OFF"
    assert prof.result_dirs == [running_dir]
    _check_prof_dir(running_dir, (0, 1), counter=1)
    assert running_dir.parent == out_dir
    info = session_info(running_dir)
    assert info["stopMonotonicNs"] >= info["startMonotonicNs"]
    assert info["initPath"] == str(out_dir)
    _assert_destroyed(config_spy[0])


def test_explicit_start_stop_close_are_idempotent(out_dir):
    prof = aclprof.Profiler(out_dir)
    assert prof.start() is prof
    with pytest.raises(RuntimeError, match="already running"):
        prof.start()
    assert prof.running and mock.mode() == "API_CTRL"
    prof.stop()
    assert mock.mode() == "OFF"
    prof.stop()
    prof.close()
    prof.close()
    assert mock.mode() == "OFF" and len(prof.result_dirs) == 1
    # A stopped Profiler can be started again: a second PROF_* directory.
    prof.start()
    prof.close()
    first, second = prof.result_dirs
    assert first != second
    _check_prof_dir(first, (0,), counter=1)
    _check_prof_dir(second, (0,), counter=2)
    assert mock.mode() == "OFF"


def test_several_sessions_one_after_another(tmp_path, list_prof_dirs):
    seen = []
    for i in range(4):
        target = tmp_path / ("shared" if i % 2 else f"own{i}")
        with aclprof.Profiler(target, devices=(i,)) as prof:
            assert mock.mode() == "API_CTRL"
        assert mock.mode() == "OFF"
        (result,) = prof.result_dirs
        _check_prof_dir(result, (i,))
        seen.append(result)
    assert len(set(seen)) == 4
    assert len(list_prof_dirs(tmp_path / "shared")) == 2


def test_result_dirs_ignore_what_was_there_before(out_dir):
    with aclprof.Profiler(out_dir):
        pass
    with aclprof.Profiler(out_dir) as prof:
        pass
    (mine,) = prof.result_dirs
    assert len(list(out_dir.iterdir())) == 2 and mine in list(out_dir.iterdir())


def test_msproftx_without_devices_has_only_host(out_dir):
    with aclprof.Profiler(out_dir, devices=(), data_types=DataType.MSPROFTX) as prof:
        pass
    (result,) = prof.result_dirs
    _check_prof_dir(result, ())


def test_single_int_device_and_properties(out_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prof = aclprof.Profiler("relative/out", devices=3, data_types=DataType.ACL_API)
    assert prof.output_dir == tmp_path / "relative" / "out" and prof.output_dir.is_absolute()
    assert prof.devices == (3,)
    assert prof.data_types == DataType.ACL_API
    assert "stopped" in repr(prof)
    with prof:
        assert "running" in repr(prof)
    _check_prof_dir(prof.result_dirs[0], (3,))


# ---- exceptions in the with-block ---------------------------------------------------------

@pytest.mark.parametrize("exc_type", [Boom, HardStop])
def test_exception_in_block_still_tears_down(out_dir, exc_type, config_spy, session_info):
    error = exc_type("from the body")
    with pytest.raises(exc_type) as info:
        with aclprof.Profiler(out_dir, devices=(0, 2)) as prof:
            raise error
    assert info.value is error  # propagates unchanged
    assert mock.mode() == "OFF"  # finalized
    (result,) = prof.result_dirs
    assert session_info(result)["stopMonotonicNs"] is not None  # stopped
    _assert_destroyed(config_spy[0])  # destroyed
    # And the process can profile again.
    with aclprof.Profiler(out_dir):
        assert mock.mode() == "API_CTRL"


def test_body_exception_wins_over_teardown_failure(out_dir):
    error = Boom()
    with pytest.raises(Boom) as info:
        with aclprof.Profiler(out_dir):
            mock.fail_next("aclprofStop", 1, 500005)
            raise error
    assert info.value is error
    assert mock.mode() == "OFF"  # finalize still ran


def test_exception_inside_annotation_in_session(out_dir, tx_events):
    with pytest.raises(Boom):
        with aclprof.Profiler(out_dir, data_types=DataType.ACL_API | DataType.MSPROFTX) as prof:
            with aclprof.annotate("outer"):
                aclprof.range("open range").start()  # never ended
                raise Boom()
    assert mock.mode() == "OFF"
    assert mock.stats()["stampsInUse"] == 0
    events = tx_events(prof.result_dirs[0])
    assert [(e["kind"], e["message"]) for e in events] == [("range", "outer")]


# ---- injected faults ----------------------------------------------------------------------

START_FAULTS = [
    ("aclprofInit", 100003, aclprof.InvalidFileError),
    ("aclprofCreateConfig", 0, aclprof.InvalidParamError),  # returns NULL: code unused
    ("aclprofSetConfig", 100010, aclprof.InvalidProfilingConfigError),
    ("aclprofStart", 500005, aclprof.ProfilingFailureError),
    ("aclprofStart", 100042, aclprof.ProfAlreadyRunError),
]


@pytest.mark.parametrize("function, code, exc", START_FAULTS, ids=[f"{f}-{c}" for f, c, _ in START_FAULTS])
def test_fault_during_start_is_undone(out_dir, function, code, exc, config_spy, list_prof_dirs):
    prof = aclprof.Profiler(out_dir, options={ConfigType.SYS_IO_FREQ: 10})
    mock.fail_next(function, 1, code)
    with pytest.raises(exc) as info:
        prof.start()
    assert type(info.value) is exc and info.value.function == function
    assert not prof.running
    assert mock.mode() == "OFF"
    assert list_prof_dirs(out_dir) == [] and prof.result_dirs == []
    for pointer in config_spy:
        _assert_destroyed(pointer)
    # The fault was one-shot: the same Profiler starts now.
    with prof:
        assert mock.mode() == "API_CTRL"
    assert len(prof.result_dirs) == 1


STOP_FAULTS = [
    ("aclprofStop", 500005, aclprof.ProfilingFailureError),
    ("aclprofDestroyConfig", 100000, aclprof.InvalidParamError),
    ("aclprofFinalize", 500005, aclprof.ProfilingFailureError),
]


@pytest.mark.parametrize("function, code, exc", STOP_FAULTS, ids=[f for f, _, _ in STOP_FAULTS])
def test_fault_during_stop_still_tears_down(out_dir, function, code, exc, session_info):
    prof = aclprof.Profiler(out_dir).start()
    mock.fail_next(function, 1, code)
    with pytest.raises(exc) as info:
        prof.stop()
    assert info.value.function == function and info.value.code == code
    assert not prof.running
    # Every other teardown step ran; a failed aclprofFinalize is retried by close().
    prof.close()
    assert mock.mode() == "OFF"
    assert session_info(prof.result_dirs[0])["stopMonotonicNs"] is not None
    prof.close()
    with aclprof.Profiler(out_dir):  # nothing was left behind
        pass


@pytest.mark.parametrize("function, code, exc", STOP_FAULTS, ids=[f for f, _, _ in STOP_FAULTS])
def test_fault_at_exit_of_with_block(out_dir, function, code, exc):
    with pytest.raises(exc):
        with aclprof.Profiler(out_dir) as prof:
            mock.fail_next(function, 1, code)
    prof.close()
    assert mock.mode() == "OFF"


def test_start_after_a_failed_finalize(out_dir):
    prof = aclprof.Profiler(out_dir).start()
    mock.fail_next("aclprofFinalize", 1, 500005)
    with pytest.raises(aclprof.ProfilingFailureError):
        prof.stop()
    assert mock.mode() == "API_CTRL"  # the library is still initialised ...
    prof.start()  # ... so start() finishes the finalize first
    assert prof.running and mock.mode() == "API_CTRL"
    prof.close()
    assert mock.mode() == "OFF" and len(prof.result_dirs) == 2


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_failed_finalize_of_a_finalized_library_is_not_retried(out_dir, era):
    # Someone finalized behind the Profiler's back: close() must stay idempotent. CANN 2025
    # reports it (100043); 2026 makes Stop and Finalize without init no-ops.
    mock.set_cann_era(era)
    prof = aclprof.Profiler(out_dir).start()
    ll.stop(None) if era == "2026" else ll.stop(prof._config)
    ll.finalize()
    if era == "2025":
        with pytest.raises(aclprof.ProfNotRunError):
            prof.close()
    else:
        prof.close()
    prof.close()
    prof.close()
    assert mock.mode() == "OFF"


def test_finalize_failing_while_undoing_a_failed_start(out_dir):
    prof = aclprof.Profiler(out_dir)
    mock.fail_next("aclprofStart", 1, 500005)
    mock.fail_next("aclprofFinalize", 1, 500005)
    with pytest.raises(aclprof.ProfilingFailureError) as info:
        prof.start()
    assert info.value.function == "aclprofStart"  # the original error, not the cleanup's
    prof.close()  # retries the finalize that failed
    assert mock.mode() == "OFF"


def test_device_beyond_the_driver_fails_in_c_and_is_undone(out_dir):
    prof = aclprof.Profiler(out_dir, devices=(0, 8))  # valid for Python (< 64)
    with pytest.raises(aclprof.InvalidParamError, match="this host has 8 device"):
        prof.start()
    assert mock.mode() == "OFF" and not prof.running


# ---- argument validation -------------------------------------------------------------------

def _bad_arguments(tmp_path: Path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = tmp_path / "out"
    return [
        ((123,), {}, TypeError),
        ((None,), {}, TypeError),
        ((str(out) + "/a\0b",), {}, ValueError),
        ((str(out) + "/" + "d/" * 2100,), {}, ValueError),  # > 4095 bytes
        ((a_file,), {}, NotADirectoryError),
        ((out,), {"devices": (-1,)}, ValueError),
        ((out,), {"devices": (64,)}, ValueError),
        ((out,), {"devices": (0, 1, 0)}, ValueError),
        ((out,), {"devices": ("0",)}, TypeError),
        ((out,), {"devices": (True,)}, TypeError),
        ((out,), {"devices": 1.0}, TypeError),
        ((out,), {"devices": "0"}, TypeError),
        ((out,), {"devices": ()}, ValueError),  # no device without MSPROFTX
        ((out,), {"data_types": 0}, ValueError),
        ((out,), {"data_types": DataType.ACL_API | 0x400}, ValueError),
        ((out,), {"data_types": "ACL_API"}, TypeError),
        ((out,), {"aicore_metrics": 9}, ValueError),
        ((out,), {"options": {ConfigType.SYS_IO_FREQ: 0}}, ValueError),
        ((out,), {"options": {ConfigType.STORAGE_LIMIT: "199"}}, ValueError),
        ((out,), {"options": {2: "1"}}, ValueError),
        ((out,), {"options": {ConfigType.PATH: "/tmp/a|b"}}, ValueError),
        ((out,), {"options": {ConfigType.NTS_METRICS: "x"}}, ValueError),
        ((out,), {"options": [(ConfigType.SYS_IO_FREQ, 1)]}, TypeError),
    ]


@pytest.mark.parametrize("index", range(23))
def test_bad_arguments_raise_before_any_c_call(tmp_path, index):
    cases = _bad_arguments(tmp_path)
    assert len(cases) == 23
    args, kwargs, exc = cases[index]
    before = sorted(tmp_path.iterdir())
    for function in ("aclprofInit", "aclprofCreateConfig"):
        mock.fail_next(function, 1, 500001)
    with pytest.raises(exc):
        aclprof.Profiler(*args, **kwargs).start()
    assert mock.mode() == "OFF"
    assert sorted(tmp_path.iterdir()) == before  # nothing created
    # Both faults are still armed: neither C function was called.
    with pytest.raises(aclprof.InvalidParamError):  # a NULL, whatever the code
        ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    with pytest.raises(aclprof.OtherAclError):
        ll.init(tmp_path)


# ---- one session per process ------------------------------------------------------------------

def test_second_profiler_while_one_runs(tmp_path, session_info):
    first = aclprof.Profiler(tmp_path / "a", devices=(0,)).start()
    second = aclprof.Profiler(tmp_path / "b", devices=(1,))
    with pytest.raises(aclprof.RepeatInitializeError) as info:
        second.start()
    assert info.value.code == 100002 and info.value.function == "aclprofInit"
    assert not second.running and second.result_dirs == []
    # The first keeps running, untouched by the second's cleanup.
    assert first.running and mock.mode() == "API_CTRL"
    (result,) = first.result_dirs
    assert session_info(result)["stopMonotonicNs"] is None
    first.stop()
    assert session_info(result)["stopMonotonicNs"] is not None
    with second:
        pass
    assert len(second.result_dirs) == 1
