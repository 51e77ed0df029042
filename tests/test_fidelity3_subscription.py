"""Fidelity audit 3 row 1b: CANN drops the records still queued when an unsubscribe closes
the fd (no flush of its pipe uploader); ``mock.set_unsubscribe_policy("drop")`` does too.

What "exact" accounting means then: aclprof counts every record that reached the pipe
(``records_read == recordsWritten``, each delivered or counted as dropped by aclprof); the
records the library itself lost never reach the pipe, so on CANN nothing reports them. The
mock counts them (``recordsDroppedAtUnsubscribe``), and emitted = written + dropped by the
library holds exactly; their names stay in the library's name table, never fetched.
"""

from __future__ import annotations

import pytest

import aclprof
from aclprof import mock

OPS = [{"name": "conv1", "type": "Conv2D", "duration_ns": 1000}]


def _name_table() -> int:
    return mock.stats()["nameTableEntries"]


def test_policy_is_checked_and_reset(monkeypatch):
    with pytest.raises(ValueError, match="policy"):
        mock.set_unsubscribe_policy("flush")
    monkeypatch.setenv("ACLMOCK_UNSUBSCRIBE", "drop")
    mock.reset()
    model = mock.load_model(OPS)
    mock.set_writer_delay_us(1000)
    sub = aclprof.subscribe(model)
    mock.execute(model, 100)
    sub.close()
    assert mock.stats()["recordsDroppedAtUnsubscribe"] > 0
    monkeypatch.delenv("ACLMOCK_UNSUBSCRIBE")
    mock.reset()


@pytest.mark.parametrize("policy", ["drain", "drop"])
def test_subscription_counts_reconcile_when_the_library_drops(emit_log, policy):
    mock.set_unsubscribe_policy(policy)
    model = mock.load_model(OPS)
    mock.set_writer_delay_us(1000)  # 0.1 s for the 100 records: the close comes first
    sub = aclprof.subscribe(model)
    mock.execute(model, 100)
    sub.close()
    records = list(sub)
    s = mock.stats()
    st = sub.stats
    lost = s["recordsDroppedAtUnsubscribe"]
    assert len(emit_log.read()) == s["recordsEmitted"] == 100
    assert s["recordsWritten"] + lost == s["recordsEmitted"]
    assert s["recordsDropped"] == lost
    assert st.records_read == s["recordsWritten"] == len(records) + st.dropped + st.queued
    assert st.bytes_read == s["bytesWritten"] == 80 * s["recordsWritten"]
    assert _name_table() == lost  # the lost records' names were never fetched
    if policy == "drain":
        assert lost == 0 and len(records) == 100
    else:
        assert lost > 0


def test_agent_and_daemon_accounting_when_the_library_drops_at_unsubscribe(tmp_path):
    """An agent stops (unsubscribes) while the library still has records queued, and the
    library drops them as CANN does: the daemon's count + the agent's LOSS account for every
    record the library wrote, and the library's drops for the rest, exactly."""
    from helpers.daemons import Daemon
    from helpers.procs import Worker, wait_for

    daemon = Daemon()
    daemon.start()
    worker = None
    try:
        worker = Worker(daemon.socket, "--service", "drops", "--unsubscribe", "drop",
                        "--writer-delay-us", "500")
        wait_for(lambda: any(a["models"] for a in daemon.status()["agents"]), what="the agent")
        emitted = worker.cmd("burst 100")["emitted"]
        final = worker.stop()
        worker = None
        m, a = final["mock"], final["agent"]
        lost = m["recordsDroppedAtUnsubscribe"]
        assert m["recordsEmitted"] == emitted > 0
        assert lost > 0 and m["recordsWritten"] + lost == emitted
        st = wait_for(lambda: (s := daemon.status())["records_total"] + s["dropped_by_agents"]
                      == m["recordsWritten"] and s, what="every written record accounted")
        assert a["records_sent"] == st["records_total"]
    finally:
        if worker is not None:
            worker.kill()
        daemon.cleanup()
