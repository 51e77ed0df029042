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

import structlog

from .sockets import DaemonError, bind_socket, socket_is_ours
from .transport import Transport

__all__ = ["SocketFile"]

_log = structlog.get_logger("aclprofd")


class SocketFile:
    """The socket file at ``path`` (mode 0660, group ``group``) and ``transport``'s listener on it."""

    def __init__(self, transport: Transport, path: str, group: str | None):
        self.t = transport
        self.path, self.group = path, group
        self.ino: int | None = None
        #: why our socket file is gone and not recreated (a STATUS problem until it is back)
        self.problem: str | None = None

    def listen(self) -> None:
        """Bind the socket file and listen (DaemonError if impossible)."""
        t = self.t
        t.listener = bind_socket(self.path, self.group)
        self.ino = os.stat(self.path).st_ino
        t.sel.register(t.listener, selectors.EVENT_READ, "listen")

    def stop_listening(self) -> None:
        """Accept no more connections; remove the socket file if it is still ours."""
        t = self.t
        if t.listener is None:
            return
        try:
            t.sel.unregister(t.listener)
        except (KeyError, ValueError):
            pass
        t.listener.close()
        t.listener = None
        try:
            # only if the path is still ours (another daemon may have replaced a stale one)
            if os.stat(self.path).st_ino == self.ino:
                os.unlink(self.path)
        except OSError:
            pass

    def check(self) -> None:
        """At every flush: if our socket file was removed or replaced, listen again on a new
        one (new agents and the CLI could not reach us otherwise); connected clients keep
        their connections. A failure is logged and tried again at the next flush."""
        t = self.t
        if t.listener is None or socket_is_ours(self.path, self.ino):
            return
        try:
            new = bind_socket(self.path, self.group)
        except (DaemonError, OSError) as exc:  # OSError: out of descriptors (EMFILE) too
            if self.problem is None:  # logged once; STATUS says so until it is back
                _log.error("socket file was removed or replaced and cannot be recreated",
                           socket=self.path, error=str(exc))
            # new agents and CLI commands cannot connect: unhealthy for whoever is still connected
            self.problem = (f"socket file {self.path} was removed or replaced and cannot be "
                            f"recreated: {exc}; new clients cannot connect (retried every flush)")
            return
        self.problem = None
        t.replace_listener(new)  # minds an accept pause (the listener is then out of the selector)
        self.ino = os.stat(self.path).st_ino
        _log.warning("socket file was removed; listening again", socket=self.path)
