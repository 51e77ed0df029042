"""The daemon's socket file: listen on it, notice that it was removed or replaced and
listen again on a new one, and at a stop remove it only if it is still ours.

:class:`SocketFile` owns what the file's lifetime needs (its inode, the STATUS problem
while it cannot be recreated); the listening socket itself is the transport's
(:attr:`aclprofd.transport.Transport.listener`, in the loop's selector). Kept apart from
:mod:`aclprofd.server` so that the rules about a path another process may also touch are
in one place.
"""

from __future__ import annotations

import os
import selectors
from typing import TYPE_CHECKING

import structlog

from .sockets import DaemonError, bind_socket, socket_is_ours

if TYPE_CHECKING:
    from .server import Daemon

__all__ = ["SocketFile"]

_log = structlog.get_logger("aclprofd")


class SocketFile:
    """The socket path of ``settings.socket`` and the daemon's listener on it."""

    def __init__(self, daemon: Daemon):
        self.d = daemon
        self.ino: int | None = None
        #: why our socket file is gone and not recreated (a STATUS problem until it is back)
        self.problem: str | None = None

    def listen(self) -> None:
        """Bind the socket file and listen (DaemonError if impossible)."""
        d, s = self.d, self.d.settings
        d.listener = bind_socket(s.socket, s.socket_group)
        self.ino = os.stat(s.socket).st_ino
        d.sel.register(d.listener, selectors.EVENT_READ, "listen")

    def stop_listening(self) -> None:
        """Accept no more connections; remove the socket file if it is still ours."""
        d = self.d
        if d.listener is None:
            return
        try:
            d.sel.unregister(d.listener)
        except (KeyError, ValueError):
            pass
        d.listener.close()
        d.listener = None
        try:
            # only if the path is still ours (another daemon may have replaced a stale one)
            if os.stat(d.settings.socket).st_ino == self.ino:
                os.unlink(d.settings.socket)
        except OSError:
            pass

    def check(self) -> None:
        """At every flush: if our socket file was removed or replaced, listen again on a new
        one (new agents and the CLI could not reach us otherwise); connected clients keep
        their connections. A failure is logged and tried again at the next flush."""
        d = self.d
        if d.listener is None or socket_is_ours(d.settings.socket, self.ino):
            return
        try:
            new = bind_socket(d.settings.socket, d.settings.socket_group)
        except (DaemonError, OSError) as exc:  # OSError: out of descriptors (EMFILE) too
            if self.problem is None:  # logged once; STATUS says so until it is back
                _log.error("socket file was removed or replaced and cannot be recreated",
                           socket=d.settings.socket, error=str(exc))
            # new agents and CLI commands cannot connect: unhealthy for whoever is still connected
            self.problem = (f"socket file {d.settings.socket} was removed or replaced and cannot be "
                            f"recreated: {exc}; new clients cannot connect (retried every flush)")
            return
        self.problem = None
        d.replace_listener(new)  # minds an accept pause (the listener is then out of the selector)
        self.ino = os.stat(d.settings.socket).st_ino
        _log.warning("socket file was removed; listening again", socket=d.settings.socket)
