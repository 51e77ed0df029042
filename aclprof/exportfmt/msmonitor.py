"""msMonitor's SQLite database (``aclprof export --format msmonitor-db -o DIR``), so that
``msprof-analyze cluster -m compute_op_sum -d DIR`` (and its other DB recipes) read our records.

One file per profiled process, ``msmonitor_<pid>_<YYYYmmddHHMMSSfff>_<rank>.db``: the name
msMonitor's ``DBProcessManager::GetMsmonitorDbPath`` gives (pid, 17-digit local time, rank) and the
pattern msprof-analyze matches (``^msmonitor_(\\d+)_\\d{17}_(-1|\\d+)\\.db$``). The tables and
columns are those of Ascend/msmonitor ``plugin/ipc_monitor/db/DataBase.cpp`` (commit
b41b19222655fcaf8cb1c5c8a9c148060a91d908; table names from ``db/DBConstant.h``): every table is
created, string columns hold ``STRING_IDS`` ids. Each op record is one ``TASK`` row and one
``COMPUTE_TASK_INFO`` row, joined by ``globalTaskId`` (raw ops, not a histogram: msprof-analyze's
count, median and quartiles are the exact ones); ``endNs - startNs`` is the record's ``duration_ns``
(what msprof-analyze reads as the op's duration). What the operator subscription does not report is
written as msMonitor writes a field it did not collect: ``UINT32_MAX`` for numbers (``contextId``,
``streamId``, ``taskId``, ``blockNum``), the string ``N/A`` for names (``taskType``, shapes,
formats). ``opType`` holds the op type (msMonitor's mspti kernels have none and write ``N/A``).

msprof-analyze keeps one file per rank (the newest, if several), so processes get the ranks 0, 1,
... in (host, pid) order, not ``-1``: :attr:`MsmonitorWriter.ranks` says which is which, and each
file's ``META_DATA`` names its host, pid and service. Names are escaped as in every export
(:func:`aclprof.protocol.safetext.safe`). Step keypoints are not ops: they are not written (counted
in :attr:`MsmonitorWriter.keypoints`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from aclprof.protocol.safetext import safe

__all__ = ["TABLES", "UINT32_MAX", "NOT_COLLECTED", "SCHEMA_META", "db_file_name", "MsmonitorWriter"]

_I, _T, _N = "INTEGER", "TEXT", "NUMERIC"  # DBConstant.h's SQL_INT_TYPE, SQL_TEXT_TYPE, SQL_NUMERIC_TYPE

#: msMonitor's tables (DataBase.cpp ``MsMonitorDB``): name -> [(column, SQL type)]; the enum
#: tables' ``id`` is their primary key.
TABLES: dict[str, list[tuple[str, str]]] = {
    "STRING_IDS": [("id", _I), ("value", _T)],
    "SESSION_TIME_INFO": [("startTimeNs", _I), ("endTimeNs", _I)],
    "COMMUNICATION_OP": [(c, _N if c == "count" else _I) for c in (
        "opName", "startNs", "endNs", "connectionId", "groupName", "opId", "relay", "retry", "dataType",
        "algType", "count", "opType", "deviceId")],
    "ENUM_HCCL_DATA_TYPE": [("id", _I + " PRIMARY KEY"), ("name", _T)],
    "MSTX_EVENTS": [(c, _I) for c in ("startNs", "endNs", "eventType", "rangeId", "category", "message", "globalTid",
                               "endGlobalTid", "domainId", "connectionId")],
    "ENUM_MSTX_EVENT_TYPE": [("id", _I + " PRIMARY KEY"), ("name", _T)],
    "ENUM_API_TYPE": [("id", _I + " PRIMARY KEY"), ("name", _T)],
    "CANN_API": [(c, _I) for c in ("startNs", "endNs", "type", "globalTid", "connectionId", "name")],
    "TASK": [(c, _I) for c in ("startNs", "endNs", "deviceId", "connectionId", "globalTaskId", "globalPid",
                               "taskType", "contextId", "streamId", "taskId", "modelId")],
    "COMPUTE_TASK_INFO": [(c, _I) for c in (
        "name", "globalTaskId", "blockNum", "mixBlockNum", "taskType", "opType", "inputFormats",
        "inputDataTypes", "inputShapes", "outputFormats", "outputDataTypes", "outputShapes", "attrInfo",
        "opState", "hf32Eligible")],
    "META_DATA": [("name", _T), ("value", _T)],
    "HOST_INFO": [("hostUid", _T), ("hostName", _T)],
    "NPU_INFO": [("id", _I), ("name", _T)],
    "RANK_DEVICE_MAP": [("rankId", _I), ("deviceId", _I)],
}
UINT32_MAX = 0xFFFFFFFF  # msMonitor's value for a number it did not collect
NOT_COLLECTED = "N/A"
#: DBProcessManager.cpp's META_DATA rows (the schema version msMonitor writes).
SCHEMA_META = [("SCHEMA_VERSION_MICRO", "1"), ("SCHEMA_VERSION_MINOR", "2"), ("SCHEMA_VERSION_MAJOR", "0"),
               ("SCHEMA_VERSION", "1.2.0")]
_MSTX_EVENT_TYPE = [(0, "marker"), (1, "push/pop"), (2, "start/end"), (3, "marker_ex")]
_API_TYPE = [(5000, "runtime"), (5500, "hccl"), (10000, "node"), (15000, "model"), (20000, "acl"), (50001, "op"),
             (50002, "queue"), (50003, "trace"), (50004, "mstx")]
_FILE_MODE = 0o666  # less the umask, as sqlite creates it


def db_file_name(pid: int, first_ts: float, rank: int) -> str:
    """``msmonitor_<pid>_<YYYYmmddHHMMSSfff>_<rank>.db``: the time is the process's first
    exported record's receive time (local time, milliseconds, as msMonitor names its files)."""
    try:
        lt = time.localtime(first_ts)
        stamp = time.strftime("%Y%m%d%H%M%S", lt) + f"{int(first_ts * 1000) % 1000:03d}"
    except (OverflowError, OSError, ValueError):  # not a time: still a name the tools accept
        stamp = "0" * 17
    return f"msmonitor_{int(pid)}_{stamp}_{int(rank)}.db"


