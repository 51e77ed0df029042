"""Persistence: agents' records into the segment files (:mod:`aclprofd.storage`) and the
since-start aggregates into ``aggregates.npz`` in the data dir, so that a restart continues
them (daemon/README.md); plus handing freed heap back to the kernel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from .conn import Conn

if TYPE_CHECKING:
    from .server import Daemon

__all__ = ["Persistence", "AGGREGATES_FILE", "malloc_trim"]

AGGREGATES_FILE = "aggregates.npz"
_log = structlog.get_logger("aclprofd")


class Persistence:
    """Where a daemon's records and aggregates go on disk (the data dir)."""

    def __init__(self, daemon: Daemon):
        self.d = daemon

    def store(self, conn: Conn) -> None:
        """Write ``conn``'s received batches to the current segment."""
        storage = self.d.storage
        if conn.pending_store and storage is not None:
            ident = {"host": conn.host, "pid": conn.pid, "service": conn.service, "labels": conn.labels}
            storage.write(conn.id, ident, conn.names_order, conn.pending_store)
            conn.pending_store = []
            conn.pending_bytes = 0

    @property
    def aggregates_path(self) -> str:
        return os.path.join(self.d.settings.data_dir, AGGREGATES_FILE)

    def load_aggregates(self) -> None:
        """Continue the since-start aggregates of the previous daemon (a missing file is a
        first start; an unreadable one is logged and set aside, never fatal)."""
        path = self.aggregates_path
        agg = self.d.aggregator
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
        self.d.health.other_seen = agg.other_records  # old "(other)" records are no new problem
        _log.info("aggregates restored", path=path, **info)

    def save_aggregates(self) -> None:
        """Write the since-start aggregates if they changed since the last save (atomic:
        temp file, fsync, rename). A failure is logged and counted like a storage error."""
        agg = self.d.aggregator
        if not agg.dirty:
            return
        try:
            agg.save(self.aggregates_path)
        except OSError as exc:
            if self.d.storage is not None:
                self.d.storage.failed(exc)
            _log.error("cannot save the aggregates", error=str(exc))


def _load_malloc_trim() -> Callable[[], None]:
    # Frames of ~230 KB arriving thousands of times a second leave glibc's heap holes that
    # it keeps (RSS creeps at saturation although Python-level memory is flat);
    # malloc_trim(0) returns them. No-op where there is no glibc.
    try:
        import ctypes
        trim = ctypes.CDLL("libc.so.6").malloc_trim
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0) and None


malloc_trim = _load_malloc_trim()
