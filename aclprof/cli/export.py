"""``aclprof export``: records the daemon kept on disk, as csv, Chrome trace JSON, JSON lines or
the directories torch_npu's profiler writes (``ascend``).

- ``csv``: op statistics, one row per (service, process, device, model, op type):
  ``Service, PID, Device_id, Model Name, OP Type, Core Type, Count, Total Time(us),
  Min Time(us), Avg Time(us), Max Time(us), Ratio(%)``. Model ids are per process, so two
  services' "model 1" are two rows. ``Model Name`` is the model id (the op records carry
  no model name); ``Core Type`` is ``N/A`` (operator subscription does not report the
  core); ``Ratio(%)`` is the share of the device's total op time.
- ``chrome``: the Trace Event Format (opens in Perfetto and chrome://tracing): one
  complete event (``ph: "X"``, ``ts``/``dur`` in microseconds of the library's clock) per
  record; one process per inference process (``pid``), one thread per device and model
  (``tid = device * 100000 + model``), named by metadata events.
- ``kineto``: the Chrome trace shaped as PyTorch's profiler writes it (ops as ``kernel``
  events named by op type, one stream per process and model), for HTA
  (:mod:`aclprof.exportfmt.kineto`).
- ``perfetto``: Perfetto's native protobuf trace (TrackEvent; the same tracks as
  ``chrome``), exact nanoseconds, for large windows (:mod:`aclprof.exportfmt.perfetto`;
  needs PyPI ``perfetto``: ``pip install 'aclprof[perfetto]'``).
- ``jsonl``: one record per line, as in ``daemon/PROTOCOL.md``.
- ``pprof``: a gzipped pprof profile (``go tool pprof``, Pyroscope, speedscope): sample types
  calls/count and device time/nanoseconds, stacks service <- model <- op type <- op name
  (``aclprof.exportfmt.pprof``).
- ``msmonitor-db``: ``-o DIR`` (missing or empty) gets one msMonitor SQLite DB per process,
  ``msmonitor_<pid>_<time>_<rank>.db``, which ``msprof-analyze cluster -m compute_op_sum -d DIR``
  reads (``aclprof.exportfmt.msmonitor``; README "Exporting for the Ascend tools").
- ``ascend``: ``-o DIR`` (missing or empty) gets one ``<host>_<pid>_<time>_ascend_pt``
  directory per process, which MindStudio Insight and ``msprof-analyze compare`` open
  (``aclprof.cli.export_ascend``; README "Exporting for the Ascend tools").
"""

from __future__ import annotations

import argparse
import functools
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, TextIO

from aclprof.cli.argtypes import output_path, point_in_time
from aclprof.cli.common import EXIT_OK, CliError, add_filter_args, add_socket_arg, connect, filter_from_args
from aclprof.cli.export_ascend import cmd_export_ascend
from aclprof.cli.export_msmonitor import cmd_export_msmonitor
from aclprof.cli.exportloss import has_record_filters, lost_error
from aclprof.cli.signals import deferred
from aclprof.cli.staging import create_file as create_staging_file
from aclprof.cli.staging import sweep as sweep_staging
from aclprof.exportfmt.chrome import write_chrome
from aclprof.exportfmt.jsonl import write_jsonl
from aclprof.exportfmt.kineto import write_kineto
from aclprof.exportfmt.opcsv import write_csv
from aclprof.exportfmt.perfetto import MissingDependency, trace_class, write_perfetto
from aclprof.exportfmt.pprof import write_pprof
from aclprof.exportfmt.requests import RequestSpan, spans_from_bills
from aclprof.protocol import wire

__all__ = ["add_parser", "cmd_export"]

_EXAMPLES = """examples:
  aclprof export --since -5m --format csv -o op_statistic.csv
  aclprof export --since '1h ago' --until '30m ago' --format chrome -o trace.json   # open in ui.perfetto.dev
  aclprof export --since -1h --format perfetto -o trace.pftrace   # large windows: exact ns, 4x smaller files
  aclprof export --since -5m --format perfetto --requests -o t.pftrace   # request bills: slices + flows to ops
  aclprof export --since 2026-11-29T10:00:00 --until 2026-11-29T10:05:00 --format jsonl --type Conv
  aclprof export --since 1764410000 --format jsonl | wc -l
  aclprof export --since -10m --format ascend -o prof-after/   # msprof-analyze compare -d prof-after/...
  aclprof export --since -10m --format pprof -o ops.pb.gz      # go tool pprof -http=: ops.pb.gz
  aclprof export --since -10m --format msmonitor-db -o dbs/   # msprof-analyze cluster -m compute_op_sum -d dbs/

times: ISO 8601 (local time unless it has an offset or Z), Unix seconds, now, or relative
(-5m, '10s ago'); they select records by the daemon's receive time.
"""


