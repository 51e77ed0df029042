"""``aclprofd``: the command that runs the daemon (also ``python -m aclprofd``).

``main(argv)`` takes the arguments without the program name (``None``: ``sys.argv[1:]``)
and returns the exit code: 0 after a clean stop (SIGTERM, SIGINT), 2 for a usage or
configuration error, 1 when the daemon cannot start; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import __version__

__all__ = ["main", "build_parser"]

_EPILOG = """\
examples:
  aclprofd                                   # defaults: socket under $XDG_RUNTIME_DIR, metrics on 127.0.0.1:9464
  aclprofd --socket /tmp/a.sock --data-dir /tmp/aclprof --prometheus-port 0
  aclprofd --config /etc/aclprof/aclprofd.toml --log-format json --log-file /var/log/aclprofd.log
  ACLPROFD_DISK_CAP=10GiB aclprofd --max-age 2d
  aclprofd --write-config /etc/aclprof/aclprofd.toml   # the annotated example, where the unit reads it

signals: SIGTERM/SIGINT flush and exit 0; SIGHUP reopens the log file and reloads the config.
settings and the segment format: daemon/README.md; the protocol: daemon/PROTOCOL.md.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"aclprofd: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from .config import add_arguments

    p = _Parser(prog="aclprofd", description="The aclprof host daemon: collects per-operator timings from "
                "the inference processes of this host.", epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"aclprofd {__version__}")
    p.add_argument("--write-config", metavar="PATH",
                   help="write the annotated example configuration (every key at its default) to PATH "
                        "('-' for stdout), creating missing directories, and exit; an existing file is "
                        "kept unless --force")
    p.add_argument("--force", action="store_true", help="with --write-config: replace an existing file")
    add_arguments(p)
    return p


def _write_config(args: argparse.Namespace) -> int:
    from .writeconfig import WriteConfigError, example_text, write_config

    if args.write_config == "-":
        sys.stdout.write(example_text())
        return 0
    try:
        path = write_config(args.write_config, force=args.force)
    except WriteConfigError as exc:
        print(f"aclprofd: error: {exc}", file=sys.stderr)
        return exc.code
    print(f"aclprofd: wrote {path} (every key commented at its default; edit, then start or "
          f"`systemctl reload aclprofd`)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.write_config is not None:
        return _write_config(args)
    if args.force:
        parser.error("--force only goes with --write-config")
    import structlog

    from . import config, logsetup
    from .cpuslice import request_slice
    from .server import Daemon, DaemonError

    try:
        settings = config.load(args)
    except config.ConfigError as exc:
        print(f"aclprofd: error: {exc}", file=sys.stderr)
        return 2
    try:
        logsetup.configure(settings.log_level, settings.log_format, settings.log_file)
    except OSError as exc:
        print(f"aclprofd: error: cannot open log file {settings.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    # before any thread starts: each inherits the slice of the thread that starts it
    cpu_slice = request_slice(settings.cpu_slice_s)
    if cpu_slice.error is not None:
        # a refusal (a seccomp filter, a policy) is worth a warning; an older kernel is not
        level = "warning" if cpu_slice.error.startswith("sched_setattr failed") else "info"
        getattr(structlog.get_logger("aclprofd"), level)(
            "CPU slice left at the kernel's default (daemon/README.md \"CPU slice\")",
            requested_us=cpu_slice.requested_us, reason=cpu_slice.error)
    daemon = Daemon(settings, reload=lambda: config.load(args))
    daemon.cpu_slice = cpu_slice.as_dict()
    try:
        daemon.start()
    except DaemonError as exc:
        print(f"aclprofd: error: {exc}", file=sys.stderr)
        return 1
    # What is loaded by now (modules, the configuration, the restored aggregates) lives as
    # long as the daemon: frozen out of the collector's sight, a full collection on the loop
    # scans only what came later (~35k objects, 5-11 ms less per pass; STATUS loop.stalls.gc)
    gc.collect()
    gc.freeze()
    try:
        daemon.run(signals=True)
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
