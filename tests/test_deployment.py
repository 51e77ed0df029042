"""The deployment as the shipped unit runs it (issue 17): ``daemon/aclprofd.service`` checked
with ``systemd-analyze verify``, then its ExecStart run the way systemd would (systemd is not
PID 1 here): as a non-root daemon user whose group and supplementary groups are the unit's
``Group=``/``SupplementaryGroups=``, with the unit's ``UMask=``, its runtime and state
directories made with the unit's modes, the config written by ``aclprofd --write-config`` and
the README's drop-in for a remote Prometheus, started with ``setpriv``. Users made with
``useradd --system`` then use it through ``runuser``: an operator in both groups runs
``top --once``, ``tail``, ``export`` and ``trace``; services in the socket group stream
with the agent; the rest are refused.

Every authorization rule comes from one table, :data:`RULES` (request kind -> the peers
allowed), probed for every peer kind; a request kind the daemon handles that the table lacks
fails the test. Root only (it creates users and groups, removed at the end); skipped with
the reason otherwise.

The other users cannot run the test's interpreter (it may live under /root, 0700), so a
session fixture makes a venv from ``/usr/bin/python3`` with this checkout installed, in a
directory readable by all, reused while the sources are unchanged (~20 s to build).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.deployvenv import SYSTEM_PY
from helpers.procs import REPO, TESTS, free_port, wait_for

from aclprof.cli.doctor_deploy import service_settings
from aclprof.protocol.wire import Kind

UNIT = REPO / "daemon" / "aclprofd.service"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates users and groups and drops to them "
                                                 "(CI runs the suite as root)"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("setpriv", "runuser", "useradd", "userdel", "groupadd",
                                                          "groupdel")),
                       reason="needs setpriv, runuser, useradd/userdel and groupadd/groupdel (util-linux, passwd)"),
    pytest.mark.skipif(not os.access(SYSTEM_PY, os.X_OK), reason=f"needs {SYSTEM_PY} for an interpreter "
                                                                  "the other users may run"),
]

# ---- the one authorization table ---------------------------------------------------------------
#: Peer kinds. Groups: "sock" is the unit's socket group (aclprof), "admin" its admin group.
PEERS = {
    "root": "uid 0",
    "daemon_user": "the daemon's own user",
    "operator": "supplementary groups sock and admin (README: usermod -aG aclprof,aclprof-admin)",
    "admin_primary": "primary group admin, supplementary sock",
    "service_primary": "primary group sock: the daemon's own group",
    "service_supplementary": "supplementary group sock",
    "admin_only": "supplementary group admin, not sock",
    "outsider": "in neither group",
}
_CONNECT = frozenset(PEERS) - {"admin_only", "outsider"}  # the socket (0660) and /run/aclprof (0750)
_ADMIN = frozenset({"root", "daemon_user", "operator", "admin_primary"})
#: request kind -> (the role of the connection that sends it, the peers allowed to).
#: daemon/README.md "Security model": STATUS and the agent frames for whoever can connect,
#: every other control request for root, the daemon's user and the admin group.
RULES: dict[Kind, tuple[str, frozenset[str]]] = {
    Kind.HELLO: ("agent", _CONNECT),
    Kind.NAMES: ("agent", _CONNECT),
    Kind.WATCH: ("agent", _CONNECT),
    Kind.UNWATCH: ("agent", _CONNECT),
    Kind.BATCH: ("agent", _CONNECT),
    Kind.LOSS: ("agent", _CONNECT),
    Kind.TRACE_DONE: ("agent", _CONNECT),
    Kind.OP_FAILURE: ("agent", _CONNECT),
    Kind.REQUEST_BILL: ("agent", _CONNECT),
    Kind.STATUS: ("control", _CONNECT),
    Kind.SNAPSHOT: ("control", _ADMIN),
    Kind.STREAM: ("control", _ADMIN),
    Kind.EXPORT: ("control", _ADMIN),
    Kind.RESET: ("control", _ADMIN),
    Kind.TRACE: ("control", _ADMIN),
    Kind.BASELINE_SAVE: ("control", _ADMIN),
    Kind.BASELINE_LIST: ("control", _ADMIN),
    Kind.BASELINE_GET: ("control", _ADMIN),
    Kind.REQUESTS: ("control", _ADMIN),
}
#: a valid request of each kind (the probe sends it; an allowed one must not be refused)
PAYLOADS: dict[Kind, object] = {
    Kind.NAMES: {"names": {"1": "Conv2D", "2": "conv1"}},
    Kind.WATCH: {"model_id": 7, "device": 0, "labels": {}},
    Kind.UNWATCH: {"model_id": 7},
    Kind.BATCH: None,  # records: built by the probe
    Kind.LOSS: {"dropped": 0, "reason": "none"},
    Kind.TRACE_DONE: {"trace_id": 999999, "pause_ns": 0, "session_ns": 0},
    Kind.OP_FAILURE: {"device": 0, "stream": 1, "task": 0, "thread": 1, "code": 507015},
    Kind.REQUEST_BILL: {"id": "probe", "wall_ns": 1000, "device_ns": 0, "ops": 0},
    Kind.STATUS: {},
    Kind.SNAPSHOT: {"window": "all", "group_by": "type"},
    Kind.STREAM: {"filter": {}},
    Kind.EXPORT: {"since_ts": None, "until_ts": None, "filter": {"service": "nobody-has-this"}},
    Kind.RESET: {},
    Kind.TRACE: {"service": "nobody-has-this", "duration_s": 0.5},
    Kind.BASELINE_SAVE: {"name": "probe"},
    Kind.BASELINE_LIST: {},
    Kind.BASELINE_GET: {"name": "probe"},
    Kind.REQUESTS: {},
}


def test_every_request_kind_the_daemon_handles_is_in_the_table():
    """A new request kind (a handler in control.py, ingest.py, trace.py or detector_control.py)
    without a row in RULES fails here: its authorization would go untested."""
    from helpers.daemons import InProcess

    with InProcess() as d:
        handled = set(d.daemon.control.handlers) | set(d.daemon.ingest.handlers) | {Kind.HELLO}
    assert handled - set(RULES) == set(), f"request kinds missing from RULES: {handled - set(RULES)}"
    assert set(RULES) - handled == set(), f"RULES names kinds the daemon does not handle: {set(RULES) - handled}"
    assert set(RULES) == set(PAYLOADS) | {Kind.HELLO}
    # and PROTOCOL.md documents each of them
    protocol = (REPO / "daemon" / "PROTOCOL.md").read_text()
    assert [k.name for k in RULES if f"`{k.name}`" not in protocol] == []


# ---- the unit ----------------------------------------------------------------------------------

def readme_dropin() -> str:
    """The README "Deployment" drop-in for a remote Prometheus (the [Service] block)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\w*\n(.*?)```", section, re.S)
    found = [b for b in blocks if "[Service]" in b]
    assert len(found) == 1, "README Deployment must show one drop-in with a [Service] section"
    # the block is a heredoc in a shell command: keep the unit lines
    body = found[0]
    return body[body.index("[Service]"):].split("\nEOF", 1)[0]


def test_unit_names_both_groups_and_matches_the_readme():
    s = service_settings(UNIT.read_text())
    argv = shlex.split(s["ExecStart"][0])
    assert argv[0] == "/opt/aclprof/bin/aclprofd"
    assert argv[argv.index("--socket-group") + 1] == "aclprof"
    assert argv[argv.index("--admin-group") + 1] == "aclprof-admin"
    assert argv[argv.index("--config") + 1] == "/etc/aclprof/aclprofd.toml"
    assert s["Group"] == ["aclprof"] and s["UMask"] == ["0007"]
    readme = (REPO / "README.md").read_text().split("## Deployment", 1)[1].split("\n## ", 1)[0]
    for needed in ("/usr/bin/python3 -m venv /opt/aclprof", "groupadd --system aclprof",
                   "groupadd --system aclprof-admin", "aclprofd --write-config /etc/aclprof/aclprofd.toml",
                   "usermod -aG aclprof,aclprof-admin", "usermod -aG aclprof ", "IPAddressAllow="):
        assert needed in readme, needed
    # the metrics bind: the unit allows loopback only, as the default prometheus_host;
    # the drop-in opens both together
    assert s["IPAddressDeny"] == ["any"] and s["IPAddressAllow"] == ["localhost"]
    drop = service_settings(readme_dropin())
    # a non-loopback bind needs a token (aclprofd.metrics_access): handed over as a credential
    assert drop["Environment"] == ["ACLPROFD_PROMETHEUS_HOST=0.0.0.0",
                                   "ACLPROFD_PROMETHEUS_TOKEN_FILE=%d/prometheus.token"]
    assert drop["LoadCredential"] == ["prometheus.token:/etc/aclprof/prometheus.token"]
    assert len(drop["IPAddressAllow"]) == 1


# ---- users, groups, the daemon as the unit runs it ---------------------------------------------

@dataclass
class Deployment:
    base: Path
    venv: Path
    socket: str
    data_dir: str
    config: str
    unit: str                      # the installed unit: the shipped one with this deployment's paths
    sock_group: str
    admin_group: str
    users: dict[str, str]          # peer kind -> user name (root: "root")
    metrics_port: int
    proc: subprocess.Popen | None = None
    log: str = ""
    workers: list[subprocess.Popen] = field(default_factory=list)

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def as_user(self, peer: str, *argv: str, **kw) -> list[str]:
        """argv run as ``peer`` with runuser (its groups from the group database, as at login)."""
        env = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", f"ACLPROF_SOCKET={self.socket}",
               "ACLPROF_BACKEND=mock", "NO_COLOR=1", "COLUMNS=200", "TMPDIR=/tmp"]
        if peer == "root":
            return [*env, *argv]
        return ["runuser", "-u", self.users[peer], "--", *env, *argv]

    def run(self, peer: str, *argv: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.as_user(peer, *argv), capture_output=True, text=True, timeout=timeout,
                              cwd=self.base, **kw)

    def aclprof(self, peer: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.run(peer, self.bin("aclprof"), *args, "--socket", self.socket, timeout=timeout)


def _sh(*argv: str) -> None:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()}")


def _start_like_systemd(d: Deployment, unit_text: str, dropin: str) -> None:
    """The unit's ExecStart as systemd would run it: its user (a DynamicUser stands in as a
    system user), Group=, SupplementaryGroups=, UMask=, NoNewPrivileges=, no capabilities,
    RuntimeDirectory/StateDirectory with their modes, the drop-in's Environment=."""
    import grp

    s = service_settings(unit_text)
    drop = service_settings(dropin)
    daemon = pwd.getpwnam(d.users["daemon_user"])
    group = grp.getgrnam(s["Group"][0]).gr_gid
    supp = [grp.getgrnam(g).gr_gid for v in s.get("SupplementaryGroups", []) for g in v.split()]
    for path, mode in ((os.path.dirname(d.socket), s["RuntimeDirectoryMode"][0]),
                       (d.data_dir, s["StateDirectoryMode"][0])):
        os.makedirs(path)
        os.chown(path, daemon.pw_uid, group)
        os.chmod(path, int(mode, 8))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "ACLPROFD_FLUSH_INTERVAL": "0.2",
           "ACLPROFD_PROMETHEUS_PORT": str(d.metrics_port), "ACLPROFD_LOG_FORMAT": "json"}
    # LoadCredential=: systemd copies each file into a directory only the service's user reads
    # (%d, $CREDENTIALS_DIRECTORY); the drop-in's source paths are this deployment's
    creds = d.base / "credentials"
    creds.mkdir(mode=0o700)
    os.chown(creds, daemon.pw_uid, group)
    for item in drop.get("LoadCredential", []):
        name, source = item.split(":", 1)
        data = Path(source.replace("/etc/aclprof", os.path.dirname(d.config))).read_bytes()
        target = creds / name
        target.write_bytes(data)
        os.chown(target, daemon.pw_uid, group)
        os.chmod(target, 0o400)
    env["CREDENTIALS_DIRECTORY"] = str(creds)
    for item in drop.get("Environment", []):
        k, v = item.split("=", 1)
        env[k] = v.replace("%d", str(creds))
    notify_path = str(d.base / "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    os.chmod(notify_path, 0o666)  # the daemon's user writes READY=1 into it (NotifyAccess=main)
    env["NOTIFY_SOCKET"] = notify_path
    argv = shlex.split(s["ExecStart"][0])
    assert s["NoNewPrivileges"] == ["yes"] and s["CapabilityBoundingSet"] == [""]
    cmd = ["setpriv", f"--reuid={daemon.pw_uid}", f"--regid={group}",
           f"--groups={','.join(str(g) for g in supp)}", "--inh-caps=-all", "--bounding-set=-all",
           "--no-new-privs", "--", "/bin/sh", "-c", f'umask {s["UMask"][0]} && exec "$@"', "sh", *argv]
    log = open(d.log, "wb")
    d.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd="/")
    log.close()
    deadline = time.monotonic() + 30
    try:
        while True:
            if d.proc.poll() is not None:
                pytest.fail(f"aclprofd exited {d.proc.returncode} at start:\n{Path(d.log).read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"aclprofd sent no READY=1 in 30 s:\n{Path(d.log).read_text()[-3000:]}")
            if select.select([notify], [], [], 0.1)[0] and b"READY=1" in notify.recv(4096):
                return
    finally:
        notify.close()


@pytest.fixture(scope="module")
def deployed(deploy_venv: Path) -> Iterator[Deployment]:
    sfx = uuid.uuid4().hex[:6]
    base = Path(f"/tmp/aclprof-deploy-{sfx}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    sock_group, admin_group = f"aclp{sfx}", f"aclpadm{sfx}"
    # peer kind -> useradd's group options
    specs = {"daemon_user": ["-g", sock_group],  # the unit's Group= is the socket group
             "operator": ["-U", "-G", f"{sock_group},{admin_group}"],
             "admin_primary": ["-g", admin_group, "-G", sock_group],
             "service_primary": ["-g", sock_group],
             "service_supplementary": ["-U", "-G", sock_group],
             "admin_only": ["-U", "-G", admin_group],
             "outsider": ["-U"]}
    users = {peer: f"aclp{i}{sfx}" for i, peer in enumerate(specs)}
    users["root"] = "root"
    made_users: list[str] = []
    made_groups: list[str] = []
    d = Deployment(base, deploy_venv, str(base / "run" / "aclprof" / "aclprofd.sock"),
                   str(base / "lib" / "aclprof"), str(base / "etc" / "aclprof" / "aclprofd.toml"),
                   str(base / "etc" / "systemd" / "system" / "aclprofd.service"), sock_group, admin_group, users,
                   free_port(), log=str(base / "aclprofd.log"))
    try:
        for g in (sock_group, admin_group):
            _sh("groupadd", "--system", g)
            made_groups.append(g)
        for peer, opts in specs.items():
            _sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", *opts, users[peer])
            made_users.append(users[peer])
        # README "Deployment", with this deployment's paths and group names
        p = subprocess.run([d.bin("aclprofd"), "--write-config", d.config], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        text = UNIT.read_text()
        for old, new in (("/opt/aclprof", str(deploy_venv)), ("/etc/aclprof/aclprofd.toml", d.config),
                         ("/run/aclprof/aclprofd.sock", d.socket), ("/var/lib/aclprof", d.data_dir),
                         ("aclprof-admin", admin_group)):
            text = text.replace(old, new)
        text = re.sub(r"(--socket-group |Group=|SupplementaryGroups=)aclprof\b", rf"\g<1>{sock_group}", text)
        os.makedirs(os.path.dirname(d.unit))
        Path(d.unit).write_text(text)
        os.makedirs(d.unit + ".d")
        Path(d.unit + ".d", "metrics.conf").write_text(readme_dropin())  # the README's remote-scrape drop-in
        token = Path(os.path.dirname(d.config), "prometheus.token")  # the README's token, root's alone
        old_umask = os.umask(0o077)
        try:
            token.write_text(secrets.token_urlsafe(32) + "\n")
        finally:
            os.umask(old_umask)
        _start_like_systemd(d, text, readme_dropin())
        yield d
    finally:
        for w in d.workers:  # EOF on stdin: the worker stops its agent and exits
            with contextlib.suppress(OSError):
                w.stdin.close()  # type: ignore[union-attr]
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)  # runuser and the worker under it
                w.wait(10)
        if d.proc is not None and d.proc.poll() is None:
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(20)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait(10)
        for u in made_users:
            subprocess.run(["userdel", u], capture_output=True)
            subprocess.run(["groupdel", u], capture_output=True)  # the -U group, if userdel kept it
        for g in made_groups:
            subprocess.run(["groupdel", g], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_systemd_analyze_verify_passes_on_the_installed_unit(deployed: Deployment):
    """The unit as the README installs it (here: this venv, not /opt/aclprof): no warning."""
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (Debian: systemd)")
    p = subprocess.run([exe, "verify", deployed.unit], capture_output=True, text=True, timeout=60)
    out = (p.stdout + p.stderr).strip()
    if p.returncode != 0 and "Failed to" in out and "aclprofd.service:" not in out:
        pytest.skip(f"systemd-analyze verify cannot run offline here: {out[:300]}")
    assert p.returncode == 0 and out == "", out
    # and the shipped unit's ExecStart is what /opt/aclprof's venv has
    shipped = subprocess.run([exe, "verify", str(UNIT)], capture_output=True, text=True, timeout=60)
    if not os.path.exists("/opt/aclprof/bin/aclprofd"):
        assert "/opt/aclprof/bin/aclprofd is not executable" in shipped.stdout + shipped.stderr


def _service(d: Deployment, peer: str, name: str) -> subprocess.Popen:
    """tests/helpers/agent_worker.py as ``peer`` (copied where that user can read it)."""
    worker = d.base / "agent_worker.py"
    if not worker.exists():
        shutil.copy(TESTS / "helpers" / "agent_worker.py", worker)
        os.chmod(worker, 0o644)
    trace_dir = d.base / f"trace-{name}"
    trace_dir.mkdir(mode=0o777, exist_ok=True)
    os.chmod(trace_dir, 0o777)
    err = d.base / f"worker-{name}.err"
    with open(err, "wb") as errf:
        p = subprocess.Popen(d.as_user(peer, d.bin("python"), str(worker), "--socket", d.socket, "--service",
                                       name, "--trace-dir", str(trace_dir)),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, text=True,
                             cwd=d.base, start_new_session=True)
    d.workers.append(p)
    assert p.stdout is not None
    first = json.loads(p.stdout.readline() or '{"error": "no output"}')
    assert first.get("ready"), (first, err.read_text()[-2000:])
    return p


def _cmd(p: subprocess.Popen, line: str) -> dict:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def _status(d: Deployment) -> dict:
    p = d.aclprof("root", "status", "--json")
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def services(deployed: Deployment) -> dict[str, subprocess.Popen]:
    """Two services streaming: one whose user has the socket group as its primary group,
    one as a supplementary group."""
    svc = {"svc-a": _service(deployed, "service_supplementary", "svc-a"),
           "svc-b": _service(deployed, "service_primary", "svc-b")}
    for p in svc.values():
        _cmd(p, "run 50")
    wait_for(lambda: {a["service"] for a in _status(deployed)["agents"]} >= set(svc), timeout=30)
    wait_for(lambda: _status(deployed)["records_total"] >= 2 * 50 * 5, timeout=30)
    return svc


def test_the_daemon_runs_as_its_own_user_with_the_units_umask_and_groups(deployed: Deployment, services):
    import grp

    st = os.stat(deployed.socket)
    daemon = pwd.getpwnam(deployed.users["daemon_user"])
    assert (st.st_uid, grp.getgrgid(st.st_gid).gr_name, st.st_mode & 0o777) == \
        (daemon.pw_uid, deployed.sock_group, 0o660)
    status = open(f"/proc/{_daemon_pid(deployed)}/status").read()
    assert re.search(rf"^Uid:\s+{daemon.pw_uid}\s", status, re.M)
    assert re.search(r"^Umask:\s+0007$", status, re.M)
    assert re.search(r"^CapEff:\s+0+$", status, re.M) and re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    # the files it made: no access for others (umask 0007 and its own modes)
    for root, dirs, files in os.walk(deployed.data_dir):
        for n in dirs + files:
            assert os.stat(os.path.join(root, n)).st_mode & 0o007 == 0, n
    acc = _status(deployed)["access"]
    assert acc == {"socket_group": deployed.sock_group, "admin_group": deployed.admin_group,
                   "daemon_uid": daemon.pw_uid, "peer_is_admin": True}


def _daemon_pid(d: Deployment) -> int:
    return int(_status(d)["pid"])


def test_operator_watches_with_top_tail_export_and_trace(deployed: Deployment, services):
    d = deployed
    p = d.aclprof("operator", "top", "--once", "--json", "--window", "all")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert {"Conv2D", "MatMulV2"} <= {r["op_type"] for r in rows}
    p = d.aclprof("operator", "top", "--once", "--group", "service", "--window", "all")
    assert p.returncode == 0 and "svc-a" in p.stdout and "svc-b" in p.stdout, p.stdout + p.stderr
    # tail: lines while the services run
    tail = subprocess.Popen(d.as_user("operator", d.bin("aclprof"), "tail", "--json", "--socket", d.socket),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=d.base,
                            start_new_session=True)  # Ctrl-C reaches tail through runuser as a group
    try:
        assert tail.stdout is not None
        lines: list[dict] = []
        deadline = time.monotonic() + 30
        while len(lines) < 20 and time.monotonic() < deadline:
            for p_ in services.values():
                _cmd(p_, "run 5")
            ready = select.select([tail.stdout], [], [], 1.0)[0]
            while ready and len(lines) < 20:
                lines.append(json.loads(tail.stdout.readline()))
                ready = select.select([tail.stdout], [], [], 0)[0]
        assert len(lines) >= 20, tail.stderr.read() if tail.poll() is not None else "no lines"
        assert {x["service"] for x in lines} <= {"svc-a", "svc-b"}
    finally:
        os.killpg(tail.pid, signal.SIGINT)
        assert tail.wait(20) in (0, 130), tail.stderr.read()
    p = d.aclprof("operator", "export", "--format", "jsonl", "-o", "-")
    assert p.returncode == 0, p.stderr
    exported = [json.loads(x) for x in p.stdout.splitlines()]
    assert {x["service"] for x in exported} == {"svc-a", "svc-b"} and len(exported) >= 500
    p = d.aclprof("operator", "trace", "--service", "svc-a", "--duration", "0.5s", "--json", timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    dirs = [x for proc in json.loads(p.stdout)["processes"] for x in proc["dirs"]]
    assert dirs and all(x.startswith(str(d.base / "trace-svc-a")) for x in dirs), p.stdout


def test_services_stream_but_may_not_read_others_records(deployed: Deployment, services):
    d = deployed
    errors_before = _status(d)["protocol_errors"]
    for peer in ("service_primary", "service_supplementary"):
        p = d.aclprof(peer, "status")
        assert p.returncode == 0, p.stderr
        p = d.aclprof(peer, "top", "--once")
        assert p.returncode != 0 and "refused" in p.stderr and d.admin_group in p.stderr, p.stderr
        p = d.aclprof(peer, "export", "--format", "jsonl", "-o", "-")
        assert p.returncode != 0 and "refused" in p.stderr and p.stdout == "", p.stderr
    # a refusal is logged, not counted as a protocol error (the AclprofdProtocolErrors alert,
    # top's "degraded"): a user missing a group is not an attack
    assert _status(d)["protocol_errors"] == errors_before
    assert any('"control request refused"' in line for line in Path(d.log).read_text().splitlines())


def test_users_outside_the_socket_group_cannot_connect_and_are_told_why(deployed: Deployment, services):
    d = deployed
    for peer in ("outsider", "admin_only"):
        p = d.aclprof(peer, "status")
        assert p.returncode == 2 and "ermission denied" in p.stderr, (peer, p.stderr)
        # was: "(the socket is mode 0660: join the daemon's group)", naming neither
        assert f"usermod -aG {d.sock_group} {d.users[peer]}" in p.stderr, p.stderr
        p = d.run(peer, d.bin("aclprof"), "doctor", "--socket", d.socket, "--unit", d.unit)
        assert p.returncode == 1, p.stdout
        assert f"usermod -aG {d.sock_group} {d.users[peer]}" in p.stdout, p.stdout
        assert "join group 'root'" not in p.stdout


def test_doctor_as_operator_finds_no_problem_and_as_service_names_the_admin_group(deployed: Deployment, services):
    d = deployed
    p = d.run("operator", d.bin("aclprof"), "doctor", "--socket", d.socket, "--unit", d.unit)
    assert p.returncode == 0, p.stdout + p.stderr
    for needed in (f"unit: {d.unit}", "(executable)", f"config: {d.config}", f"socket group: {d.sock_group!r}",
                   f"admin group: {d.admin_group!r}", "you are a member", "your requests: all",
                   f"metrics: binds 0.0.0.0:{d.metrics_port}", "answers (200)"):
        assert needed in p.stdout, (needed, p.stdout)
    p = d.run("service_supplementary", d.bin("aclprof"), "doctor", "--socket", d.socket, "--unit", d.unit)
    assert p.returncode == 1
    assert f"as root: usermod -aG {d.admin_group} {d.users['service_supplementary']}" in p.stdout, p.stdout


def test_an_agent_denied_the_socket_names_the_group_and_the_fix(deployed: Deployment):
    """Was: "aclprof daemon unreachable ... (start aclprofd, or check ACLPROF_SOCKET)"."""
    d = deployed
    code = ("import aclprof, time, aclprof.agent as agent; aclprof.use_mock();"
            "a = agent.start(service='lonely'); time.sleep(1.0); agent.stop()")
    p = d.run("outsider", d.bin("python"), "-c", code, timeout=60)
    assert "permission denied" in p.stderr, p.stderr
    assert f"usermod -aG {d.sock_group} {d.users['outsider']}" in p.stderr, p.stderr
    assert "start aclprofd" not in p.stderr


@contextlib.contextmanager
def _test_host() -> Iterator[tuple[str, str]]:
    """Another host, made here: a network namespace joined to this one by a veth pair on a
    /30 of its own. Yields (namespace, this host's address on the link). The scrape goes
    from that namespace to this host's end of the link: nothing leaves the machine."""
    tag = uuid.uuid4().hex[:6]
    ns, here, there = f"aclprof-prom-{tag}", f"acph{tag}", f"acpn{tag}"
    host_addr, peer_addr = "10.231.17.1", "10.231.17.2"

    def ip(*args: str, netns: str | None = None) -> None:
        cmd = ["ip", *(("netns", "exec", netns, "ip") if netns else ()), *args]
        subprocess.run(cmd, check=True, capture_output=True, timeout=10)

    try:
        ip("netns", "add", ns)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make a network namespace for the remote Prometheus: {exc}")
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        ip("addr", "add", f"{host_addr}/30", "dev", here)
        ip("link", "set", here, "up")
        ip("addr", "add", f"{peer_addr}/30", "dev", there, netns=ns)
        ip("link", "set", there, "up", netns=ns)
        yield ns, host_addr
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


_SCRAPE = """
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
with urllib.request.urlopen(req, timeout=10) as r:
    sys.stdout.write(r.read().decode())
"""


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs ip (iproute2) to make a test host")
def test_a_prometheus_on_another_address_scrapes_with_the_readme_dropin(deployed: Deployment, services):
    with _test_host() as (ns, host_addr):
        url = f"http://{host_addr}:{deployed.metrics_port}/metrics"
        token = Path(os.path.dirname(deployed.config), "prometheus.token").read_text().strip()
        scrape = subprocess.run(["ip", "netns", "exec", ns, SYSTEM_PY, "-c", _SCRAPE, url, token],
                                capture_output=True, text=True, timeout=30)
        wrong = subprocess.run(["ip", "netns", "exec", ns, SYSTEM_PY, "-c", _SCRAPE, url, "wrong"],
                               capture_output=True, text=True, timeout=30)
    assert scrape.returncode == 0, scrape.stderr
    assert "HTTP Error 401" in wrong.stderr, wrong.stderr  # the token is what admits a remote scraper
    assert 'aclprofd_op_duration_seconds_count{' in scrape.stdout and 'service="svc-a"' in scrape.stdout


# ---- the table, probed as every peer -----------------------------------------------------------

_PROBE = r'''
import json, socket, sys, numpy as np
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind
path, plan = sys.argv[1], json.loads(sys.argv[2])

def records():
    r = np.zeros(4, dtype=wire.RECORD_DTYPE)
    r["op_name"], r["op_type"], r["model_id"], r["start"], r["end"], r["duration"] = 2, 1, 7, 1000, 2000, 1000
    return r

def frame(kind, payload):
    if kind == Kind.BATCH:  # its names first: name ids are per connection
        return b"".join(wire.encode_names({1: "Conv2D", 2: "conv1"})) + wire.encode_batch(records())
    if kind == Kind.NAMES:
        return b"".join(wire.encode_names({1: "Conv2D", 2: "conv1"}))
    return wire.encode_json(kind, payload)

def error_verdict(payload):
    m = wire.decode_json(payload).get("message", "")
    return "refused" if "refused" in m or "not allowed" in m else "error: " + m

def one(kind, role, payload):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
    except PermissionError:
        return "no-connect"
    reader, pending = wire.FrameReader(ignore_unknown=True), []
    s.sendall(wire.encode_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": 1, "host": "probe",
                                            "service": "probe", "labels": {}}))
    k, p = wire.recv_frame(s, reader, pending)
    if k != Kind.WELCOME:
        return "hello: " + Kind(k).name
    if kind == Kind.HELLO:
        return "allowed"
    s.sendall(frame(kind, payload))
    if kind == Kind.STREAM and role == "control":  # records to stream: send some as an agent
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        a.connect(path)
        a.sendall(wire.encode_json(Kind.HELLO, {"role": "agent", "version": "0.1.0", "pid": 1, "host": "probe",
                                                "service": "probe", "labels": {}}))
        a.sendall(frame(Kind.BATCH, None))
        a.shutdown(socket.SHUT_WR)
        while a.recv(65536):
            pass
        a.close()
    if role == "agent":   # agents get no reply: end the stream, read to EOF, look for an ERROR
        s.shutdown(socket.SHUT_WR)
        while True:
            f = wire.recv_frame(s, reader, pending)
            if f is None:
                return "allowed"
            if f[0] == Kind.ERROR:
                return error_verdict(f[1])
    f = wire.recv_frame(s, reader, pending)
    if f is None:
        return "closed"
    return error_verdict(f[1]) if f[0] == Kind.ERROR else "allowed"

print(json.dumps({str(k): one(Kind(k), role, payload) for k, role, payload in plan}))
'''


def _probe(d: Deployment, peer: str, plan: list[tuple[int, str, object]]) -> dict[Kind, str]:
    probe = d.base / "probe.py"
    if not probe.exists():
        probe.write_text(_PROBE)
        os.chmod(probe, 0o644)
    if peer == "daemon_user":  # as the unit's process is: its uid, the unit's groups
        import grp
        daemon = pwd.getpwnam(d.users[peer])
        gid = grp.getgrnam(d.sock_group).gr_gid
        argv = ["setpriv", f"--reuid={daemon.pw_uid}", f"--regid={gid}", f"--groups={gid}", "--",
                d.bin("python"), str(probe), d.socket, json.dumps(plan)]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=d.base,
                           env={"PATH": "/usr/bin:/bin"})
    else:
        p = d.run(peer, d.bin("python"), str(probe), d.socket, json.dumps(plan), timeout=120)
    assert p.returncode == 0, p.stderr
    return {Kind(int(k)): v for k, v in json.loads(p.stdout).items()}


def test_every_authorization_rule_for_every_peer(deployed: Deployment, services):
    """RULES x PEERS against the daemon the unit runs: allowed, refused (ERROR naming the
    rule, connection closed) or, outside the socket group, no connection at all."""
    plan = [(int(k), role, PAYLOADS.get(k)) for k, (role, _) in RULES.items()]
    got = {peer: _probe(deployed, peer, plan) for peer in PEERS}
    want = {peer: {k: ("allowed" if peer in allowed else "refused" if peer in _CONNECT else "no-connect")
                   for k, (_, allowed) in RULES.items()} for peer in PEERS}
    wrong = {(peer, k.name): (got[peer].get(k), want[peer][k]) for peer in PEERS for k in RULES
             if got[peer].get(k) != want[peer][k]}
    assert wrong == {}, f"(peer, request) -> (got, want): {wrong}"


def test_each_request_on_the_other_roles_connection_is_refused(deployed: Deployment, services):
    """An agent connection cannot send control requests, nor a control connection agent frames."""
    plan = [(int(k), "control" if role == "agent" else "agent", PAYLOADS.get(k))
            for k, (role, _) in RULES.items() if k != Kind.HELLO]
    got = _probe(deployed, "root", plan)
    assert {k.name: v for k, v in got.items() if v != "refused"} == {}
