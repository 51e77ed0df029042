"""``aclprof export --format ascend -o DIR``: the daemon's records as the directories that
torch_npu's profiler writes, so that MindStudio Insight and ``msprof-analyze`` open them.

The files, their columns and what the subscription cannot fill are described in
:mod:`aclprof.exportfmt.ascend` (which formats and writes them, shared with the daemon's
flight recorder) and in README.md "Exporting for the Ascend tools".
:class:`StagedDir` makes the whole export appear at once, and :func:`cmd_export_ascend`
is the command.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from aclprof.cli.common import EXIT_OK, CliError, connect, filter_from_args
from aclprof.cli.exportloss import has_record_filters, lost_error
from aclprof.cli.signals import deferred
from aclprof.cli.staging import create_dir as create_staging_dir
from aclprof.cli.staging import remove_tree
from aclprof.cli.staging import sweep as sweep_staging
from aclprof.exportfmt.ascend import _DIR_MODE, AscendWriter

__all__ = ["StagedDir", "DirWriter", "export_to_dir", "cmd_export_ascend"]


# -- the target directory --------------------------------------------------------------------

class StagedDir:
    """``-o DIR`` for a directory export: DIR must be missing or empty (an export is never
    mixed into other files, and nothing is deleted to make room). Everything is written into
    a new private directory beside it (``.DIR.aclprof-<random>.tmp``, mode 0700, opened by fd
    with ``O_NOFOLLOW``, locked: :mod:`aclprof.cli.staging`), which is renamed to DIR once
    complete: a failed or interrupted export (Ctrl-C, SIGTERM, SIGHUP) leaves no partial DIR
    and no staging directory (one killed by SIGKILL leaves one, which the next export beside
    it removes), and a symlink planted anywhere is refused, never followed. DIR itself may
    be a symlink given by the user (it is resolved, like a shell's ``cd``)."""

    def __init__(self, path: str | None, fmt: str = "ascend"):
        if not path or path == "-":
            raise CliError(f"--format {fmt} writes a directory: give it with -o DIR", 2)
        self.path = path
        self.final = os.path.realpath(path)
        self.parent, self.base = os.path.split(self.final)
        self.fd = self._parent_fd = -1
        self.staging: str | None = None
        try:
            st: os.stat_result | None = os.lstat(self.final)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}", 2) from None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise CliError(f"cannot write {path}: it exists and is not a directory", 2)
        if st is not None and _has_entries(self.final, path):
            raise CliError(f"{path} is not empty: give a new or empty directory (an export is never mixed "
                           "with other files)", 2)
        sweep_staging(self.parent)  # what an export killed by SIGKILL left here
        try:
            with deferred():  # the staging directory exists only once self.staging says so
                self._parent_fd = os.open(self.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                self.fd, self.staging = create_staging_dir(self._parent_fd, self.base)
            own = os.fstat(self.fd)
            if own.st_uid != os.geteuid() or stat.S_IMODE(own.st_mode) != 0o700:
                raise CliError(f"the staging directory beside {self.final} was replaced; nothing was written", 1)
        except FileExistsError:
            self.close()
            raise CliError(f"cannot create a staging directory beside {self.final}: 100 random names "
                           "were taken", 1) from None
        except OSError as exc:
            self.close()
            raise CliError(f"cannot write {path}: {exc.strerror or exc}", 2) from None
        except BaseException:
            self.close()
            raise

    def commit(self) -> None:
        """The export is complete: give it the usual directory mode and put it in place."""
        assert self.staging is not None
        os.fchmod(self.fd, _DIR_MODE & ~_umask())
        here = os.stat(self.staging, dir_fd=self._parent_fd, follow_symlinks=False)
        own = os.fstat(self.fd)
        if (here.st_dev, here.st_ino) != (own.st_dev, own.st_ino):
            raise CliError(f"the staging directory beside {self.final} was replaced; nothing was written", 1)
        try:
            # replaces DIR only if it is (still) an empty directory; a file, a symlink or a
            # directory that something filled meanwhile makes the rename fail
            with deferred():
                os.rename(self.staging, self.base, src_dir_fd=self._parent_fd, dst_dir_fd=self._parent_fd)
                self.staging = None
        except OSError as exc:
            raise CliError(f"{self.path} changed during the export ({exc.strerror or exc}); nothing was "
                           "written there", 1) from None

    def close(self) -> None:
        """Remove the staging directory unless committed; release the fds (idempotent)."""
        if self.staging is not None and self.fd >= 0:
            try:
                remove_tree(self.fd)
                os.rmdir(self.staging, dir_fd=self._parent_fd)
            except OSError as exc:
                print(f"aclprof: warning: could not remove {os.path.join(self.parent, self.staging)}: "
                      f"{exc.strerror or exc}", file=sys.stderr)
            self.staging = None
        for fd in (self.fd, self._parent_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self._parent_fd = -1


def _has_entries(directory: str, shown: str) -> bool:
    try:
        with os.scandir(directory) as it:
            return any(True for _ in it)
    except OSError as exc:
        raise CliError(f"cannot write {shown}: {exc.strerror or exc}", 2) from None


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


# -- the command -----------------------------------------------------------------------------

class DirWriter(Protocol):
    """What :func:`export_to_dir` drives: a writer of one directory export."""

    records: int

    def add(self, records: Any) -> None: ...
    def finish(self) -> None: ...
    def close(self) -> None: ...


W = TypeVar("W", bound=DirWriter)


def export_to_dir(args: argparse.Namespace, fmt: str, make_writer: Callable[[int, dict[str, Any]], W]) -> W | None:
    """The daemon's records of the window into ``make_writer(fd of the staged directory,
    filter)``, the directory renamed to ``-o DIR`` once complete (:class:`StagedDir`); the
    writer, or None when no record matched (said on stderr, DIR left empty). Raises the
    export's loss error (exit 1) when records of the window were lost to a storage failure."""
    target: StagedDir | None = None
    try:
        with deferred():  # a staging directory is created only with `target` set to remove it
            target = StagedDir(args.output, fmt)
        assert target is not None
        filt = filter_from_args(args)
        client = connect(args, timeout=30.0)
        try:
            writer = make_writer(target.fd, filt)
            try:
                for records in client.export(args.since, args.until, filt):
                    writer.add(records)
                writer.finish()
            finally:
                writer.close()
        finally:
            client.close()
        target.commit()
    finally:  # also on Ctrl-C, SIGTERM and SIGHUP (aclprof.cli.signals); a second one waits
        with deferred():
            if target is not None:
                target.close()
    lost = lost_error(client.export_lost, writer.records, record_filters=has_record_filters(args))
    if lost is not None:
        raise lost  # exit 1: the window's records were lost to a storage failure, not unmatched
    if writer.records == 0:
        print(f"no records matched (check --since/--until and the filters); {args.output} is empty",
              file=sys.stderr)
        return None
    return writer


def cmd_export_ascend(args: argparse.Namespace) -> int:
    """``aclprof export --format ascend -o DIR`` (called by :mod:`aclprof.cli.export`)."""
    writer = export_to_dir(args, "ascend", lambda fd, filt: AscendWriter(
        fd, window={"since_ts": args.since, "until_ts": args.until, "filter": filt}))
    if writer is not None:
        print(f"exported {writer.records:,} records of {writer.processes} process(es) to {args.output}",
              file=sys.stderr)
    return EXIT_OK
