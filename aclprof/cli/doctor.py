"""``aclprof doctor``: which libascendcl loads (or why none does), the CANN environment
variables, the deployment (unit, config, groups: :mod:`aclprof.cli.doctor_deploy`), the
daemon socket's permissions, whether the daemon answers and where /metrics listens; each
problem with the command that fixes it.

The only CLI module that touches the binding, and only inside the command.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from aclprof.cli.argtypes import input_path
from aclprof.cli.common import EXIT_ERROR, EXIT_OK, CliError, add_socket_arg, connect
from aclprof.cli.doctor_check import add_check_args, cmd_check
from aclprof.cli.doctor_deploy import (
    CONFIG_PATH,
    SYSTEM_SOCKET,
    UNIT_PATH,
    Report,
    Unit,
    check_access,
    check_config,
    check_groups,
    check_metrics,
    check_socket,
    check_unit,
)

__all__ = ["add_parser", "cmd_doctor"]


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof doctor`` on the subparsers ``sub``."""
    p = sub.add_parser("doctor", help="diagnose the library, CANN variables and the daemon",
                       formatter_class=fmt,
                       description="Which libascendcl is found (or why none is), the CANN environment "
                                   "variables, the deployment (systemd unit, config file, socket and admin "
                                   "groups and whether you are in them), the daemon socket's permissions, "
                                   "whether the daemon answers and where /metrics listens. Each problem "
                                   "comes with the command that fixes it.",
                       epilog="examples:\n  aclprof doctor\n  ACLPROF_BACKEND=mock aclprof doctor\n"
                              "  aclprof doctor --check --model resnet50.om --report check.json\n"
                              "\nexit status 0 when no problem is found, else 1. With --check: 0 when "
                              "every check passed, 1 when one failed (the report says which and why), "
                              "2 for bad arguments or a report file that cannot be written.")
    add_socket_arg(p)
    p.add_argument("--unit", default=UNIT_PATH, metavar="PATH", type=input_path,
                   help=f"the installed systemd unit to check (default {UNIT_PATH})")
    add_check_args(p)
    p.set_defaults(func=cmd_doctor)


