"""Storage faults of a real ``aclprofd`` process (issue 9): a second daemon on the same data
directory, a name in the way of the next segment, a full disk, the socket file removed.

The full disk is simulated without root with ``RLIMIT_FSIZE`` set on the running daemon
from outside (``resource.prlimit`` on its pid): a write past the limit fails with EFBIG
(Python ignores SIGXFSZ), as a write on a full disk fails with ENOSPC; raising the limit
again is "space returns".
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest
from helpers.daemons import Daemon, agent, running, status
from helpers.procs import cli, short_tmpdir, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import RECORD_DTYPE

BATCH = 1000


def _send(path: str, n: int, **kw) -> None:
    """``n`` records from one agent connection, in batches; waits until the daemon has them."""
    before = status(path)["records_total"]
    a = agent(path, service="faults", **kw)
    try:
        for _ in range(n // BATCH):
            a.send_batch(make_records(BATCH))
        wait_for(lambda: status(path)["records_total"] >= before + n, what=f"{n} records received")
    finally:
        a.close()


def _stored(path: str) -> int:
    from helpers.daemons import Client
    c = Client(path)
    try:
        return len(c.export())
    finally:
        c.close()


def _segments(data_dir: str) -> list[str]:
    return sorted(p.name for p in Path(data_dir).iterdir() if p.name.endswith(".acps") and p.is_file())


def test_second_daemon_on_the_same_data_dir_is_refused(tmp_path):
    root = short_tmpdir()
    data = os.path.join(root, "data")
    with running(root, data_dir=data) as first:
        second = Daemon(short_tmpdir(), data_dir=data)
        try:
            with pytest.raises(AssertionError, match="daemon exited 1"):
                second.start(timeout=20)
            out = Path(second.out_path).read_text()
            assert "in use by another aclprofd" in out and f"pid {first.proc.pid}" in out, out
            assert "--data-dir" in out
        finally:
            second.cleanup()
        # the first one is untouched and still stores
        _send(first.socket, 5 * BATCH)
        assert _stored(first.socket) == 5 * BATCH
    # once the first has stopped, the directory is free again
    with running(root, data_dir=data) as again:
        assert _stored(again.socket) == 5 * BATCH


def test_names_in_the_way_of_new_segments_are_skipped(tmp_path):
    root = short_tmpdir()
    data = os.path.join(root, "data")
    os.makedirs(data)
    for seq in (1, 2, 4):  # directories where the writer's next segments would go
        os.mkdir(os.path.join(data, f"seg-{seq:08d}.acps"))
    n = 60 * BATCH
    with running(root, "--segment-size", "256KiB", data_dir=data) as d:
        _send(d.socket, n)
        time.sleep(0.5)  # a flush or two
        assert _stored(d.socket) == n
        st = status(d.socket)["storage"]
        assert st["records_lost"] == 0 and st["write_errors"] == 0
        assert st["names_skipped"] >= 3
        segs = _segments(data)
        assert len(segs) >= 2 and "seg-00000003.acps" in segs


def test_full_disk_counts_every_lost_record_and_creates_no_files():
    root = short_tmpdir()
    with running(root) as d:
        assert d.proc is not None
        n1 = 20 * BATCH
        _send(d.socket, n1)
        wait_for(lambda: status(d.socket)["storage"]["record_bytes_in"] >= n1 * RECORD_DTYPE.itemsize,
                 what="first records on disk")  # stored encoded: fewer bytes in the file
        time.sleep(0.5)
        [seg] = _segments(d.data_dir)
        limit = os.path.getsize(os.path.join(d.data_dir, seg))
        soft, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (limit, hard))  # "the disk is full"
        try:
            lost = 37 * BATCH
            for _ in range(3):  # several connections and flush intervals
                _send(d.socket, lost // 3 // BATCH * BATCH)
                time.sleep(0.3)
            lost = lost // 3 // BATCH * BATCH * 3
            time.sleep(0.5)
            assert _segments(d.data_dir) == [seg], "a failing write must not create files"
            st = status(d.socket)
            assert any(f"({lost} records not stored)" in p for p in st["problems"]), st["problems"]
            assert st["storage"]["records_lost"] == lost, st["storage"]
            assert st["storage"]["write_errors"] >= 1
            time.sleep(1.0)
            assert _segments(d.data_dir) == [seg]
        finally:
            resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))  # space returns
        n2 = 5 * BATCH
        _send(d.socket, n2)
        time.sleep(0.5)
        assert _stored(d.socket) == n1 + n2
        assert status(d.socket)["storage"]["records_lost"] == lost


def test_removed_socket_file_is_recreated():
    root = short_tmpdir()
    with running(root) as d:
        os.unlink(d.socket)
        wait_for(lambda: os.path.exists(d.socket), timeout=10, what="socket recreated")
        assert status(d.socket)["records_total"] == 0
        _send(d.socket, 2 * BATCH)
        assert any(line.get("event") == "socket file was removed; listening again" for line in d.log_lines())


def test_a_daemon_that_cannot_bind_releases_the_data_dir():
    from aclprofd import config
    from aclprofd.server import Daemon as InProcessDaemon
    from aclprofd.sockets import DaemonError

    root = short_tmpdir()
    data = os.path.join(root, "data")
    Path(root, "not-a-socket").write_text("")
    bad = config.load({"socket": os.path.join(root, "not-a-socket"), "data_dir": data, "prometheus_port": "0"},
                      environ={})
    with pytest.raises(DaemonError, match="is not a socket"):
        InProcessDaemon(bad).start()
    with running(root, data_dir=data) as d:  # the lock was released
        assert status(d.socket)["storage"]["write_errors"] == 0


def _log_events(d: Daemon, event: str) -> list[dict]:
    return [ln for ln in d.log_lines() if ln.get("event") == event]


def test_full_disk_is_logged_once_and_an_export_of_the_lost_period_says_so():
    """Issue 17: a full disk turned STATUS unhealthy but wrote nothing to the log, and an
    export of the lost period said "no records matched", exit 0."""
    root = short_tmpdir()
    data = os.path.join(root, "data")
    with running(root, data_dir=data) as d:
        assert d.proc is not None
        n1 = 10 * BATCH
        _send(d.socket, n1)
        wait_for(lambda: status(d.socket)["storage"]["record_bytes_in"] >= n1 * RECORD_DTYPE.itemsize,
                 what="first records on disk")  # stored encoded: fewer bytes in the file
        [seg] = _segments(d.data_dir)
        soft, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (os.path.getsize(os.path.join(d.data_dir, seg)), hard))
        t0 = time.time()
        try:
            lost = 0
            for _ in range(4):  # several connections and flush intervals: one episode
                _send(d.socket, 3 * BATCH)
                lost += 3 * BATCH
                wait_for(lambda want=lost: status(d.socket)["storage"]["records_lost"] == want,
                         what="records counted lost")
            t1 = time.time()
            st = status(d.socket)["storage"]
        finally:
            resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))  # space returns
        failing = _log_events(d, "storage write failing; received records are being lost")
        assert len(failing) == 1, "the start of the failure is logged, once"
        assert failing[0]["level"] == "error" and "File too large" in failing[0]["error"], failing
        assert failing[0]["data_dir"] == data and 0 < failing[0]["records_lost"] <= 3 * BATCH  # the first write
        assert st["failing"] and st["loss_periods"] == 1, st  # one sender (host, pid, service), one episode
        assert not _log_events(d, "storage writing again")
        time.sleep(0.05)
        t2 = time.time()
        _send(d.socket, 2 * BATCH)
        [again] = wait_for(lambda: _log_events(d, "storage writing again"), what="recovery logged")
        assert again["records_lost"] == lost and again["level"] == "info", again
        assert len(_log_events(d, "storage write failing; received records are being lost")) == 1
        assert not status(d.socket)["storage"]["failing"]

        def export(*args: str):
            return cli("export", "--format", "jsonl", "--socket", d.socket, *args)
        # the lost period: no "no records matched", exit 1, how many and when
        p = export("--since", str(t0), "--until", str(t1))
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "no records matched" not in p.stderr, p.stderr
        assert f"{lost:,} records of this window were lost to a storage failure" in p.stderr, p.stderr
        assert p.stderr.count("File too large") == 1 and "service faults" in p.stderr, p.stderr
        assert p.stdout == ""
        # everything: the stored records are exported, and the loss is said, exit 1
        p = export()
        assert p.returncode == 1 and len(p.stdout.splitlines()) == n1 + 2 * BATCH, p.stderr
        assert f"the {n1 + 2 * BATCH:,} stored records were exported" in p.stderr
        # a window after the recovery, or another sender: complete, exit 0
        p = export("--since", str(t2))
        assert p.returncode == 0 and len(p.stdout.splitlines()) == 2 * BATCH, p.stderr
        p = export("--since", str(t0), "--until", str(t1), "--service", "other")
        assert p.returncode == 0 and "no records matched" in p.stderr, p.stderr
        p = cli("export", "--format", "csv", "--socket", d.socket, "--since", str(t0), "--until", str(t1),
                "--type", "Conv")
        assert p.returncode == 1 and "filters cannot be applied" in p.stderr, p.stderr
        # diff over the lost window: not compared as if it were complete
        p = cli("diff", f"window:{t0}..{t1}", f"window:{t2}..{time.time() + 1}", "--socket", d.socket)
        assert p.returncode == 1 and "lost to a storage failure" in p.stderr, (p.returncode, p.stderr)
    # a restart on the same data directory still knows the lost period
    with running(root, data_dir=data) as d:
        p = cli("export", "--format", "jsonl", "--socket", d.socket, "--since", str(t0), "--until", str(t1))
        assert p.returncode == 1 and f"{lost:,} records of this window were lost" in p.stderr, p.stderr
