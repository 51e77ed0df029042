"""Who may do what (issue 9), against a real ``aclprofd`` process on its real socket: the
peer's real pid from SO_PEERCRED, control requests only for root, the daemon's user and
the admin group; and ``aclprof export -o`` that never replaces what is not a regular file
and never follows a planted temporary name.

Tests that need another uid create a user and a group (root only; skipped otherwise) and
speak to the daemon from a forked child that has dropped to that user.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from helpers.daemons import Client, agent, running, status
from helpers.procs import short_tmpdir, wait_for
from helpers.records import make_records

from aclprof.cli.main import main as cli_main
from aclprof.protocol.wire import Kind, decode_json

# ---- identity: the peer's pid, not HELLO's ----------------------------------------------------


def test_hello_pid_is_checked_against_the_peer():
    root = short_tmpdir()
    with running(root) as d:
        liar = agent(d.socket, service="liar", pid=1)  # claims to be init
        liar.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 100)
        assert [a["pid"] for a in status(d.socket)["agents"]] == [os.getpid()]
        liar.close()
        c = Client(d.socket)
        try:
            assert {r["pid"] for r in c.export()} == {os.getpid()}
        finally:
            c.close()
        line = wait_for(lambda: next((x for x in d.log_lines() if x.get("hello_pid") == 1), None))
        assert line["peer_pid"] == os.getpid() and line["level"] == "warning"


# ---- another uid ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_user():
    """(uid, gid, group name) of a new user whose primary group is new too; removed after."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (run the suite as root to cover it)")
    if not (shutil.which("useradd") and shutil.which("userdel")):
        pytest.skip("useradd/userdel not installed")
    name = f"aclpt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        import pwd
        pw = pwd.getpwnam(name)
        yield pw.pw_uid, pw.pw_gid, name
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


