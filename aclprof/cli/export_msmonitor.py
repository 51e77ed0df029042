"""``aclprof export --format msmonitor-db -o DIR``: the daemon's records as msMonitor's SQLite
databases, one per process, which ``msprof-analyze cluster -m compute_op_sum -d DIR`` reads.

The tables, the file names and the ranks are described in :mod:`aclprof.exportfmt.msmonitor`
and README.md "Exporting for the Ascend tools"; the directory appears at once, as for
``--format ascend`` (:class:`aclprof.cli.export_ascend.StagedDir`).
"""

from __future__ import annotations

import argparse
import sys

from aclprof.cli.common import EXIT_OK, connect, filter_from_args
from aclprof.cli.export_ascend import StagedDir
from aclprof.cli.exportloss import has_record_filters, lost_error
from aclprof.cli.signals import deferred
from aclprof.exportfmt.msmonitor import MsmonitorWriter

__all__ = ["cmd_export_msmonitor"]


def cmd_export_msmonitor(args: argparse.Namespace) -> int:
    """``aclprof export --format msmonitor-db -o DIR`` (called by :mod:`aclprof.cli.export`)."""
    target: StagedDir | None = None
    try:
        with deferred():  # a staging directory is created only with `target` set to remove it
            target = StagedDir(args.output, "msmonitor-db")
        assert target is not None
        client = connect(args, timeout=30.0)
        try:
            writer = MsmonitorWriter(target.fd)
            try:
                for records in client.export(args.since, args.until, filter_from_args(args)):
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
        return EXIT_OK
    ranks = ", ".join(f"rank {rank}: {host} pid {pid}" for (host, pid), rank in sorted(
        writer.ranks.items(), key=lambda kv: kv[1]))
    skipped = f"; {writer.keypoints:,} step keypoints not written (not ops)" if writer.keypoints else ""
    print(f"exported {writer.records - writer.keypoints:,} op records of {writer.processes} process(es) to "
          f"{args.output} ({ranks}){skipped}", file=sys.stderr)
    return EXIT_OK
