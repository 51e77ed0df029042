"""The global mode state machine (reference 3.1) through aclprof.binding.lowlevel: every session call
and the subscription calls in each mode, with the exact exception class and code, and the
mode unchanged after a rejected call. Every test runs under both CANN eras (2025, 2026)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aclprof
import aclprof.api.session  # monkeypatched below; not imported by `import aclprof` alone
from aclprof import AicoreMetrics, ConfigType, DataType, mock
from aclprof.binding import lowlevel as ll

MODEL_TEXT = "aclmock-model 1\ndevice 0\nop\tconv1\tConv2D\t1000\nop\trelu1\tRelu\t500\n"


class ModeSetup:
    """Puts the mock into a mode and knows how to leave it cleanly (fds included)."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
        self.models: list[int] = []
        self.subscribed: list[int] = []
        self.pipes: list[tuple[int, ll.FdCell]] = []

    def load_model(self) -> int:
        path = self.tmp / f"model{len(self.models)}.txt"
        path.write_text(MODEL_TEXT)
        model_id = ll.mdl_load_from_file(path)
        self.models.append(model_id)
        return model_id

    def subscribe_config(self) -> ll.SubscribeConfig:
        r, w = os.pipe()
        cell = ll.FdCell(w)
        self.pipes.append((r, cell))
        return ll.create_subscribe_config(True, AicoreMetrics.NONE, cell)

    def enter(self, mode: str) -> None:
        if mode == "API_CTRL":
            ll.init(self.tmp / "prof")
        elif mode == "SUBSCRIBE":
            model_id = self.load_model()
            ll.model_subscribe(model_id, self.subscribe_config())
            self.subscribed.append(model_id)
        assert mock.mode() == mode

    def cleanup(self) -> None:
        if mock.mode() == "API_CTRL":
            ll.finalize()
        for model_id in self.subscribed:
            try:
                ll.model_unsubscribe(model_id)  # closes the write end, sets the cell to -1
            except aclprof.InvalidModelIdError:
                pass  # the test unsubscribed it already
        for r, cell in self.pipes:
            os.close(r)
            if cell.value >= 0:  # never subscribed: the library did not take it
                os.close(cell.value)


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@pytest.fixture
def setup(tmp_path):
    before = _open_fds()
    s = ModeSetup(tmp_path)
    yield s
    s.cleanup()
    assert _open_fds() <= before, "a pipe end was left open"


MODES = ["OFF", "API_CTRL", "SUBSCRIBE"]

# (call, mode) -> expected exception class, or None for success (reference 3.1, 2025).
ERA_2025 = {
    ("init", "OFF"): None,
    ("init", "API_CTRL"): aclprof.RepeatInitializeError,
    ("init", "SUBSCRIBE"): aclprof.ApiConflictError,
    ("start", "OFF"): aclprof.ProfNotRunError,
    ("start", "API_CTRL"): None,
    ("start", "SUBSCRIBE"): aclprof.ApiConflictError,
    ("stop", "OFF"): aclprof.ProfNotRunError,
    ("stop", "API_CTRL"): None,
    ("stop", "SUBSCRIBE"): aclprof.ApiConflictError,
    ("finalize", "OFF"): aclprof.ProfNotRunError,
    ("finalize", "API_CTRL"): None,
    ("finalize", "SUBSCRIBE"): aclprof.ApiConflictError,
    ("subscribe", "OFF"): None,
    ("subscribe", "API_CTRL"): aclprof.ApiConflictError,
    ("subscribe", "SUBSCRIBE"): None,
    ("unsubscribe", "OFF"): aclprof.InvalidModelIdError,  # loaded but not subscribed
    ("unsubscribe", "API_CTRL"): aclprof.ApiConflictError,
    ("unsubscribe", "SUBSCRIBE"): None,
}
# The mode after a successful call.
AFTER_SUCCESS = {
    ("init", "OFF"): "API_CTRL",
    ("start", "API_CTRL"): "API_CTRL",
    ("stop", "API_CTRL"): "API_CTRL",
    ("finalize", "API_CTRL"): "OFF",
    ("subscribe", "OFF"): "SUBSCRIBE",
    ("subscribe", "SUBSCRIBE"): "SUBSCRIBE",
    ("unsubscribe", "SUBSCRIBE"): "OFF",  # the last subscription ended
}


