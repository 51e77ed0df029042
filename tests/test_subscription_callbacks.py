"""A subscription callback that raises (issue 10): its traceback is logged once, then only
rate-limited counts; the counters stay exact. (Before: 5,000 failing records wrote 40,000
stderr lines, a traceback per record.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.agent_worker import FIXED_OPS

import aclprof
from aclprof import mock
from aclprof.api.subscription import reader as reader_mod

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def logged(caplog) -> Iterator[Any]:
    """The log records so far as (level, message, has_traceback), through structlog when the
    session configured it, else stdlib logging (aclprof._log picks the same way)."""
    import structlog
    import structlog.testing

    if structlog.is_configured():
        with structlog.testing.capture_logs() as cap:
            yield lambda: [(e["log_level"], f"{e['event']} {e}", "exc_info" in e) for e in list(cap)]
        return
    caplog.set_level(logging.INFO, logger="aclprof")
    yield lambda: [(r.levelname.lower(), r.getMessage(), bool(r.exc_info)) for r in list(caplog.records)]


def _callback_lines(logged) -> list[tuple[str, str, bool]]:
    return [rec for rec in logged() if "callback" in rec[1]]


def _run(n_iterations: int, **callbacks: Any) -> aclprof.SubscriptionStats:
    model = mock.load_model(FIXED_OPS)
    sub = aclprof.subscribe(model, **callbacks)
    try:
        mock.execute(model, n_iterations)
        mock.wait_writer_idle()
    finally:
        sub.close()
    return sub.stats


def test_failing_callback_logs_once_then_counts(logged):
    calls = 0

    def bad(record: Any) -> None:
        nonlocal calls
        calls += 1
        if calls % 10:  # 9 of 10 fail: the good ones are delivered and counted apart
            raise RuntimeError(f"bad record {calls}")

    st = _run(1000, callback=bad)  # 5,000 records
    assert st.records_read == 5000 == calls
    assert st.callback_errors == st.dropped_callback_error == 4500 and st.delivered == 500
    assert st.dropped == 4500
    lines = _callback_lines(logged)
    assert 1 <= len(lines) <= 3, lines
    first = lines[0]
    assert first[2] and "callback raised" in first[1] and "bad" in first[1]  # the traceback, once
    assert all(not tb for _, _, tb in lines[1:])
    # The summary at the reader's end carries the exact totals and the latest error.
    last = lines[-1][1]
    assert "errors_total=4500" in last.replace("'errors_total': 4500", "errors_total=4500")
    assert "RuntimeError: bad record 4999" in last


def test_failing_batch_callback_logs_once_then_counts(logged):
    def bad(batch: Any) -> None:
        raise ValueError("nope")

    st = _run(1000, batch_callback=bad)
    assert st.records_read == 5000 == st.dropped_callback_error and st.delivered == 0
    assert st.callback_errors >= 1
    lines = _callback_lines(logged)
    assert 1 <= len(lines) <= 3 and lines[0][2]
    if st.callback_errors > 1:  # one batch or several, depending on how the reads fell
        assert f"errors_total={st.callback_errors}" in lines[-1][1].replace(
            f"'errors_total': {st.callback_errors}", f"errors_total={st.callback_errors}")


def test_summaries_each_interval_add_up(logged, monkeypatch):
    # With no interval every error after the first gets its own summary line: the lines'
    # counts add up to the total (nothing is left out of the log's arithmetic).
    monkeypatch.setattr(reader_mod, "CALLBACK_ERROR_LOG_EVERY", 0.0)

    def bad(record: Any) -> None:
        raise KeyError("x")

    st = _run(4, callback=bad)
    lines = _callback_lines(logged)
    assert st.callback_errors == 20 == len(lines)
    assert all("errors_since_last=1" in m or "'errors_since_last': 1" in m for _, m, _ in lines[1:])
