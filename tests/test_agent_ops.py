"""What the agent tells ops engineers (issue 10): an unreachable daemon is a rate-limited
WARNING with the records dropped meanwhile; a second start() with other arguments raises;
a service's own subscribe() of a model the agent watches names the agent."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.agent_worker import FIXED_OPS
from helpers.procs import wait_for

import aclprof
from aclprof import agent as agent_mod
from aclprof import mock
from aclprof.agent import sender as sender_mod

pytestmark = pytest.mark.timeout(60)

UNREACHABLE = "aclprof daemon unreachable"


@pytest.fixture
def sock_path() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="aclp-ops-")
    yield os.path.join(d, "nobody.sock")
    import shutil

    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def agent() -> Iterator[Any]:
    yield agent_mod
    agent_mod.stop(timeout=0.5)


@pytest.fixture
def logged(caplog) -> Iterator[Callable[[], list[tuple[str, str, dict[str, str]]]]]:
    """The log records so far as (level, event, fields): through structlog if the session
    configured it, else through stdlib logging (aclprof._log picks the same way)."""
    import structlog
    import structlog.testing

    if structlog.is_configured():
        with structlog.testing.capture_logs() as cap:
            yield lambda: [(e["log_level"], e["event"], {k: str(v) for k, v in e.items()}) for e in list(cap)]
        return
    caplog.set_level(logging.INFO, logger="aclprof")

    def records() -> list[tuple[str, str, dict[str, str]]]:
        out = []
        for r in list(caplog.records):
            msg = r.getMessage()
            fields = dict(re.findall(r" (\w+)=('[^']*'|\S+)", msg))
            out.append((r.levelname.lower(), msg, {k: v.strip("'") for k, v in fields.items()}))
        return out

    yield records


def _warnings(logged) -> list[dict[str, str]]:
    return [f for level, event, f in logged() if level == "warning" and UNREACHABLE in event]


def test_unreachable_daemon_warns_once_then_rate_limited_with_drop_counts(
        sock_path, agent, logged, monkeypatch):
    # Today: 29,200 records dropped with nothing above INFO said. Now: one WARNING as soon as
    # records are dropped, none more within _WARN_EVERY however many attempts fail, then one
    # per interval with the records dropped since the previous one.
    monkeypatch.setattr(sender_mod, "_WARN_AFTER", 1000.0)
    monkeypatch.setattr(sender_mod, "_WARN_EVERY", 1000.0)
    a = agent.start(sock_path, buffer_records=100, backoff_max=0.02)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    mock.execute(model, 1000)  # 5,000 records
    mock.wait_writer_idle()
    wait_for(lambda: a.stats().records_in == 5000, what="delivery")
    wait_for(lambda: _warnings(logged), what="the first warning")
    start = a.stats().connect_failures
    wait_for(lambda: a.stats().connect_failures >= start + 20, what="20 more failed attempts")
    (first,) = _warnings(logged)
    assert first["socket"] == sock_path and "No such file" in first["error"]
    first_dropped = int(first["dropped_total"])
    assert int(first["dropped_since_last_warning"]) == first_dropped > 0

    monkeypatch.setattr(sender_mod, "_WARN_EVERY", 0.0)
    mock.execute(model, 200)  # 1,000 more, all beyond the full buffer
    mock.wait_writer_idle()
    wait_for(lambda: a.stats().records_in == 6000, what="delivery")
    wait_for(lambda: int(_warnings(logged)[-1]["dropped_total"]) == a.stats().dropped_buffer,
             what="a warning with the new drops")
    warnings = _warnings(logged)
    assert sum(int(w["dropped_since_last_warning"]) for w in warnings) == a.stats().dropped_buffer == 5900
    final = agent.stop(timeout=0.2)
    assert final.records_in == 6000 and final.dropped_buffer == 6000


def test_unreachable_daemon_warns_after_a_grace_period_without_drops(sock_path, agent, logged, monkeypatch):
    monkeypatch.setattr(sender_mod, "_WARN_AFTER", 0.2)
    a = agent.start(sock_path, backoff_max=0.05)
    wait_for(lambda: _warnings(logged), what="the warning")
    (w,) = _warnings(logged)
    assert int(w["dropped_since_last_warning"]) == 0 and float(w["unreachable_s"]) >= 0.2
    assert a.stats().connect_failures >= 2


def test_second_start_with_other_arguments_raises(sock_path, agent):
    a = agent.start(sock_path, service="svc", labels={"team": "x"}, buffer_records=1000)
    # The same arguments, or none: the running agent.
    assert agent.start(sock_path, service="svc", labels={"team": "x"}, buffer_records=1000) is a
    assert agent.start() is a
    with pytest.raises(ValueError) as info:
        agent.start(sock_path + ".other", service="svc2", buffer_records=1000, backoff_max=1.0)
    msg = str(info.value)
    for name in ("socket_path=", "service='svc2'", "backoff_max=1.0", "agent.stop()"):
        assert name in msg
    assert "buffer_records" not in msg and "labels" not in msg  # these matched
    with pytest.raises(ValueError, match=r"labels=\{'team': 'y'\}"):
        agent.start(labels={"team": "y"})
    assert agent.running() and a.service == "svc" and a.buffer_records == 1000


def test_repeat_subscribe_names_the_agent(sock_path, agent):
    agent.start(sock_path)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    with pytest.raises(aclprof.RepeatSubscribeError) as info:
        aclprof.subscribe(model)
    msg = str(info.value)
    assert "aclprof agent" in msg and f"aclprof.agent.unwatch({model})" in msg
    # Once the agent let go, the service may subscribe.
    agent.unwatch(model)
    aclprof.subscribe(model).close()
    # A plain repeat (no agent involved) keeps the generic hint.
    sub = aclprof.subscribe(model)
    try:
        with pytest.raises(aclprof.RepeatSubscribeError) as plain:
            aclprof.subscribe(model)
        assert "agent" not in str(plain.value)
    finally:
        sub.close()


def test_a_stop_that_cannot_send_says_how_many_records_it_dropped(sock_path, agent, logged):
    """stop() with no daemon: the buffered records are dropped (counted, as before) and a
    WARNING says how many; it said nothing above INFO (issue 21: a bench round lost 40,000
    records with no line at all)."""
    agent.start(sock_path)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    mock.execute(model, 100)
    mock.wait_writer_idle()
    final = agent.stop(timeout=0.2)
    assert final.records_in == 500 and final.dropped_buffer == 500
    (w,) = [f for level, event, f in logged() if level == "warning" and "could not send" in event]
    assert int(w["dropped"]) == 500 and w["connected"] == "False" and w["socket"] == sock_path
