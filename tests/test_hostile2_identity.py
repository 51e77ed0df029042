"""Issue 19, second hostile round: identities a peer cannot forge (items 7 and 9) and the
modes of the files the daemon writes (item 8, files).

- Item 7: an unprivileged user in its own user and pid namespace (``unshare -Urpf``) is pid 1
  there and can claim any pid in HELLO, a victim's included; ``export --pid VICTIM`` and
  ``trace --pid VICTIM`` must not take the impostor's records or route to it.
- Item 9: an agent of another user announcing a service's name must not have its forged
  ``PROF_*`` directories reported as the service's; a silent one must not hold a trace to its
  full deadline nor block the next trace.
- Item 8: ``aggregates.npz`` and saved baselines are 0640 whatever the umask, and a
  pre-existing data directory wider than 0750 is tightened: another user reads nothing.

Tests that need another uid create a user (root only; skipped otherwise) and run as it from a
forked child (``test_daemon_security._as_user``) or through ``setpriv``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemons import Client, Daemon, InProcess, agent, running, status
from helpers.procs import env, free_port, short_tmpdir, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind, decode_json

pytestmark = pytest.mark.timeout(120)

IMPOSTOR = str(Path(__file__).parent / "helpers" / "impostor.py")


@pytest.fixture(scope="module")
def other_user() -> Iterator[tuple[int, int, str]]:
    import test_daemon_security as sec

    gen = sec.other_user.__wrapped__()
    yield next(gen)
    next(gen, None)


def _daemon_root() -> str:
    root = short_tmpdir()
    os.chmod(root, 0o755)  # the other user must reach the socket in it
    return root


def _userns_works(uid: int, gid: int) -> str | None:
    """None if ``unshare -Urpf`` works for ``uid``, else why not."""
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return "unshare or setpriv is not installed"
    r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "unshare", "-Urpf",
                        "sh", "-c", "grep NSpid /proc/self/status"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"unshare -Urpf as uid {uid} failed: {r.stderr.strip()}"
    return None


class Impostor:
    """tests/helpers/impostor.py as ``uid``/``gid`` (``userns``: in its own user and pid
    namespace), claiming ``pid``; stops when closed."""

    def __init__(self, sock: str, uid: int | None, gid: int | None, *args: str, userns: bool = False,
                 venv: Path | None = None):
        script, self._copy = IMPOSTOR, None
        python = sys.executable
        if uid is not None:
            # another user runs it: an interpreter and a copy of the script that user can read
            # (this checkout and the default python3 may sit under /root, mode 0700)
            assert venv is not None, "running as another user needs the deploy_venv fixture"
            python = str(venv / "bin" / "python")
            self._copy = short_tmpdir()
            os.chmod(self._copy, 0o755)
            script = shutil.copy(IMPOSTOR, self._copy)
            os.chmod(script, 0o644)
        cmd = [python, script, sock, *args]
        if userns:
            cmd = ["unshare", "-Urpf", *cmd]
        if uid is not None:
            cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env())
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise AssertionError(f"impostor did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.hello = json.loads(line)
        assert self.hello.get("ready"), self.hello

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)


def _export_pids(sock: str, **flt: object) -> list[int]:
    c = Client(sock)
    try:
        return [r["pid"] for r in c.export(filter=flt)]
    finally:
        c.close()


# ---- item 7: pid spoofing across user namespaces -------------------------------------------------


def test_impostor_in_its_own_pid_namespace_cannot_claim_a_victims_pid(other_user, deploy_venv):
    uid, gid, group = other_user
    why = _userns_works(uid, gid)
    if why:
        pytest.skip(why)
    with running(_daemon_root(), "--socket-group", group) as d:
        victim = agent(d.socket, service="victim-svc")  # this process: the victim's pid
        vpid = os.getpid()
        victim.send_batch(make_records(100))
        imp = Impostor(d.socket, uid, gid, "--pid", str(vpid), "--service", "victim-svc", "--records", "40",
                       userns=True, venv=deploy_venv)
        try:
            assert imp.hello["pid"] == 1  # pid 1 of its own namespace
            st = wait_for(lambda: (s := status(d.socket))["records_total"] == 140 and s)
            # export --pid VICTIM: the victim's 100 records and none of the impostor's 40
            assert _export_pids(d.socket, pid=vpid) == [vpid] * 100
            fake = next(a for a in st["agents"] if a["uid"] == uid)
            # marked as what it is: another pid namespace, the kernel's pid, its claim beside it
            assert fake["pid_ns"] == "foreign" and fake["ns_pid"] == 1 and fake["hello_pid"] == vpid
            assert fake["pid"] not in (vpid, 1)
            nspid = Path(f"/proc/{fake['pid']}/status").read_text().split("NSpid:")[1].split("\n")[0].split()
            assert nspid == [str(fake["pid"]), "1"]  # the kernel's pid of that very process
            mine = next(a for a in st["agents"] if a["uid"] == os.geteuid())
            assert mine["pid"] == vpid and mine["pid_ns"] == "same"
            assert _export_pids(d.socket, pid=fake["pid"]) == [fake["pid"]] * 40
            # trace --pid VICTIM goes to the victim only (it answers; the impostor never would)
            c = Client(d.socket)
            try:
                c.send_json(Kind.TRACE, {"service": None, "pid": vpid, "duration_s": 0.2})
                k, payload = victim.recv()
                assert k == Kind.TRACE_START
                victim.send_json(Kind.TRACE_DONE, {"trace_id": decode_json(payload)["trace_id"]})
                k, payload = c.recv()
                reply = decode_json(payload)
                assert k == Kind.TRACE_REPLY and [p["pid"] for p in reply["processes"]] == [vpid], reply
            finally:
                c.close()
            from aclprof.cli.status import format_status
            assert f"pid namespace: foreign (pid 1 there, it said pid {vpid})" in format_status(st)
            warned = [x for x in d.log_lines() if x.get("event", "").startswith("HELLO pid is not")]
            assert warned and warned[-1]["hello_pid"] == vpid and warned[-1]["pid_ns"] == "foreign"
        finally:
            imp.close()
            victim.close()


# ---- item 9: TRACE impostors and silent agents ----------------------------------------------------


def _answer_trace(a: Client, prof_root: Path) -> tuple[int, str]:
    """Answer the TRACE_START ``a`` got as a real agent does: a session directory of its own
    under ``prof_root`` (the layout of aclprof/agent/trace.py). (trace id, the PROF_ path)."""
    k, payload = a.recv()
    assert k == Kind.TRACE_START, k
    tid = decode_json(payload)["trace_id"]
    prof = prof_root / f"aclprof-trace-{tid}-abc123" / "PROF_000001_real"
    prof.mkdir(parents=True)
    prof.parent.chmod(0o700)
    a.send_json(Kind.TRACE_DONE, {"trace_id": tid, "dirs": [str(prof)], "pause_ns": 5, "models": [1]})
    return tid, str(prof)


def test_trace_impostor_of_another_user_is_not_asked_and_its_forged_dirs_never_reported(other_user, tmp_path,
                                                                                      deploy_venv):
    uid, gid, group = other_user
    with running(_daemon_root(), "--socket-group", group) as d:
        real = agent(d.socket, service="svc")  # root's service, announced first
        # the victim's own session directory of a later trace: the impostor points at it
        forged = tmp_path / "aclprof-trace-2-zzz" / "PROF_000001_forged"
        forged.mkdir(parents=True)
        imp = Impostor(d.socket, uid, gid, "--pid", str(os.getpid()), "--service", "svc", "--on-trace", "forge",
                       "--dirs", str(forged), venv=deploy_venv)
        c = Client(d.socket)
        try:
            fake_pid = next(a["pid"] for a in status(d.socket)["agents"] if a["service"] == "svc"
                            and a["pid"] != os.getpid())
            # by service: only the owner's process is asked; the impostor is named apart
            c.send_json(Kind.TRACE, {"service": "svc", "pid": None, "duration_s": 0.2})
            _, real_dir = _answer_trace(real, tmp_path)
            k, payload = c.recv()
            reply = decode_json(payload)
            assert k == Kind.TRACE_REPLY
            assert [(p["pid"], p["dirs"]) for p in reply["processes"]] == [(os.getpid(), [real_dir])], reply
            [ex] = reply["excluded"]
            assert ex["pid"] == fake_pid and ex["uid"] == uid and "not its owner" in ex["reason"]
            assert f"uid {os.geteuid()}, which announced it first" in ex["reason"]
            assert str(forged) not in json.dumps(reply["processes"])
            from aclprof.cli.trace import format_trace
            assert f"not traced (1):\n    pid {fake_pid} uid {uid} svc: announces service" in format_trace(reply)
            # by its own (kernel) pid it is asked, but a directory it does not own is not believed
            c.send_json(Kind.TRACE, {"service": None, "pid": fake_pid, "duration_s": 0.2})
            k, payload = c.recv()
            reply = decode_json(payload)
            [p] = reply["processes"]
            assert p["pid"] == fake_pid and p["uid"] == uid and p["dirs"] == []
            [refused] = p["dirs_refused"]
            assert refused["path"] == str(forged) and f"owned by uid {os.geteuid()}" in refused["reason"]
            assert f"NOT BELIEVED {forged}: " in format_trace(reply)
            st = status(d.socket)["traces"]
            assert st["impostors_excluded"] == 1 and st["dirs_refused"] == 1
        finally:
            c.close()
            imp.close()
            real.close()


def test_a_silent_agent_neither_holds_the_trace_nor_blocks_the_next(tmp_path):
    port = free_port()
    with InProcess(trace_straggler_grace_s=0.3, prometheus_port=port) as d:
        good = agent(d.socket, service="svc")
        silent = agent(d.socket, service="svc")  # same user, never answers (hung, or hostile)
        c = Client(d.socket)
        c.sock.settimeout(5)  # the reply grace is 10 s: a reply within 5 s is the straggler rule's
        try:
            for n in (1, 2):
                c.send_json(Kind.TRACE, {"service": "svc", "pid": None, "duration_s": 0.2})
                _, real_dir = _answer_trace(good, tmp_path / str(n))
                k, payload = c.recv()
                reply = decode_json(payload)
                assert k == Kind.TRACE_REPLY, reply
                by_dirs = {tuple(p["dirs"]): p for p in reply["processes"]}
                assert by_dirs[(real_dir,)]["error"] is None
                if n == 1:  # the silent one is named, with why, beside the good result
                    assert reply["ok"] is False and len(reply["processes"]) == 2
                    assert "no reply 0.3 s after every other process answered" in by_dirs[()]["error"]
                else:  # the next trace runs at once without it, and says so
                    assert reply["ok"] is True and len(reply["processes"]) == 1
                    [ex] = reply["excluded"]
                    assert "did not answer trace 1; not asked again until it answers" in ex["reason"]
            st = status(d.socket)["traces"]
            assert (st["stragglers_cut"], st["silent_excluded"], st["running"]) == (1, 1, 0)
            # the same in /metrics (the snapshot the loop publishes: wait for the one after the STATUS)
            def scraped() -> str:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            text = wait_for(lambda: next((t for t in [scraped()] if "aclprofd_trace_stragglers_cut_total 1.0" in t),
                                         None))
            assert 'aclprofd_trace_agents_not_asked_total{reason="silent"} 1.0' in text
            assert 'aclprofd_trace_agents_not_asked_total{reason="not_owner"} 0.0' in text
            # it answers (late): it is asked again
            k, payload = silent.recv()
            assert k == Kind.TRACE_START
            silent.send_json(Kind.TRACE_DONE, {"trace_id": decode_json(payload)["trace_id"]})
            wait_for(lambda: status(d.socket)["traces"]["running"] == 0)
            c.send_json(Kind.TRACE, {"service": "svc", "pid": None, "duration_s": 0.2})
            _answer_trace(good, tmp_path / "3")
            k, payload = silent.recv()
            assert k == Kind.TRACE_START
        finally:
            c.close()
            good.close()
            silent.close()


# ---- item 8 (files): modes whatever the umask and the existing directory --------------------------


def _readable(paths: list[str]) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            with open(p, "rb") as f:
                f.read(1)
            out[p] = "read"
        except OSError as exc:
            out[p] = type(exc).__name__
    return out


def test_files_are_0640_in_a_0750_dir_whatever_the_umask_and_the_dirs_old_mode(other_user):
    import test_daemon_security as sec

    uid, gid, group = other_user
    root = _daemon_root()
    data = os.path.join(root, "data")
    os.mkdir(data)
    os.chmod(data, 0o755)  # pre-existing and open, as a careless install leaves it
    daemon = Daemon(root, "--socket-group", group)
    old_umask = os.umask(0o022)  # the common default: files 0644 unless the daemon says otherwise
    try:
        daemon.start()
    finally:
        os.umask(old_umask)
    try:
        a = agent(daemon.socket, service="secret-svc", names={1: "Conv2D", 2: "MatMul", 3: "secret_op_name", 4: "x"})
        a.send_batch(make_records(100))
        wait_for(lambda: status(daemon.socket)["records_total"] == 100)
        a.close()
        c = Client(daemon.socket)
        try:
            saved = c.request(Kind.BASELINE_SAVE, {"name": "b1", "source": "recent"})
        finally:
            c.close()
        access = status(daemon.socket)["storage"].get("dir_access")
        daemon.stop()  # writes aggregates.npz
    finally:
        daemon.cleanup()
    files = [os.path.join(data, "aggregates.npz"), saved["path"], os.path.join(data, "seg-00000001.acps")]
    # another user, outside the daemon's group, reads none of it
    got = sec._as_user(uid, gid, lambda: _readable(files))
    assert set(got.values()) == {"PermissionError"}, got
    for f in files:
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o640, (f, oct(os.stat(f).st_mode))
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(os.path.dirname(saved["path"])).st_mode) == 0o750
    # ... and the daemon said what it did
    assert access == {"path": data, "mode": "0750", "tightened_from": "0755", "problem": None}
    narrowed = [x for x in daemon.log_lines() if x.get("event") == "directory was wider than its mode; narrowed"]
    assert narrowed and narrowed[0]["mode_was"] == "0755"
    shutil.rmtree(root, ignore_errors=True)


def test_an_open_data_dir_of_another_user_is_reported_not_used_silently(other_user):
    uid, gid, group = other_user
    root = _daemon_root()
    data = os.path.join(root, "data")
    os.mkdir(data)
    os.chown(data, uid, gid)
    os.chmod(data, 0o755)  # not the daemon's (root's) to narrow
    try:
        with running(root, "--socket-group", group) as d:
            st = status(d.socket)
            problem = st["storage"]["dir_access"]["problem"]
            assert st["healthy"] is False and problem in st["problems"]
            assert f"{data} is mode 0755 and owned by uid {uid}" in problem and "chmod 750" in problem
            assert any(x.get("event") == "directory is too open" and x["level"] == "error" for x in d.log_lines())
            doctor = subprocess.run([sys.executable, "-m", "aclprof", "doctor", "--socket", d.socket],
                                    capture_output=True, text=True, env=env(), timeout=60)
            assert f"data dir: {data} mode 0755" in doctor.stdout and problem in doctor.stdout, doctor.stdout
        assert stat.S_IMODE(os.stat(data).st_mode) == 0o755  # left as it was
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_process_busy_in_one_trace_does_not_refuse_a_trace_of_its_service(tmp_path):
    with InProcess() as d:
        busy = agent(d.socket, service="svc")
        free = agent(d.socket, service="svc")
        first, second = Client(d.socket), Client(d.socket)
        try:
            first.send_json(Kind.TRACE, {"service": None, "pid": os.getpid(), "duration_s": 0.2})
            # both connections are this process's: the pid trace holds both; free one of them
            k, payload = busy.recv()
            k2, payload2 = free.recv()
            assert k == k2 == Kind.TRACE_START
            free.send_json(Kind.TRACE_DONE, {"trace_id": decode_json(payload2)["trace_id"]})
            wait_for(lambda: status(d.socket)["traces"]["running"] == 1)
            second.send_json(Kind.TRACE, {"service": "svc", "pid": None, "duration_s": 0.2})
            _, real_dir = _answer_trace(free, tmp_path)
            k, payload = second.recv()
            reply = decode_json(payload)
            assert k == Kind.TRACE_REPLY and reply["ok"], reply
            assert [p["dirs"] for p in reply["processes"]] == [[real_dir]]
            [ex] = reply["excluded"]
            assert "already tracing (trace 1" in ex["reason"]
            assert status(d.socket)["traces"]["busy_excluded"] == 1
        finally:
            for c in (first, second, busy, free):
                c.close()
