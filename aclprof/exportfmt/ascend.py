"""The directories torch_npu's profiler writes (``ascend``), built from export records:
what ``aclprof export --format ascend`` (:mod:`aclprof.cli.export_ascend`) and the daemon's
flight recorder (:mod:`aclprofd.capture.recorder`) both write. Pure formatting and file writing into
a directory given by fd; nothing here talks to the daemon or knows about the command line.

One directory per profiled process (torch_npu writes one per rank)::

    <host>_<pid>_<YYYYmmddHHMMSS>_ascend_pt/
        profiler_info.json            collection level (Level0) and what aclprof filled in
        profiler_metadata.json        service, host and pid (torch_npu's add_metadata file)
        ASCEND_PROFILER_OUTPUT/
            kernel_details.csv        one row per op record
            op_statistic.csv          one row per op type
            trace_view.json           Chrome trace: "Ascend Hardware", "Overlap Analysis", "Step Trace"

The columns are torch_npu's at profiler level 0 (``Device_id, Name, Type, Accelerator Core,
Start Time(us), Duration(us), Wait Time(us), Block Num`` and ``OP Type, Core Type, Count,
Total Time(us), Min Time(us), Avg Time(us), Max Time(us), Ratio(%)``). What the operator
subscription does not report is written the way msprof writes a field it did not collect:
``Accelerator Core``/``Core Type`` ``N/A`` (msprof's value for Task Type at task_time l0; the
real values are AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, MIX_AIV, ...), ``Block Num`` 0.
README.md "Exporting for the Ascend tools" lists every field and where it comes from.
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, TextIO

import numpy as np

from aclprof.protocol.safetext import safe

from .chrome import TID_STRIDE  # thread of device d, model m: as `--format chrome`
from .tally import tally

__all__ = ["KERNEL_DETAILS_COLUMNS", "OP_STATISTIC_COLUMNS", "NOT_COLLECTED", "OUTPUT_DIR", "HARDWARE_PID",
           "OVERLAP_PID", "STEP_PID", "TID_STRIDE", "format_us", "path_component", "process_dir_name",
           "kernel_row", "op_statistic_rows", "busy_intervals", "span_openers", "AscendWriter"]

#: torch_npu's kernel_details.csv at profiler level 0 (CsvHeaders.OP_SUMMARY_KERNEL_BASE_HEADERS).
KERNEL_DETAILS_COLUMNS = ["Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                          "Wait Time(us)", "Block Num"]
#: torch_npu's op_statistic.csv (msprof's op_statistic without Device_id and Model Name).
OP_STATISTIC_COLUMNS = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                        "Max Time(us)", "Ratio(%)"]
#: What msprof writes for a Task Type it did not collect (task_time l0).
NOT_COLLECTED = "N/A"
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"

# Chrome trace processes inside one trace_view.json (each file is one inference process).
HARDWARE_PID, OVERLAP_PID, STEP_PID = 1, 2, 3
_COMPUTING_TID, _FREE_TID = 1, 4  # torch_npu's Overlap Analysis threads (2, 3: communication)
_MAX_OPEN_PROCESSES = 32  # open file pairs; more processes are reopened for append
_DIR_MODE, _FILE_MODE = 0o777, 0o666  # less the umask, as mkdir and open would create them


# -- pure formatting -------------------------------------------------------------------------

def format_us(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals (``1234567`` -> ``"1234.567"``),
    as torch_npu writes times: no float rounding of large device timestamps."""
    if ns >= 0:
        return f"{ns // 1000}.{ns % 1000:03d}"
    return "-" + format_us(-ns)


def _number(value: float) -> str:
    """A statistic as torch_npu prints it: at most three decimals (``12.674``, ``100.0``)."""
    return repr(round(float(value), 3))


_NOT_PORTABLE = re.compile(r"[^A-Za-z0-9.-]")