def add_parser(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("export", help="export kept records (csv, chrome/perfetto/kineto trace, jsonl, ascend, pprof, "
                                      "msmonitor-db)",
                       formatter_class=fmt, description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       epilog=_EXAMPLES)
    p.add_argument("--since", type=point_in_time, metavar="T", default=None,
                   help="first receive time (default: the oldest kept record)")
    p.add_argument("--until", type=point_in_time, metavar="T", default=None, help="last receive time (default: now)")
    p.add_argument("--format", required=True, help="output format",
                   choices=("csv", "chrome", "kineto", "perfetto", "jsonl", "ascend", "pprof", "msmonitor-db"))
    p.add_argument("-o", "--output", metavar="PATH", default=None, type=output_path,
                   help="output file, '-' for stdout (default: stdout); a symlink is followed, a FIFO or "
                        "device is written into, a regular file is replaced only once the export is complete. "
                        "ascend, msmonitor-db: a directory, required, missing or empty; it appears once complete")
    p.add_argument("--requests", action="store_true",
                   help="chrome, perfetto: also the request bills the daemon keeps (aclprof requests) as slices "
                        "on their host threads with flows to their ops (the 1000 slowest of the window)")
    add_filter_args(p)
    add_socket_arg(p)
    p.set_defaults(func=cmd_export)


class _TextSink:
    """Bytes to a text-only stdout (embedding, captured output)."""

    def __init__(self, out: TextIO):
        self._out = out

    def write(self, data: bytes) -> None:
        self._out.write(str(data, "utf-8"))

    def flush(self) -> None:
        self._out.flush()


_WRITERS: dict[str, Callable[[Any, Any], int]] = {"csv": write_csv, "chrome": write_chrome, "jsonl": write_jsonl,
                                                  "kineto": write_kineto, "perfetto": write_perfetto,
                                                  "pprof": write_pprof}
_BINARY = ("jsonl", "perfetto", "pprof")  # written as bytes


class _Output:
    """Where ``-o PATH`` writes, opened as a user expects of ``> PATH``, without its risks.

    - PATH is followed if it is a symlink (the link stays, its target gets the export).
    - A FIFO, device or other non-regular file (``/dev/null``, ``/dev/stdout``, a named
      pipe) is opened and written into: never replaced by a regular file.
    - A regular or missing file is written to a new staging file in the same directory
      (:mod:`aclprof.cli.staging`: a random name created with ``O_CREAT|O_EXCL|O_NOFOLLOW``,
      so a planted file or symlink there is refused, never followed or overwritten; locked
      while the export runs), then renamed over the target: a failed or interrupted export
      (Ctrl-C, SIGTERM, SIGHUP) leaves the old file and no half file, and one killed by
      SIGKILL leaves a staging file that the next export into that directory removes. The
      new file keeps the old file's mode (else 0666 less the umask).
    """

    def __init__(self, path: str):
        self.path = path
        self.tmp: str | None = None
        self.final = path
        self._lock_fd = -1  # holds the staging lock until commit or discard (self.fd is closed first)
        try:
            st: os.stat_result | None = os.stat(path)  # follows a symlink, like a shell redirect
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}", 2) from None
        try:
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise CliError(f"cannot write {path}: it is a directory", 2)
            if st is not None and not stat.S_ISREG(st.st_mode):
                self.fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # FIFO, device: write into it
                return
            self.final = os.path.realpath(path)
            mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
            directory, base = os.path.split(self.final)
            sweep_staging(directory)  # what an export killed by SIGKILL left here
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                with deferred():  # the staging file exists only once self.tmp says so
                    self.fd, name = create_staging_file(dir_fd, base, mode)
                    self.tmp = os.path.join(directory, name)
                    self._lock_fd = os.dup(self.fd)
            finally:
                os.close(dir_fd)
        except FileExistsError:
            raise CliError(f"cannot create a staging file beside {self.final}: 100 random names were taken",
                           1) from None
        except OSError as exc:
            if self.tmp is not None:
                os.close(self.fd)
            self.discard()
            raise CliError(f"cannot write {path}: {exc.strerror or exc}", 2) from None

    def commit(self) -> None:
        """The export is complete: put the staging file in place."""
        if self.tmp is None:
            return
        try:
            st = os.lstat(self.final)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            # replaced by something else while we exported: never rename over it
            raise CliError(f"{self.final} is no longer a regular file; the export was not written there", 1)
        with deferred():
            os.replace(self.tmp, self.final)
            self.tmp = None
        self._unlock()

    def discard(self) -> None:
        """Remove the staging file unless committed (idempotent)."""
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


