"""Shared fixtures: every test runs against the bundled mock through the real cffi binding.

- The mock is selected before anything loads a library, and environment variables that
  would change the mock's or aclprof's defaults are removed first.
- ``_fresh_mock`` (autouse) resets the mock and aclprof's msproftx state before and after
  every test, so nothing leaks from one test into the next.
- ``out_dir`` is an output directory that does not exist yet (aclprof creates it).
- ``tx_events`` / ``device_config`` / ``session_info`` read back what the mock wrote into a
  ``PROF_*`` directory (format: mock_acl/README.md).
- ``run_python`` runs a snippet in a fresh interpreter, for what is cached per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

# Before aclprof is imported: these would change the defaults the tests expect (aclprof.api.markers
# reads ACLPROF_TX_DISABLE at import, the mock reads ACLMOCK_* at load and at reset).
for _var in [v for v in os.environ if v.startswith("ACLMOCK_")] + ["ACLPROF_TX_DISABLE", "ACLPROF_LIBRARY"]:
    os.environ.pop(_var, None)
os.environ["ACLPROF_BACKEND"] = "mock"  # inherited by subprocesses unless they override it
# Subprocesses run `python -m aclprof ...` / `python -m daemon ...`, some from the checkout's
# root: without this, -m puts the current directory first on sys.path and they would import
# the unbuilt source tree instead of the installed package (Python 3.11+).
os.environ["PYTHONSAFEPATH"] = "1"

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import aclprof  # noqa: E402
import aclprof.mock  # noqa: E402
import aclprof.api.markers  # noqa: E402

aclprof.use_mock()

# Hypothesis: no deadline (CI machines are slow and shared); the autouse reset fixture is
# function-scoped on purpose, and tests using @given reset state themselves where needed.
settings.register_profile(
    "aclprof", deadline=None, max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile("aclprof")

REPO = Path(__file__).resolve().parent.parent
CDEFS = REPO / "cdefs"

# tests/bench holds scripts, not tests. Ignoring it here also keeps pytest from importing
# tests/bench/conftest.py, which would otherwise shadow this module as "conftest" for the
# test modules that do `from conftest import ...`.
collect_ignore = ["bench"]


def pytest_report_header(config):
    info = aclprof.library_info()
    return [f"aclprof {aclprof.__version__} from {Path(aclprof.__file__).parent}",
            f"library: {info.name} at {info.path}"]


def _reset_all() -> None:
    aclprof.set_strict(False)
    aclprof.mock.reset()  # also tells aclprof's stamp cache that the session is gone
    # This thread's push/range stacks (pushes a test left open, e.g. outside a session).
    aclprof.api.markers._clear_thread_state()


@pytest.fixture(autouse=True)
def _fresh_mock():
    _reset_all()
    yield
    _reset_all()


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """An output directory for a session (not created: aclprof creates it)."""
    return tmp_path / "out"


# ---- reading back what the mock wrote ------------------------------------------------------

def read_tx_events(prof_dir: Path) -> list[dict]:
    """Every event of ``host/msproftx.jsonl`` (marks, push/pop pairs, ranges, steps ...)."""
    path = Path(prof_dir) / "host" / "msproftx.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_device_config(prof_dir: Path, device: int) -> dict:
    """``device_<id>/mock_config.json``: the configuration the device ran with."""
    return json.loads((Path(prof_dir) / f"device_{device}" / "mock_config.json").read_text())


def read_session(prof_dir: Path) -> dict:
    """``host/mock_session.json``: the session's start (and stop, once stopped)."""
    return json.loads((Path(prof_dir) / "host" / "mock_session.json").read_text())


def prof_dirs(parent: Path) -> list[Path]:
    """The PROF_* directories directly under ``parent``, sorted by name."""
    if not Path(parent).is_dir():
        return []
    return sorted(p for p in Path(parent).iterdir() if p.name.startswith("PROF_"))