def path_component(text: str, limit: int = 64) -> str:
    """A peer string (the host name) made one safe file name part: only ``[A-Za-z0-9.-]``
    (``_`` separates the name's fields, so it is replaced too), at most ``limit``
    characters, never empty and never starting with a dot."""
    s = _NOT_PORTABLE.sub("-", text)[:limit]
    if not s or s.startswith("."):
        s = "h" + s[: limit - 1]
    return s


def process_dir_name(host: str, pid: int, first_ts: float) -> str:
    """``<host>_<pid>_<YYYYmmddHHMMSS>_ascend_pt``, torch_npu's ``{hostname}_{pid}_{time}``
    worker name; the time is the first exported record's receive time (local, like torch_npu)."""
    try:
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(first_ts))
    except (OverflowError, OSError, ValueError):  # not a time: still a valid, sortable name
        stamp = "0" * 14
    return f"{path_component(host)}_{int(pid)}_{stamp}_ascend_pt"


def kernel_row(device: int, name: str, op_type: str, start_ns: int, dur_ns: int, wait_ns: int) -> list[Any]:
    """One kernel_details.csv row (names already made safe; ``wait_ns``: the gap after the
    previous op of the same model on the same device, see :class:`_Process`)."""
    return [device, name, op_type, NOT_COLLECTED, format_us(start_ns), format_us(dur_ns), format_us(wait_ns), 0]


def op_statistic_rows(stats: dict[str, list[int]]) -> list[list[Any]]:
    """op_statistic.csv rows of ``{op_type: [count, total_ns, min_ns, max_ns]}``, by total
    time descending; ``Ratio(%)`` is the type's share of all op time in the file."""
    grand = sum(g[1] for g in stats.values()) or 1
    rows = []
    for op_type, (count, total, lo, hi) in sorted(stats.items(), key=lambda kv: (-kv[1][1], kv[0])):
        rows.append([op_type, NOT_COLLECTED, count, _number(total / 1e3), _number(lo / 1e3),
                     _number(total / count / 1e3), _number(hi / 1e3), _number(100.0 * total / grand)])
    return rows