def _do(call: str, s: ModeSetup, mode: str) -> None:
    if call == "init":
        ll.init(s.tmp / "prof2")
    elif call == "start":
        ll.start(s.config)
    elif call == "stop":
        ll.stop(s.config)
    elif call == "finalize":
        ll.finalize()
    elif call == "subscribe":
        model_id = s.load_model()
        ll.model_subscribe(model_id, s.subscribe_config())
        s.subscribed.append(model_id)
    elif call == "unsubscribe":
        model_id = s.subscribed[0] if mode == "SUBSCRIBE" else s.load_model()
        ll.model_unsubscribe(model_id)
    else:  # pragma: no cover
        raise AssertionError(call)


# The 2026 library (ACLMOCK_CANN=2026, hicann/runtime 681ef7610) differs only in the OFF
# column of Start/Stop/Finalize: Start auto-initialises (with ACL_PROF_PATH or "./"), Stop
# and Finalize do nothing (audit row 6).
ERA_2026 = {**ERA_2025, ("start", "OFF"): None, ("stop", "OFF"): None, ("finalize", "OFF"): None}
ERA_2026_AFTER = {**AFTER_SUCCESS, ("start", "OFF"): "API_CTRL", ("stop", "OFF"): "OFF",
                  ("finalize", "OFF"): "OFF"}


@pytest.fixture(params=["2025", "2026"], autouse=True)
def era(request, _fresh_mock):
    """Every test of this module runs under both CANN eras (after the autouse reset)."""
    mock.set_cann_era(request.param)
    return request.param


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("call", ["init", "start", "stop", "finalize", "subscribe", "unsubscribe"])
def test_precheck_matrix(setup, call, mode, era):
    table, after = (ERA_2025, AFTER_SUCCESS) if era == "2025" else (ERA_2026, ERA_2026_AFTER)
    if era == "2026":
        ll.set_config(ConfigType.PATH, str(setup.tmp / "auto"))  # where an auto-init writes
    setup.enter(mode)
    expected = table[(call, mode)]
    if expected is None:
        _do(call, setup, mode)
        assert mock.mode() == after[(call, mode)]
        return
    with pytest.raises(expected) as info:
        _do(call, setup, mode)
    assert type(info.value) is expected
    assert info.value.code == expected.code
    assert mock.mode() == mode, "a rejected call must not change the mode"


def test_2025_noinit_codes_and_names(setup):
    mock.set_cann_era(2025)
    for call, cname in (("start", "aclprofStart"), ("stop", "aclprofStop"), ("finalize", "aclprofFinalize")):
        with pytest.raises(aclprof.ProfNotRunError) as info:
            _do(call, setup, "OFF")
        assert info.value.code == 100043 and info.value.function == cname
        assert "ACL_ERROR_PROF_NOT_RUN" in str(info.value)
        assert mock.mode() == "OFF"
    for call in (ll.start, ll.stop):  # preCheckProfConfig: NULL is refused first
        with pytest.raises(aclprof.InvalidParamError):
            call(None)
    with pytest.raises(aclprof.UninitializeError):  # SetConfig needs Init in 2025
        ll.set_config(ConfigType.SYS_IO_FREQ, "10")
    assert list(Path(setup.tmp).glob("**/PROF_*")) == []


def test_2026_is_the_default():
    mock.reset()
    ll.finalize()  # would raise ProfNotRunError under 2025
    ll.stop(None)
    assert mock.mode() == "OFF"


def test_set_cann_era_rejects_unknown_eras():
    for bad in (2024, "2027", "modern", None):
        with pytest.raises(ValueError, match="era"):
            mock.set_cann_era(bad)


def test_2026_start_without_init_uses_acl_prof_path(setup, tmp_path, list_prof_dirs, device_config):
    mock.set_cann_era(2026)
    target = tmp_path / "auto"
    ll.set_config(ConfigType.PATH, str(target))
    ll.start(setup.config)
    assert mock.mode() == "API_CTRL"  # auto-initialised
    (prof,) = list_prof_dirs(target)
    assert device_config(prof, 0)["devices"] == [0]
    assert device_config(prof, 0)["options"]["ACL_PROF_PATH"] == str(target)
    ll.stop(setup.config)
    ll.finalize()
    assert mock.mode() == "OFF"


def test_2026_start_without_init_or_path_uses_cwd(setup, tmp_path, monkeypatch, list_prof_dirs):
    mock.set_cann_era(2026)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    ll.start(setup.config)
    assert mock.mode() == "API_CTRL"
    ll.stop(setup.config)
    ll.finalize()
    assert len(list_prof_dirs(cwd)) == 1


