"""Who may read /metrics (``aclprofd/metrics_access.py``) as in-process unit tests (issue 20,
mutation run): the token file's checks, the bind check, the /proc/net/tcp lookup of a
loopback peer's uid (against real loopback connections of this process) and every branch of
:meth:`Access.decide`.

tests/test_hostile2_metrics.py checks the same rule through HTTP against in-process daemons
(seconds per test); these are the small ones a mutant can be run against.
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from aclprofd import metrics_access
from aclprofd.config import Settings
from aclprofd.metrics_access import Access, AccessError, Decision, check_bind, is_loopback, peer_uid, read_token


def settings(**kw: object) -> Settings:
    return Settings(socket="/nonexistent/d.sock", **kw)  # type: ignore[arg-type]


def token_file(tmp_path, data: bytes = b"s3cret\n", mode: int = 0o600) -> str:
    path = tmp_path / "token"
    path.write_bytes(data)
    os.chmod(path, mode)
    return str(path)


# ---- is_loopback -------------------------------------------------------------------------------

@pytest.mark.parametrize("addr, loop", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True), ("::1%lo", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("::", False), ("0.0.0.0", False),
    ("localhost", False), ("", False),
])
def test_is_loopback(addr: str, loop: bool):
    assert is_loopback(addr) is loop


# ---- read_token ---------------------------------------------------------------------------------

def test_a_token_file_gives_its_one_line_stripped(tmp_path):
    assert read_token(token_file(tmp_path, b"  s3cret \n")) == b"s3cret"
    assert read_token(token_file(tmp_path, b"x" * 4096)) == b"x" * 4096  # at the limit
    assert read_token(token_file(tmp_path, b"ab", mode=0o640)) == b"ab"  # group-readable is fine
    assert read_token(token_file(tmp_path, b"cd", mode=0o601)) == b"cd"  # only reading by others is refused


@pytest.mark.parametrize("data", [b"", b" \n", b"one\ntwo\n", b"x" * 4097, b"x" * 4095 + b"\n\n"],
                         ids=["empty", "blank", "two lines", "one above the limit", "limit with blank lines"])
def test_a_token_file_not_one_line_of_1_to_4096_bytes_is_refused(tmp_path, data: bytes):
    path = token_file(tmp_path, data)
    with pytest.raises(AccessError) as err:
        read_token(path)
    assert str(err.value) == f"prometheus_token_file {path} must hold one token line of 1..4096 bytes"


def test_a_world_readable_token_file_is_refused_with_the_fix(tmp_path):
    path = token_file(tmp_path, mode=0o604)
    with pytest.raises(AccessError) as err:
        read_token(path)
    assert str(err.value) == (f"prometheus_token_file {path} is readable by every user (mode 0604): "
                              f"chmod o-rwx {path}")


def test_a_missing_token_file_names_the_reason(tmp_path):
    path = str(tmp_path / "nope")
    with pytest.raises(AccessError) as err:
        read_token(path)
    assert str(err.value) == f"prometheus_token_file {path}: No such file or directory"


def test_a_token_file_that_is_a_symlink_or_a_directory_is_refused(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(token_file(tmp_path))
    with pytest.raises(AccessError, match=r"^prometheus_token_file .*/link: Too many levels of symbolic links$"):
        read_token(str(link))
    d = tmp_path / "dir"
    d.mkdir(mode=0o700)
    with pytest.raises(AccessError) as err:
        read_token(str(d))
    assert str(err.value) == f"prometheus_token_file {d} is not a regular file"


def test_read_token_leaves_no_descriptor_open(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    good, bad = token_file(tmp_path), str(tmp_path / "bad")
    os.mkdir(bad, 0o700)
    for _ in range(5):
        read_token(good)
        with pytest.raises(AccessError):
            read_token(bad)
    assert len(os.listdir("/proc/self/fd")) == before


# ---- check_bind -------------------------------------------------------------------------------

def test_a_loopback_bind_needs_nothing():
    check_bind(settings(), "127.0.0.1")
    check_bind(settings(), "::1")


def test_a_remote_bind_needs_a_token_file_or_the_explicit_switch(tmp_path):
    check_bind(settings(prometheus_token_file="/some/file"), "0.0.0.0")
    check_bind(settings(prometheus_allow_unauthenticated_remote=True), "0.0.0.0")
    s = settings(prometheus_host="0.0.0.0", prometheus_port=9464)
    with pytest.raises(AccessError) as err:
        check_bind(s, "0.0.0.0")
    assert str(err.value) == (
        "prometheus_host 0.0.0.0 is reachable from other hosts and no prometheus_token_file is set: anyone who "
        "reaches port 9464 would read the services and op types. Set prometheus_token_file (Prometheus: "
        "authorization: credentials_file:), bind 127.0.0.1, or set prometheus_allow_unauthenticated_remote = true")


# ---- the peer's uid from /proc/net/tcp{,6} ----------------------------------------------------

def test_hex_addresses_as_proc_net_tcp_writes_them():
    assert metrics_access._hex_addr("127.0.0.1", 8080) == (b"0100007F:1F90", b"0000000000000000FFFF00000100007F:1F90")
    assert metrics_access._hex_addr("::ffff:127.0.0.1", 1) == (b"0100007F:0001",
                                                                b"0000000000000000FFFF00000100007F:0001")
    assert metrics_access._hex_addr("::1", 65535) == (b"-", b"00000000000000000000000001000000:FFFF")


@contextmanager
def loopback_pair(family: int, host: str) -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    """A connected loopback TCP pair: (client address, server address) as the server sees them."""
    lsock = socket.socket(family, socket.SOCK_STREAM)
    try:
        lsock.bind((host, 0))
        lsock.listen(1)
        client = socket.socket(family, socket.SOCK_STREAM)
        try:
            client.connect(lsock.getsockname()[:2])
            server, peer = lsock.accept()
            try:
                yield peer[:2], server.getsockname()[:2]
            finally:
                server.close()
        finally:
            client.close()
    finally:
        lsock.close()


def test_peer_uid_of_an_ipv4_loopback_connection_is_this_process_uid():
    with loopback_pair(socket.AF_INET, "127.0.0.1") as (peer, local):
        assert peer_uid(peer, local) == os.geteuid()
        assert peer_uid(local, peer) == os.geteuid()  # the server's end: ours too
        assert peer_uid((peer[0], peer[1] ^ 1), local) is None  # another port: no such socket


def test_peer_uid_of_ipv6_and_dual_stack_connections():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with loopback_pair(socket.AF_INET6, "::1") as (peer, local):
            assert peer_uid(peer, local) == os.geteuid()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    # an IPv4 client of a dual-stack listener: the server sees a v4-mapped address
    lsock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        lsock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        lsock.bind(("::", 0))
        lsock.listen(1)
        with socket.create_connection(("127.0.0.1", lsock.getsockname()[1])):
            server, peer = lsock.accept()
            with server:
                assert peer[0] == "::ffff:127.0.0.1"
                assert peer_uid(peer[:2], server.getsockname()[:2]) == os.geteuid()
    finally:
        lsock.close()


def test_proc_rows_skip_the_header_and_short_lines(tmp_path):
    table = tmp_path / "tcp"
    table.write_text("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
                     "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1234 0 1\n"
                     "   1: short line\n"
                     "   3: 0100007F:0002 0100007F:1F90 01 00000000:00000000 00:00000000 00000000\n"
                     "   2: 0100007F:0001 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  99\n")
    assert list(metrics_access._proc_rows(str(table))) == [(b"0100007F:1F90", b"00000000:0000", 1234),
                                                          (b"0100007F:0001", b"0100007F:1F90", 99)]
    assert list(metrics_access._proc_rows(str(tmp_path / "missing"))) == []
    (tmp_path / "empty").write_text("")
    assert list(metrics_access._proc_rows(str(tmp_path / "empty"))) == []


# ---- Access.decide ------------------------------------------------------------------------------

REMOTE, LOOP, LOCAL = ("192.0.2.7", 40000), ("127.0.0.1", 40000), ("127.0.0.1", 9464)


def test_the_right_bearer_token_is_allowed_from_anywhere(tmp_path):
    a = Access(settings(prometheus_token_file=token_file(tmp_path)))
    for header in ("Bearer s3cret", "bearer s3cret", " BEARER  s3cret ", "Bearer s3cret\t"):
        assert a.decide(header, REMOTE, LOCAL) == Decision(200, ""), header


@pytest.mark.parametrize("header", ["Bearer wrong", "Basic s3cret", "s3cret", "Bearer", "", "Bearer s3cre",
                                    "Bearer s3crett"])
def test_a_wrong_token_is_401_even_from_loopback(tmp_path, header: str):
    a = Access(settings(prometheus_token_file=token_file(tmp_path)))
    assert a.decide(header, LOOP, LOCAL) == Decision(401, "bad_token")
    assert a.decide(header, REMOTE, LOCAL) == Decision(401, "bad_token")


def test_an_authorization_header_without_a_token_file_is_ignored(monkeypatch):
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: None)
    a = Access(settings())
    assert a.token is None
    assert a.decide("Bearer anything", REMOTE, LOCAL) == Decision(401, "no_token")
    assert a.decide("Bearer anything", LOOP, LOCAL) == Decision(403, "unknown_peer")


def test_a_remote_peer_without_a_token_is_401_unless_remote_reads_are_opened(tmp_path):
    assert Access(settings(prometheus_token_file=token_file(tmp_path))).decide(None, REMOTE, LOCAL) == \
        Decision(401, "no_token")
    assert Access(settings()).decide(None, REMOTE, LOCAL) == Decision(401, "no_token")
    opened = Access(settings(prometheus_allow_unauthenticated_remote=True))
    assert opened.open_remote is True
    assert opened.decide(None, REMOTE, LOCAL) == Decision(200, "")


class Users:
    """The password and group databases Access reads, as fakes."""

    def __init__(self, users: dict[int, tuple[str, int]]):
        self.users = users

    def getpwuid(self, uid: int) -> SimpleNamespace:
        if uid not in self.users:
            raise KeyError(uid)
        name, gid = self.users[uid]
        return SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid)


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> Users:
    fake = Users({0: ("root", 0), 500: ("prometheus", 500), 501: ("scraper", 501), 502: ("mallory", 502),
                  4242: ("aclprofd", 4242)})
    monkeypatch.setattr(pwd, "getpwuid", fake.getpwuid)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setattr("grp.getgrnam", lambda name: SimpleNamespace(gr_gid=900, gr_mem=["admin1"])
                        if name == "ops" else (_ for _ in ()).throw(KeyError(name)))
    monkeypatch.setattr(os, "getgrouplist", lambda user, gid: [gid])
    return fake


@pytest.mark.parametrize("uid, allow_users, admin_group, status", [
    (0, (), None, 200),                     # root
    (4242, (), None, 200),                  # the daemon's own user
    (500, ("prometheus",), None, 200),      # the default scraper user
    (501, ("prometheus",), None, 403),      # another user
    (501, ("prometheus", "scraper"), None, 200),
    (502, (), "ops", 403),                  # in no admin group
    (777, ("prometheus",), None, 403),      # a uid the database does not know
    (777, (), "ops", 403),
], ids=["root", "daemon user", "allowed user", "other user", "second allowed user", "not in admin group",
        "unknown uid", "unknown uid, admin group set"])
def test_a_loopback_scrape_is_judged_by_the_peers_uid(monkeypatch, users: Users, uid, allow_users, admin_group,
                                                       status):
    seen = []
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: seen.append((peer, local)) or uid)
    a = Access(settings(prometheus_allow_users=allow_users, admin_group=admin_group))
    assert a.decide(None, LOOP, LOCAL) == Decision(status, "" if status == 200 else "forbidden_user")
    assert seen == [(LOOP, LOCAL)]


def test_a_member_of_the_admin_group_by_primary_gid_may_scrape(monkeypatch, users: Users):
    users.users[503] = ("opsuser", 900)
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: 503)
    assert Access(settings(admin_group="ops", prometheus_allow_users=())).decide(None, LOOP, LOCAL) == \
        Decision(200, "")
    assert Access(settings(admin_group=None, prometheus_allow_users=())).decide(None, LOOP, LOCAL) == \
        Decision(403, "forbidden_user")


def test_an_unknown_uid_in_the_admin_groups_is_judged_by_uid_alone(monkeypatch, users: Users):
    """A uid the database does not know: admin only by uid (no gid to go by: -1, never a group's)."""
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: 4242)
    del users.users[4242]
    assert Access(settings(prometheus_allow_users=())).decide(None, LOOP, LOCAL) == Decision(200, "")


