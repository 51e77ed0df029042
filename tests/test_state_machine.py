"""The global mode state machine (reference 3.1) through aclprof.lowlevel: every session call
and the subscription calls in each mode, with the exact exception class and code, and the
mode unchanged after a rejected call. Both behaviours of Start/Stop/Finalize without Init."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aclprof
from aclprof import AicoreMetrics, ConfigType, DataType
from aclprof import lowlevel as ll
from aclprof import mock

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

# (call, mode) -> expected exception class, or None for success (reference 3.1, classic).
CLASSIC = {
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


# The 2026 behaviour (ACLMOCK_NOINIT=modern) differs only in the OFF column of Start/Stop/
# Finalize: Start auto-initialises (with ACL_PROF_PATH or "./"), Stop and Finalize do nothing.
MODERN = {**CLASSIC, ("start", "OFF"): None, ("stop", "OFF"): None, ("finalize", "OFF"): None}
MODERN_AFTER = {**AFTER_SUCCESS, ("start", "OFF"): "API_CTRL", ("stop", "OFF"): "OFF",
                ("finalize", "OFF"): "OFF"}


@pytest.mark.parametrize("noinit", ["classic", "modern"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("call", ["init", "start", "stop", "finalize", "subscribe", "unsubscribe"])
def test_precheck_matrix(setup, call, mode, noinit):
    mock.set_noinit_behaviour(noinit)
    table, after = (CLASSIC, AFTER_SUCCESS) if noinit == "classic" else (MODERN, MODERN_AFTER)
    ll.set_config(ConfigType.PATH, str(setup.tmp / "auto"))  # where a modern auto-init writes
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


def test_classic_noinit_codes_and_names(setup):
    mock.set_noinit_behaviour("classic")
    for call, cname in (("start", "aclprofStart"), ("stop", "aclprofStop"), ("finalize", "aclprofFinalize")):
        with pytest.raises(aclprof.ProfNotRunError) as info:
            _do(call, setup, "OFF")
        assert info.value.code == 100043 and info.value.function == cname
        assert "ACL_ERROR_PROF_NOT_RUN" in str(info.value)
        assert mock.mode() == "OFF"
    assert list(Path(setup.tmp).glob("**/PROF_*")) == []


def test_classic_is_the_default():
    mock.reset()
    with pytest.raises(aclprof.ProfNotRunError):
        ll.finalize()


def test_modern_start_without_init_uses_acl_prof_path(setup, tmp_path, list_prof_dirs):
    mock.set_noinit_behaviour("modern")
    target = tmp_path / "auto"
    ll.set_config(ConfigType.PATH, str(target))
    ll.start(setup.config)
    assert mock.mode() == "API_CTRL"  # auto-initialised
    assert len(list_prof_dirs(target)) == 1
    ll.stop(setup.config)
    ll.finalize()
    assert mock.mode() == "OFF"


def test_modern_start_without_init_or_path_uses_cwd(setup, tmp_path, monkeypatch, list_prof_dirs):
    mock.set_noinit_behaviour("modern")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    ll.start(setup.config)
    assert mock.mode() == "API_CTRL"
    ll.stop(setup.config)
    ll.finalize()
    assert len(list_prof_dirs(cwd)) == 1


def test_modern_stop_and_finalize_without_init_are_noops(setup):
    mock.set_noinit_behaviour("modern")
    ll.stop(setup.config)
    assert mock.mode() == "OFF"
    ll.finalize()
    assert mock.mode() == "OFF"
    ll.finalize()  # still nothing to do
    assert mock.mode() == "OFF"
    assert list(Path(setup.tmp).glob("**/PROF_*")) == []


def test_init_finalize_cycle_repeats(setup, tmp_path, list_prof_dirs):
    # DOC: the Init/Finalize pair may be repeated, e.g. to change the output path.
    for i in range(3):
        ll.init(tmp_path / f"p{i}")
        ll.start(setup.config)
        ll.stop(setup.config)
        ll.finalize()
        assert mock.mode() == "OFF"
        assert len(list_prof_dirs(tmp_path / f"p{i}")) == 1


def test_start_in_subscribe_mode_with_default_config(setup):
    setup.enter("SUBSCRIBE")
    with pytest.raises(aclprof.ApiConflictError):
        ll.start(None)
    with pytest.raises(aclprof.ApiConflictError):
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


def test_running_session_blocks_nothing_but_init(setup, tmp_path):
    setup.enter("API_CTRL")
    ll.start(setup.config)
    with pytest.raises(aclprof.RepeatInitializeError):
        ll.init(tmp_path / "other")
    model_id = setup.load_model()
    with pytest.raises(aclprof.ApiConflictError):
        ll.model_subscribe(model_id, setup.subscribe_config())
    assert mock.mode() == "API_CTRL"
    # Finalize with a session still running ends it (the real one finalises every task).
    ll.finalize()
    assert mock.mode() == "OFF"


def test_default_config_start_stop(setup, tmp_path, list_prof_dirs, device_config):
    # Start(NULL): every device of the mock driver, the platform's default data types.
    mock.set_device_count(3)
    ll.init(tmp_path / "d")
    ll.start(None)
    ll.stop(None)
    ll.finalize()
    (prof,) = list_prof_dirs(tmp_path / "d")
    assert sorted(p.name for p in prof.iterdir()) == ["device_0", "device_1", "device_2", "host"]
    assert device_config(prof, 2)["devices"] == [0, 1, 2]


@pytest.mark.parametrize("value, finalize_ok", [("modern", True), ("classic", False), ("", False)])
def test_noinit_default_from_the_environment(run_python, make_env, value, finalize_ok):
    code = (
        "import aclprof, aclprof.mock\n"
        "from aclprof import lowlevel as ll\n"
        "try:\n"
        "    ll.finalize(); print('ok')\n"
        "except aclprof.ProfNotRunError:\n"
        "    print('not run')\n"
        "aclprof.mock.reset()  # the variable is read again at reset\n"
        "try:\n"
        "    ll.finalize(); print('ok')\n"
        "except aclprof.ProfNotRunError:\n"
        "    print('not run')\n"
    )
    proc = run_python(code, env=make_env(ACLPROF_BACKEND="mock", ACLMOCK_NOINIT=value))
    assert proc.returncode == 0, proc.stderr
    expected = "ok" if finalize_ok else "not run"
    assert proc.stdout.splitlines() == [expected, expected]