class _ProcessDb:
    """One process's database, written as its records arrive (rows are not kept in memory)
    under a temporary name: the rank in its final name is known only once every process has
    been seen (:meth:`MsmonitorWriter.finish`)."""

    def __init__(self, root_fd: int, tmp_name: str, r: dict[str, Any]):
        self.tmp_name = tmp_name
        self.service = str(r.get("service") or "")
        self.first_ts = float(r.get("ts", 0.0))
        self.last_ts = self.first_ts
        self.strings: dict[str, int] = {}
        self.tasks = 0
        self.devices: set[int] = set()
        self.na = self.sid(NOT_COLLECTED)
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE,
                     dir_fd=root_fd)
        os.close(fd)
        self.con = sqlite3.connect(f"/proc/self/fd/{root_fd}/{tmp_name}", isolation_level=None)
        try:
            # no journal, no fsync: an interrupted export leaves only the staging directory
            self.con.execute("PRAGMA journal_mode=OFF")
            self.con.execute("PRAGMA synchronous=OFF")
            self.con.execute("BEGIN")
            for table, cols in TABLES.items():
                self.con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in cols)})")
        except BaseException:
            self.con.close()
            raise

    def sid(self, text: str) -> int:
        """The STRING_IDS id of ``text`` (msMonitor's IdPool: ids from 0, in order of first use)."""
        i = self.strings.get(text)
        if i is None:
            i = self.strings[text] = len(self.strings)
        return i

    def rows(self, tasks: list[tuple[int, ...]], infos: list[tuple[int, ...]]) -> None:
        self.con.executemany(_insert("TASK"), tasks)
        self.con.executemany(_insert("COMPUTE_TASK_INFO"), infos)

    def finish(self, host: str, pid: int, rank: int) -> None:
        """The per-process tables, then commit (the connection stays open until :meth:`close`)."""
        con = self.con
        con.executemany(_insert("STRING_IDS"), [(i, s) for s, i in self.strings.items()])
        con.executemany(_insert("ENUM_MSTX_EVENT_TYPE"), _MSTX_EVENT_TYPE)
        con.executemany(_insert("ENUM_API_TYPE"), _API_TYPE)
        con.executemany(_insert("META_DATA"), [*SCHEMA_META, ("aclprof_host", safe(host)), ("aclprof_pid", str(pid)),
                                               ("aclprof_service", safe(self.service))])
        con.execute(_insert("HOST_INFO"), (NOT_COLLECTED, safe(host)))
        con.execute(_insert("SESSION_TIME_INFO"), (_ns(self.first_ts), _ns(self.last_ts)))
        devices = sorted(self.devices)
        con.executemany(_insert("NPU_INFO"), [(d, "UNKNOWN") for d in devices])
        con.executemany(_insert("RANK_DEVICE_MAP"), [(rank, d) for d in devices])
        con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()


