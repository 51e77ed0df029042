"""Whole-file replacement that survives ``kill -9`` and power loss: the daemon's files that
are rewritten in place (the aggregates file, saved baselines) are written to a temporary
file in the same directory, fsynced, renamed over the old one, and the directory fsynced,
so a reader or a restarted daemon sees the old file or the new one, never a mix.

Modes (daemon/README.md "Security model": data directory 0750, files 0640): every file is
created with :data:`FILE_MODE` and ``fchmod``-ed to it, whatever the umask (a umask of 022
made ``aggregates.npz`` and baselines 0644; issue 19); :func:`private_dir` makes a directory
of the daemon's with :data:`DIR_MODE` and narrows one that already exists wider than that
(a pre-existing 0755 data directory let any user read op names), or reports why it cannot.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import structlog

__all__ = ["FILE_MODE", "DIR_MODE", "DirAccess", "replace_file", "create_file", "private_dir", "fsync_dir"]

#: group (the daemon's) may read, others nothing
FILE_MODE = 0o640
DIR_MODE = 0o750
_log = structlog.get_logger("aclprofd")


def create_file(path: str, flags: int = 0) -> int:
    """A new file at ``path`` (``O_EXCL``, never through a symlink), mode :data:`FILE_MODE`
    exactly whatever the umask; its descriptor, open for writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken group read away (or a umask of 0 given nothing more)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_file(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write(f)`` writes into a binary file (mode
    :data:`FILE_MODE`); on any exception the temporary file is removed and ``path`` is left
    as it was."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        try:
            fd = create_file(tmp)
        except FileExistsError:  # left by a crash of a process with our pid: ours to remove
            os.unlink(tmp)
            fd = create_file(tmp)
        with open(fd, "wb") as f:
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


@dataclass(frozen=True)
class DirAccess:
    """What :func:`private_dir` found and did (STATUS ``storage.dir_access``)."""

    path: str
    mode: str                   # the mode now, octal text ("0750")
    tightened_from: str | None  # the wider mode it had, if the daemon narrowed it
    problem: str | None         # too wide and the daemon may not narrow it: what to do

    def as_dict(self) -> dict[str, str | None]:
        return {"path": self.path, "mode": self.mode, "tightened_from": self.tightened_from,
                "problem": self.problem}


def private_dir(path: str, mode: int = DIR_MODE) -> DirAccess:
    """Make ``path`` (and missing parents) with ``mode`` exactly; if it exists with more
    permissions than ``mode`` and belongs to the daemon's user, take the extra ones away
    (logged); if it belongs to another user, leave it and say so (``problem``, logged at
    error level). OSError if it cannot be made or is not a directory."""
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)  # the umask may have narrowed it
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(path, mode, exist_ok=True)
        os.chmod(path, mode)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, f"{path} is not a directory")
    have = stat.S_IMODE(st.st_mode)
    extra = have & ~mode
    if not extra:
        return DirAccess(path, f"{have:04o}", None, None)
    if st.st_uid == os.geteuid():
        os.chmod(path, have & mode)
        _log.warning("directory was wider than its mode; narrowed", path=path, mode_was=f"{have:04o}",
                     mode=f"{have & mode:04o}")
        return DirAccess(path, f"{have & mode:04o}", f"{have:04o}", None)
    problem = (f"{path} is mode {have:04o} and owned by uid {st.st_uid}, not the daemon's user (uid {os.geteuid()}): "
               f"users outside the daemon's group may read what the daemon writes there; chmod {mode:o} it, or "
               f"give the daemon a directory of its own")
    _log.error("directory is too open", path=path, mode=f"{have:04o}", owner_uid=st.st_uid)
    return DirAccess(path, f"{have:04o}", None, problem)