def test_2026_stop_and_finalize_without_init_are_noops(setup):
    mock.set_cann_era(2026)
    ll.stop(setup.config)
    assert mock.mode() == "OFF"
    ll.finalize()
    assert mock.mode() == "OFF"
    ll.finalize()  # still nothing to do
    assert mock.mode() == "OFF"
    assert list(Path(setup.tmp).glob("**/PROF_*")) == []


def test_init_finalize_cycle_repeats(setup, tmp_path, list_prof_dirs, session_info):
    # DOC: the Init/Finalize pair may be repeated, e.g. to change the output path.
    for i in range(3):
        ll.init(tmp_path / f"p{i}")
        ll.start(setup.config)
        ll.stop(setup.config)
        ll.finalize()
        assert mock.mode() == "OFF"
        (prof,) = list_prof_dirs(tmp_path / f"p{i}")
        assert session_info(prof)["devices"] == [0]
        assert session_info(prof)["stopMonotonicNs"] is not None


def test_start_in_subscribe_mode_with_default_config(setup, era):
    setup.enter("SUBSCRIBE")
    # 2025 refuses NULL before looking at the mode; 2026 reaches the mode check.
    expected = aclprof.InvalidParamError if era == "2025" else aclprof.ApiConflictError
    with pytest.raises(expected):
        ll.start(None)
    with pytest.raises(expected):
        ll.stop(None)
    assert mock.mode() == "SUBSCRIBE"


def test_subscribe_rows_check_model_before_mode(setup):
    # An unknown model id is reported before the mode conflict (reference 3.3 step 1).
    setup.enter("API_CTRL")
    cfg = setup.subscribe_config()
    with pytest.raises(aclprof.InvalidModelIdError):
        ll.model_subscribe(987654, cfg)
    with pytest.raises(aclprof.InvalidModelIdError):
        ll.model_unsubscribe(987654)
    assert mock.mode() == "API_CTRL"


def test_running_session_blocks_nothing_but_init(setup, tmp_path, session_info):
    setup.enter("API_CTRL")
    ll.start(setup.config)
    (prof,) = [p for p in Path(setup.tmp).glob("**/PROF_*")]
    with pytest.raises(aclprof.RepeatInitializeError):
        ll.init(tmp_path / "other")
    model_id = setup.load_model()
    with pytest.raises(aclprof.ApiConflictError):
        ll.model_subscribe(model_id, setup.subscribe_config())
    assert mock.mode() == "API_CTRL"
    # Finalize with a session still running ends it (the real one finalises every task).
    assert session_info(prof)["stopMonotonicNs"] is None
    ll.finalize()
    assert mock.mode() == "OFF"
    assert session_info(prof)["stopMonotonicNs"] is not None


def test_default_config_start_stop(setup, tmp_path, list_prof_dirs, device_config):
    # Start(NULL) (2026): the devices the process opened, CANN's platform default data types
    # (fidelity audit 3, R2), no host entry.
    mock.set_cann_era(2026)
    mock.set_device_count(3)
    ll.rt_set_device(0)
    ll.rt_set_device(2)
    ll.init(tmp_path / "d")
    ll.start(None)
    ll.stop(None)
    ll.finalize()
    (prof,) = list_prof_dirs(tmp_path / "d")
    assert sorted(p.name for p in prof.iterdir()) == ["device_0", "device_2", "host"]
    assert device_config(prof, 2)["devices"] == [0, 2]


# ---- a second Start while a session runs, and Stop with another config (audit rows 4, 5) --

TYPES = DataType.ACL_API | DataType.TASK_TIME

# Each step's expected exception (None: success) per era.
SECOND_START = [
    # (call, devices, types, 2025 result, 2026 result)
    ("start", (0, 1), TYPES, None, None),
    ("start", (0, 1), TYPES, aclprof.ProfAlreadyRunError, None),
    ("start", (0, 1), DataType.ACL_API, aclprof.ProfAlreadyRunError, aclprof.InvalidProfilingConfigError),
    ("start", (1, 2), TYPES, aclprof.ProfAlreadyRunError, None),        # 2026: 2 stays off
    ("start", (2, 3), TYPES, None, None),                               # 2025: 2, 3 start
    ("start", (4,), DataType.ACL_API, None, aclprof.InvalidProfilingConfigError),  # the host
    ("stop", (0, 1), DataType.ACL_API, aclprof.InvalidProfilingConfigError,
     aclprof.InvalidProfilingConfigError),
    # Devices 5, 6 do not run, the host's types match: 2025 drops one host user (3 -> 2),
    # 2026 stops every running device.
    ("stop", (5, 6), TYPES, None, None),
]


