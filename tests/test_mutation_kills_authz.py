"""The daemon's authorization rule as unit tests (issue 20, mutation run of
``aclprofd/authz.py``'s :func:`is_admin` / :func:`authorize`): every branch of the rule
with the credentials and the group database it reads replaced by fakes, so that the rule is
checked in this process (a mutant of it is live here) and without root.

The deployed tests (tests/test_deployment.py, tests/test_bite2_security.py) check the same
rule against a real daemon run as a service user; they start it in a subprocess, which
imports the unmutated package, so they cannot kill a mutant.
"""

from __future__ import annotations

import grp
import os
import pwd
from types import SimpleNamespace

import pytest
from aclprofd.authz import OPEN_REQUESTS, authorize, is_admin
from aclprofd.config import Settings
from test_deployment import _ADMIN, _CONNECT, RULES

from aclprof.protocol.wire import Kind, ProtocolError

DAEMON_UID = 4242
ADMIN_GID = 777
OTHER_GID = 555


class GroupDb:
    """The group and password databases the rule reads, as fakes that count their look-ups."""

    def __init__(self, members: tuple[str, ...] = (), grouplist: dict[str, list[int]] | None = None,
                 users: dict[int, tuple[str, int]] | None = None):
        self.members = members
        self.grouplist = grouplist or {}
        self.users = users or {}
        self.calls: list[str] = []

    def getgrnam(self, name: str) -> SimpleNamespace:
        self.calls.append(f"getgrnam {name}")
        if name != "ops":
            raise KeyError(name)
        return SimpleNamespace(gr_name="ops", gr_gid=ADMIN_GID, gr_mem=list(self.members))

    def getpwuid(self, uid: int) -> SimpleNamespace:
        self.calls.append(f"getpwuid {uid}")
        if uid not in self.users:
            raise KeyError(uid)
        name, gid = self.users[uid]
        return SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid)

    def getgrouplist(self, user: str, gid: int) -> list[int]:
        self.calls.append(f"getgrouplist {user} {gid}")
        return [gid, *self.grouplist.get(user, [])]


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> GroupDb:
    fake = GroupDb(members=("alice",), grouplist={"bob": [ADMIN_GID], "carol": [OTHER_GID]},
                   users={1001: ("alice", OTHER_GID), 1002: ("bob", OTHER_GID), 1003: ("carol", OTHER_GID)})
    monkeypatch.setattr(os, "geteuid", lambda: DAEMON_UID)
    monkeypatch.setattr(grp, "getgrnam", fake.getgrnam)
    monkeypatch.setattr(pwd, "getpwuid", fake.getpwuid)
    monkeypatch.setattr(os, "getgrouplist", fake.getgrouplist)
    return fake


def settings(admin_group: str | None = "ops") -> Settings:
    return Settings(socket="/nonexistent/d.sock", admin_group=admin_group)


def conn(peer: tuple[int, int, int] | None) -> SimpleNamespace:
    return SimpleNamespace(peer=peer, pid=None if peer is None else peer[0], refused=False)


# ---- is_admin ---------------------------------------------------------------------------------

def test_no_peer_credentials_is_never_admin(db: GroupDb):
    assert is_admin(settings(), None) is False
    assert db.calls == []


@pytest.mark.parametrize("uid", [0, DAEMON_UID])
def test_root_and_the_daemons_own_user_are_admins_whatever_their_group(db: GroupDb, uid: int):
    assert is_admin(settings(), (10, uid, OTHER_GID)) is True
    assert is_admin(settings(None), (10, uid, OTHER_GID)) is True
    assert db.calls == []  # decided by the uid alone


def test_without_an_admin_group_only_root_and_the_daemons_user_are_admins(db: GroupDb):
    assert is_admin(settings(None), (10, 1001, ADMIN_GID)) is False
    assert is_admin(settings(""), (10, 1001, ADMIN_GID)) is False
    assert db.calls == []  # no group looked up


def test_an_admin_group_missing_from_the_database_admits_nobody(db: GroupDb):
    assert is_admin(settings("nosuchgroup"), (10, 1002, ADMIN_GID)) is False
    assert db.calls == ["getgrnam nosuchgroup"]


def test_the_peers_primary_group_from_the_kernel_makes_it_admin(db: GroupDb):
    # uid 9999 is in no database: the kernel's gid alone decides
    assert is_admin(settings(), (10, 9999, ADMIN_GID)) is True
    assert db.calls == ["getgrnam ops"]


