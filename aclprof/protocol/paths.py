"""Where the aclprof daemon's socket lives: one function shared by the agent, the CLI and
the daemon, so that every side resolves the same path.

Order: an explicit path, then ``ACLPROF_SOCKET``, then ``$XDG_RUNTIME_DIR/aclprof/aclprofd.sock``,
then ``/run/aclprof/aclprofd.sock``. Clients (agents, the CLI: :func:`resolve_socket_path`)
use the system daemon's socket (the systemd unit's, :data:`SYSTEM_SOCKET`) instead of the
per-user one when no per-user socket exists and ``/run/aclprof`` does: a login shell has
``XDG_RUNTIME_DIR`` set, and an operator of the system daemon must not need ``ACLPROF_SOCKET``.
"""

from __future__ import annotations

import os

__all__ = ["ENV_SOCKET", "SOCKET_NAME", "SYSTEM_SOCKET", "default_socket_path", "resolve_socket_path",
           "permission_hint"]

ENV_SOCKET = "ACLPROF_SOCKET"
SOCKET_NAME = "aclprofd.sock"
#: the socket of the system daemon (daemon/aclprofd.service: RuntimeDirectory=aclprof)
SYSTEM_SOCKET = os.path.join("/run", "aclprof", SOCKET_NAME)


def default_socket_path(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The socket path when none is given explicitly (``ACLPROF_SOCKET`` included)."""
    env = os.environ if environ is None else environ
    override = env.get(ENV_SOCKET)
    if override:
        return override
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "aclprof", SOCKET_NAME)
    return SYSTEM_SOCKET


def resolve_socket_path(path: str | os.PathLike[str] | None = None,
                        environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The socket a client connects to: ``path`` if given, else :func:`default_socket_path`,
    except that a per-user path with no socket there gives way to :data:`SYSTEM_SOCKET` when
    the system daemon's directory exists (its socket may be unreadable to this user: the
    connection then says "permission denied", which is the truth, not "no such file")."""
    if path is not None and str(path) != "":
        return os.fspath(path)
    env = os.environ if environ is None else environ
    chosen = default_socket_path(env)
    if (not env.get(ENV_SOCKET) and chosen != SYSTEM_SOCKET and not os.path.exists(chosen)
            and os.path.isdir(os.path.dirname(SYSTEM_SOCKET))):
        return SYSTEM_SOCKET
    return chosen


def permission_hint(path: str, who: str, then: str) -> str:
    """Why this process may not connect to the socket at ``path`` (permission denied), in
    words an operator acts on: the group that admits it and the command that adds the user
    (``who``: "this service's user", "your user"; ``then``: what to do after it)."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"uid {os.geteuid()}"
    try:
        st, what = os.stat(path), "the socket"
    except OSError:
        try:  # /run/aclprof is 0750: outside its group even the socket cannot be seen
            st, what = os.stat(os.path.dirname(path) or "."), "the socket's directory"
        except OSError as exc:
            return f"cannot inspect {path}: {exc.strerror}"
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = None
    if st.st_gid == 0 or group == owner:  # root's group, or the daemon user's private group
        # no socket group: joining the daemon's own group would make the user root (or the
        # daemon's user), so the daemon needs a socket group instead
        return (f"{what} belongs to the daemon's own group {group!r} (aclprofd runs without --socket-group): "
                f"start aclprofd with --socket-group aclprof as the shipped unit does, and as root: "
                f"groupadd --system aclprof; usermod -aG aclprof {user}; {then}")
    return (f"{what} admits the group {group!r} and {who} {user!r} is not in it: as root, "
            f"usermod -aG {group} {user}, {then}")
