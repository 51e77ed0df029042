"""Who may send which control request (daemon/README.md "Security model"): STATUS is open to
every peer that can connect; every other request needs an admin peer (:func:`is_admin`), a
rule /metrics shares for local scrapers (:mod:`aclprofd.metrics_access`).

The peer's uid and gid are the kernel's (``SO_PEERCRED``, :func:`aclprofd.handshake.peer_credentials`),
never what the peer says; supplementary groups come from the group database (SO_PEERCRED has none).
"""

from __future__ import annotations

import grp
import os
import pwd
from typing import TYPE_CHECKING

import structlog

from aclprof.protocol.wire import Kind, ProtocolError

from .conn import Conn

if TYPE_CHECKING:
    from .config import Settings

__all__ = ["OPEN_REQUESTS", "authorize", "is_admin"]

_log = structlog.get_logger("aclprofd")
#: control requests any peer that can connect may send (counters and health, no records)
OPEN_REQUESTS = frozenset({Kind.STATUS})


def is_admin(settings: Settings, peer: tuple[int, int, int] | None) -> bool:
    """Root, the daemon's own user, or a member of ``settings.admin_group`` (the peer's
    primary group or, by the group database, one of its user's supplementary groups)."""
    if peer is None:
        return False
    _, uid, gid = peer
    if uid == 0 or uid == os.geteuid():
        return True
    if not settings.admin_group:
        return False
    try:
        admin = grp.getgrnam(settings.admin_group)
    except KeyError:
        return False
    if gid == admin.gr_gid:
        return True
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    return user.pw_name in admin.gr_mem or admin.gr_gid in os.getgrouplist(user.pw_name, user.pw_gid)


def authorize(settings: Settings, conn: Conn, kind: Kind) -> None:
    """ProtocolError (closing this connection) unless ``conn``'s peer may send ``kind``:
    STATUS is open to every peer that can connect; every other control request (EXPORT,
    RESET, SNAPSHOT, STREAM, ...) needs :func:`is_admin`."""
    if kind in OPEN_REQUESTS or is_admin(settings, conn.peer):
        return
    uid = conn.peer[1] if conn.peer else "unknown"
    group = f" or a member of the admin group {settings.admin_group!r}" if settings.admin_group else \
        " (no --admin-group is set)"
    _log.warning("control request refused", request=kind.name, pid=conn.pid, uid=uid)
    conn.refused = True  # logged here; an operator missing a group is not an attack (protocol_errors)
    raise ProtocolError(f"{kind.name} refused: control requests other than STATUS need root, the daemon's "
                        f"user (uid {os.geteuid()}){group}; this peer is uid {uid}")
