"""Where the aclprof daemon's socket lives: one function shared by the agent, the CLI and
the daemon, so that every side resolves the same path.

Order: an explicit path, then ``ACLPROF_SOCKET``, then ``$XDG_RUNTIME_DIR/aclprof/aclprofd.sock``,
then ``/run/aclprof/aclprofd.sock``.
"""

from __future__ import annotations

import os

__all__ = ["ENV_SOCKET", "SOCKET_NAME", "default_socket_path", "resolve_socket_path"]

ENV_SOCKET = "ACLPROF_SOCKET"
SOCKET_NAME = "aclprofd.sock"


def default_socket_path(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The socket path when none is given explicitly (``ACLPROF_SOCKET`` included)."""
    env = os.environ if environ is None else environ
    override = env.get(ENV_SOCKET)
    if override:
        return override
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "aclprof", SOCKET_NAME)
    return os.path.join("/run", "aclprof", SOCKET_NAME)


def resolve_socket_path(path: str | os.PathLike[str] | None = None) -> str:
    """``path`` if given, else :func:`default_socket_path`."""
    if path is not None and str(path) != "":
        return os.fspath(path)
    return default_socket_path()