class MsmonitorWriter:
    """Writes one msMonitor DB per (host, pid) of the export records into ``root_fd`` (an open
    directory that only we use: the staging directory). Files are created with
    ``O_EXCL|O_NOFOLLOW`` relative to ``root_fd`` and opened by SQLite through ``/proc/self/fd``
    (Linux), so a renamed or replaced path is never followed; :meth:`finish` gives them their
    names, :meth:`close` releases them (also on failure)."""

    def __init__(self, root_fd: int):
        self._root = root_fd
        self._procs: dict[tuple[str, int], _ProcessDb] = {}
        self.records = 0  # records read (ops and keypoints)
        self.keypoints = 0  # step keypoints read and not written (not ops)
        self.ranks: dict[tuple[str, int], int] = {}  # (host, pid) -> rank, once finished
        self._texts: dict[Any, str] = {}
        self.files: list[str] = []

    @property
    def processes(self) -> int:
        return len(self._procs)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Write the rows of a batch of export records."""
        rows: dict[tuple[str, int], tuple[list[tuple[int, ...]], list[tuple[int, ...]]]] = {}
        for r in records:
            self.records += 1
            if r.get("kind") == "keypoint":
                self.keypoints += 1
                continue
            key = (str(r.get("host", "?")), int(r.get("pid", 0)))
            p = self._procs.get(key)
            if p is None:
                p = self._procs[key] = _ProcessDb(self._root, f".process-{len(self._procs)}.db", r)
            p.last_ts = max(p.last_ts, float(r.get("ts", p.last_ts)))
            start = int(r.get("start", 0))
            dur = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
            device = int(r.get("device", 0))
            p.devices.add(device)
            na = p.na
            task_id = p.tasks
            p.tasks += 1
            tasks, infos = rows.get(key) or rows.setdefault(key, ([], []))
            tasks.append((start, start + dur, device, task_id, task_id, key[1], na, UINT32_MAX, UINT32_MAX,
                          UINT32_MAX, int(r.get("model", 0))))
            infos.append((p.sid(self._text(r.get("op_name", "?"))), task_id, UINT32_MAX, UINT32_MAX, na,
                          p.sid(self._text(r.get("op_type", "?"))), na, na, na, na, na, na, na, na, na))
        for key, (tasks, infos) in rows.items():
            self._procs[key].rows(tasks, infos)

    def _text(self, raw: Any) -> str:
        """A peer string as stored: control characters and lone surrogates escaped, as in every
        export (msprof-analyze writes its csv files without quoting a carriage return: a raw
        one would split a row). Computed once per distinct name."""
        text = self._texts.get(raw)
        if text is None:
            text = self._texts[raw] = safe(raw)
        return text

    def finish(self) -> None:
        """Complete each DB and give it its name: ranks 0, 1, ... in (host, pid) order."""
        for rank, key in enumerate(sorted(self._procs)):
            p = self._procs[key]
            self.ranks[key] = rank
            p.finish(key[0], key[1], rank)
            name = db_file_name(key[1], p.first_ts, rank)  # unique: the rank is
            os.rename(p.tmp_name, name, src_dir_fd=self._root, dst_dir_fd=self._root)
            self.files.append(name)
        self.close()

    def close(self) -> None:
        """Close every database (idempotent; an unfinished one stays under its temporary name
        in the staging directory, which the caller removes)."""
        for p in self._procs.values():
            p.close()


def _ns(ts: float) -> int:
    """A receive time (Unix seconds, microsecond resolution) in whole nanoseconds, exactly:
    ``ts * 1e9`` as a float is off by up to 128 ns at today's times."""
    return round(ts * 1e6) * 1000


def _insert(table: str) -> str:
    return f"INSERT INTO {table} VALUES ({', '.join('?' * len(TABLES[table]))})"
