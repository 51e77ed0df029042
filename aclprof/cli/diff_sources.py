"""The inputs of ``aclprof diff``, each read into per-op log histograms.

A source spec is one of:

- ``baseline:NAME``: a baseline the daemon saved (``aclprof baseline save NAME``);
- ``live:current``, ``live:trailing``, ``live:recent``: the daemon's regression detector
  now (its current window, its trailing baseline, or both);
- ``window:SINCE..UNTIL``: the records the daemon kept between two times (``aclprof
  export``'s times: ``-2h``, ``'10m ago'``, ISO 8601, Unix seconds, ``now``), read
  through EXPORT;
- a path to an ``aclprof export --format jsonl`` file (``-`` is stdin);
- a path to a saved baseline ``.json`` file (as in the daemon's ``baselines/`` directory);
- a directory holding ``kernel_details.csv`` files (an ``ascend`` export or a torch_npu
  profiler output: ``Type``, ``Name``, ``Duration(us)`` columns), searched recursively;
- ``requests:KEY=VALUE[,KEY=VALUE...]``: the request bills the daemon kept with these
  attributes (:mod:`aclprof.cli.diff_requests`: rows are per-request quantities).

Everything ends as :class:`Histograms`: cells ``(service, model, op_type, op_name)`` and
their dense histograms (the daemon's bins). A malformed input is a :class:`CliError` naming
the file and line; nothing is skipped silently.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from aclprof.cli.common import EXIT_UNREACHABLE, CliError, parse_time
from aclprof.cli.exportloss import lost_error
from aclprof.protocol import baselinefmt
from aclprof.protocol.quantshift import NBINS, bin_index

if TYPE_CHECKING:
    from aclprof.cli.client import Client

__all__ = ["Histograms", "load_source", "check_spec", "needs_daemon", "window_times", "LIVE", "BAD_INPUT"]

LIVE = {"current": "@current", "trailing": "@trailing", "recent": "@recent"}
_MAX_LINE = 1 << 20
#: exit status of an input diff cannot read (a malformed file or line): a usage error, like
#: a bad argument; one line on stderr, never a traceback
BAD_INPUT = EXIT_UNREACHABLE
_MAX_DURATION_NS = (1 << 63) - 1  # an int64, as the records' durations
_CHUNK = 200_000
_MAX_CSV_FILES = 1000
_MAX_CELLS = baselinefmt.MAX_ROWS  # distinct (service, model, type, name): 2.6 KB of histogram each
Cell = tuple[str, str, str, str]


@dataclass
class Histograms:
    spec: str
    cells: list[Cell]
    hists: np.ndarray
    #: the raw samples (sorted) per op type when the source keeps them (request bills): the
    #: diff then reports exact quantiles too
    samples: dict[str, np.ndarray] | None = None


def window_times(rest: str) -> tuple[float, float]:
    """``SINCE..UNTIL`` as Unix times; ValueError naming the problem."""
    since, sep, until = rest.partition("..")
    if not sep or not since.strip() or not until.strip():
        raise ValueError(f"window:{rest}: use window:SINCE..UNTIL (example: window:-2h..-1h)")
    try:
        t0, t1 = parse_time(since), parse_time(until)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"window:{rest}: {exc}") from None
    if not t0 < t1:
        raise ValueError(f"window:{rest}: SINCE must be before UNTIL")
    return t0, t1


def check_spec(text: str) -> str:
    """ValueError (argparse turns it into exit 2) for a spec that cannot be right."""
    kind, _, rest = text.partition(":")
    if kind == "window" and rest:
        window_times(rest)
    elif kind == "baseline" and rest:
        baselinefmt.check_name(rest)
    elif kind == "live" and rest:
        if rest not in LIVE:
            raise ValueError(f"live:{rest}: use live:current, live:trailing or live:recent")
    elif text != "-" and not os.path.exists(text):
        raise ValueError(f"{text!r} is neither baseline:NAME, live:WHICH, window:SINCE..UNTIL, requests:KEY=VALUE "
                         "nor an existing file or directory")
    return text


def needs_daemon(spec: str) -> bool:
    kind, _, rest = spec.partition(":")
    return kind in ("baseline", "live", "window", "requests") and bool(rest)


def load_source(spec: str, client: Client | None, stdin: IO[bytes] | None = None,
                service: str | None = None) -> Histograms:
    """The histograms of one spec; ``client`` is needed when :func:`needs_daemon`."""
    kind, _, rest = spec.partition(":")
    if kind == "window" and rest:
        if client is None:
            raise CliError(f"{spec}: needs the daemon", EXIT_UNREACHABLE)
        since, until = window_times(rest)
        filt = {"service": service} if service is not None else {}
        hist = _from_jsonl(spec, _Chunks(client.export_jsonl(since, until, filt)))
        lost = lost_error(client.export_lost, 0, record_filters=False)
        if lost is not None:  # a window with records lost to a storage failure would compare as complete
            raise CliError(f"{spec}: {lost}", lost.code)
        return hist
    if kind in ("baseline", "live") and rest:
        if client is None:
            raise CliError(f"{spec}: needs the daemon", EXIT_UNREACHABLE)
        from aclprof.protocol.wire import Kind
        name = LIVE[rest] if kind == "live" else rest
        doc = client.request(Kind.BASELINE_GET, {"name": name}, Kind.BASELINE_GET_REPLY)
        return _decoded(spec, doc)
    if spec == "-":
        return _from_jsonl(spec, stdin or sys.stdin.buffer)
    if os.path.isdir(spec):
        return _from_kernel_details(spec)
    with open(spec, "rb") as f:
        head = f.read(64).lstrip()
        f.seek(0)
        if head.startswith(b'{"format"') or spec.endswith(".json"):
            data = f.read(64 << 20)
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python's stack
                raise CliError(f"{spec}: not JSON: {_why(exc)}", BAD_INPUT) from None
            return _decoded(spec, doc)
        return _from_jsonl(spec, f)


def _decoded(spec: str, doc: Any) -> Histograms:
    try:
        cells, hists = baselinefmt.decode(doc)
    except ValueError as exc:
        raise CliError(f"{spec}: {exc}", BAD_INPUT) from None
    return Histograms(spec, cells, hists)


class _Accumulator:
    """Durations per cell, binned in chunks (no Python loop per bin, bounded lists)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.index: dict[Cell, int] = {}
        self.rows: list[np.ndarray] = []
        self.pending_cells: list[int] = []
        self.pending_ns: list[float] = []

    def add(self, cell: Cell, ns: float) -> None:
        i = self.index.get(cell)
        if i is None:
            if len(self.rows) >= _MAX_CELLS:
                raise CliError(f"{self.spec}: more than {_MAX_CELLS} distinct (service, model, op type, op name)")
            i = self.index[cell] = len(self.rows)
            self.rows.append(np.zeros(NBINS, np.float64))
        self.pending_cells.append(i)
        self.pending_ns.append(ns)
        if len(self.pending_ns) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.pending_ns:
            return
        hist = np.zeros((len(self.rows), NBINS))
        np.add.at(hist, (np.asarray(self.pending_cells), bin_index(np.asarray(self.pending_ns))), 1.0)
        for i in range(len(self.rows)):
            self.rows[i] += hist[i]
        self.pending_cells, self.pending_ns = [], []

    def result(self) -> Histograms:
        self.flush()
        hists = np.stack(self.rows) if self.rows else np.zeros((0, NBINS))
        return Histograms(self.spec, list(self.index), hists)


