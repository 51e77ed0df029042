"""An export ended by SIGTERM or SIGHUP cleans up as one ended by Ctrl-C (issue 17): no
hidden staging file (csv, chrome, jsonl, pprof) or directory (ascend, msmonitor-db) is left, an older target is
kept as it was, and the exit status says which signal ended it (143, 129; 130 for Ctrl-C).
SIGKILL cannot clean up: the next export into the same directory removes what it left,
and never the staging entry of an export that is still running.

The exports run as real ``aclprof`` processes against a fake daemon that sends records and
then pauses with the export open (tests/helpers/fakedaemon.py), so the signal always lands
mid-export."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.fakedaemon import FakeDaemon
from helpers.procs import env, short_tmpdir, wait_for

from aclprof.cli import staging
from aclprof.protocol import wire

pytestmark = pytest.mark.timeout(60)

FORMATS = ["csv", "chrome", "jsonl", "ascend", "pprof", "msmonitor-db"]
DIR_FORMATS = ("ascend", "msmonitor-db")  # -o DIR


def _rec(i: int) -> dict:
    return {"ts": 1764400000.5 + i * 1e-3, "host": "node1", "pid": 4242, "service": "svc", "device": 0,
            "model": 1, "op_type": "MatMul", "op_name": f"fc{i % 7}", "start": 1_000_000 + i * 20_000,
            "end": 1_010_000 + i * 20_000, "duration_ns": 10_000, "flag": 0, "thread_id": 7, "kind": "op"}


RECORDS = b"".join(json.dumps(_rec(i)).encode() + b"\n" for i in range(3000))


def _pausing(fake, conn, recv):
    """Records, then the export stays open until the test is done."""
    assert recv()[0] == wire.Kind.EXPORT
    conn.sendall(wire.encode(wire.Kind.EXPORT_RECORDS, RECORDS))
    fake.sent = True
    fake.release.wait(30)


def _complete(fake, conn, recv):
    assert recv()[0] == wire.Kind.EXPORT
    conn.sendall(wire.encode(wire.Kind.EXPORT_RECORDS, RECORDS[:RECORDS.index(b"\n") + 1]))
    conn.sendall(wire.encode_json(wire.Kind.END, {"records": 1}))


def _staged(directory) -> list[str]:
    return [n for n in os.listdir(directory) if staging.STAGING_RE.match(n)]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a backgrounded pytest ignores SIGINT


def _start_export(d: FakeDaemon, fmt: str, out) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "aclprof", "export", "--socket", d.path, "--format", fmt,
                          "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env(), preexec_fn=_sigint_default)
    # mid-export: the daemon sent records, the staging entry exists (and, for jsonl, has them)
    wait_for(lambda: getattr(d, "sent", False) and _staged(out.parent), what="the export under way")
    if fmt == "jsonl":
        wait_for(lambda: os.path.getsize(out.parent / _staged(out.parent)[0]) > 0, what="records written")
    return p


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_a_signal_mid_export_leaves_nothing_behind(tmp_path, fmt, sig):
    out = tmp_path / ("prof" if fmt in DIR_FORMATS else f"out.{fmt}")
    if fmt not in DIR_FORMATS:
        out.write_text("old\n")  # an older export stays as it was
    d = FakeDaemon(_pausing)
    try:
        p = _start_export(d, fmt, out)
        p.send_signal(sig)
        assert p.wait(15) == 128 + sig  # 143, 129, 130: not killed where it stood (-15, -1)
        err = p.stderr.read()
        assert "Traceback" not in err, err
    finally:
        d.close()
    assert _staged(tmp_path) == []
    if fmt in DIR_FORMATS:
        assert os.listdir(tmp_path) == []
    else:
        assert os.listdir(tmp_path) == [out.name] and out.read_text() == "old\n"


@pytest.mark.parametrize("fmt", ["jsonl", "ascend"])
def test_the_next_export_removes_what_a_killed_one_left(tmp_path, fmt):
    out = tmp_path / ("prof" if fmt == "ascend" else "out.jsonl")
    d = FakeDaemon(_pausing)
    try:
        p = _start_export(d, fmt, out)
        p.kill()  # SIGKILL: nothing can clean up
        assert p.wait(15) == -signal.SIGKILL
    finally:
        d.close()
    assert len(_staged(tmp_path)) == 1  # what SIGKILL left
    d = FakeDaemon(_complete)
    try:
        second = tmp_path / ("prof2" if fmt == "ascend" else "second.jsonl")
        p = subprocess.run([sys.executable, "-m", "aclprof", "export", "--socket", d.path, "--format", fmt,
                            "-o", str(second)], capture_output=True, text=True, env=env(), timeout=30)
    finally:
        d.close()
    assert p.returncode == 0, p.stderr
    assert "removed 1 staging entry" in p.stderr and "left by an export that was killed" in p.stderr
    assert sorted(os.listdir(tmp_path)) == [second.name]


# -- the staging lock, in this process ------------------------------------------------------

def _dir_fd(path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_a_sweep_never_removes_a_running_exports_staging_entries(tmp_path):
    dir_fd = _dir_fd(tmp_path)
    try:
        fd, name = staging.create_file(dir_fd, "out.csv", 0o644)
        dfd, dname = staging.create_dir(dir_fd, "prof")
        assert staging.sweep(str(tmp_path)) == (0, 0)
        assert sorted(os.listdir(tmp_path)) == sorted([name, dname])
        os.write(fd, b"x" * 1000)
        os.close(fd)  # the export died: its lock is gone
        os.close(dfd)
        assert staging.sweep(str(tmp_path)) == (2, 1000)
        assert os.listdir(tmp_path) == []
    finally:
        os.close(dir_fd)


def test_a_sweep_leaves_other_names_and_other_users_alone(tmp_path):
    older = tmp_path / ".out.csv.0123456789abcdef.tmp"  # an older aclprof's name: it took no lock
    older.write_text("x")
    mine = tmp_path / ".out.csv.aclprof-0123456789abcdef.tmp"
    mine.write_text("x")
    if os.geteuid() == 0:
        theirs = tmp_path / ".x.aclprof-fedcba9876543210.tmp"
        theirs.write_text("x")
        os.chown(theirs, 12345, -1)
    assert staging.sweep(str(tmp_path)) == (1, 1)
    assert not mine.exists() and older.exists()
    assert os.geteuid() != 0 or theirs.exists()


def test_a_sweep_between_create_and_lock_makes_the_creator_take_a_new_name(tmp_path, monkeypatch):
    """The creator's lock comes a moment after the create: a sweep in that moment removes the
    entry, and the creator, finding its name gone, starts again under a new one."""
    real = staging._locked
    swept: list[tuple[int, int]] = []

    def sweep_first(fd: int) -> bool:
        if not swept:
            swept.append(staging.sweep(str(tmp_path)))
        return real(fd)

    monkeypatch.setattr(staging, "_locked", sweep_first)
    dir_fd = _dir_fd(tmp_path)
    try:
        fd, name = staging.create_file(dir_fd, "out.csv", 0o600)
        assert swept == [(1, 0)] and os.listdir(tmp_path) == [name]
        assert staging.sweep(str(tmp_path)) == (0, 0)  # the new one is held
        os.close(fd)
    finally:
        os.close(dir_fd)


def test_a_long_target_name_still_gets_a_staging_name_within_name_max():
    name = staging.staging_name("é" * 127 + ".jsonl")  # 260 bytes
    assert len(os.fsencode(name)) <= 255 and staging.STAGING_RE.match(name)


# -- aclprof.cli.signals -------------------------------------------------------------------

def test_deferred_holds_a_signal_until_the_block_ends_and_a_second_waits_for_the_clean_up():
    from aclprof.cli.signals import Terminated, deferred, ending_signals

    # what was installed before (SIG_DFL, or coverage's own handler under `sigterm = true`)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    reached = []
    with pytest.raises(Terminated) as exc, ending_signals():
        try:
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                reached.append("after the kill")  # the handler ran, but held the signal
            reached.append("not reached")
        finally:
            with pytest.raises(Terminated) as second:
                with deferred():  # the clean-up: a second signal does not cut it short
                    os.kill(os.getpid(), signal.SIGHUP)
                    reached.append("clean-up done")
            assert second.value.signum == signal.SIGHUP
    assert exc.value.signum == signal.SIGTERM
    assert reached == ["after the kill", "clean-up done"]
    assert {s: signal.getsignal(s) for s in before} == before  # given back


def test_a_signal_in_a_forks_hooks_is_not_lost():
    """Python drops an exception raised in the after-fork hooks (logging's _releaseLock):
    spawning under deferred() acts on the signal after the spawn instead."""
    from aclprof.cli.signals import Terminated, deferred, ending_signals

    armed = [True]

    def hook() -> None:  # stays registered (there is no unregister), inert once it fired
        if armed:
            armed.clear()
            os.kill(os.getpid(), signal.SIGTERM)  # delivered while the parent runs its hooks

    os.register_at_fork(after_in_parent=hook)
    with pytest.raises(Terminated), ending_signals():
        with deferred():
            subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True)
    assert not armed


def test_an_ignored_signal_stays_ignored():
    """``nohup aclprof export ...``: SIGHUP was ignored when it started, and stays so."""
    from aclprof.cli.signals import ending_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with ending_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


# -- the other command that stages files: demo's temporary directory ------------------------

@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["HUP", "TERM"])
def test_demo_ended_by_a_signal_stops_its_processes_and_removes_its_directory(sig):
    """``aclprof demo`` keeps a daemon, services and their data in a temporary directory: a
    closed terminal (SIGHUP) removed nothing on the old code (only SIGTERM had a handler)."""
    # a short TMPDIR: the demo's daemon socket lives in it, and pytest's tmp_path (longer in an
    # xdist worker: .../popen-gw1/...) left the socket path over the 107 bytes of a Unix socket
    tmp = Path(short_tmpdir("acld-demo-"))
    p = subprocess.Popen([sys.executable, "-m", "aclprof", "demo", "--duration", "60"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env(TMPDIR=str(tmp)),
                         preexec_fn=_sigint_default)
    try:
        # running: the daemon logged its start and the services connected (their log has lines)
        wait_for(lambda: [d for d in tmp.iterdir() if (d / "services.log").exists()], timeout=30,
                 what="the demo running")
        (demo_dir,) = list(tmp.iterdir())
        p.send_signal(sig)
        assert p.wait(30) == 128 + sig
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        demo_left = list(tmp.iterdir())
        shutil.rmtree(tmp, ignore_errors=True)
    assert "Traceback" not in p.stderr.read()
    assert demo_left == []  # the demo removed its directory itself
    assert subprocess.run(["pgrep", "-f", str(demo_dir)], capture_output=True).stdout == b""
