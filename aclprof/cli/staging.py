"""Staging files and directories of ``aclprof export``: created beside the target under a
private random name, locked while their export runs, and found again if it was killed.

An export writes ``.<target>.aclprof-<16 hex>.tmp`` (a file, or a directory for ``--format
ascend``) and renames it over the target once complete. Ctrl-C, SIGTERM and SIGHUP remove it
(:mod:`aclprof.cli.signals`); SIGKILL, a crash or a power cut cannot. So the exporting
process holds an exclusive ``flock`` on its staging file or directory, which the kernel
releases when the process dies however it dies, and the next export into the same directory
(:func:`sweep`) removes every staging entry of ours that nobody holds: no pid files, no
guessing whether a pid was reused or belongs to another host of a shared file system.

The creator locks right after creating and checks that the name still leads to what it
locked: a sweep that took the lock in between removed the entry, and the creator starts
again under a new name. A file system without locks (some FUSE ones) gets no sweep.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import stat
import sys
from collections.abc import Callable

from aclprof.cli.signals import deferred

__all__ = ["STAGING_RE", "staging_name", "create_file", "create_dir", "remove_tree", "sweep"]

#: what :func:`staging_name` makes (and only what it makes: an older aclprof's unlocked
#: ``.<target>.<hex>.tmp`` is never taken for a dead export's)
STAGING_RE = re.compile(r"^\..*\.aclprof-[0-9a-f]{16}\.tmp$", re.DOTALL)
_MAX_BASE_BYTES = 200  # a staging name stays below NAME_MAX (255) however long the target's
_ATTEMPTS = 100


def staging_name(base: str) -> str:
    """A new random staging name for the target file name ``base``."""
    cut = os.fsdecode(os.fsencode(base)[:_MAX_BASE_BYTES])
    return f".{cut}.aclprof-{secrets.token_hex(8)}.tmp"


def _locked(fd: int) -> bool:
    """Take the staging lock on ``fd``: True if held, False if another process holds it;
    True also where the file system has no locks (nothing to coordinate with)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return True
        raise
    return True


def _still_there(name: str, fd: int, dir_fd: int) -> bool:
    """Whether ``name`` in ``dir_fd`` is still the file or directory open as ``fd``."""
    try:
        here = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (own.st_dev, own.st_ino)


def _create(dir_fd: int, base: str, make: Callable[[str], int]) -> tuple[int, str]:
    """``make(name)`` creates ``name`` in ``dir_fd`` (FileExistsError if taken) and returns an
    fd of it; this locks it and checks that no sweep removed it meanwhile."""
    for _ in range(_ATTEMPTS):
        name = staging_name(base)
        with deferred():  # created and returned to the caller, who removes it, or not created
            try:
                fd = make(name)
            except FileExistsError:
                continue
            try:
                if _locked(fd) and _still_there(name, fd, dir_fd):
                    return fd, name
            except BaseException:
                os.close(fd)
                _remove_entry(dir_fd, name)
                raise
            os.close(fd)  # a sweep took it between create and lock: it is gone; a new name
    raise FileExistsError(errno.EEXIST, f"{_ATTEMPTS} random staging names were taken")


def _remove_entry(dir_fd: int, name: str) -> None:
    """Best effort: remove the (just created, still empty) staging entry ``name``."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass
    except OSError:
        pass


def create_file(dir_fd: int, base: str, mode: int) -> tuple[int, str]:
    """A new locked staging file for ``base`` in ``dir_fd``, opened for writing, created
    with ``O_EXCL|O_NOFOLLOW`` (never a planted file or symlink), then given ``mode``. Call it
    under :func:`~aclprof.cli.signals.deferred` and record the name before that block ends:
    a signal is then acted on only once the file is known to the clean-up."""
    def make(name: str) -> int:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=dir_fd)

    fd, name = _create(dir_fd, base, make)
    os.fchmod(fd, mode)
    return fd, name


def create_dir(dir_fd: int, base: str) -> tuple[int, str]:
    """A new locked staging directory (mode 0700) for ``base`` in ``dir_fd``, opened; called
    as :func:`create_file` is."""
    def make(name: str) -> int:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except BaseException:
            os.rmdir(name, dir_fd=dir_fd)
            raise

    return _create(dir_fd, base, make)


def remove_tree(dir_fd: int) -> int:
    """Delete everything below ``dir_fd`` without following a symlink; the bytes freed."""
    freed = 0
    for _, dirs, files, fd in os.fwalk(dir_fd=dir_fd, topdown=False):
        for name in files:
            try:
                freed += os.stat(name, dir_fd=fd, follow_symlinks=False).st_size
            except OSError:
                pass
            os.unlink(name, dir_fd=fd)
        for name in dirs:
            try:
                os.rmdir(name, dir_fd=fd)
            except NotADirectoryError:  # a symlink to a directory: the link goes, not its target
                os.unlink(name, dir_fd=fd)
    return freed


def sweep(directory: str) -> tuple[int, int]:
    """Remove the staging files and directories in ``directory`` that are ours (this user's,
    named by :func:`staging_name`) and that no live export holds: those of an export killed
    by SIGKILL or a crash. Says on stderr what it removed; a failure is a warning, never
    an error of the export that sweeps. Returns (entries removed, bytes freed)."""
    removed = freed = 0
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0, 0  # the export itself reports an unusable directory
    try:
        try:
            with os.scandir(dir_fd) as it:
                names = [e.name for e in it if STAGING_RE.match(e.name)]
        except OSError:
            names = []  # unreadable (write-only) directory: nothing to find
        for name in names:
            try:
                freed += _remove_unheld(dir_fd, name)
                removed += 1
            except (_Held, FileNotFoundError):  # held, or committed or removed since the scan
                continue
            except OSError as exc:
                print(f"aclprof: warning: could not remove the stale staging entry "
                      f"{os.path.join(directory, name)}: {exc.strerror or exc}", file=sys.stderr)
    finally:
        os.close(dir_fd)
    if removed:
        print(f"aclprof: removed {removed} staging entr{'y' if removed == 1 else 'ies'} "
              f"({freed / 2**20:,.1f} MiB) in {directory} left by an export that was killed",
              file=sys.stderr)
    return removed, freed


class _Held(Exception):
    """The entry is not ours to remove: a live export holds it, or another user owns it."""


def _remove_unheld(dir_fd: int, name: str) -> int:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if st.st_uid != os.geteuid() or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise _Held
    is_dir = stat.S_ISDIR(st.st_mode)
    flags = (os.O_RDONLY | os.O_DIRECTORY) if is_dir else os.O_RDONLY
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:  # held by a live export, or a file system without locks
            raise _Held from exc
        if not _still_there(name, fd, dir_fd):
            raise _Held  # replaced since the scan
        if is_dir:
            size = remove_tree(fd)
            os.rmdir(name, dir_fd=dir_fd)
        else:
            size = os.fstat(fd).st_size
            os.unlink(name, dir_fd=dir_fd)
        return size
    finally:
        os.close(fd)