def test_second_start_and_stop_by_era(tmp_path, era, list_prof_dirs, device_config):
    ll.init(tmp_path / "p")
    configs = []
    for call, devices, types, res_2025, res_2026 in SECOND_START:
        config = ll.create_config(devices, AicoreMetrics.NONE, types)
        configs.append(config)
        expected = res_2025 if era == "2025" else res_2026
        fn = ll.start if call == "start" else ll.stop
        if expected is None:
            fn(config)
        else:
            with pytest.raises(expected):
                fn(config)
    (prof,) = list_prof_dirs(tmp_path / "p")
    started = sorted(int(p.name.split("_")[1]) for p in prof.glob("device_*"))
    if era == "2025":
        assert started == [0, 1, 2, 3, 4]  # disjoint sets start (in the mock: one PROF dir)
    else:
        assert started == [0, 1]          # a repeated Start never starts anything
        assert (prof / "host" / "mock_session.json").exists()
        # The last Stop (other devices, same types) stopped everything.
        assert _session(prof)["stopMonotonicNs"] is not None
    ll.finalize()
    for config in configs:
        config.close()


def _session(prof: Path) -> dict:
    import json
    return json.loads((prof / "host" / "mock_session.json").read_text())


def test_2026_failed_start_or_finalize_without_stop_leaves_start_inert(tmp_path, list_prof_dirs):
    # g_isRepeatInvoking: set by a Start that passes the mode check, cleared only by Stop.
    mock.set_cann_era(2026)
    config = ll.create_config((0,), AicoreMetrics.NONE, DataType.ACL_API)
    ll.init(tmp_path / "p")
    ll.start(config)
    ll.finalize()  # no stop
    ll.init(tmp_path / "p")
    ll.start(config)  # succeeds ...
    assert len(list_prof_dirs(tmp_path / "p")) == 1  # ... but started nothing
    ll.stop(config)
    ll.start(config)
    assert len(list_prof_dirs(tmp_path / "p")) == 2
    ll.stop(config)
    ll.finalize()
    config.close()


def test_profiler_clears_the_start_flag_after_a_failed_start(out_dir, monkeypatch, device_config):
    # A Start that fails after 2026 set its flag (here: device 5 went away between
    # CreateConfig and Start) must not leave every later Profiler inert.
    real_create = ll.create_config

    def create_then_shrink(*args):
        config = real_create(*args)
        mock.set_device_count(2)
        return config

    monkeypatch.setattr(aclprof.api.session.lowlevel, "create_config", create_then_shrink)
    with pytest.raises(aclprof.InvalidParamError):
        aclprof.Profiler(out_dir, devices=(5,)).start()
    monkeypatch.setattr(aclprof.api.session.lowlevel, "create_config", real_create)
    with aclprof.Profiler(out_dir, devices=(0,)) as prof:
        pass
    (result,) = prof.result_dirs
    assert device_config(result, 0)["devices"] == [0]  # this Profiler's session really ran


def test_profiler_works_in_both_eras(out_dir, era, device_config):
    with aclprof.Profiler(out_dir, devices=(0, 1), options={ConfigType.SYS_IO_FREQ: 10}) as prof:
        pass
    with aclprof.Profiler(out_dir, devices=(1,)) as prof2:
        pass
    assert len(prof.result_dirs) == 1 and len(prof2.result_dirs) == 1
    assert device_config(prof.result_dirs[0], 1)["options"] == {"ACL_PROF_SYS_IO_FREQ": "10"}


@pytest.mark.parametrize("value, finalize_ok", [("2026", True), ("2025", False), ("", True)])
def test_cann_era_default_from_the_environment(run_python, make_env, value, finalize_ok):
    code = (
        "import aclprof, aclprof.mock\n"
        "from aclprof import lowlevel as ll\n"
        "try:\n"
        "    ll.finalize(); print('ok')\n"
        "except aclprof.ProfNotRunError:\n"
        "    print('not run')\n"
        "aclprof.mock.set_cann_era(2025 if %r else 2026)\n"
        "aclprof.mock.reset()  # the variable is read again at reset\n"
        "try:\n"
        "    ll.finalize(); print('ok')\n"
        "except aclprof.ProfNotRunError:\n"
        "    print('not run')\n"
    ) % finalize_ok
    proc = run_python(code, env=make_env(ACLPROF_BACKEND="mock", ACLMOCK_CANN=value))
    assert proc.returncode == 0, proc.stderr
    expected = "ok" if finalize_ok else "not run"
    assert proc.stdout.splitlines() == [expected, expected]
