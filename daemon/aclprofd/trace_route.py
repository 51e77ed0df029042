"""Which agents a TRACE reaches and which of their answers the daemon believes (issue 19,
item 9; daemon/README.md "Security model").

A service name is the client's word: any user who may connect can announce any service. So
a TRACE for a service is sent only to the agents of its **owner**, the identity (uid, and
whether the peer is in the daemon's pid namespace: :mod:`aclprofd.peerid`) of the agent
connection that announced the name first, kept while any connection of that identity with
that name is open (:class:`ServiceOwners`). Agents of another identity announcing the same
name are not asked; the reply lists them under ``excluded`` with the reason, apart from the
service's processes. A TRACE by ``pid`` selects the kernel's pid (unforgeable) and needs no
owner.

A TRACE_DONE's ``dirs`` are the agent's word too: each is kept only if it is where the agent
makes its session directories (``<trace_dir>/aclprof-trace-<trace id>-XXXXXX/PROF_*``,
``aclprof/agent/trace.py``) and those directories belong to the replying peer's uid
(:func:`check_dirs`); the others are reported under ``dirs_refused`` with the reason, never
as the service's results.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from .conn import Conn

__all__ = ["OwnerKey", "ServiceOwners", "owner_key", "describe_owner", "check_dirs", "peer_fields"]

#: (uid, in the daemon's pid namespace); uid None: the socket could not say (never an owner)
OwnerKey = tuple[int | None, bool]


def owner_key(conn: Conn) -> OwnerKey:
    return (conn.peer[1] if conn.peer else None, conn.pid_ns == "same")


def describe_owner(key: OwnerKey) -> str:
    uid, same = key
    return f"uid {uid}" + ("" if same else " in another pid namespace")


def peer_fields(conn: Conn) -> dict[str, Any]:
    """Who a process of a TRACE_REPLY is, by the kernel's word."""
    return {"pid": conn.pid, "host": conn.host, "service": conn.service,
            "uid": conn.peer[1] if conn.peer else None, "pid_ns": conn.pid_ns}


class ServiceOwners:
    """service name -> (owner identity, the owner's open agent connections with that name).
    One entry per announced name with an open owner connection: bounded by the agent
    connections (aclprofd.connlimits)."""

    def __init__(self) -> None:
        self._owners: dict[str, tuple[OwnerKey, set[str]]] = {}

    def admitted(self, conn: Conn) -> None:
        """An agent finished HELLO: the first to announce its service name owns it."""
        if conn.role != "agent" or conn.service is None:
            return
        key = owner_key(conn)
        entry = self._owners.get(conn.service)
        if entry is None:
            if key[0] is not None:
                self._owners[conn.service] = (key, {conn.id})
        elif entry[0] == key:
            entry[1].add(conn.id)

    def closed(self, conn: Conn) -> None:
        if conn.service is None:
            return
        entry = self._owners.get(conn.service)
        if entry is not None and conn.id in entry[1]:
            entry[1].discard(conn.id)
            if not entry[1]:
                del self._owners[conn.service]  # the next agent to announce the name owns it

    def owner(self, service: str) -> OwnerKey | None:
        entry = self._owners.get(service)
        return entry[0] if entry else None

    def __len__(self) -> int:
        return len(self._owners)


def _refuse(path: str, why: str) -> dict[str, str]:
    return {"path": path, "reason": why}


def check_dirs(dirs: list[str], trace_id: int, uid: int | None) -> tuple[list[str], list[dict[str, str]]]:
    """(the ``dirs`` believed, the others with why) of a TRACE_DONE for ``trace_id`` from a
    peer of ``uid``. A believed directory is an absolute, normalized ``.../aclprof-trace-
    <trace_id>-*/PROF_*`` whose parent is a real directory (not a symlink) owned by ``uid``,
    and which is itself a directory owned by ``uid`` when the daemon may look inside the
    parent (the agent makes the parent 0700: only its own user, or root, can have put a
    ``PROF_*`` there). Paths are checked in the daemon's file system: an agent in another
    mount namespace (a container) reports paths the daemon cannot verify, refused as such."""
    good: list[str] = []
    bad: list[dict[str, str]] = []
    prefix = f"aclprof-trace-{trace_id}-"
    for path in dirs:
        if uid is None:
            bad.append(_refuse(path, "the peer's uid is unknown"))
            continue
        parent, name = os.path.split(path)
        if not os.path.isabs(path) or os.path.normpath(path) != path or not name.startswith("PROF_") \
                or not os.path.basename(parent).startswith(prefix):
            bad.append(_refuse(path, f"not a session directory of this trace (<trace_dir>/{prefix}*/PROF_*)"))
            continue
        try:
            pst = os.lstat(parent)
        except OSError as exc:
            bad.append(_refuse(path, f"{parent}: {exc.strerror or exc} (in the daemon's file system; an agent in "
                                     f"a container reports paths of its own)"))
            continue
        if not stat.S_ISDIR(pst.st_mode) or pst.st_uid != uid:
            what = "not a directory" if not stat.S_ISDIR(pst.st_mode) else f"owned by uid {pst.st_uid}"
            bad.append(_refuse(path, f"{parent} is {what}, not a directory of the replying uid {uid}"))
            continue
        try:
            st = os.lstat(path)
        except PermissionError:
            good.append(path)  # the peer's private session directory: only it (or root) wrote in it
            continue
        except OSError as exc:
            bad.append(_refuse(path, f"{exc.strerror or exc}"))
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            what = "not a directory" if not stat.S_ISDIR(st.st_mode) else f"owned by uid {st.st_uid}"
            bad.append(_refuse(path, f"{what}, not a directory of the replying uid {uid}"))
            continue
        good.append(path)
    return good, bad
