"""The deployment checks of ``aclprof doctor``: the systemd unit and its drop-ins, the config
file, the socket group and the admin group (and whether the caller is in them), the socket's
permissions and where ``/metrics`` listens. Each failed check gives the exact command that
fixes it (README.md "Deployment").

A check reports through :class:`Report`: ``line`` prints what was found, ``problem`` adds a
failure with its fix. Nothing here imports the daemon (layering: tests/test_layers.py); the
unit and the config are read as text and TOML.
"""

from __future__ import annotations

import grp
import ipaddress
import os
import pwd
import shlex
import stat
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from aclprof.protocol.paths import SYSTEM_SOCKET

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["UNIT_PATH", "SYSTEM_SOCKET", "SOCKET_GROUP", "ADMIN_GROUP", "CONFIG_PATH", "Report", "Unit",
           "service_settings", "read_unit", "check_unit", "check_config", "check_groups", "check_socket",
           "check_access", "check_metrics"]

UNIT_PATH = "/etc/systemd/system/aclprofd.service"
CONFIG_PATH = "/etc/aclprof/aclprofd.toml"
SOCKET_GROUP = "aclprof"
ADMIN_GROUP = "aclprof-admin"
_INSTALL_UNIT = ("install -m 0644 daemon/aclprofd.service /etc/systemd/system/ && systemctl daemon-reload "
                 "&& systemctl enable --now aclprofd   (from a clone; README.md \"Deployment\")")


@dataclass
class Report:
    """What the checks found: printed lines, and problems each with the command that fixes it."""

    problems: list[str] = field(default_factory=list)

    def line(self, text: str) -> None:
        print(f"  {text}")

    def problem(self, what: str, fix: str) -> None:
        self.problems.append(f"{what}\n      fix: {fix}")


@dataclass
class Unit:
    """What doctor needs from the installed unit (its ExecStart flags and its drop-ins)."""

    path: str
    exec_start: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    ip_allow: list[str] = field(default_factory=list)
    ip_deny: list[str] = field(default_factory=list)
    dropins: list[str] = field(default_factory=list)

    def flag(self, name: str) -> str | None:
        """The value of ``--name VALUE`` or ``--name=VALUE`` in ExecStart (the last one)."""
        value = None
        args = self.exec_start
        for i, a in enumerate(args):
            if a == name and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(name + "="):
                value = a.split("=", 1)[1]
        return value


