"""The deployment's pieces that need no root (issue 17): ``aclprofd --write-config``, the
clients' fallback to the system daemon's socket, and what ``aclprof doctor`` reads from an
installed unit and says about a socket without a socket group. The deployment run as the
unit runs it, with real users: tests/test_deployment.py."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.procs import env

from aclprof.cli import doctor_deploy as dd
from aclprof.cli.launch import daemon_argv
from aclprof.protocol import paths


def _aclprofd(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*daemon_argv(), *args], capture_output=True, text=True, env=env(), timeout=60,
                          cwd="/", **kw)


# ---- aclprofd --write-config -------------------------------------------------------------------

def test_write_config_writes_the_packaged_example_readable_by_all(tmp_path: Path):
    from aclprofd import config
    from aclprofd.writeconfig import example_text

    target = tmp_path / "etc" / "aclprof" / "aclprofd.toml"   # parents are created
    p = subprocess.run(["/bin/sh", "-c", 'umask 077 && exec "$@"', "sh", *daemon_argv(), "--write-config",
                        str(target)], capture_output=True, text=True, env=env(), timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr
    assert str(target) in p.stdout
    assert target.read_text() == example_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # the daemon's (dynamic) user reads it
    assert config.load({"config": str(target)}, environ={}).max_keys == config.Settings(socket="").max_keys
    assert [x.name for x in target.parent.iterdir()] == ["aclprofd.toml"]  # no temporary left


def test_write_config_never_replaces_a_file_unless_forced(tmp_path: Path):
    target = tmp_path / "aclprofd.toml"
    target.write_text("max_keys = 5\n")
    p = _aclprofd("--write-config", str(target))
    assert p.returncode == 2 and "exists" in p.stderr and "--force" in p.stderr, p.stderr
    assert target.read_text() == "max_keys = 5\n"
    p = _aclprofd("--write-config", str(target), "--force")
    assert p.returncode == 0, p.stderr
    assert "max_keys = 5" not in target.read_text() and "# max_keys = 10000" in target.read_text()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["aclprofd.toml"]


def test_write_config_errors_are_one_line_and_leave_nothing(tmp_path: Path):
    (tmp_path / "dir.toml").mkdir()
    p = _aclprofd("--write-config", str(tmp_path / "dir.toml"), "--force")
    assert p.returncode == 2 and "not a regular file" in p.stderr and "Traceback" not in p.stderr
    p = _aclprofd("--force")
    assert p.returncode == 2 and "--force only goes with --write-config" in p.stderr
    p = _aclprofd("--write-config", "-")
    assert p.returncode == 0 and "# admin_group" in p.stdout
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: a read-only directory is writable")
        p = _aclprofd("--write-config", str(ro / "a.toml"))
        assert p.returncode == 1 and "cannot write" in p.stderr and len(p.stderr.splitlines()) == 1
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


# ---- clients find the system daemon -------------------------------------------------------------

def test_clients_use_the_system_socket_when_no_per_user_daemon_runs(tmp_path: Path, monkeypatch):
    """A login shell has XDG_RUNTIME_DIR: the CLI looked for a per-user socket and said the
    daemon was unreachable while the service's daemon ran at /run/aclprof."""
    system = tmp_path / "run" / "aclprof" / "aclprofd.sock"
    monkeypatch.setattr(paths, "SYSTEM_SOCKET", str(system))
    user_dir = tmp_path / "user"
    env_ = {"XDG_RUNTIME_DIR": str(user_dir)}
    per_user = str(user_dir / "aclprof" / "aclprofd.sock")
    assert paths.resolve_socket_path(environ=env_) == per_user          # no system daemon here
    system.parent.mkdir(parents=True)
    assert paths.resolve_socket_path(environ=env_) == str(system)       # the service's daemon
    os.makedirs(os.path.dirname(per_user))
    Path(per_user).touch()
    assert paths.resolve_socket_path(environ=env_) == per_user          # a daemon of one's own wins
    assert paths.resolve_socket_path(environ={**env_, "ACLPROF_SOCKET": "/x.sock"}) == "/x.sock"
    assert paths.resolve_socket_path("/y.sock", environ=env_) == "/y.sock"


