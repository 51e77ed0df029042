"""Run only by tests/test_test_output.py in a pytest subprocess (not collected otherwise: the
name does not start with ``test_``): an in-process daemon that logs while a test runs."""

from __future__ import annotations

import pytest

from helpers.daemons import DAEMON_LOGS, InProcess, agent
from helpers.procs import wait_for
from helpers.records import make_records


def _agent_comes_and_goes() -> None:
    with InProcess() as d:
        a = agent(d.socket, service="quiet-case")
        a.send_batch(make_records(10))
        a.close()
        wait_for(lambda: "connection closed" in DAEMON_LOGS.text(), what="the daemon's 'connection closed' line")


def test_agent_comes_and_goes():
    _agent_comes_and_goes()


def test_fails_after_the_daemon_logged():
    _agent_comes_and_goes()
    raise AssertionError("planned failure")



@pytest.fixture(scope="module")
def child():
    from helpers.daemons import Daemon

    d = Daemon().start()
    yield d
    d.cleanup()


def test_fails_with_a_child_daemon_running(child):
    raise AssertionError("planned failure with a child daemon")