def _as_user(uid: int, gid: int, fn) -> object:
    """Run ``fn()`` in a forked child that has become uid/gid; its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no pytest machinery from here on
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            out = {"ok": fn()}
        except BaseException as exc:  # report everything to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"}
            code = 1
        try:
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    res = json.loads(data)
    assert "error" not in res, res["error"]
    return res["ok"]


def _try(sock: str, kind: Kind, req: dict) -> dict:
    """One control request on a fresh connection: the reply, or the ERROR and whether the
    daemon then closed the connection."""
    c = Client(sock)
    try:
        c.send_json(kind, req)
        k, payload = c.recv()
        if k == Kind.ERROR:
            return {"error": decode_json(payload)["message"], "closed": c.closed_by_peer(5)}
        return {"kind": Kind(k).name}
    finally:
        c.close()


def _user_session(sock: str) -> dict:
    out = {"status": _try(sock, Kind.STATUS, {}),
           "export": _try(sock, Kind.EXPORT, {"since_ts": None, "until_ts": None, "filter": {}}),
           "reset": _try(sock, Kind.RESET, {}),
           "snapshot": _try(sock, Kind.SNAPSHOT, {"window": "all", "group_by": "type"}),
           "stream": _try(sock, Kind.STREAM, {"filter": {}})}
    a = agent(sock, service="user-svc", pid=1)
    a.send_batch(make_records(50))
    a.close()
    return out


def _daemon_root(gid: int) -> str:
    root = short_tmpdir()
    os.chmod(root, 0o755)  # the other user must reach the socket in it
    return root


def test_control_requests_need_owner_root_or_admin_group(other_user):
    uid, gid, group = other_user
    root = _daemon_root(gid)
    with running(root, "--socket-group", group) as d:
        mine = agent(d.socket, service="root-svc")
        mine.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 100)
        mine.close()
        got = _as_user(uid, gid, lambda: _user_session(d.socket))
        assert got["status"] == {"kind": "STATUS_REPLY"}
        for req in ("export", "reset", "snapshot", "stream"):
            assert got[req]["closed"], (req, got[req])
            msg = got[req]["error"]
            assert "refused" in msg and f"uid {uid}" in msg and "--admin-group" in msg, msg
        # the agent part was accepted, under the child's real pid (not 1), as the user's own data
        wait_for(lambda: status(d.socket)["records_total"] == 150)
        c = Client(d.socket)
        try:
            recs = c.export()
        finally:
            c.close()
        by_service = {r["service"]: r["pid"] for r in recs}
        assert by_service["root-svc"] == os.getpid() and by_service["user-svc"] not in (1, os.getpid())
        refused = [x for x in d.log_lines() if x.get("event") == "control request refused"]
        assert {x["request"] for x in refused} == {"EXPORT", "RESET", "SNAPSHOT", "STREAM"}
        assert all(x["uid"] == uid for x in refused)
        # the aggregates were not reset by the refused RESET
        assert status(d.socket)["records_total"] == 150
    with running(root, "--socket-group", group, "--admin-group", group) as d:
        got = _as_user(uid, gid, lambda: {"export": _try(d.socket, Kind.EXPORT, {"filter": {}}),
                                          "reset": _try(d.socket, Kind.RESET, {})})
        assert got == {"export": {"kind": "EXPORT_RECORDS"}, "reset": {"kind": "RESET_REPLY"}}


# ---- aclprof export -o ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exporting():
    """A daemon with 300 stored records."""
    root = short_tmpdir()
    with running(root) as d:
        a = agent(d.socket, service="exp")
        for _ in range(3):
            a.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 300)
        a.close()
        yield d


def _export(sock: str, out: str) -> int:
    """``aclprof export`` in this process (its pid is known: the planted-name test needs it)."""
    import structlog
    saved = structlog.get_config()  # the CLI configures structlog onto this test's captured stderr
    try:
        return cli_main(["export", "--socket", sock, "--format", "jsonl", "-o", out])
    finally:
        structlog.configure(**saved)


def test_export_into_a_fifo_writes_into_it(exporting, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        assert _export(exporting.socket, str(fifo)) == 0
    finally:
        if reader.is_alive() and not got:  # the export may never have opened it: unblock the reader
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:  # ENXIO: no reader has it open, it read to the end already
                if e.errno != errno.ENXIO:
                    raise
        reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    assert len(got[0].splitlines()) == 300
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def test_export_into_a_device_node_leaves_it_a_device(exporting, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    assert _export(exporting.socket, str(null)) == 0
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3), "the device node was replaced"
    assert sorted(os.listdir(tmp_path)) == ["null"]


def test_export_through_a_symlink_keeps_the_link(exporting, tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert _export(exporting.socket, str(link)) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert len(target.read_text().splitlines()) == 300
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link.jsonl", "real.jsonl"]


def test_export_never_follows_a_planted_temporary_name(exporting, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out.jsonl"
    # the name the previous code used for its temporary file, planted as a symlink
    planted = Path(f"{out}.tmp-{os.getpid()}")
    planted.symlink_to(victim)
    assert _export(exporting.socket, str(out)) == 0
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink()
    assert len(out.read_text().splitlines()) == 300 and not out.is_symlink()
    assert sorted(os.listdir(tmp_path)) == sorted(["victim", "out.jsonl", planted.name])


def test_export_to_a_regular_file_and_to_stdout(exporting, tmp_path, capfdbinary):
    out = tmp_path / "x.jsonl"
    out.write_text("old\n")
    assert _export(exporting.socket, str(out)) == 0
    assert len(out.read_text().splitlines()) == 300
    assert sorted(os.listdir(tmp_path)) == ["x.jsonl"]  # no temporary left
    capfdbinary.readouterr()
    assert _export(exporting.socket, "-") == 0
    assert len(capfdbinary.readouterr().out.splitlines()) == 300


def test_export_to_a_directory_is_a_clear_error(exporting, tmp_path, capsys):
    assert _export(exporting.socket, str(tmp_path)) == 2
    assert "is a directory" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