def service_settings(text: str) -> dict[str, list[str]]:
    """A unit file's ``[Service]`` key -> its values in order (systemd's list settings repeat
    the key; an empty value resets the list, which the caller applies)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith(("#", ";")):
            continue
        if s.startswith("["):
            section = s
        elif section == "[Service]" and "=" in s:
            key, value = (x.strip() for x in s.split("=", 1))
            out.setdefault(key, []).append(value)
    return out


def read_unit(path: str) -> Unit:
    """The unit at ``path`` and its ``path.d/*.conf`` drop-ins, in systemd's order (OSError if
    the unit cannot be read). ``ExecStart=`` empty resets the command, as systemd does;
    ``IPAddressAllow=`` values add up."""
    unit = Unit(path)
    files = [path]
    dropdir = path + ".d"
    if os.path.isdir(dropdir):
        unit.dropins = sorted(os.path.join(dropdir, n) for n in os.listdir(dropdir) if n.endswith(".conf"))
        files += unit.dropins
    for i, f in enumerate(files):
        try:
            with open(f, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            if i == 0:
                raise
            continue
        settings = service_settings(text)
        for value in settings.get("ExecStart", []):
            unit.exec_start = shlex.split(value) if value else []
        for value in settings.get("Environment", []):
            for item in shlex.split(value):
                if "=" in item:
                    k, v = item.split("=", 1)
                    unit.environment[k] = v
        for value in settings.get("IPAddressAllow", []):
            unit.ip_allow = unit.ip_allow + value.split() if value else []
        for value in settings.get("IPAddressDeny", []):
            unit.ip_deny = unit.ip_deny + value.split() if value else []
    return unit


def check_unit(rep: Report, path: str, system: bool) -> Unit | None:
    """The unit file: present, readable, its ExecStart executable. A missing unit is a
    problem only for the system daemon's socket (``system``)."""
    try:
        unit = read_unit(path)
    except FileNotFoundError:
        rep.line(f"unit: {path} not installed")
        if system:
            rep.problem(f"the systemd unit {path} is not installed", f"as root: {_INSTALL_UNIT}")
        return None
    except OSError as exc:
        rep.line(f"unit: {path} cannot be read ({exc.strerror})")
        rep.problem(f"cannot read the unit {path}: {exc.strerror}", f"as root: chmod 0644 {path}")
        return None
    rep.line(f"unit: {path}" + (f" (drop-ins: {', '.join(unit.dropins)})" if unit.dropins else ""))
    if not unit.exec_start:
        rep.problem(f"the unit {path} has no ExecStart", f"as root: {_INSTALL_UNIT}")
        return unit
    exe = unit.exec_start[0].lstrip("@-:+!")
    ok = os.path.isfile(exe) and os.access(exe, os.X_OK)
    rep.line(f"ExecStart: {exe} ({'executable' if ok else 'NOT FOUND or not executable'})")
    if not ok:
        rep.problem(f"the unit's ExecStart {exe} is not an executable file (aclprofd installed elsewhere?)",
                    "as root: /usr/bin/python3 -m venv /opt/aclprof && /opt/aclprof/bin/pip install . "
                    "(from a clone), or `systemctl edit aclprofd` with `ExecStart=` then "
                    "`ExecStart=$(command -v aclprofd) ...` (the unit's other arguments)")
    return unit


def check_config(rep: Report, path: str, required: bool) -> dict[str, Any]:
    """The config file: present, readable and TOML; its settings ({} if none)."""
    try:
        with open(path, "rb") as f:
            doc: dict[str, Any] = tomllib.load(f)
    except FileNotFoundError:
        rep.line(f"config: {path} missing")
        if required:
            rep.problem(f"the config file {path} does not exist (aclprofd exits 2 without it)",
                        f"as root: aclprofd --write-config {path}")
        return {}
    except PermissionError:
        rep.line(f"config: {path} not readable by this user")
        # the daemon (a DynamicUser) needs to read it; the file holds no secret
        rep.problem(f"the config file {path} is not readable by everyone (the daemon's user must read it)",
                    f"as root: chmod 0644 {path}")
        return {}
    except OSError as exc:
        rep.line(f"config: {path} cannot be read ({exc.strerror})")
        rep.problem(f"cannot read the config file {path}: {exc.strerror}",
                    f"as root: aclprofd --write-config {path} --force")
        return {}
    except tomllib.TOMLDecodeError as exc:
        rep.line(f"config: {path} is not valid TOML ({exc})")
        rep.problem(f"the config file {path} does not parse: {exc}",
                    f"fix the line, or start again from the example: aclprofd --write-config {path} --force")
        return {}
    rep.line(f"config: {path} (readable, {len(doc)} setting(s) set)")
    return doc


def _member(group: grp.struct_group) -> tuple[bool, bool]:
    """(in this process's groups now, in the group database): membership needs a new login
    to reach a running shell."""
    now = group.gr_gid == os.getegid() or group.gr_gid in os.getgroups()
    try:
        pw = pwd.getpwuid(os.getuid())
        listed = group.gr_gid == pw.pw_gid or group.gr_gid in os.getgrouplist(pw.pw_name, pw.pw_gid)
    except KeyError:
        listed = now
    return now, listed


def check_groups(rep: Report, socket_group: str | None, admin_group: str | None) -> None:
    """Both groups exist, and whether the caller is in them (root needs neither)."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    root = os.geteuid() == 0
    for role, name, why in (("socket group", socket_group, "connect (stream as a service, STATUS)"),
                            ("admin group", admin_group, "run top, tail, export, trace, reset")):
        if not name:
            rep.line(f"{role}: none set")
            flag = "--socket-group" if role == "socket group" else "--admin-group"
            dflt = SOCKET_GROUP if role == "socket group" else ADMIN_GROUP
            rep.problem(f"the daemon has no {role}: only root and the daemon's user can {why}",
                        f"as root: groupadd --system {dflt}, and start aclprofd with {flag} {dflt} "
                        "(the shipped unit does)")
            continue
        try:
            g = grp.getgrnam(name)
        except KeyError:
            rep.line(f"{role}: {name!r} does NOT exist")
            rep.problem(f"the {role} {name!r} does not exist", f"as root: groupadd --system {name}")
            continue
        if root:
            rep.line(f"{role}: {name!r} (gid {g.gr_gid}); you are root: no membership needed")
            continue
        now, listed = _member(g)
        state = "you are a member" if now else ("you are listed but this login predates it" if listed
                                                else "you are NOT a member")
        rep.line(f"{role}: {name!r} (gid {g.gr_gid}); {state}")
        if now:
            continue
        if listed:
            rep.problem(f"{user} was added to {name!r} after this login, so this shell lacks it",
                        f"log out and in again (or, for this shell only: newgrp {name})")
        else:
            rep.problem(f"{user} is not in the {role} {name!r}: needed to {why}",
                        f"as root: usermod -aG {name} {user}   (then log out and in again)")


def check_socket(rep: Report, path: str, st_: os.stat_result, socket_group: str | None) -> None:
    """The socket's mode, owner and group, and the fix when this user may not use it."""
    kind = "socket" if stat.S_ISSOCK(st_.st_mode) else "NOT A SOCKET"
    owner_pw: pwd.struct_passwd | None
    try:
        owner_pw = pwd.getpwuid(st_.st_uid)
    except KeyError:
        owner_pw = None
    owner = owner_pw.pw_name if owner_pw is not None else str(st_.st_uid)
    try:
        group = grp.getgrgid(st_.st_gid).gr_name
    except KeyError:
        group = str(st_.st_gid)
    access = os.access(path, os.R_OK | os.W_OK)
    rep.line(f"socket file: {kind}, mode {stat.S_IMODE(st_.st_mode):04o}, owner {owner}:{group}, "
             f"{'read/write allowed' if access else 'NO read/write access for this user'}")
    if access:
        return
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    # No socket group set: the socket has the daemon's own group (root's, or the daemon
    # user's personal group). Joining that would make the user root-equivalent or the
    # daemon's user: say how to give the daemon a socket group instead.
    personal = st_.st_gid == 0 or group == owner  # root's group, or the daemon user's private group
    if personal:
        wanted = socket_group or SOCKET_GROUP
        rep.problem(f"the socket's group is {group!r}, the daemon user's own group: the daemon runs without "
                    "a socket group, so only root and its user may connect",
                    f"as root: groupadd --system {wanted}; usermod -aG {wanted} {user}; restart aclprofd with "
                    f"--socket-group {wanted} (the shipped unit does); or run this command as root")
    else:
        rep.problem(f"no permission on the socket: {user} is not in its group {group!r}",
                    f"as root: usermod -aG {group} {user}   (then log out and in again)")


def check_access(rep: Report, st: dict[str, Any]) -> None:
    """What this peer may ask the running daemon (STATUS ``access``, absent on older daemons)."""
    acc = st.get("access")
    if not isinstance(acc, dict):
        return
    if acc.get("peer_is_admin"):
        rep.line("your requests: all (root, the daemon's user or a member of its admin group)")
        return
    admin = acc.get("admin_group")
    rep.line("your requests: STATUS and streaming as a service only")
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    if admin:
        rep.problem(f"{user} may not run top, tail, export or trace: not in the daemon's admin group {admin!r}",
                    f"as root: usermod -aG {admin} {user}   (then log out and in again)")
    else:
        rep.problem("the daemon has no admin group: only root and its user may run top, tail, export or trace",
                    f"as root: groupadd --system {ADMIN_GROUP}; usermod -aG {ADMIN_GROUP} {user}; set "
                    f"admin_group = \"{ADMIN_GROUP}\" in its config and `systemctl reload aclprofd` "
                    "(the shipped unit passes --admin-group)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_metrics(rep: Report, host: str, port: int, unit: Unit | None, timeout: float = 2.0) -> None:
    """Where /metrics listens, whether it answers there, and whether the unit's IP filter
    lets a remote Prometheus in when the bind does (and the other way round)."""
    if port == 0:
        rep.line("metrics: disabled (prometheus_port = 0)")
        return
    probe = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    url = f"http://{'[' + probe + ']' if ':' in probe else probe}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            answers = f"answers ({r.status})"
            ok = True
    except urllib.error.HTTPError as exc:
        # it answers, but not to this user (daemon/README.md "Security model": who may read it)
        answers, ok = f"answers ({exc.code}: not to this user; see daemon/README.md \"Security model\")", \
            exc.code in (401, 403)
    except (urllib.error.URLError, OSError) as exc:
        answers, ok = f"does NOT answer at {url} ({getattr(exc, 'reason', exc)})", False
    scope = "this host only" if _is_loopback(host) else "reachable from other hosts"
    rep.line(f"metrics: binds {host}:{port} ({scope}); {answers}")
    if not ok:
        rep.problem(f"/metrics does not answer at {url}",
                    "check `journalctl -u aclprofd` for the bind error (port taken?); set prometheus_port "
                    "in the config or the drop-in")
    if unit is None:
        return
    allow = unit.ip_allow
    remote_allowed = [a for a in allow if a not in ("localhost", "127.0.0.1", "::1", "127.0.0.0/8", "::1/128")]
    if not _is_loopback(host) and "any" in unit.ip_deny and not remote_allowed:
        rep.problem(f"/metrics binds {host} but the unit allows only {' '.join(allow) or 'nothing'} "
                    "(IPAddressAllow): a remote Prometheus cannot scrape",
                    "as root: add `IPAddressAllow=<the Prometheus server's address>` to "
                    "/etc/systemd/system/aclprofd.service.d/metrics.conf, then systemctl daemon-reload "
                    "&& systemctl restart aclprofd")
    elif _is_loopback(host) and remote_allowed:
        rep.problem(f"the unit lets {' '.join(remote_allowed)} in (IPAddressAllow) but /metrics binds {host}: "
                    "a remote Prometheus cannot scrape",
                    "as root: add `Environment=ACLPROFD_PROMETHEUS_HOST=0.0.0.0` to "
                    "/etc/systemd/system/aclprofd.service.d/metrics.conf, then systemctl daemon-reload "
                    "&& systemctl restart aclprofd")
