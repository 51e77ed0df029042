"""Security as deployed, second round (issue 20): the authorization table of
tests/test_deployment.py (:data:`RULES`, the one table: request kind -> role, peers allowed)
probed against the daemon the shipped unit runs (an unprivileged service user whose group is
the socket group, admin group set), with peers whose *process* credentials differ from their
*user's* entry in the group database, the cases the first round's users (each logged in
with the groups the database gives) could not tell apart:

- the process's primary group is the admin group, the user is not in it (admin: the
  daemon takes the peer's gid from the kernel);
- the user's primary group in the database is the admin group, the process runs with the
  socket group (admin: the group database decides membership);
- the process carries the admin group as a supplementary group the database does not give
  the user (not admin: the kernel's SO_PEERCRED has no supplementary groups, and a process
  that can set its own groups is trusted anyway);
- a user in neither group whose process has the socket group (connects: STATUS only);
- the daemon's own uid with another group (admin by uid);
- the operator (in both groups by the database) with its groups cleared (cannot connect:
  the socket's permissions are the kernel's, by the process's groups).

And the table is complete by the protocol itself: every :class:`aclprof.protocol.wire.Kind`
is either a request in RULES or a kind only the daemon sends (:data:`DAEMON_SENDS`), which
the daemon refuses from either role. A new kind in wire.py that is in neither fails here.

The deployed tests are root only, like tests/test_deployment.py (they create users and groups).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
from dataclasses import dataclass

import pytest
from test_deployment import (  # noqa: F401  (fixture: deployed; deploy_venv is conftest's)
    _ADMIN,
    _CONNECT,
    _PROBE,
    PAYLOADS,
    RULES,
    Deployment,
    deployed,
)
from test_deployment import pytestmark as _ROOT_ONLY

from aclprof.protocol.wire import Kind

#: kinds only the daemon sends (replies, stream frames, agent notices): no client may send them
DAEMON_SENDS = frozenset({
    Kind.WELCOME, Kind.ERROR, Kind.GOODBYE, Kind.LIVE, Kind.TRACE_START, Kind.STATUS_REPLY,
    Kind.STREAM_RECORDS, Kind.SNAPSHOT_REPLY, Kind.EXPORT_RECORDS, Kind.RESET_REPLY, Kind.TRACE_REPLY,
    Kind.END, Kind.STREAM_SKIPPED, Kind.BASELINE_SAVE_REPLY, Kind.BASELINE_LIST_REPLY, Kind.BASELINE_GET_REPLY,
    Kind.REQUESTS_REPLY, Kind.STREAM_SOURCE, Kind.STREAM_NAMES, Kind.STREAM_BATCH, Kind.STREAM_SOURCE_END,
})


def test_every_wire_kind_is_a_request_in_the_table_or_one_only_the_daemon_sends():
    every = set(Kind)
    assert set(RULES) & DAEMON_SENDS == set()
    missing = every - set(RULES) - DAEMON_SENDS
    assert missing == set(), f"wire kinds in neither RULES (tests/test_deployment.py) nor DAEMON_SENDS: {missing}"


def test_no_client_may_send_a_kind_only_the_daemon_sends():
    """Each such kind, from an agent and from a control connection, closes it with an ERROR
    (in-process daemon: this is the dispatch, not the credentials)."""
    from helpers.daemons import Client, InProcess

    with InProcess() as d:
        for role in ("agent", "control"):
            for k in sorted(DAEMON_SENDS):
                c = Client(d.socket, role)
                try:
                    c.send_json(k, {})
                    got = c.recv()
                    assert got[0] == Kind.ERROR, (role, k.name, got)
                    assert c.closed_by_peer(), (role, k.name)
                finally:
                    c.close()


# ---- peers whose process credentials differ from the group database ---------------------------

@dataclass(frozen=True)
class Creds:
    user: str           # whose uid (a peer kind of test_deployment's users)
    gid: str            # "sock", "admin" or "own" (the user's own -U group) or "user" (its database primary)
    groups: tuple[str, ...]  # the process's supplementary groups, same names
    connect: bool       # may open the socket (kernel: the process's groups)
    admin: bool         # may send every control request (daemon: uid, peer gid, group database)


CASES = {
    "process gid admin, user not in admin": Creds("service_supplementary", "admin", ("sock",), True, True),
    "database primary admin, process gid sock": Creds("admin_primary", "sock", ("sock",), True, True),
    "process supplementary admin only": Creds("service_supplementary", "sock", ("sock", "admin"), True, False),
    "outsider with the socket group as gid": Creds("outsider", "sock", (), True, False),
    "daemon uid, another gid": Creds("daemon_user", "own_outsider", (), True, True),
    "operator with groups cleared": Creds("operator", "own", (), False, False),
}


def _gid(d: Deployment, name: str, user: str) -> int:
    if name == "sock":
        return grp.getgrnam(d.sock_group).gr_gid
    if name == "admin":
        return grp.getgrnam(d.admin_group).gr_gid
    if name == "own":
        return grp.getgrnam(d.users[user]).gr_gid
    if name == "own_outsider":
        return grp.getgrnam(d.users["outsider"]).gr_gid
    raise AssertionError(name)


def _probe_as(d: Deployment, c: Creds, plan: list) -> dict[Kind, str]:
    probe = d.base / "probe2.py"
    if not probe.exists():
        probe.write_text(_PROBE)
        os.chmod(probe, 0o644)
    uid = pwd.getpwnam(d.users[c.user]).pw_uid
    groups = ",".join(str(_gid(d, g, c.user)) for g in c.groups)
    argv = ["setpriv", f"--reuid={uid}", f"--regid={_gid(d, c.gid, c.user)}",
            f"--groups={groups}" if groups else "--clear-groups", "--",
            d.bin("python"), str(probe), d.socket, json.dumps(plan)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=d.base, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    return {Kind(int(k)): v for k, v in json.loads(p.stdout).items()}


def root_only(f):
    """test_deployment's marks (root, setpriv/runuser/useradd, /usr/bin/python3) on one test."""
    for mark in _ROOT_ONLY:
        f = mark(f)
    return f


