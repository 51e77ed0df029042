"""The test suite's own output (issue 10): daemon log lines never appear in pytest's output
(between the dots); an in-process daemon's lines go to the running test's log file, which a
failing test's report shows."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.procs import REPO, TESTS, env

pytestmark = pytest.mark.timeout(90)


def _pytest(tmp_path, *args: str) -> subprocess.CompletedProcess:
    # -s: no capture at all, so any line a daemon writes to stdout or stderr would show here;
    # its own basetemp, so it never rotates this session's temporary directories
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "-p", "no:cacheprovider",
                           f"--basetemp={tmp_path / 'inner'}", *args], cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=80)


def test_in_process_daemon_logs_never_reach_pytest_output(tmp_path):
    p = _pytest(tmp_path, str(TESTS / "helpers" / "daemon_log_case.py") + "::test_agent_comes_and_goes")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "1 passed" in out
    assert "connection closed" not in out and "quiet-case" not in out, out[-3000:]


def test_a_failing_test_shows_its_daemon_log(tmp_path):
    p = _pytest(tmp_path, str(TESTS / "helpers" / "daemon_log_case.py") + "::test_fails_after_the_daemon_logged")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "planned failure" in p.stdout
    section = p.stdout.split("Captured daemon log (", 1)
    assert "test_fails_after_the_daemon_logged.log)" in section[-1]
    assert len(section) == 2, p.stdout[-3000:]
    assert '"event": "connection closed"' in section[1] and '"service": "quiet-case"' in section[1]


def test_a_failing_test_shows_the_end_of_a_running_child_daemons_log(tmp_path):
    p = _pytest(tmp_path, str(TESTS / "helpers" / "daemon_log_case.py") + "::test_fails_with_a_child_daemon_running")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    section = p.stdout.split("Captured child daemon log (", 1)
    assert len(section) == 2, p.stdout[-3000:]
    assert '"event": "listening"' in section[1] or '"event":"listening"' in section[1]
