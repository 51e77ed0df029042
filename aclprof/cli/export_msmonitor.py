"""``aclprof export --format msmonitor-db -o DIR``: the daemon's records as msMonitor's SQLite
databases, one per process, which ``msprof-analyze cluster -m compute_op_sum -d DIR`` reads.

The tables, the file names and the ranks are described in :mod:`aclprof.exportfmt.msmonitor`
and README.md "Exporting for the Ascend tools"; the directory appears at once, as for
``--format ascend`` (:class:`aclprof.cli.export_ascend.StagedDir`).
"""

from __future__ import annotations

import argparse
import sys

from aclprof.cli.common import EXIT_OK
from aclprof.cli.export_ascend import export_to_dir
from aclprof.exportfmt.msmonitor import MsmonitorWriter

__all__ = ["cmd_export_msmonitor"]


def cmd_export_msmonitor(args: argparse.Namespace) -> int:
    """``aclprof export --format msmonitor-db -o DIR`` (called by :mod:`aclprof.cli.export`)."""
    writer = export_to_dir(args, "msmonitor-db", lambda fd, _filt: MsmonitorWriter(fd))
    if writer is None:
        return EXIT_OK
    ranks = ", ".join(f"rank {rank}: {host} pid {pid}" for (host, pid), rank in sorted(
        writer.ranks.items(), key=lambda kv: kv[1]))
    skipped = f"; {writer.keypoints:,} step keypoints not written (not ops)" if writer.keypoints else ""
    print(f"exported {writer.records - writer.keypoints:,} op records of {writer.processes} process(es) to "
          f"{args.output} ({ranks}){skipped}", file=sys.stderr)
    return EXIT_OK
