"""The flight recorder's directory: ``<data_dir>/captures/``, one directory per capture,
and its bounds (count and bytes). Used from the capture worker thread only, except
:attr:`CaptureStore.published` (one immutable tuple, replaced after every change).

A capture directory is ``<YYYYmmddTHHMMSSZ>_<service>_<op_type>`` (the flag's UTC time,
then the flagged key made file-name safe), so names sort by time. It appears at once: it
is built as ``.<name>.tmp`` and renamed once ``capture.json`` is written, so a directory
with a final name is always complete. Leftover ``.*.tmp`` directories (a crash while
writing) are removed at start.

Sizes are the files' lengths (``st_size``), summed per capture when it is made or found.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from aclprof.exportfmt.ascend import path_component

__all__ = ["CaptureStore", "CaptureEntry", "NoRoom", "CAPTURE_FILE", "DIR_NAME", "capture_name", "tree_bytes"]

_log = structlog.get_logger("aclprofd")
DIR_NAME = "captures"
CAPTURE_FILE = "capture.json"
_MAX_CAPTURE_FILE = 1 << 20  # a capture.json larger than this is not ours: listed as unreadable
_MAX_TEXT = 256  # characters of a string field listed in STATUS


class NoRoom(Exception):
    """No capture may be deleted to make room: the new one is not taken (counted, logged)."""


@dataclass(frozen=True)
class CaptureEntry:
    """One capture on disk, as STATUS lists it."""

    name: str
    bytes: int
    summary: dict[str, Any] = field(default_factory=dict)  # from capture.json (summary_of)

    def listing(self, root: str) -> dict[str, Any]:
        return {"name": self.name, "path": os.path.join(root, self.name), "bytes": self.bytes, **self.summary}


def capture_name(flag_ts: float, service: str, op_type: str) -> str:
    """``<UTC time>_<service>_<op_type>``; each part file-name safe and bounded."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(flag_ts))
    return f"{stamp}_{path_component(service or 'none', 48)}_{path_component(op_type or 'none', 48)}"