class _Chunks:
    """EXPORT_RECORDS payloads (whole lines each) read like a file, line by line."""

    def __init__(self, payloads: Iterable[bytes]) -> None:
        self._it = iter(payloads)
        self._lines: list[bytes] = []

    def readline(self, limit: int = -1) -> bytes:
        while not self._lines:
            payload = next(self._it, None)
            if payload is None:
                return b""
            self._lines = payload.splitlines(keepends=True)[::-1]
        return self._lines.pop()


def _lines(spec: str, f: Any) -> Iterator[tuple[int, bytes]]:
    for n, line in enumerate(iter(lambda: f.readline(_MAX_LINE + 1), b""), 1):
        if len(line) > _MAX_LINE:
            raise CliError(f"{spec}: line {n} is longer than {_MAX_LINE} bytes", BAD_INPUT)
        yield n, line


def _from_jsonl(spec: str, f: Any) -> Histograms:
    acc = _Accumulator(spec)
    for n, line in _lines(spec, f):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            if not isinstance(r, dict):
                raise ValueError("not an object")
            if r.get("kind") in ("keypoint", "request"):
                continue  # a step boundary or a request's bill (aclprof tail --json), not an op
            d = r["duration_ns"]
            if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= _MAX_DURATION_NS:
                raise ValueError(f"duration_ns must be an integer in [0, 2**63): {_short(d)}")
            cell = (_text(r.get("service")), _text(r.get("model", "")), _text(r["op_type"]), _text(r["op_name"]))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            # RecursionError: a line nested deeper than Python's stack (json.loads recurses)
            raise CliError(f"{spec}: line {n} is not an aclprof export record: {_why(exc)}", BAD_INPUT) from None
        acc.add(cell, float(d))
    return acc.result()


def _short(v: Any, limit: int = 40) -> str:
    """``repr(v)`` cut for an error line (a 400-digit number stays one readable line)."""
    text = repr(v) if not isinstance(v, int) or v.bit_length() < 200 else f"an integer of {len(str(v))} digits"
    return text if len(text) <= limit else text[:limit] + "..."


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)[:200]


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return str(v)
    raise ValueError(f"{_short(v)} is not a string")


def _csv_files(root: str) -> Iterable[str]:
    found = []
    for dirpath, _, files in os.walk(root):
        if "kernel_details.csv" in files:
            found.append(os.path.join(dirpath, "kernel_details.csv"))
            if len(found) > _MAX_CSV_FILES:
                raise CliError(f"{root}: more than {_MAX_CSV_FILES} kernel_details.csv files")
    if not found:
        raise CliError(f"{root}: no kernel_details.csv below this directory")
    return sorted(found)


def _from_kernel_details(root: str) -> Histograms:
    acc = _Accumulator(root)
    csv.field_size_limit(_MAX_LINE)
    for path in _csv_files(root):
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.DictReader(f)
            missing = {"Type", "Name", "Duration(us)"} - set(reader.fieldnames or ())
            if missing:
                raise CliError(f"{path}: no {', '.join(sorted(missing))} column (not a kernel_details.csv)",
                               BAD_INPUT)
            try:
                for r in reader:
                    us = float(r["Duration(us)"])
                    if not 0 <= us < 1e15:
                        raise ValueError(f"Duration(us) {us} out of range")
                    acc.add(("", "", r["Type"] or "", r["Name"] or ""), us * 1000.0)
            except (ValueError, TypeError, csv.Error) as exc:
                raise CliError(f"{path}: line {reader.line_num}: {exc}", BAD_INPUT) from None
    return acc.result()