def test_a_loopback_scrape_whose_socket_is_not_found_is_403(monkeypatch):
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: None)
    assert Access(settings()).decide(None, LOOP, LOCAL) == Decision(403, "unknown_peer")


def test_a_real_loopback_scrape_of_this_process_is_judged_by_its_uid():
    """No fakes: the uid found in /proc/net/tcp for a real connection of this process."""
    with loopback_pair(socket.AF_INET, "127.0.0.1") as (peer, local):
        me = os.geteuid()
        allowed = Access(settings(prometheus_allow_users=(pwd.getpwuid(me).pw_name,)))
        assert allowed.decide(None, peer, local) == Decision(200, "")


def test_a_uid_unknown_to_the_database_is_not_taken_for_a_member_of_gid_1(monkeypatch, users: Users):
    """Without a database entry there is no group to go by: never a gid that could be the
    admin group's (on Debian gid 1 is ``daemon``)."""
    monkeypatch.setattr("grp.getgrnam", lambda name: SimpleNamespace(gr_gid=1, gr_mem=[]))
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: 777)
    assert Access(settings(admin_group="daemon", prometheus_allow_users=())).decide(None, LOOP, LOCAL) == \
        Decision(403, "forbidden_user")
    users.users[778] = ("d", 1)
    monkeypatch.setattr(metrics_access, "peer_uid", lambda peer, local: 778)
    assert Access(settings(admin_group="daemon", prometheus_allow_users=())).decide(None, LOOP, LOCAL) == \
        Decision(200, "")