def _setting(key: str, flag: str, unit: Unit | None, cfg: dict[str, Any]) -> str | None:
    """A setting as the unit starts the daemon: its flag, its environment, then the config file."""
    if unit is not None:
        v = unit.flag(flag) or unit.environment.get(f"ACLPROFD_{key.upper()}")
        if v:
            return v
    v = cfg.get(key)
    return str(v) if v else None


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print what was found; exit 0 when no problem is found, else 1 (``--check``: see
    :func:`aclprof.cli.doctor_check.cmd_check`)."""
    from aclprof.protocol.paths import resolve_socket_path

    if args.check:
        return cmd_check(args)

    rep = Report()
    _library(rep.problems)
    path = resolve_socket_path(args.socket)
    print("deployment:")
    unit, system, cfg = _deployment(rep, path, args.unit)
    print("daemon:")
    st = _daemon(rep, args, path, system, unit, cfg)
    access = st.get("access") if st is not None and isinstance(st.get("access"), dict) else None
    if unit is not None or system:
        # the running daemon's own word first, then the unit's flags, then the config file
        groups = {k: access[k] if access else _setting(k, flag, unit, cfg)
                  for k, flag in (("socket_group", "--socket-group"), ("admin_group", "--admin-group"))}
        check_groups(rep, groups["socket_group"], groups["admin_group"])
    if st is not None:
        check_access(rep, st)
    _metrics(rep, st, unit, cfg)
    if rep.problems:
        print("problems:")
        for p in rep.problems:
            print(f"  - {p}")
        return EXIT_ERROR
    print("no problems found")
    return EXIT_OK


def _library(problems: list[str]) -> None:
    """Which libascendcl loads, and the environment variables that steer it."""
    # The binding is imported here, not at the top: importing the CLI must load none of it
    # (the daemon host may have no libascendcl at all), and only this command needs it.
    from aclprof.binding import loader as _loader

    print("library:")
    try:
        candidates, _ = _loader._candidates()
    except ValueError as exc:
        candidates = []
        problems.append(str(exc))
    for origin, path in candidates:
        print(f"  candidate: {path} ({origin})")
    try:
        info = _loader.library_info()
    except Exception as exc:  # LibraryNotFoundError, ValueError (bad ACLPROF_BACKEND)
        print("  not found:")
        for line in str(exc).splitlines():
            print(f"    {line}")
        problems.append("no ACL library can be loaded")
    else:
        print(f"  loaded: {info.name} at {info.path}" + (" (mock)" if info.is_mock else ""))
        print(f"  op record size: {info.op_desc_size}; missing symbols: "
              f"{', '.join(info.missing_symbols) if info.missing_symbols else 'none'}")
        for group in info.groups:  # which file gave each function group (issue 22)
            print(f"  {group.group}: {group.found} functions from {', '.join(group.files) or 'nowhere'}"
                  + (f"; missing {', '.join(group.missing)}" if group.missing else ""))
    print("environment:")
    names = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR"]
    names += sorted(k for k in os.environ if k.startswith(("ACLPROF_", "ACLMOCK_")))
    for name in names:
        print(f"  {name}={os.environ[name]}" if name in os.environ else f"  {name} (not set)")


def _deployment(rep: Report, path: str, unit_path: str) -> tuple[Unit | None, bool, dict[str, Any]]:
    """The unit and the config file: (unit, whether ``path`` is the system daemon's socket,
    the config's settings). For a user's own daemon (a socket elsewhere, no unit) they are
    not checked."""
    unit = check_unit(rep, unit_path, system=path == SYSTEM_SOCKET)
    system = path == ((unit.flag("--socket") if unit else None) or SYSTEM_SOCKET)
    if unit is None and path != SYSTEM_SOCKET:
        print("  (a daemon of your own at this socket: the unit, config and groups are not checked)")
        return None, False, {}
    cfg_path = (unit.flag("--config") or unit.environment.get("ACLPROFD_CONFIG") if unit else None) or CONFIG_PATH
    return unit, system, check_config(rep, cfg_path, required=True)


def _daemon(rep: Report, args: argparse.Namespace, path: str, system: bool, unit: Unit | None,
            cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The socket file and whether the daemon answers: its STATUS, or None."""
    from aclprof.cli.client import DaemonError

    print(f"  socket: {path}")
    try:
        st_ = os.stat(path)
    except FileNotFoundError:
        print("  socket file: missing")
        rep.problem("the daemon socket does not exist (aclprofd not running?)",
                    "as root: systemctl start aclprofd; then journalctl -u aclprofd if it stops" if system
                    else "start aclprofd (README.md \"Deployment\" for the service)")
    except PermissionError:
        # /run/aclprof is 0750, group the socket group: outsiders cannot even see the socket
        print("  socket file: cannot stat (permission denied: its directory is for the socket group)")
        rep.problems.append(f"cannot reach the socket {path}: its directory admits only the socket group (below)")
    except OSError as exc:
        print(f"  socket file: cannot stat ({exc.strerror})")
        rep.problems.append(f"cannot stat the socket: {exc.strerror}")
    else:
        check_socket(rep, path, st_, _setting("socket_group", "--socket-group", unit, cfg))
    try:
        client = connect(args, timeout=3.0)
        try:
            st = client.status()
        finally:
            client.close()
    except (CliError, DaemonError) as exc:
        print(f"  reachable: no ({exc})")
        rep.problems.append("the daemon is not reachable")
        return None
    print(f"  reachable: yes, aclprofd {st.get('version')} pid {st.get('pid')}, "
          f"{'healthy' if st.get('healthy') else 'UNHEALTHY'}, {len(st.get('agents') or [])} processes")
    access = (st.get("storage") or {}).get("dir_access")
    if isinstance(access, dict):  # the data dir's mode (a wider one is narrowed, or a STATUS problem)
        was = f", narrowed from {access['tightened_from']} at start" if access.get("tightened_from") else ""
        print(f"  data dir: {access.get('path')} mode {access.get('mode')}{was}")
    if not st.get("healthy"):
        rep.problems.append("the daemon reports problems: " + "; ".join(st.get("problems") or []))
    return st


def _metrics(rep: Report, st: dict[str, Any] | None, unit: Unit | None, cfg: dict[str, Any]) -> None:
    """Where /metrics listens: the running daemon's word (STATUS), else the unit and config's."""
    metrics = st.get("metrics") if st is not None else None
    if isinstance(metrics, dict):
        host, port = metrics.get("host"), metrics.get("port")
    elif unit is not None:
        host = unit.environment.get("ACLPROFD_PROMETHEUS_HOST") or cfg.get("prometheus_host") or "127.0.0.1"
        port = unit.environment.get("ACLPROFD_PROMETHEUS_PORT") or cfg.get("prometheus_port") or 9464
    else:
        return
    try:
        port_n = int(port or 0)
    except (TypeError, ValueError):
        rep.problem(f"prometheus_port {port!r} is not a port number", "set prometheus_port to 0..65535")
        return
    check_metrics(rep, str(host), port_n, unit)
