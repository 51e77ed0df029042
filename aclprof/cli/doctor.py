"""``aclprof doctor``: which libascendcl loads (or why none does), the CANN environment
variables, the daemon socket's permissions and whether the daemon answers.

The only CLI module that touches the binding, and only inside the command.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import Any

from aclprof.cli.common import EXIT_ERROR, EXIT_OK, CliError, add_socket_arg, connect

__all__ = ["add_parser", "cmd_doctor"]


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof doctor`` on the subparsers ``sub``."""
    p = sub.add_parser("doctor", help="diagnose the library, CANN variables and the daemon",
                       formatter_class=fmt,
                       description="Which libascendcl is found (or why none is), the CANN environment "
                                   "variables, the daemon socket's permissions and whether the daemon answers.",
                       epilog="examples:\n  aclprof doctor\n  ACLPROF_BACKEND=mock aclprof doctor\n"
                              "\nexit status 0 when no problem is found, else 1.")
    add_socket_arg(p)
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print what was found; exit 0 when no problem is found, else 1."""
    # The binding is imported here, not at the top: importing the CLI must load none of it
    # (the daemon host may have no libascendcl at all), and only this command needs it.
    from aclprof.binding import loader as _loader
    from aclprof.protocol.paths import resolve_socket_path

    problems: list[str] = []
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
    print("environment:")
    names = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR"]
    names += sorted(k for k in os.environ if k.startswith(("ACLPROF_", "ACLMOCK_")))
    for name in names:
        print(f"  {name}={os.environ[name]}" if name in os.environ else f"  {name} (not set)")
    path = resolve_socket_path(args.socket)
    print("daemon:")
    print(f"  socket: {path}")
    try:
        st_ = os.stat(path)
    except FileNotFoundError:
        print("  socket file: missing")
        problems.append("the daemon socket does not exist (aclprofd not running?)")
    except OSError as exc:
        print(f"  socket file: cannot stat ({exc.strerror})")
        problems.append(f"cannot stat the socket: {exc.strerror}")
    else:
        import grp
        import pwd

        kind = "socket" if stat.S_ISSOCK(st_.st_mode) else "NOT A SOCKET"
        try:
            owner = pwd.getpwuid(st_.st_uid).pw_name
        except KeyError:
            owner = str(st_.st_uid)
        try:
            group = grp.getgrgid(st_.st_gid).gr_name
        except KeyError:
            group = str(st_.st_gid)
        access = os.access(path, os.R_OK | os.W_OK)
        print(f"  socket file: {kind}, mode {stat.S_IMODE(st_.st_mode):04o}, owner {owner}:{group}, "
              f"{'read/write allowed' if access else 'NO read/write access for this user'}")
        if not access:
            problems.append(f"no permission on the socket: join group {group!r}")
    from aclprof.cli.client import DaemonError

    try:
        client = connect(args, timeout=3.0)
        try:
            st = client.status()
        finally:
            client.close()
    except (CliError, DaemonError) as exc:
        print(f"  reachable: no ({exc})")
        problems.append("the daemon is not reachable")
    else:
        print(f"  reachable: yes, aclprofd {st.get('version')} pid {st.get('pid')}, "
              f"{'healthy' if st.get('healthy') else 'UNHEALTHY'}, {len(st.get('agents') or [])} processes")
        if not st.get("healthy"):
            problems.append("the daemon reports problems: " + "; ".join(st.get("problems") or []))
    if problems:
        print("problems:")
        for p in problems:
            print(f"  - {p}")
        return EXIT_ERROR
    print("no problems found")
    return EXIT_OK
