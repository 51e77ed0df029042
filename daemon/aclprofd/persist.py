"""Persistence: agents' records into the segment files (:mod:`aclprofd.storage`) and the
since-start aggregates into ``aggregates.npz`` in the data dir, so that a restart continues
them (daemon/README.md).
"""

from __future__ import annotations

import os
from typing import Protocol

import structlog

from .aggregate.aggregator import Aggregator
from .conn import Conn
from .status import Health
from .storage import Storage

__all__ = ["Persistence", "AGGREGATES_FILE", "StorageHolder"]

AGGREGATES_FILE = "aggregates.npz"
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

    def store(self, conn: Conn) -> None:
        """Write ``conn``'s received batches to the current segment."""
        storage = self.holder.storage
        if conn.pending_store and storage is not None:
            ident = {"host": conn.host, "pid": conn.pid, "service": conn.service, "labels": conn.labels}
            storage.write(conn.id, ident, conn.names_order, conn.pending_store)
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

    def save_aggregates(self) -> None:
        """Write the since-start aggregates if they changed since the last save (atomic:
        temp file, fsync, rename). A failure is logged and counted like a storage error."""
        agg = self.aggregator
        if not agg.dirty:
            return
        try:
            agg.save(self.aggregates_path)
        except OSError as exc:
            storage = self.holder.storage
            if storage is not None:
                storage.failed(exc)
            _log.error("cannot save the aggregates", error=str(exc))
