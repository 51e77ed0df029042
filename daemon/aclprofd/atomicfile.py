"""Whole-file replacement that survives ``kill -9`` and power loss: the daemon's files that
are rewritten in place (the aggregates file, saved baselines) are written to a temporary
file in the same directory, fsynced, renamed over the old one, and the directory fsynced,
so a reader or a restarted daemon sees the old file or the new one, never a mix."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["replace_file", "fsync_dir"]


def replace_file(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write(f)`` writes into a binary file; on any exception
    the temporary file is removed and ``path`` is left as it was."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(directory: str) -> None:
    """Make a rename durable (best effort: some file systems refuse a directory fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