def _sorted_openers(starts: np.ndarray, ends: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ops sorted by start (``order``, ``s``), how far the union reaches at each
    (``reach``), and which of them begin a busy interval (``new``), in that sorted order.
    Non-empty input only."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum(ends[order], starts[order])
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    return order, s, reach, new


def busy_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals ``[starts[i], ends[i])`` as sorted disjoint intervals
    (touching intervals are merged): what the "Computing" row of Overlap Analysis shows."""
    if len(starts) == 0:
        return starts[:0], ends[:0]
    _, s, reach, new = _sorted_openers(starts, ends)
    last = np.empty(len(s), dtype=bool)
    last[-1] = True
    last[:-1] = new[1:]
    return s[new], reach[last]


def span_openers(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which ops begin one of :func:`busy_intervals`' intervals: a boolean per op, in the
    ops' own order (the flight recorder sizes a capture's Overlap Analysis by it)."""
    out = np.zeros(len(starts), dtype=bool)
    if len(starts):
        order, _, _, new = _sorted_openers(starts, ends)
        out[order] = new
    return out


def _event(obj: dict[str, Any]) -> str:
    # ensure_ascii: the file is plain ASCII whatever the names (safe() already escaped the
    # characters that no encoder or viewer should meet)
    return json.dumps(obj, separators=(",", ":"))


def _meta(kind: str, pid: int, tid: int, args: dict[str, Any]) -> str:
    return _event({"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args})


class _Names:
    """Peer strings as written: ``safe()`` text and its JSON string, computed once per
    distinct string (op names repeat every inference). Bounded: a flood of distinct names
    only costs the recomputation."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, str]] = {}

    def get(self, raw: Any) -> tuple[str, str]:
        hit = self._cache.get(raw)
        if hit is None:
            text = safe(raw)
            hit = (text, json.dumps(text))
            if len(self._cache) >= self.LIMIT:
                self._cache.clear()
            self._cache[raw] = hit
        return hit


# an op on the "Ascend Hardware" process, and a span of "Overlap Analysis": templates, as
# json.dumps per record would be most of the export's time (the names come JSON-quoted)
_KERNEL = ('{"ph":"X","name":%s,"pid":' + str(HARDWARE_PID) + ',"tid":%d,"ts":"%s","dur":%r,'
           '"args":{"Model Id":%d,"Device Id":%d,"Type":%s,"Task Type":"' + NOT_COLLECTED + '","Thread Id":%s}}')
_SPAN = '{"ph":"X","name":"%s","pid":' + str(OVERLAP_PID) + ',"tid":%d,"ts":"%s","dur":%r}'


# -- one process -----------------------------------------------------------------------------

class _Process:
    """What one inference process's directory needs beyond the rows already written."""

    def __init__(self, name: str, r: dict[str, Any]):
        self.name = name
        self.host, self.pid = safe(r.get("host", "?")), int(r.get("pid", 0))
        self.service = None if r.get("service") is None else safe(r["service"])
        self.first_ts = self.last_ts = float(r.get("ts", 0.0))
        self.stats: dict[str, list[int]] = {}
        self.threads: set[tuple[int, int]] = set()
        self.starts, self.ends = array("q"), array("q")
        self.prev_end: dict[tuple[int, int], int] = {}
        self.steps = 0
        self.ops = 0
        self.trace_events = 0

    def op(self, r: dict[str, Any], names: _Names) -> tuple[list[Any], str]:
        """Account for an op record; its kernel_details row and trace event."""
        device, model = int(r.get("device", 0)), int(r.get("model", 0))
        start = int(r.get("start", 0))
        dur = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
        # Wait Time is the gap since the previous task on the stream; the stream is not
        # reported, and a model's ops run in order on its device: the previous op of the
        # same (device, model) in arrival order stands in for it (0 for the first, or when
        # they overlap).
        prev = self.prev_end.get((device, model))
        wait = start - prev if prev is not None and start > prev else 0
        self.prev_end[(device, model)] = start + dur
        op_type, type_json = names.get(r.get("op_type", "?"))
        op_name, name_json = names.get(r.get("op_name", "?"))
        tally(self.stats, op_type, dur)
        self.starts.append(start)
        self.ends.append(start + dur)
        self.threads.add((device, model))
        self.ops += 1
        thread_id = r.get("thread_id")
        event = _KERNEL % (name_json, device * TID_STRIDE + model, format_us(start), dur / 1e3, model, device,
                           type_json, thread_id if type(thread_id) is int else json.dumps(thread_id))
        return kernel_row(device, op_name, op_type, start, dur, wait), event

    def step(self, r: dict[str, Any]) -> str:
        """A step keypoint record as a "Step Trace" event (not a kernel, not in the csv files)."""
        self.steps += 1
        start = int(r.get("start", 0))
        dur = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
        return _event({"ph": "X", "name": f"Step {self.steps}", "pid": STEP_PID, "tid": 0, "ts": format_us(start),
                       "dur": dur / 1e3, "args": {"Model Id": int(r.get("model", 0)),
                                                  "Device Id": int(r.get("device", 0))}})

    def closing_events(self) -> list[str]:
        """Process/thread names and the Overlap Analysis rows, written after the records."""
        out = [_meta("process_name", HARDWARE_PID, 0, {"name": "Ascend Hardware"}),
               _meta("process_labels", HARDWARE_PID, 0, {"labels": "NPU"}),
               _meta("process_sort_index", HARDWARE_PID, 0, {"sort_index": HARDWARE_PID})]
        for device, model in sorted(self.threads):
            tid = device * TID_STRIDE + model
            out.append(_meta("thread_name", HARDWARE_PID, tid, {"name": f"Device {device} Model {model}"}))
            out.append(_meta("thread_sort_index", HARDWARE_PID, tid, {"sort_index": tid}))
        out += [_meta("process_name", OVERLAP_PID, 0, {"name": "Overlap Analysis"}),
                _meta("process_sort_index", OVERLAP_PID, 0, {"sort_index": OVERLAP_PID}),
                _meta("thread_name", OVERLAP_PID, _COMPUTING_TID, {"name": "Computing"}),
                _meta("thread_sort_index", OVERLAP_PID, _COMPUTING_TID, {"sort_index": _COMPUTING_TID}),
                _meta("thread_name", OVERLAP_PID, _FREE_TID, {"name": "Free"}),
                _meta("thread_sort_index", OVERLAP_PID, _FREE_TID, {"sort_index": _FREE_TID})]
        if self.steps:
            out += [_meta("process_name", STEP_PID, 0, {"name": "Step Trace"}),
                    _meta("process_sort_index", STEP_PID, 0, {"sort_index": STEP_PID}),
                    _meta("thread_name", STEP_PID, 0, {"name": "Steps"})]
        s, e = busy_intervals(np.frombuffer(self.starts, dtype=np.int64), np.frombuffer(self.ends, dtype=np.int64))
        starts, ends = s.tolist(), e.tolist()
        for i, (b, f) in enumerate(zip(starts, ends)):
            out.append(_SPAN % ("Computing", _COMPUTING_TID, format_us(b), (f - b) / 1e3))
            if i + 1 < len(starts):  # the device(s) idle between two busy spans of this process
                out.append(_SPAN % ("Free", _FREE_TID, format_us(f), (starts[i + 1] - f) / 1e3))
        return out

    def info(self, window: dict[str, Any]) -> dict[str, Any]:
        """profiler_info.json: the level the tools check, and what aclprof wrote."""
        return {"config": {"common_config": {"activities": ["ProfilerActivity.NPU"], "record_shapes": False,
                                             "profile_memory": False, "with_stack": False, "with_flops": False,
                                             "with_modules": False},
                           "experimental_config": {"_profiler_level": "Level0", "_aic_metrics": "ACL_AICORE_NONE",
                                                   "_l2_cache": False, "_data_simplification": True}},
                "aclprof": {"generator": "aclprof export --format ascend", "source": "operator subscription",
                            "host": self.host, "pid": self.pid, "service": self.service,
                            "window": window, "first_received_ts": self.first_ts, "last_received_ts": self.last_ts,
                            "op_records": self.ops, "step_records": self.steps,
                            "not_collected": ["Accelerator Core", "Core Type", "Block Num", "Input Shapes",
                                              "PMU metrics", "framework (torch) ops", "memory", "communication"]}}

    def metadata(self) -> dict[str, str]:
        """profiler_metadata.json: torch_npu's ``add_metadata`` file (string values)."""
        return {"aclprof_service": self.service or "", "aclprof_host": self.host, "aclprof_pid": str(self.pid)}


# -- the directory writer --------------------------------------------------------------------

class AscendWriter:
    """Writes the per-process directories into ``root_fd`` (an open directory that only we
    use: the staging directory). Rows are appended as records arrive; what needs all of a
    process's records (op_statistic.csv, Overlap Analysis, the JSON files) is written by
    :meth:`finish`. Every file is created with ``O_EXCL|O_NOFOLLOW`` relative to ``root_fd``."""

    def __init__(self, root_fd: int, window: dict[str, Any] | None = None):
        self._root = root_fd
        self._window = window or {}
        self._procs: dict[tuple[str, int], _Process] = {}
        self._dirnames: set[str] = set()
        self._open: OrderedDict[tuple[str, int], tuple[TextIO, Any, TextIO]] = OrderedDict()
        self._names = _Names()
        self.records = 0

    @property
    def processes(self) -> int:
        return len(self._procs)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Write the rows and events of a batch of export records."""
        for r in records:
            key = (str(r.get("host", "?")), int(r.get("pid", 0)))
            p = self._procs.get(key)
            if p is None:
                p = self._new_process(key, r)
            p.last_ts = max(p.last_ts, float(r.get("ts", p.last_ts)))
            _, kd_csv, tv = self._files(key, p)
            if r.get("kind") == "keypoint":
                event = p.step(r)
            else:
                row, event = p.op(r, self._names)
                kd_csv.writerow(row)
            tv.write(("[\n" if p.trace_events == 0 else ",\n") + event)
            p.trace_events += 1
            self.records += 1

    def _new_process(self, key: tuple[str, int], r: dict[str, Any]) -> _Process:
        name = process_dir_name(key[0], key[1], float(r.get("ts", 0.0)))
        if name in self._dirnames:  # two hosts whose names differ only in unsafe characters
            base, n = name[: -len("_ascend_pt")], 2
            while f"{base}-{n}_ascend_pt" in self._dirnames:
                n += 1
            name = f"{base}-{n}_ascend_pt"
        self._dirnames.add(name)
        os.mkdir(name, _DIR_MODE, dir_fd=self._root)
        os.mkdir(f"{name}/{OUTPUT_DIR}", _DIR_MODE, dir_fd=self._root)
        p = self._procs[key] = _Process(name, r)
        with self._create(f"{name}/{OUTPUT_DIR}/kernel_details.csv") as f:
            csv.writer(f, lineterminator="\n").writerow(KERNEL_DETAILS_COLUMNS)
        self._create(f"{name}/{OUTPUT_DIR}/trace_view.json").close()
        return p

    def _files(self, key: tuple[str, int], p: _Process) -> tuple[TextIO, Any, TextIO]:
        files = self._open.get(key)
        if files is not None:
            self._open.move_to_end(key)
            return files
        if len(self._open) >= _MAX_OPEN_PROCESSES:  # many processes: bound the open fds
            _, (kd, _, tv) = self._open.popitem(last=False)
            kd.close()
            tv.close()
        kd = self._append(f"{p.name}/{OUTPUT_DIR}/kernel_details.csv")
        tv = self._append(f"{p.name}/{OUTPUT_DIR}/trace_view.json")
        files = self._open[key] = (kd, csv.writer(kd, lineterminator="\n"), tv)
        return files

    def _create(self, path: str) -> TextIO:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE,
                     dir_fd=self._root)
        return open(fd, "w", encoding="utf-8", newline="")

    def _append(self, path: str) -> TextIO:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._root)
        return open(fd, "a", encoding="utf-8", newline="", buffering=1 << 16)

    def finish(self) -> None:
        """Close the trace lists and write the per-process summary files."""
        self.close()
        for p in self._procs.values():
            with self._append(f"{p.name}/{OUTPUT_DIR}/trace_view.json") as tv:
                closing = p.closing_events()
                if closing:
                    tv.write(("[\n" if p.trace_events == 0 else ",\n") + ",\n".join(closing))
                    p.trace_events += len(closing)
                tv.write("\n]\n" if p.trace_events else "[]\n")
            with self._create(f"{p.name}/{OUTPUT_DIR}/op_statistic.csv") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(OP_STATISTIC_COLUMNS)
                w.writerows(op_statistic_rows(p.stats))
            with self._create(f"{p.name}/profiler_info.json") as f:
                json.dump(p.info(self._window), f, indent=1)
                f.write("\n")
            with self._create(f"{p.name}/profiler_metadata.json") as f:
                json.dump(p.metadata(), f, indent=1)
                f.write("\n")

    def close(self) -> None:
        """Close the open files (also on failure; idempotent)."""
        while self._open:
            _, (kd, _, tv) = self._open.popitem()
            for f in (kd, tv):
                try:
                    f.close()
                except OSError:
                    pass
