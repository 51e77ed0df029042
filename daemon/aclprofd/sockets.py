"""The daemon's Unix socket at start-up, and systemd readiness.

:func:`bind_socket` creates the listening socket with mode 0660 (and a group), refusing a
live socket of another daemon and anything that is not a socket, and removing a stale
socket file; :func:`sd_notify` sends ``READY=1`` and friends to ``$NOTIFY_SOCKET`` with a
few lines of socket code (no dependency on libsystemd).
"""

from __future__ import annotations

import grp
import os
import socket
import stat

import structlog

__all__ = ["DaemonError", "Waker", "bind_socket", "sd_notify", "socket_is_ours"]

_log = structlog.get_logger("aclprofd")


class DaemonError(RuntimeError):
    """A reason the daemon cannot start or run; the message is one readable line."""


def sd_notify(message: str) -> bool:
    """Send ``message`` to systemd's $NOTIFY_SOCKET (no-op without it). True if sent."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr[0] == "@":
        addr = "\0" + addr[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(message.encode())
        return True
    except OSError as exc:
        _log.warning("sd_notify failed", error=str(exc))
        return False


def bind_socket(path: str, group: str | None) -> socket.socket:
    """The listening socket at ``path``, mode 0660 (group ``group``). Refuses a live socket
    of another daemon and anything that is not a socket; removes a stale socket file."""
    if len(os.fsencode(path)) >= 108:
        raise DaemonError(f"socket path is too long for a Unix socket ({len(os.fsencode(path))} bytes, "
                          f"max 107): {path}")
    parent = os.path.dirname(path) or "."
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise DaemonError(f"cannot create the socket directory {parent}: {exc.strerror or exc}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise DaemonError(f"{path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(2.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            _log.info("removing stale socket", socket=path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        except OSError as exc:
            raise DaemonError(f"cannot check whether {path} is in use: {exc.strerror or exc}") from None
        else:
            raise DaemonError(f"another aclprofd is already listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)  # the socket never exists with wider permissions, even briefly
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise DaemonError(f"cannot bind {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    try:
        os.chmod(path, 0o660)
        if group:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise DaemonError(f"socket group {group!r} does not exist") from None
            os.chown(path, -1, gid)
    except (OSError, DaemonError) as exc:
        sock.close()
        os.unlink(path)
        if isinstance(exc, DaemonError):
            raise
        raise DaemonError(f"cannot set the owner or mode of {path}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def socket_is_ours(path: str, ino: int | None) -> bool:
    """Whether ``path`` is still the socket file we bound (inode ``ino``). False when it was
    removed (a cleanup of /run or /tmp, a careless ``rm``) or replaced: the daemon would go
    on running, unreachable, with nothing in its counters saying so."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_ino == ino


class Waker:
    """A socket pair that wakes the event loop's select: :meth:`wake` from any thread,
    or a byte a signal handler writes to :attr:`write_fd` (the signal wakeup fd); the loop
    selects :attr:`reader` and calls :meth:`drain` when it is readable."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)

    @property
    def write_fd(self) -> int:
        return self._writer.fileno()

    def wake(self) -> None:
        try:
            self._writer.send(b"\0")
        except OSError:  # full (a wake is pending anyway) or closed
            pass

    def drain(self) -> None:
        try:
            while self.reader.recv(4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.reader.close()
        self._writer.close()