@pytest.fixture
def tx_events():
    return read_tx_events


@pytest.fixture
def device_config():
    return read_device_config


@pytest.fixture
def session_info():
    return read_session


@pytest.fixture
def list_prof_dirs():
    return prof_dirs


# ---- subprocesses -----------------------------------------------------------------------

def clean_env(**overrides: str | None) -> dict[str, str]:
    """os.environ without any variable that steers the loader or the mock, plus overrides
    (a value of None removes the variable)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACLPROF_", "ACLMOCK_", "ASCEND_"))}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.fixture
def make_env():
    return clean_env


@pytest.fixture
def run_python(tmp_path: Path):
    """Run ``code`` in a fresh interpreter; returns the CompletedProcess.

    The working directory is a temporary one, so that ``python -c`` can never import the
    unbuilt source tree instead of the installed package.
    """

    def run(code: str, env: dict[str, str] | None = None, timeout: float = 60,
            args: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable] + (args if args is not None else ["-c", code])
        return subprocess.run(cmd, env=env if env is not None else clean_env(ACLPROF_BACKEND="mock"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=timeout)

    return run


# ---- operator subscription (test_subscription*.py, test_decoder.py) ----------------------

class Emitted(NamedTuple):
    """One line of the mock's emit log (format: mock_acl/src/subscribe_log.c ``sub_log_record``)."""

    model_id: int
    op_index: int
    name_bytes: bytes
    type_bytes: bytes
    start: int
    end: int
    duration: int
    flag: int
    thread_id: int
    device_id: int
    corrupt: bool

    @property
    def name(self) -> str:
        return self.name_bytes.decode("utf-8", "backslashreplace")

    @property
    def type(self) -> str:
        return self.type_bytes.decode("utf-8", "backslashreplace")

    def key(self) -> tuple:
        """Comparable with :func:`record_key` of a delivered OpRecord."""
        return (self.model_id, self.name, self.type, self.start, self.end, self.duration,
                self.flag, self.thread_id, self.device_id)


def record_key(rec) -> tuple:
    """An OpRecord as the tuple :meth:`Emitted.key` gives (execution_time is not logged)."""
    return (rec.model_id, rec.op_name, rec.op_type, rec.start, rec.end, rec.duration,
            rec.flag, rec.thread_id, rec.device_id)


def read_emit_log(path: Path) -> list[Emitted]:
    """Every record the mock emitted while the log was on, in emission order."""
    out = []
    for line in Path(path).read_text(encoding="ascii").splitlines():
        f = line.split("\t")
        assert len(f) == 11, f"malformed emit log line {line!r}"
        out.append(Emitted(int(f[0]), int(f[1]), bytes.fromhex(f[2]), bytes.fromhex(f[3]),
                           int(f[4]), int(f[5]), int(f[6]), int(f[7]), int(f[8]), int(f[9]),
                           f[10] == "1"))
    return out


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def aclprof_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("aclprof-")]


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves an fd open or an ``aclprof-*`` thread running."""
    before = open_fds()
    yield
    assert aclprof_threads() == [], "a subscription thread is still running"
    leaked = open_fds() - before
    assert not leaked, f"fds leaked: {sorted(leaked)}"


class EmitLog:
    """The mock's own account of the records it emitted (``aclprof.mock.set_emit_log``)."""

    def __init__(self, path: Path):
        self.path = path

    def read(self, model_id: int | None = None) -> list[Emitted]:
        lines = read_emit_log(self.path) if self.path.exists() else []
        return [e for e in lines if model_id is None or e.model_id == model_id]


@pytest.fixture
def emit_log(tmp_path: Path, no_leaks) -> EmitLog:
    path = tmp_path / "emit.log"
    aclprof.mock.set_emit_log(path)
    yield EmitLog(path)
    aclprof.mock.set_emit_log(None)  # closes the log's fd before no_leaks counts
