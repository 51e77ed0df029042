"""Shared fixtures: every test runs against the bundled mock through the real cffi binding.
The helpers the tests import live in the ``helpers`` package; this module holds fixtures only.

- The mock is selected before anything loads a library, and environment variables that
  would change the mock's or aclprof's defaults are removed first.
- ``_fresh_mock`` (autouse) resets the mock and aclprof's msproftx state before and after
  every test, so nothing leaks from one test into the next; ``_structlog_restored`` (autouse)
  puts back structlog's configuration a test changed.
- ``out_dir`` is an output directory that does not exist yet (aclprof creates it).
- ``tx_events`` / ``device_config`` / ``session_info`` read back what the mock wrote into a
  ``PROF_*`` directory (format: mock_acl/README.md).
- ``run_python`` runs a snippet in a fresh interpreter, for what is cached per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Before aclprof is imported: these would change the defaults the tests expect (aclprof.api.markers
# reads ACLPROF_TX_DISABLE at import, the mock reads ACLMOCK_* at load and at reset).
for _var in [v for v in os.environ if v.startswith("ACLMOCK_")] + ["ACLPROF_TX_DISABLE", "ACLPROF_LIBRARY"]:
    os.environ.pop(_var, None)
os.environ["ACLPROF_BACKEND"] = "mock"  # inherited by subprocesses unless they override it
# Subprocesses run `python -m aclprof ...` / `python -m aclprofd ...`, some from the checkout's
# root: without this, -m puts the current directory first on sys.path and they would import
# the unbuilt source tree instead of the installed package (Python 3.11+).
os.environ["PYTHONSAFEPATH"] = "1"

import pytest  # noqa: E402
from helpers import deployvenv  # noqa: E402
from helpers.procs import aclprof_threads, clean_env, open_fds  # noqa: E402
from helpers.profdirs import prof_dirs, read_device_config, read_session, read_tx_events  # noqa: E402
from helpers.records import EmitLog  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import aclprof  # noqa: E402
import aclprof.api.markers  # noqa: E402
import aclprof.mock  # noqa: E402

aclprof.use_mock()

# Hypothesis: no deadline (CI machines are slow and shared); the autouse reset fixture is
# function-scoped on purpose, and tests using @given reset state themselves where needed.
settings.register_profile(
    "aclprof", deadline=None, max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile("aclprof")


# tests/bench holds scripts, not tests (and its own conftest.py, which pytest must not load).
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


@pytest.fixture(autouse=True)
def _structlog_restored():
    """A test that configures structlog (an in-process CLI or daemon entry point does) leaves
    it as it found it: its output file is pytest's capture of that test, closed afterwards,
    and a later test's library logger writing to it fails ("I/O operation on closed file";
    seen in full runs, test_mutation_kills_connection after CLI tests)."""
    import structlog

    was_configured, config = structlog.is_configured(), structlog.get_config()
    yield
    if structlog.is_configured() != was_configured or structlog.get_config() != config:
        structlog.reset_defaults()
        if was_configured:
            structlog.configure(**config)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """An output directory for a session (not created: aclprof creates it)."""
    return tmp_path / "out"


# ---- reading back what the mock wrote ------------------------------------------------------

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

@pytest.fixture
def no_leaks():
    """Fails the test if it leaves an fd open or an ``aclprof-*`` thread running."""
    before = open_fds()
    yield
    assert aclprof_threads() == [], "a subscription thread is still running"
    leaked = open_fds() - before
    assert not leaked, f"fds leaked: {sorted(leaked)}"


@pytest.fixture
def emit_log(tmp_path: Path, no_leaks) -> EmitLog:
    path = tmp_path / "emit.log"
    aclprof.mock.set_emit_log(path)
    yield EmitLog(path)
    aclprof.mock.set_emit_log(None)  # closes the log's fd before no_leaks counts


# ---- daemon logs: a file per test, shown with a failure, never between the dots -------------

@pytest.fixture(scope="session", autouse=True)
def _daemon_log_dir(tmp_path_factory):
    from helpers.daemons import DAEMON_LOGS

    path = tmp_path_factory.mktemp("daemon-logs")
    DAEMON_LOGS.route(path / "session.log")  # module fixtures set up before the first test
    yield path
    DAEMON_LOGS.route(None)


@pytest.fixture(autouse=True)
def _daemon_log(request, _daemon_log_dir):
    """In-process daemons (helpers.daemons.InProcess) log into this test's file; lines that
    come after the test ended (a connection closed late) stay in it."""
    import re

    from helpers.daemons import DAEMON_LOGS

    DAEMON_LOGS.route(_daemon_log_dir / (re.sub(r"[^\w.-]+", "_", request.node.nodeid)[-150:] + ".log"))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failing call's report shows the test's daemon log (and the end of each running child
    # daemon's) like captured output; passing tests' reports stay small.
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and report.failed:
        from helpers.daemons import DAEMON_LOGS

        for title, text in DAEMON_LOGS.sections():
            report.sections.append((f"Captured {title}", text))


@pytest.fixture(scope="session")
def deploy_venv() -> Path:
    """A venv from /usr/bin/python3 with this checkout installed, that other users can run
    (:mod:`helpers.deployvenv`); made once per session, cached while the sources are unchanged."""
    try:
        return deployvenv.deploy_venv()
    except deployvenv.DeployVenvError as exc:
        pytest.fail(str(exc))
