"""The storage's loss periods and failure log lines (aclprofd.storage_losses; issue 17): a
disk that flaps between full and not full logs a bounded number of lines that still carry
every total, and makes one loss period per sender, not one per flush; the periods survive a
restart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aclprofd import ratelimit, storage_losses
from aclprofd.storage_losses import LOSSES_FILE, StorageLosses


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append((level, event, kw))

    def events(self, event: str) -> list[dict[str, Any]]:
        return [kw for _, e, kw in self.lines if e == event]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def log(monkeypatch):
    rec = _Log()
    monkeypatch.setattr(ratelimit, "_log", rec)  # LogLimiter writes through its module's logger
    monkeypatch.setattr(storage_losses, "_log", rec)
    return rec


SENDER = {"host": "h", "pid": 7, "service": "svc"}


def test_a_flapping_disk_logs_a_bounded_number_of_lines_and_one_period(tmp_path, log, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(ratelimit, "time", clock)  # the limiter's minute, without waiting for it
    losses = StorageLosses(str(tmp_path), max_age_s=7 * 86400)
    t = 1_800_000_000.0
    for i in range(200):  # fails and recovers at every flush (1 s) for 200 s
        losses.lost(SENDER, t + i, t + i + 0.5, 10, "OSError: [Errno 28] No space left on device", now=t + i)
        losses.ok(now=t + i + 0.9)
        clock.now += 1.0
    failing = log.events("storage write failing; received records are being lost")
    again = log.events("storage writing again")
    # 3 lines a minute each, over 200 s: 4 windows -> at most 12 of each, not 200
    assert 4 <= len(failing) <= 12 and 4 <= len(again) <= 12, (len(failing), len(again))
    assert sum(kw.get("suppressed", 0) for kw in again) + len(again) <= 200
    assert any(kw.get("suppressed") for kw in again), "the lines left out are counted on the next one"
    assert all(kw["records_lost"] == 10 for kw in again)  # each line carries its episode's total
    [period] = losses.periods  # one sender, losses never 60 s apart: one period
    assert (period.records, period.since_ts, period.until_ts) == (2000, t, t + 199.5)


def test_periods_are_per_sender_filtered_and_survive_a_restart(tmp_path, log):
    losses = StorageLosses(str(tmp_path), max_age_s=1e12)
    t = 1_800_000_000.0
    losses.lost(SENDER, t, t + 1, 100, "EFBIG", now=t + 1)
    losses.lost({"host": "h", "pid": 8, "service": None}, t + 2, t + 3, 50, "EFBIG", now=t + 3)
    assert not (tmp_path / LOSSES_FILE).exists()  # written once the episode is over
    losses.ok(now=t + 4)
    losses.lost(SENDER, t + 500, t + 501, 5, "EIO", now=t + 501)  # a later failure: a new period
    losses.save()
    again = StorageLosses(str(tmp_path), max_age_s=1e12)
    assert [(p.pid, p.records, p.error) for p in again.periods] == [(7, 100, "EFBIG"), (8, 50, "EFBIG"),
                                                                    (7, 5, "EIO")]
    every = lambda host, pid, service: True  # noqa: E731
    assert [p["records"] for p in again.overlapping(t + 1.5, t + 2.5, every)] == [50]
    assert [p["records"] for p in again.overlapping(None, None, lambda h, pid, s: s == "svc")] == [100, 5]
    assert again.overlapping(t + 600, None, every) == []


def test_an_unreadable_losses_file_is_logged_not_fatal(tmp_path, log):
    (tmp_path / LOSSES_FILE).write_text(json.dumps({"periods": [{"since_ts": 1}]}))
    assert StorageLosses(str(tmp_path), max_age_s=1.0).periods == []
    assert log.events("cannot read the storage loss periods; they are forgotten")


def test_a_flapping_disk_does_not_rewrite_the_file_at_every_recovery(tmp_path, log, monkeypatch):
    writes: list[str] = []
    monkeypatch.setattr(storage_losses, "replace_file", lambda path, write: writes.append(path))
    losses = StorageLosses(str(tmp_path), max_age_s=1e12)
    t = 1_800_000_000.0
    for i in range(120):
        losses.lost(SENDER, t + i, t + i, 1, "ENOSPC", now=t + i)
        losses.ok(now=t + i + 0.5)
    assert len(writes) == 2  # at the first recovery and a minute later
    losses.save()
    assert len(writes) == 3  # at close: everything
