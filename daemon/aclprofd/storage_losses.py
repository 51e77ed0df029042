"""What the storage failed to write: the periods of lost records, and the log lines of a
failure (issue 17: a full disk turned STATUS unhealthy but wrote nothing to the log, and
an export of the lost period said "no records matched", exit 0).

A failure episode begins at the first failed segment write after a good one and ends at the
next good write. Its records are kept as loss periods, one per sender (host, pid, service)
per episode (a loss within ``MERGE_S`` of the sender's previous period extends that one:
a flapping disk makes one period): the receive times of the first and last lost record,
how many, and the error.
``EXPORT`` reports the periods that overlap its window and sender filter in ``END``
(``"lost"``), so ``aclprof export`` says the records of that period were lost and exits 1.

Logging: one ``error`` line when an episode begins (what failed), one ``warning`` line per
minute while it lasts (records lost so far), one ``info`` line when writes succeed again
(records lost, the period, how long). A disk that flaps between full and not full would
make a pair of lines per flush: each event is limited to 3 lines a minute, and the next
line written says how many were left out (``suppressed``; no flood, and the totals are on
every line).

The periods are saved to ``storage_losses.json`` in the data directory when an episode ends
(at most once a minute) and at close (a full disk may refuse it: logged; the in-memory list still serves exports),
and read back at start, so a restart does not forget them. At most ``MAX_PERIODS`` are
kept (the oldest are forgotten first, counted in ``forgotten``), none older than the
storage's ``max_age_s``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from .atomicfile import replace_file
from .ratelimit import LogLimiter

__all__ = ["LossPeriod", "StorageLosses", "LOSSES_FILE", "MAX_PERIODS", "MERGE_S"]

LOSSES_FILE = "storage_losses.json"
MAX_PERIODS = 1000
_STILL_FAILING_S = 60.0  # a "still failing" line this often while an episode lasts
_SAVE_EVERY_S = 60.0  # the periods file is rewritten at most this often (and at close)
MERGE_S = 60.0  # a sender's loss this soon after its previous period extends that period
_log = structlog.get_logger("aclprofd")


@dataclass
class LossPeriod:
    """Records of one sender the storage could not write during one failure episode."""

    since_ts: float  # receive time of the first lost record
    until_ts: float  # receive time of the last lost record
    records: int
    host: str
    pid: int
    service: str | None
    error: str

    @classmethod
    def from_dict(cls, d: Any) -> LossPeriod:
        """From the saved file; ValueError if it is not one of ours."""
        if not isinstance(d, dict):
            raise ValueError("a loss period is not an object")
        try:
            p = cls(float(d["since_ts"]), float(d["until_ts"]), int(d["records"]), str(d["host"]),
                    int(d["pid"]), None if d["service"] is None else str(d["service"]), str(d["error"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a loss period lacks or mistypes {exc}") from None
        if p.records < 0 or p.until_ts < p.since_ts:
            raise ValueError("a loss period has a negative count or ends before it begins")
        return p


class StorageLosses:
    """The loss periods of one data directory, and the failure episode in progress."""

    def __init__(self, directory: str, max_age_s: float) -> None:
        self.path = os.path.join(directory, LOSSES_FILE)
        self.max_age_s = max_age_s
        self.periods: list[LossPeriod] = []
        self.forgotten = 0  # periods dropped for MAX_PERIODS
        self.failing = False
        self._episode: dict[tuple[str, int, str | None], LossPeriod] = {}
        self._episode_start = 0.0
        self._episode_records = 0
        self._episode_error = ""
        self._next_still = 0.0
        self._dirty = False
        self._saved_ts = 0.0
        self._limiter = LogLimiter(burst=3, every=60.0)
        self._load()

    # ---- the episode --------------------------------------------------------------------
    def lost(self, identity: dict[str, Any], first_ts: float, last_ts: float, records: int, error: str,
             now: float | None = None) -> None:
        """``records`` of ``identity``'s (host, pid, service), received from ``first_ts`` to
        ``last_ts``, were not written because of ``error``."""
        now = time.time() if now is None else now
        key = (str(identity.get("host", "")), int(identity.get("pid") or 0), identity.get("service"))
        if not self.failing:
            self.failing = True
            self._episode = {}
            self._episode_start, self._episode_records, self._next_still = now, 0, now + _STILL_FAILING_S
            self._limiter.log("error", "storage write failing; received records are being lost",
                              error=error, data_dir=os.path.dirname(self.path), records_lost=records,
                              service=key[2], pid=key[1])
        self._episode_error = error
        self._episode_records += records
        p = self._episode.get(key) or self._recent(key, first_ts)
        if p is None:
            p = LossPeriod(first_ts, last_ts, 0, key[0], key[1], key[2], error)
            self.periods.append(p)
            if len(self.periods) > MAX_PERIODS:
                self.periods.pop(0)
                self.forgotten += 1
        self._episode[key] = p
        p.since_ts, p.until_ts = min(p.since_ts, first_ts), max(p.until_ts, last_ts)
        p.records += records
        p.error = error
        self._dirty = True
        if now >= self._next_still:
            self._next_still = now + _STILL_FAILING_S
            self._limiter.log("warning", "storage write still failing", error=error,
                              records_lost=self._episode_records, failing_s=round(now - self._episode_start, 1))

    def _recent(self, key: tuple[str, int, str | None], first_ts: float) -> LossPeriod | None:
        """The sender's last period if it ended less than ``MERGE_S`` before ``first_ts``: a
        disk that flaps between full and not makes one period, not one per flush."""
        for p in reversed(self.periods[-64:]):
            if (p.host, p.pid, p.service) == key:
                return p if first_ts - p.until_ts < MERGE_S else None
        return None

    def ok(self, now: float | None = None) -> None:
        """A segment write succeeded: an episode in progress is over."""
        if not self.failing:
            return
        now = time.time() if now is None else now
        self.failing = False
        since = min((p.since_ts for p in self._episode.values()), default=self._episode_start)
        until = max((p.until_ts for p in self._episode.values()), default=now)
        self._limiter.log("info", "storage writing again", records_lost=self._episode_records,
                          lost_since=_iso(since), lost_until=_iso(until),
                          failed_s=round(now - self._episode_start, 1), error=self._episode_error)
        self._episode = {}
        if now - self._saved_ts >= _SAVE_EVERY_S:  # a flapping disk: not an fsync per flush
            self.save(now)

    # ---- reading ------------------------------------------------------------------------
    def overlapping(self, since_ts: float | None, until_ts: float | None,
                    source_matches: Callable[[str, int, str | None], bool]) -> list[dict[str, Any]]:
        """The periods (as dicts, oldest first) with lost records in [since_ts, until_ts]
        from senders ``source_matches`` accepts."""
        return [asdict(p) for p in self.periods
                if not (since_ts is not None and p.until_ts < since_ts)
                and not (until_ts is not None and p.since_ts > until_ts)
                and source_matches(p.host, p.pid, p.service)]

    # ---- the file -----------------------------------------------------------------------
    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                obj = json.load(f)
            if not isinstance(obj, dict) or not isinstance(obj.get("periods"), list):
                raise ValueError("not an object with a list of periods")
            self.periods = [LossPeriod.from_dict(d) for d in obj["periods"]][-MAX_PERIODS:]
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:  # never fatal: the periods are a report, not data
            _log.warning("cannot read the storage loss periods; they are forgotten", path=self.path,
                         error=str(exc))
            self.periods = []

    def save(self, now: float | None = None) -> None:
        """Write the periods (those within ``max_age_s``) if they changed; a failure is logged."""
        if not self._dirty:
            return
        now = time.time() if now is None else now
        self._saved_ts = now
        cutoff = now - self.max_age_s
        self.periods = [p for p in self.periods if p.until_ts >= cutoff]
        data = json.dumps({"periods": [asdict(p) for p in self.periods]}, separators=(",", ":")).encode()
        try:
            replace_file(self.path, lambda f: f.write(data))
        except OSError as exc:
            _log.warning("cannot save the storage loss periods (kept in memory)", path=self.path,
                         error=f"{type(exc).__name__}: {exc}")
            return
        self._dirty = False


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"
