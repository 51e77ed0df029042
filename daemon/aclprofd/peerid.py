"""Who a peer is, from what it cannot forge (issue 19, item 7; daemon/README.md "Security
model"): the kernel's pid and uid of the process that connected (``SO_PEERCRED``, translated
by the kernel into the daemon's pid namespace) and which pid namespace it lives in.

The pid namespace is read from the peer's ``NSpid`` (the pids it has in each namespace, from
the namespace of the daemon's ``/proc`` down to its own): one entry is the daemon's namespace,
more than one a nested one (a container, ``unshare -p``), whose last entry is the pid the peer
sees for itself. It is read through a pidfd of the peer (``SO_PEERPIDFD``, Linux 6.5+: the
very process that connected, even if its pid was reused since) and else from
``/proc/<pid>/status``; both are readable without ptrace rights, unlike
``/proc/<pid>/ns/pid``, which the previous check read (and which let a peer that the daemon
may ptrace, in another namespace, keep the pid it claimed: anyone's).
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Literal

__all__ = ["PidNs", "SAME", "FOREIGN", "OUTSIDE", "UNKNOWN", "pid_namespace"]

PidNs = Literal["same", "foreign", "outside", "unknown"]
#: the peer is in the daemon's pid namespace: its pid is the kernel's SO_PEERCRED pid
SAME: PidNs = "same"
#: a nested pid namespace (container): the daemon still knows its real pid, and its own view
FOREIGN: PidNs = "foreign"
#: a namespace the daemon cannot see into (the daemon is the one in a container): SO_PEERCRED
#: gives pid 0; its records are kept under pid 0, never under the pid it claims
OUTSIDE: PidNs = "outside"
#: the process exited before it could be looked at, or /proc is not mounted
UNKNOWN: PidNs = "unknown"

_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux's value; Python 3.11 does not name it
_INT = struct.Struct("i")


def _nspid(data: bytes) -> list[int] | None:
    at = data.find(b"\nNSpid:")
    if at < 0:
        return None
    end = data.find(b"\n", at + 1)
    try:
        return [int(x) for x in data[at + 7:end if end >= 0 else None].split()]
    except ValueError:
        return None


def _read(path: str) -> bytes:
    # os.open/os.read rather than open(): a HELLO pays this, ~4x cheaper than a text file object
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return b"\n" + os.read(fd, 8192)
    finally:
        os.close(fd)


def _via_pidfd(sock: socket.socket) -> list[int] | None:
    try:
        fd = _INT.unpack(sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD, _INT.size))[0]
    except (OSError, struct.error):
        return None  # older kernel, or not a Unix socket
    try:
        ns = _nspid(_read(f"/proc/self/fdinfo/{fd}"))
    except OSError:
        return None
    finally:
        os.close(fd)
    return ns if ns and ns[0] > 0 else None  # an exited process shows NSpid of -1 (or none)


def _via_proc(pid: int) -> list[int] | None:
    try:
        return _nspid(_read(f"/proc/{pid}/status"))
    except OSError:
        return None


def pid_namespace(sock: socket.socket, peer_pid: int) -> tuple[PidNs, int | None]:
    """(which pid namespace the peer of ``sock`` is in, the pid it has there). ``peer_pid``
    is its SO_PEERCRED pid (0: not visible in our namespace)."""
    if peer_pid <= 0:
        return OUTSIDE, None
    ns = _via_pidfd(sock)
    if ns is None or ns[0] != peer_pid:
        ns = _via_proc(peer_pid)
    if not ns or ns[0] != peer_pid:
        return UNKNOWN, None
    return (SAME, peer_pid) if len(ns) == 1 else (FOREIGN, ns[-1])
