"""Who may read /metrics (daemon/README.md "Security model"): the rule and the peer's uid.

/metrics names services, model labels and op types (op names with ``prometheus_op_name``):
what SNAPSHOT gives, which the control socket gives only to the admin peers. So a scrape
is allowed when:

1. it carries ``Authorization: Bearer <token>`` equal to ``prometheus_token_file``'s
   content (compared in constant time; what Prometheus's ``authorization:
   credentials_file:`` sends): any peer, remote ones included;
2. else, from a loopback peer, by the uid of the peer's socket (found in /proc/net/tcp and
   tcp6: the socket whose local address is the peer's address): root, the daemon's user, a
   member of ``admin_group`` (as for SNAPSHOT), or a user named in ``prometheus_allow_users``
   (by default ``prometheus``, the scraper's user of the distributions' packages);
3. else, only with ``prometheus_allow_unauthenticated_remote = true`` (anyone who reaches
   the port reads it: say so when you set it).

A wrong token is 401, a peer outside the rule 403; both are counted. A non-loopback bind
without a token file refuses to start unless rule 3 is set explicitly
(:func:`check_bind`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from .authz import is_admin
from .config import Settings

__all__ = ["Access", "AccessError", "Decision", "check_bind", "read_token", "peer_uid", "is_loopback"]

_TOKEN_MAX = 4096


class AccessError(ValueError):
    """A /metrics access setting that cannot be used (the message says which and what to do)."""


@dataclass(frozen=True)
class Decision:
    status: int          # 200, 401 or 403
    reason: str          # the refusal counter's label ("" when allowed)


def is_loopback(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def read_token(path: str) -> bytes:
    """The bearer token of ``prometheus_token_file``: not world-readable, one line, not empty."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise AccessError(f"prometheus_token_file {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AccessError(f"prometheus_token_file {path} is not a regular file")
        if st.st_mode & 0o004:
            raise AccessError(f"prometheus_token_file {path} is readable by every user (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}): chmod o-rwx {path}")
        data = os.read(fd, _TOKEN_MAX + 1)
    finally:
        os.close(fd)
    token = data.strip()
    if not token or len(data) > _TOKEN_MAX or b"\n" in token:
        raise AccessError(f"prometheus_token_file {path} must hold one token line of 1..{_TOKEN_MAX} bytes")
    return token


def check_bind(settings: Settings, bound: str) -> None:
    """AccessError for a bind other peers reach with nobody authenticating them."""
    if is_loopback(bound) or settings.prometheus_token_file or settings.prometheus_allow_unauthenticated_remote:
        return
    raise AccessError(f"prometheus_host {settings.prometheus_host} is reachable from other hosts and no "
                      "prometheus_token_file is set: anyone who reaches port "
                      f"{settings.prometheus_port} would read the services and op types. Set "
                      "prometheus_token_file (Prometheus: authorization: credentials_file:), bind 127.0.0.1, "
                      "or set prometheus_allow_unauthenticated_remote = true")


def _proc_rows(path: str) -> Iterable[tuple[bytes, bytes, int]]:
    try:
        with open(path, "rb") as f:
            next(f, None)
            for line in f:
                parts = line.split()
                if len(parts) > 7:
                    yield parts[1], parts[2], int(parts[7])
    except OSError:
        return


def _hex_addr(addr: str, port: int) -> tuple[bytes, bytes]:
    """``addr:port`` as /proc/net/tcp (v4) and tcp6 (v4-mapped) write it."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        v4 = ip.packed[::-1].hex().upper()
        mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed).packed
    else:
        v4, mapped = "", ip.packed
    v6 = "".join(mapped[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4))
    p = f"{port:04X}"
    return (f"{v4}:{p}".encode() if v4 else b"-"), f"{v6}:{p}".encode()


def peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the peer's end of a loopback TCP connection (the socket whose local
    address is ``peer`` and remote address is ``local``), or None if not found."""
    p4, p6 = _hex_addr(*peer)
    l4, l6 = _hex_addr(*local)
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for la, ra, uid in _proc_rows(path):
            if (la, ra) in ((p4, l4), (p6, l6)):
                return uid
    return None


class Access:
    """The rule above for one daemon; :meth:`decide` runs on the HTTP thread."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.token = read_token(settings.prometheus_token_file) if settings.prometheus_token_file else None
        self.open_remote = settings.prometheus_allow_unauthenticated_remote

    def _allowed_uid(self, uid: int) -> bool:
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:
            return is_admin(self.settings, (0, uid, -1))
        if is_admin(self.settings, (0, uid, pw.pw_gid)):
            return True
        return pw.pw_name in self.settings.prometheus_allow_users

    def decide(self, authorization: str | None, peer: tuple[str, int], local: tuple[str, int]) -> Decision:
        if authorization is not None and self.token is not None:
            scheme, _, cred = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(cred.strip().encode(), self.token):
                return Decision(200, "")
            return Decision(401, "bad_token")
        if self.open_remote:
            return Decision(200, "")
        if not is_loopback(peer[0]):
            return Decision(401, "no_token")
        uid = peer_uid(peer, local)
        if uid is None:
            return Decision(403, "unknown_peer")
        if self._allowed_uid(uid):
            return Decision(200, "")
        return Decision(403, "forbidden_user")