#: the most bills one REQUESTS reply carries (daemon/aclprofd/bills.py MAX_TOP)
REQUESTS_TOP = 1000


def _request_spans(client: Any, args: argparse.Namespace) -> list[RequestSpan]:
    """The request windows of the kept bills in the export's window (``--requests``)."""
    protocol = int(client.welcome.get("protocol", 1))
    if protocol < 4:
        raise CliError(f"aclprof export --requests: the daemon speaks protocol {protocol}; request bills need 4 "
                       "(upgrade aclprofd)", 2)
    reply = client.request(wire.Kind.REQUESTS, {"service": args.service, "model": args.model, "since": args.since,
                                                "until": args.until, "top": REQUESTS_TOP}, wire.Kind.REQUESTS_REPLY)
    bills = [b for b in reply.get("bills") or [] if isinstance(b, dict)
             and (args.until is None or not isinstance(b.get("ts"), (int, float)) or b["ts"] <= args.until)
             and (args.pid is None or b.get("pid") == args.pid)]
    try:
        spans = spans_from_bills(bills)
    except ValueError as exc:
        raise CliError(f"aclprof export --requests: the daemon sent a bad bill: {exc}", 1) from None
    if len(reply.get("bills") or []) >= REQUESTS_TOP:
        print(f"aclprof export --requests: only the {REQUESTS_TOP} slowest requests of the window are shown",
              file=sys.stderr)
    if bills and not spans:
        print(f"aclprof export --requests: none of the {len(bills)} bills has windows (agents older than this "
              "aclprof, or without a clock yet)", file=sys.stderr)
    return spans


def cmd_export(args: argparse.Namespace) -> int:
    if args.since is not None and args.until is not None and args.since > args.until:
        raise CliError("--since is after --until", 2)
    if args.format == "ascend":
        return cmd_export_ascend(args)
    if args.format == "msmonitor-db":
        return cmd_export_msmonitor(args)
    writer: Callable[..., int] = _WRITERS[args.format]
    if args.requests and args.format not in ("chrome", "perfetto"):
        raise CliError(f"--requests needs --format chrome or perfetto (not {args.format})", 2)
    if args.format == "pprof" and (not args.output or args.output == "-"):
        # gzip data: never onto a terminal, and a text-only stdout (embedding) cannot take it
        if getattr(sys.stdout, "buffer", None) is None or sys.stdout.isatty():
            raise CliError("--format pprof writes binary data: give -o FILE, or redirect stdout to a file or pipe", 2)
    if args.format == "perfetto":
        try:
            trace_class()  # before the daemon is asked and a file is created
        except MissingDependency as exc:
            raise CliError(f"aclprof export --format perfetto: {exc}", 2) from None
    output: _Output | None = None
    client: Any = None
    try:
        with deferred():  # a staging file is created only with `output` set to remove it
            if args.output and args.output != "-":
                output = _Output(args.output)
        client = connect(args, timeout=30.0)
        if args.requests:
            writer = functools.partial(writer, requests=_request_spans(client, args))
        if args.format == "jsonl":
            source: Any = client.export_jsonl(args.since, args.until, filter_from_args(args))
        else:
            source = client.export(args.since, args.until, filter_from_args(args))
        binary = args.format in _BINARY
        if output is not None:
            with deferred():  # the file object owns the fd from here on
                f = open(output.fd, "wb") if binary else open(output.fd, "w", encoding="utf-8", newline="")
                output.fd = -1
            with f:
                n = writer(source, f)
            output.commit()
            print(f"exported {n:,} records to {args.output}", file=sys.stderr)
        else:
            sys.stdout.flush()
            out: Any = sys.stdout
            if binary:
                out = getattr(sys.stdout, "buffer", None) or _TextSink(sys.stdout)
            n = writer(source, out)
            out.flush()
    finally:  # also on Ctrl-C, SIGTERM and SIGHUP (aclprof.cli.signals); a second one waits
        with deferred():
            if client is not None:
                client.close()
            if output is not None:
                if output.fd >= 0:
                    os.close(output.fd)
                output.discard()
    lost = lost_error(client.export_lost, n, record_filters=has_record_filters(args))
    if lost is not None:
        raise lost  # exit 1: the window's records were lost to a storage failure, not unmatched
    if n == 0:
        print("no records matched (check --since/--until and the filters)", file=sys.stderr)
    return EXIT_OK
