"""``aclprof tail`` (issue 10): the service on each line, and ``-F/--follow-restarts``, which
rides out a daemon restart on the same socket (a real ``aclprofd`` killed and started again)
instead of exiting 1."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from helpers.daemons import Daemon
from helpers.procs import Worker, env, short_tmpdir, wait_for

pytestmark = pytest.mark.timeout(120)

RECONNECTED = "daemon restarted; reconnected (records of the gap are not replayed)"


def test_tail_lines_name_the_service_escaped_and_aligned():
    from aclprof.cli.tail import tail_line

    r = {"ts": 1764400000.5, "pid": 42, "service": "resnet", "device": 0, "model": 1, "op_type": "Conv2D",
         "op_name": "conv1", "duration_ns": 12_000, "kind": "op"}
    line = tail_line(r, colour=False)
    assert " resnet           pid 42      dev 0  model 1    Conv2D" in line and line.endswith("conv1")
    evil = tail_line({**r, "service": "a\x1b[2J\nforged line"}, colour=False)
    assert "\x1b" not in evil and "\n" not in evil and "a\\x1b[2J\\x0afor… pid 42" in evil
    assert tail_line({**r, "service": None}, colour=False).split()[1] == "-"
    step = tail_line({**r, "kind": "keypoint", "start": 1, "end": 2}, colour=False)
    assert " resnet " in step and "-- step" in step


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "killed"])
def test_tail_follow_restarts_reconnects_to_a_restarted_daemon(how):
    import shutil

    root = short_tmpdir("aclp-")
    d = Daemon(root).start()
    w = None
    tail = None
    try:
        w = Worker(d.socket, "--service", "followme")
        tail = subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "-F", "--service", "followme",
                                 "--socket", d.socket], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env(), preexec_fn=_sigint_default)
        lines: list[str] = []
        err: list[str] = []
        threading.Thread(target=lambda: [lines.append(x) for x in tail.stdout], daemon=True).start()
        threading.Thread(target=lambda: [err.append(x) for x in tail.stderr], daemon=True).start()

        def feed_until(n: int) -> bool:
            w.run(5)
            return len(lines) >= n

        wait_for(lambda: feed_until(10), timeout=30, what="records before the restart")
        assert " followme " in lines[0] and f"pid {w.pid}" in lines[0]
        d.stop(how)
        d = Daemon(root).start()  # same socket, same data directory
        wait_for(lambda: any(RECONNECTED in e for e in err), timeout=30, what="the reconnected line")
        seen = len(lines)
        wait_for(lambda: feed_until(seen + 10), timeout=30, what="records after the restart")
        assert tail.poll() is None  # still following
        assert [e.strip() for e in err] == [RECONNECTED]  # exactly one line per restart, nothing else
        tail.send_signal(signal.SIGINT)
        assert tail.wait(10) == 130
        w.stop()
    finally:
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait()
        if w is not None:
            w.kill()
        d.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def test_tail_without_follow_still_exits_1_when_the_daemon_stops():
    d = Daemon().start()
    try:
        tail = subprocess.Popen([sys.executable, "-m", "aclprof", "tail", "--socket", d.socket],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        # Stop only once the daemon has registered tail's STREAM ("stream started" with tail's
        # pid): its control connection alone ("connected") left a window in which the stop came
        # between HELLO and STREAM, and tail failed with a handshake error instead of STOPPED.
        wait_for(lambda: any(e.get("event") == "stream started" and e.get("pid") == tail.pid for e in d.log_lines()),
                 what="tail's stream started")
        d.stop()
        assert tail.wait(15) == 1
        assert tail.stderr.read().strip() == "aclprof: error: the daemon ended the stream (it stopped)"
    finally:
        d.cleanup()


def test_tail_follow_stops_on_a_refused_stream(tmp_path):
    """An ERROR in reply to STREAM is no restart: -F exits 1 at once instead of reconnecting."""
    import os
    import socket

    from aclprof.protocol import wire

    path = os.path.join(short_tmpdir("aclp-"), "fake.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(20)
    accepted = []

    def serve():
        try:
            while True:
                c, _ = srv.accept()
                accepted.append(c)
                reader, pending = wire.FrameReader(), []
                wire.recv_frame(c, reader, pending)  # HELLO
                c.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 2, "pid": 1,
                                                                "started_ts": 0.0}))
                wire.recv_frame(c, reader, pending)  # STREAM
                c.sendall(wire.encode_json(wire.Kind.ERROR, {"message": "STREAM refused: not an admin"}))
                c.close()
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        p = subprocess.run([sys.executable, "-m", "aclprof", "tail", "-F", "--type", "Conv", "--socket", path],
                           capture_output=True, text=True, env=env(), timeout=30)
        assert p.returncode == 1
        assert p.stderr.strip() == "aclprof: error: the daemon rejected STREAM: STREAM refused: not an admin"
        assert len(accepted) == 1
    finally:
        srv.close()
