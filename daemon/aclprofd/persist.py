"""Persistence: agents' records into the segment files (:mod:`aclprofd.storage`) and the
since-start aggregates into ``aggregates.npz`` in the data dir, so that a restart continues
them (daemon/README.md).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Protocol

import structlog

from .aggregate.aggregator import Aggregator
from .aggregate.npzfile import write_state
from .conn import Conn
from .status import Health
from .storage import Storage

__all__ = ["Persistence", "AGGREGATES_FILE", "StorageHolder"]

AGGREGATES_FILE = "aggregates.npz"
#: the aggregates are saved at most this often (and at a clean stop and a RESET): a save at
#: every 1 s flush under steady traffic was a state copy on the loop and a writer thread
#: encoding every key each second, competing with the loop for the GIL and the CPU (issue 19)
AGGREGATES_SAVE_S = 10.0
_log = structlog.get_logger("aclprofd")


class StorageHolder(Protocol):
    """Who holds the segment store: None before the daemon opened its data dir and after
    it closed it (the daemon, :class:`aclprofd.server.Daemon`)."""

    storage: Storage | None


class Persistence:
    """Where a daemon's records and aggregates go on disk (the data dir)."""

    def __init__(self, holder: StorageHolder, aggregator: Aggregator, health: Health, data_dir: str):
        self.holder = holder
        self.aggregator = aggregator
        self.health = health
        self.data_dir = data_dir
        self._writer: threading.Thread | None = None  # the save being written (one at a time)
        self._outcome: tuple[int, BaseException | None] | None = None  # its result, for the loop
        self._last_save = -AGGREGATES_SAVE_S  # monotonic time of the last save begun

    def store(self, conn: Conn) -> None:
        """Write ``conn``'s received batches to the current segment."""
        storage = self.holder.storage
        if conn.pending_store and storage is not None:
            ident = {"host": conn.host, "pid": conn.pid, "service": conn.service, "labels": conn.labels}
            storage.write(conn.id, ident, conn.names_order, conn.pending_store, conn.names)
            conn.pending_store = []
            conn.pending_bytes = 0

    @property
    def aggregates_path(self) -> str:
        return os.path.join(self.data_dir, AGGREGATES_FILE)

    def load_aggregates(self) -> None:
        """Continue the since-start aggregates of the previous daemon (a missing file is a
        first start; an unreadable one is logged and set aside, never fatal)."""
        path = self.aggregates_path
        agg = self.aggregator
        try:
            info = agg.load(path)
        except FileNotFoundError:
            return
        except Exception as exc:  # any bad file (zip, JSON, layout) must not stop the start
            _log.warning("cannot load the saved aggregates; starting from zero", path=path, error=str(exc))
            try:
                os.replace(path, path + ".bad")
            except OSError:
                pass
            return
        self.health.other_seen = agg.other_records  # old "(other)" records are no new problem
        _log.info("aggregates restored", path=path, **info)

    def save_aggregates(self, *, wait: bool = False) -> None:
        """Write the since-start aggregates if they changed since the last save (atomic:
        temp file, fsync, rename, mode 0640: :func:`aclprofd.atomicfile.replace_file`). A
        failure is logged and counted like a storage error.

        The loop thread takes a copy of the state (under the aggregator's lock: array copies
        and the key list, milliseconds) and a writer thread encodes and writes it: 4096 keys of
        4 KiB names were ~1.3 s of the loop's CPU at every flush that followed new keys
        (issue 19). One save at a time: while one is being written, the next flush leaves
        the aggregates dirty and saves them once it is done. ``wait``: wait for a save being
        written, then save here (the daemon's close; RESET, whose zeroed figures must be on
        disk before it answers)."""
        self._collect(wait)
        agg = self.aggregator
        if self._writer is not None or not agg.dirty:
            return
        now = time.monotonic()
        if not wait and now < self._last_save + AGGREGATES_SAVE_S:
            return
        self._last_save = now
        changes, arrays, meta = agg.save_state()
        if wait:
            self._write(changes, arrays, meta)
            self._collect(True)
            return
        self._writer = threading.Thread(target=self._write, args=(changes, arrays, meta),
                                        name="aclprofd-aggregates")
        self._writer.start()

    def _write(self, changes: int, arrays: dict[str, Any], meta: dict[str, Any]) -> None:
        """Write one state (writer thread, or the loop thread with ``wait``); the outcome is
        handed to :meth:`_collect` on the loop thread."""
        try:
            write_state(self.aggregates_path, arrays, meta)
        except OSError as exc:
            self._outcome = (changes, exc)
        except Exception as exc:  # a bug must not vanish with the thread: logged at collection
            self._outcome = (changes, exc)
        else:
            self._outcome = (changes, None)

    def _collect(self, wait: bool) -> None:
        """The outcome of the last save (loop thread): the figures it wrote are saved, or
        its error is counted and logged. ``wait``: wait for a save being written."""
        writer = self._writer
        if writer is not None:
            if wait:
                writer.join()
            elif writer.is_alive():
                return
            self._writer = None
        outcome, self._outcome = self._outcome, None
        if outcome is None:
            return
        changes, exc = outcome
        if exc is None:
            self.aggregator.saved(changes)
            return
        if isinstance(exc, OSError):
            storage = self.holder.storage
            if storage is not None:
                storage.failed(exc)
            _log.error("cannot save the aggregates", error=str(exc))
        else:
            _log.error("internal error saving the aggregates", error=f"{type(exc).__name__}: {exc}")