def test_a_user_unknown_to_the_database_with_another_gid_is_not_admin(db: GroupDb):
    assert is_admin(settings(), (10, 9999, OTHER_GID)) is False
    assert db.calls == ["getgrnam ops", "getpwuid 9999"]


def test_a_member_listed_in_the_admin_group_is_admin(db: GroupDb):
    assert is_admin(settings(), (10, 1001, OTHER_GID)) is True
    assert db.calls == ["getgrnam ops", "getpwuid 1001"]  # found in gr_mem: no grouplist needed


def test_a_user_whose_group_list_holds_the_admin_group_is_admin(db: GroupDb):
    assert is_admin(settings(), (10, 1002, OTHER_GID)) is True
    assert db.calls == ["getgrnam ops", "getpwuid 1002", f"getgrouplist bob {OTHER_GID}"]


def test_a_user_in_neither_is_not_admin(db: GroupDb):
    assert is_admin(settings(), (10, 1003, OTHER_GID)) is False


# ---- authorize: the request table -------------------------------------------------------------

#: every request kind a control client may send -> whether a peer that is no admin may send it,
#: from the deployed tests' one table (daemon/README.md "Security model": STATUS only)
REQUESTS = {kind: allowed == _CONNECT for kind, (role, allowed) in RULES.items() if role == "control"}
assert all(allowed in (_CONNECT, _ADMIN) for _, allowed in RULES.values())


def test_only_status_is_open_to_every_peer():
    assert OPEN_REQUESTS == frozenset(k for k, open_ in REQUESTS.items() if open_)


@pytest.mark.parametrize("kind", list(REQUESTS), ids=lambda k: k.name)
def test_each_request_from_an_admin_passes(db: GroupDb, kind: Kind):
    c = conn((10, 1001, OTHER_GID))
    authorize(settings(), c, kind)
    assert c.refused is False


@pytest.mark.parametrize("kind", list(REQUESTS), ids=lambda k: k.name)
def test_each_request_from_a_non_admin_follows_the_table(db: GroupDb, kind: Kind):
    c = conn((10, 1003, OTHER_GID))
    if REQUESTS[kind]:
        authorize(settings(), c, kind)
        assert c.refused is False
        return
    with pytest.raises(ProtocolError) as err:
        authorize(settings(), c, kind)
    assert c.refused is True  # counted as a refusal, not as a protocol error
    assert str(err.value) == (
        f"{kind.name} refused: control requests other than STATUS need root, the daemon's user "
        f"(uid {DAEMON_UID}) or a member of the admin group 'ops'; this peer is uid 1003")


def test_a_refusal_without_an_admin_group_says_none_is_set(db: GroupDb):
    c = conn((10, 1003, OTHER_GID))
    with pytest.raises(ProtocolError) as err:
        authorize(settings(None), c, Kind.RESET)
    assert str(err.value) == (
        f"RESET refused: control requests other than STATUS need root, the daemon's user (uid {DAEMON_UID}) "
        "(no --admin-group is set); this peer is uid 1003")


def test_a_peer_without_credentials_may_send_status_only(db: GroupDb):
    c = conn(None)
    authorize(settings(), c, Kind.STATUS)
    assert c.refused is False
    with pytest.raises(ProtocolError, match=r"SNAPSHOT refused: .*; this peer is uid unknown$"):
        authorize(settings(), c, Kind.SNAPSHOT)
    assert c.refused is True


def test_a_refusal_is_logged_with_the_request_and_the_peer(db: GroupDb, monkeypatch):
    import structlog
    from aclprofd import authz
    from structlog.testing import capture_logs

    # a logger of this test's own: an earlier in-process daemon in this process (any test file
    # before this one, in whatever order pytest or a pytest-xdist worker runs them) pointed the
    # module's _log at the daemon log file (helpers.daemons), past capture_logs
    monkeypatch.setattr(authz, "_log", structlog.get_logger("aclprofd"))
    c = conn((10, 1003, OTHER_GID))
    with capture_logs() as logs, pytest.raises(ProtocolError):
        authorize(settings(), c, Kind.EXPORT)
    assert [{k: e.get(k) for k in ("event", "request", "pid", "uid", "log_level")} for e in logs] == [
        {"event": "control request refused", "request": "EXPORT", "pid": 10, "uid": 1003,
         "log_level": "warning"}]
