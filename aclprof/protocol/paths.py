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

__all__ = ["ENV_SOCKET", "SOCKET_NAME", "SYSTEM_SOCKET", "default_socket_path", "resolve_socket_path"]

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
