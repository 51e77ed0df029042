"""The library under hostile use (issue 9): a callback that never returns, fork() while a
subscription and the agent are live, and ``stats`` sampled while records flow.

Each test was written first and failed on the code before its fix (see the commit messages).
"""

from __future__ import annotations

import os
import textwrap
import threading
import time

import structlog

import aclprof
from aclprof import mock

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000},
    {"name": "relu1", "type": "Relu", "duration_ns": 200},
]


# ---- a callback that blocks forever -------------------------------------------------------

def test_close_with_a_stuck_callback_is_bounded_and_never_touches_a_reused_fd():
    """close(timeout=1) returns within 1 s + 100 ms although the callback blocks, reports the
    stuck reader (a warning naming the callback, ``stats.reader_stuck``), and the reader,
    released afterwards, reads nothing from a pipe that took one of its fd numbers."""
    model = mock.load_model(OPS)
    entered = threading.Event()
    release = threading.Event()

    def stuck_callback(record):
        entered.set()
        release.wait()

    sub = aclprof.subscribe(model, callback=stuck_callback)
    # Enough records to fill the pipe behind the stuck callback: the library's flush at
    # unsubscribe cannot finish until the reader reads again.
    mock.execute(model, 20000)
    assert entered.wait(10)
    read_fds = {sub._read_fd, sub._wake_r, sub._wake_w}
    with structlog.testing.capture_logs() as logs:
        t0 = time.monotonic()
        sub.close(timeout=1)
        elapsed = time.monotonic() - t0
    assert elapsed < 1.1, f"close(timeout=1) took {elapsed:.2f} s"
    assert any("stuck_callback" in str(entry) for entry in logs), logs
    assert sub.stats.reader_stuck
    # Fresh pipes now: with the old fds closed, one of them would take the reader's number.
    spare = [os.pipe() for _ in range(4)]
    try:
        taken = {fd for pair in spare for fd in pair} & read_fds
        for _, w in spare:
            os.write(w, b"u" * 120)  # "unrelated" bytes the reader must never see
        assert not taken, f"the stuck reader's fds {sorted(taken)} were reused"
        before = sub.stats.bytes_read
        release.set()
        for thread in (sub._thread, sub._unsub_thread):  # the reader, the unsubscribe helper
            thread.join(15)
            assert not thread.is_alive()
        for r, _ in spare:
            os.set_blocking(r, False)
            assert os.read(r, 1000) == b"u" * 120  # nothing was stolen
        stats = sub.stats
        assert stats.bytes_read >= before
        assert not stats.reader_stuck
        assert stats.records_read == stats.delivered + stats.dropped + stats.queued
    finally:
        release.set()
        for r, w in spare:
            os.close(r)
            os.close(w)
    # The reader released its fds when it ended.
    for fd in read_fds:
        try:
            os.fstat(fd)
        except OSError:
            continue
        raise AssertionError(f"fd {fd} of the stuck reader is still open after it ended")


# ---- stats are an atomic snapshot ---------------------------------------------------------

def _sample_identity(sub, stop: threading.Event, out: list[int]) -> None:
    samples = violations = 0
    while not stop.is_set() or samples < 2000:
        s = sub.stats
        samples += 1
        if s.records_read != s.delivered + s.dropped + s.queued:
            violations += 1
    out.extend([samples, violations])


def _check_identity_while_flowing(**kwargs) -> None:
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, **kwargs)
    stop = threading.Event()
    result: list[int] = []
    sampler = threading.Thread(target=_sample_identity, args=(sub, stop, result))
    consumed = [0]

    def consume():
        for batch in sub.batches():
            consumed[0] += len(batch)

    consumer = threading.Thread(target=consume) if "callback" not in kwargs else None
    sampler.start()
    if consumer:
        consumer.start()
    for _ in range(20):
        mock.execute(model, 200)
    mock.wait_writer_idle()
    stop.set()
    sampler.join(60)
    sub.close()
    if consumer:
        consumer.join(10)
    samples, violations = result
    assert samples >= 2000
    assert violations == 0, f"{violations} of {samples} samples broke the identity"
    s = sub.stats
    assert s.records_read == 8000 == s.delivered + s.dropped + s.queued


def test_stats_identity_holds_in_every_sample_with_a_callback():
    _check_identity_while_flowing(callback=lambda record: None)


def test_stats_identity_holds_in_every_sample_with_a_queue():
    _check_identity_while_flowing(queue_size=1000, on_full="drop_oldest")


# ---- fork() ----------------------------------------------------------------------------------

FORK_SCRIPT = textwrap.dedent("""
    import os, sys, threading, time
    import aclprof, aclprof.agent as agent
    from aclprof import mock

    OPS = [{"name": "conv1", "type": "Conv2D", "duration_ns": 2000},
           {"name": "relu1", "type": "Relu", "duration_ns": 200}]
    got = []
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, callback=got.append)
    agent.start(sys.argv[1], service="parent")
    watched = mock.load_model(OPS)
    agent.watch(watched)
    stop = threading.Event()

    def churn():  # keep the library's writer and locks busy while we fork
        while not stop.is_set():
            mock.execute(model, 50)
            mock.execute(watched, 50)

    t = threading.Thread(target=churn)
    t.start()
    time.sleep(0.2)
    children = []
    for i in range(int(sys.argv[2])):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child_got = []
                m = mock.load_model(OPS)
                s = aclprof.subscribe(m, callback=child_got.append)
                mock.execute(m, 10)
                s.close(timeout=5)
                assert len(child_got) == 20, len(child_got)
                a = agent.start(sys.argv[1] + ".child", service="child")
                m2 = mock.load_model(OPS)
                agent.watch(m2)
                mock.execute(m2, 10)
                st = agent.stop(timeout=1)
                assert st.records_in == 20, st
                # The parent's subscription is the parent's: no reader here, not ours to
                # unsubscribe at exit, and nothing waits for it.
                assert sub.closed
                code = 0
            except BaseException as exc:
                print("child failed:", repr(exc), flush=True)
            t0 = time.monotonic()
            try:
                sys.exit(code)  # a normal exit: atexit handlers run in the child too
            finally:
                if time.monotonic() - t0 > 0.5:
                    print("child exit slow", flush=True)
        children.append(pid)
    deadline = time.monotonic() + 20
    codes = []
    for pid in children:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes.append("hung")
                break
            time.sleep(0.02)
    stop.set()
    t.join()
    mock.wait_writer_idle()
    time.sleep(0.2)
    before = len(got)
    mock.execute(model, 10)
    mock.wait_writer_idle()
    time.sleep(0.2)
    sub.close()
    agent.stop(timeout=1)
    print("codes", codes, "parent_after_fork", len(got) - before, flush=True)
    sys.exit(0 if all(c == 0 for c in codes) and len(got) - before == 20 else 3)
""")


def test_forked_children_subscribe_and_start_their_own_agent(run_python, tmp_path):
    """Children forked while the parent streams (subscription + agent + a busy writer) can
    subscribe, execute and start an agent; the parent's subscription keeps working."""
    script = tmp_path / "fork_script.py"
    script.write_text(FORK_SCRIPT)
    sock = str(tmp_path / "nodaemon.sock")
    result = run_python("", args=[str(script), sock, "6"], timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "codes [0, 0, 0, 0, 0, 0]" in result.stdout
    assert "child failed" not in result.stdout and "child exit slow" not in result.stdout