# ---- doctor -------------------------------------------------------------------------------------

def test_doctor_reads_the_unit_and_its_dropins_as_systemd_does(tmp_path: Path):
    unit = tmp_path / "aclprofd.service"
    unit.write_text((Path(__file__).resolve().parent.parent / "daemon" / "aclprofd.service").read_text())
    u = dd.read_unit(str(unit))
    assert u.flag("--socket-group") == "aclprof" and u.flag("--admin-group") == "aclprof-admin"
    assert u.flag("--config") == "/etc/aclprof/aclprofd.toml" and u.ip_allow == ["localhost"]
    (tmp_path / "aclprofd.service.d").mkdir()
    (tmp_path / "aclprofd.service.d" / "metrics.conf").write_text(
        "[Service]\nEnvironment=ACLPROFD_PROMETHEUS_HOST=0.0.0.0\nIPAddressAllow=10.0.0.5\n"
        "ExecStart=\nExecStart=/usr/bin/aclprofd --admin-group ops\n")
    u = dd.read_unit(str(unit))
    assert u.ip_allow == ["localhost", "10.0.0.5"]                     # IPAddressAllow adds up
    assert u.environment["ACLPROFD_PROMETHEUS_HOST"] == "0.0.0.0"
    assert u.exec_start == ["/usr/bin/aclprofd", "--admin-group", "ops"]   # an empty ExecStart= resets
    assert u.flag("--socket-group") is None


def test_doctor_never_says_join_group_root(tmp_path: Path, monkeypatch, capsys):
    """The socket's group is root's (or the daemon user's own) when the daemon has no
    socket group: joining it is the wrong advice."""
    sock = tmp_path / "d.sock"
    sock.touch()
    st = os.stat(sock)
    fake = os.stat_result((stat.S_IFSOCK | 0o660, st.st_ino, st.st_dev, 1, 0, 0, 0, 0, 0, 0))
    monkeypatch.setattr(dd.os, "access", lambda *a, **k: False)
    rep = dd.Report()
    dd.check_socket(rep, str(sock), fake, None)
    text = "\n".join(rep.problems)
    assert "join group 'root'" not in text and "usermod -aG root" not in text
    assert "--socket-group aclprof" in text and "groupadd --system aclprof" in text


def test_doctor_flags_a_metrics_bind_the_unit_does_not_let_out(tmp_path: Path):
    unit = dd.Unit(str(tmp_path / "u"), ip_allow=["localhost"], ip_deny=["any"])
    rep = dd.Report()
    dd.check_metrics(rep, "0.0.0.0", 1, unit, timeout=0.5)  # port 1: nothing answers
    assert any("allows only localhost" in p and "IPAddressAllow=" in p for p in rep.problems), rep.problems
    rep = dd.Report()
    unit.ip_allow = ["localhost", "10.0.0.5"]
    dd.check_metrics(rep, "127.0.0.1", 1, unit, timeout=0.5)
    assert any("ACLPROFD_PROMETHEUS_HOST=0.0.0.0" in p for p in rep.problems), rep.problems


def test_permission_hint_never_sends_a_user_to_root_s_group(tmp_path: Path):
    """A socket without a socket group has the daemon's own group (root's here): the agent's
    warning and the CLI's error must ask for a socket group, not membership of that one."""
    sock = tmp_path / "d.sock"
    sock.touch()
    if os.stat(sock).st_gid != 0:
        pytest.skip("needs a file of group root (run as root)")
    hint = paths.permission_hint(str(sock), "your user", "then log in again")
    assert "--socket-group aclprof" in hint and "usermod -aG aclprof " in hint and "then log in again" in hint
    assert "usermod -aG root" not in hint
    # the socket's directory is what a user outside /run/aclprof (0750) can see
    hint = paths.permission_hint(str(tmp_path / "missing" / "d.sock"), "your user", "x")
    assert hint.startswith("cannot inspect")