@root_only
@pytest.mark.parametrize("case", list(CASES))
def test_authorization_by_process_credentials(deployed: Deployment, case: str):  # noqa: F811
    c = CASES[case]
    plan = [(int(k), role, PAYLOADS.get(k)) for k, (role, _) in RULES.items()]
    got = _probe_as(deployed, c, plan)
    want = {}
    for k, (_, allowed) in RULES.items():
        assert allowed in (_CONNECT, _ADMIN), k  # the table's two rules
        if not c.connect:
            want[k] = "no-connect"
        elif allowed == _CONNECT or c.admin:
            want[k] = "allowed"
        else:
            want[k] = "refused"
    wrong = {k.name: (got.get(k), w) for k, w in want.items() if got.get(k) != w}
    assert wrong == {}, f"{case}: request -> (got, want): {wrong}"


@root_only
def test_status_access_says_whether_the_asking_peer_is_an_admin(deployed: Deployment):  # noqa: F811
    """STATUS ``access.peer_is_admin`` agrees with what the peer may do, for every case."""
    code = ("import json, socket, sys\nfrom aclprof.protocol import wire\nfrom aclprof.protocol.wire import Kind\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); r, p = wire.FrameReader(), []\n"
            "s.sendall(wire.encode_json(Kind.HELLO, {'role': 'control', 'version': '0.1.0', 'pid': 1, 'host': 'h',"
            " 'labels': {}}))\nwire.recv_frame(s, r, p)\ns.sendall(wire.encode_json(Kind.STATUS, {}))\n"
            "print(json.dumps(wire.decode_json(wire.recv_frame(s, r, p)[1])['access']))\n")
    d = deployed
    for case, c in CASES.items():
        if not c.connect:
            continue
        uid = pwd.getpwnam(d.users[c.user]).pw_uid
        groups = ",".join(str(_gid(d, g, c.user)) for g in c.groups)
        p = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={_gid(d, c.gid, c.user)}",
                            f"--groups={groups}" if groups else "--clear-groups", "--", d.bin("python"), "-c", code,
                            d.socket], capture_output=True, text=True, timeout=60, cwd=d.base,
                           env={"PATH": "/usr/bin:/bin"})
        assert p.returncode == 0, (case, p.stderr)
        assert json.loads(p.stdout)["peer_is_admin"] is c.admin, case