def tree_bytes(path: str) -> int:
    """Sum of the file lengths below ``path`` (symlinks not followed; vanished files skipped)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def summary_of(doc: Any) -> dict[str, Any]:
    """What STATUS lists of a capture.json document. Tolerant and bounded: a missing or
    mistyped field is None, strings are cut to 256 characters (a damaged or foreign file
    must not make STATUS large), ``readable`` is false when it is not a JSON object."""
    readable = isinstance(doc, dict)
    doc = _obj(doc)
    flag, window, records = (_obj(doc.get(k)) for k in ("flag", "window", "records"))
    written = records.get("written")
    return {"flag_ts": _number(flag.get("since_ts")), "service": _text(flag.get("service")),
            "model": _text(flag.get("model")), "op_type": _text(flag.get("op_type")),
            "quantile": _text(flag.get("quantile")), "shift": _number(flag.get("shift")),
            "lower": _number(flag.get("lower")), "upper": _number(flag.get("upper")),
            "since_ts": _number(window.get("since_ts")), "until_ts": _number(window.get("until_ts")),
            "records": written if type(written) is int else None,
            "truncated": doc.get("truncated") if isinstance(doc.get("truncated"), bool) else None,
            "trigger": _text(doc.get("trigger")) or "regression", "failure": _failure(doc.get("failure")),
            "requests": _requests(doc.get("requests")), "readable": readable}


def _requests(value: Any) -> list[dict[str, Any]]:
    """The first request bills of a capture (issue 25): id, op type and its device time, wall time."""
    if not isinstance(value, list):
        return []
    return [{"id": _text(b.get("id")), "op_type": _text(b.get("op_type")), "op_ns": _number(b.get("op_ns")),
             "wall_ns": _number(b.get("wall_ns"))} for b in value[:_MAX_REQUESTS] if isinstance(b, dict)]


_MAX_REQUESTS = 3


def _failure(value: Any) -> dict[str, Any] | None:
    """The op failure that started a capture: its op, type, device and code (issue 24)."""
    if not isinstance(value, dict):
        return None
    code, device = value.get("code"), value.get("device")
    return {"op_name": _text(value.get("op_name")), "op_type": _text(value.get("op_type")),
            "device": device if type(device) is int else None, "code": code if type(code) is int else None,
            "code_name": _text(value.get("code_name"))}


def _text(value: Any) -> str | None:
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    # the range first: math.isfinite of a 400-digit integer raises OverflowError
    if isinstance(value, (int, float)) and not isinstance(value, bool) and -1e300 < value < 1e300 \
            and math.isfinite(value):
        return float(value)
    return None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class CaptureStore:
    """The captures directory: the list of captures (oldest first) and the bounds."""

    def __init__(self, data_dir: str) -> None:
        self.root = os.path.join(data_dir, DIR_NAME)
        self.entries: list[CaptureEntry] = []
        self.published: tuple[CaptureEntry, ...] = ()
        self.evicted = 0  # captures deleted for the bounds
        #: (name, why) of what scan() found in the directory and left out of the list (a file,
        #: a symlink, an entry it could not read): counted and logged by the recorder
        self.skipped: list[tuple[str, str]] = []

    def scan(self) -> None:
        """Read what a previous run left (the bounds count it). A missing directory is an
        empty list; one that cannot be read raises OSError (the caller counts it)."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            names = []
        entries = []
        for name in names:
            path = os.path.join(self.root, name)
            try:
                if not os.path.isdir(path) or os.path.islink(path):
                    self.skipped.append((name, "not a capture directory"))
                    continue
                if name.startswith("."):
                    if name.endswith(".tmp"):  # a capture being written when the daemon died
                        shutil.rmtree(path, ignore_errors=True)
                    continue
                entries.append(CaptureEntry(name, tree_bytes(path), _read_summary(path)))
            except Exception as exc:  # anything in the directory: skipped and said, never the thread's end
                self.skipped.append((name, f"{type(exc).__name__}: {exc}"[:200]))
        self.entries = entries
        self.publish()

    def publish(self) -> None:
        self.published = tuple(self.entries)

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    def make_room(self, max_count: int, max_bytes: int, need: int,
                  keep: Callable[[CaptureEntry], bool] = lambda e: False) -> int:
        """Delete the oldest captures (except those ``keep`` names) until one more fits the
        count and, if possible, ``need`` bytes fit too; returns the bytes the new capture may
        take (at most ``max_bytes``). NoRoom if the count or any byte cannot be made free."""
        for victim in [e for e in self.entries if not keep(e)]:
            if len(self.entries) < max_count and self.bytes + need <= max_bytes:
                break
            self._delete(victim)
        if len(self.entries) >= max_count or self.bytes >= max_bytes:
            raise NoRoom(f"the {len(self.entries)} kept captures ({self.bytes} bytes; capture_max_count "
                         f"{max_count}, capture_max_size {max_bytes}) all belong to the same event")
        return max_bytes - self.bytes

    def enforce(self, max_count: int, max_bytes: int, keep: Callable[[CaptureEntry], bool]) -> None:
        """After a capture was added: the oldest others (except those ``keep`` names) go while
        a bound is passed."""
        for victim in [e for e in self.entries if not keep(e)]:
            if len(self.entries) <= max_count and self.bytes <= max_bytes:
                break
            self._delete(victim)

    def _delete(self, entry: CaptureEntry) -> None:
        path = os.path.join(self.root, entry.name)
        shutil.rmtree(path, ignore_errors=True)
        self.entries.remove(entry)  # gone from the bounds even if a file resisted (logged)
        self.evicted += 1
        if os.path.exists(path):
            _log.error("cannot delete an old capture; it stays on disk but is no longer counted", path=path)
        self.publish()

    def add(self, name: str, summary: dict[str, Any]) -> CaptureEntry:
        entry = CaptureEntry(name, tree_bytes(os.path.join(self.root, name)), summary)
        self.entries.append(entry)  # the newest: after the others (names sort by second only)
        self.publish()
        return entry

    def unique_name(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``... when taken (two flags in one second)."""
        name, n = base, 2
        while os.path.lexists(os.path.join(self.root, name)):
            name, n = f"{base}-{n}", n + 1
        return name


def _read_summary(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, CAPTURE_FILE), "rb") as f:
            data = f.read(_MAX_CAPTURE_FILE + 1)
        if len(data) > _MAX_CAPTURE_FILE:
            return summary_of(None)
        return summary_of(json.loads(data))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested deeper than the stack
        return summary_of(None)
