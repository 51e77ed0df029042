"""The daemon's parts on their own: the aggregator (exact counts, quantile error bound,
windows, cardinality cap, reset), settings precedence and errors, the README settings
table, segment files (round trip, torn tail, restart), sd_notify."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from aclprofd import config
from aclprofd.aggregate.aggregator import NBINS, Aggregator, KeySource, bin_index, bin_value
from aclprofd.filters import Filter
from aclprofd.storage import Storage, read_segment
from helpers.records import make_records

from aclprof.protocol.wire import RECORD_DTYPE

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1"}


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_histogram_relative_error_bound():
    d = np.unique(np.geomspace(1, 2**39, 200_000).astype(np.int64))
    est = bin_value(bin_index(d))
    assert np.max(np.abs(est - d) / d) <= 2 ** (1 / 16) - 1 + 1e-9
    assert bin_index(np.array([0]))[0] == 0 and bin_index(np.array([2**60]))[0] == NBINS - 1


def test_exact_stats_and_quantiles_against_numpy():
    rng = np.random.default_rng(1)
    agg = Aggregator(clock=Clock())
    src = KeySource("h", 1, "svc")
    dur = rng.lognormal(10, 1, 50_000).astype(np.uint64)
    for part in np.array_split(dur, 13):
        agg.ingest(src, make_records(len(part), types=(1,), names=(3,), durations=part), NAMES)
    for window in ("10s", "1m", "all"):
        [row] = agg.snapshot(window, "type")["rows"]
        assert row["count"] == len(dur) and row["total_ns"] == int(dur.sum())
        assert row["min_ns"] == int(dur.min()) and row["max_ns"] == int(dur.max())
        for q in (50, 90, 99):
            exact = float(np.percentile(dur, q, method="inverted_cdf"))
            assert abs(row[f"p{q}_ns"] - exact) / exact <= 0.045, (q, row, exact)


def test_windows_slide_with_the_clock():
    clock = Clock()
    agg = Aggregator(windows=(10, 60), clock=clock)
    src = KeySource("h", 1, None)
    agg.ingest(src, make_records(100), NAMES)
    clock.t += 30
    agg.ingest(src, make_records(10), NAMES)
    count = lambda w: sum(r["count"] for r in agg.snapshot(w, "type")["rows"])  # noqa: E731
    assert (count("10s"), count("1m"), count("all")) == (10, 110, 110)
    clock.t += 45
    assert (count("10s"), count("1m"), count("all")) == (0, 10, 110)
    agg.ingest(src, make_records(5), NAMES)  # old slots are dropped as time advances
    assert len(agg.sliding.slots) <= 62
    agg.reset()
    assert (count("10s"), count("all")) == (0, 0)
    with pytest.raises(ValueError):
        agg.snapshot("5m", "type")


def test_cardinality_cap_and_other_bucket():
    agg = Aggregator(max_keys=3, clock=Clock())
    src = KeySource("h", 1, None)
    names = {i: f"op{i}" for i in range(1, 21)}
    r = make_records(10, types=tuple(range(1, 11)), names=tuple(range(11, 21)))
    agg.ingest(src, r, names)
    assert agg.nkeys == 4  # 3 keys + "(other)"
    assert agg.other_records == 7
    rows = {x["key"]: x["count"] for x in agg.snapshot("all", "name")["rows"]}
    assert rows["(other)"] == 7 and sum(rows.values()) == 10
    agg.ingest(src, r, names)  # cached mapping, same result
    assert agg.other_records == 14
    assert agg.hist.shape[0] <= 4  # memory bounded by the cap


def test_multi_model_batches_and_filters():
    agg = Aggregator(clock=Clock())
    src = KeySource("h", 5, "svc")
    r = np.concatenate([make_records(10, model=1, device=0), make_records(6, model=2, device=1)])
    agg.ingest(src, r, NAMES)
    snap = lambda f: sum(x["count"] for x in agg.snapshot("all", "type", Filter.parse(f))["rows"])  # noqa: E731
    assert snap({}) == 16 and snap({"model": 2}) == 6 and snap({"pid": 5, "type": "Mat"}) == 8
    assert snap({"service": "other"}) == 0 and snap({"host": "h", "name": "^conv1$"}) == 8
    with pytest.raises(KeyError):
        agg.ingest(src, make_records(1, types=(99,)), NAMES)


def test_a_batch_of_many_new_keys_grows_the_key_arrays_once(monkeypatch: pytest.MonkeyPatch):
    """4096 new keys in one batch: the per-key arrays grow once to fit them (main: six
    doublings, six copies of the 322-bin histograms in one loop step), new rows are zero
    (calloc'd, not written) and every record lands in its own key."""
    agg = Aggregator(max_keys=10_000)
    growths: list[tuple[int, int]] = []
    real = agg._grow_stats

    def counted(old: int, cap: int) -> None:
        growths.append((old, cap))
        real(old, cap)

    monkeypatch.setattr(agg.keys, "_on_grow", counted)
    recs = make_records(4096, types=(1,), names=(3,), durations=1000)
    recs["model_id"] = np.arange(4096)
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    assert growths == [(64, 4097)]
    n = agg.nkeys
    assert n == 4097  # "other" and the 4096
    assert agg.count[:n].sum() == 4096 and agg.hist[:n].sum() == 4096 and agg.total[:n].sum() == 4096 * 1000
    assert not agg.hist[n:].any() and not agg.count[n:].any()
    recs["model_id"] += 4096  # 4096 more: room for them, at most the cap
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    assert growths[1:] == [(4097, 8194)]


def test_the_growth_for_new_keys_stops_at_the_senders_share():
    """A sender whose share is 100 keys sends 4096 new ones: the arrays grow for what the
    share lets it add, not for the batch (the memory budget counts their capacity)."""
    agg = Aggregator(max_keys=10_000, max_keys_per_agent=100)
    recs = make_records(4096, types=(1,), names=(3,), durations=1000)
    recs["model_id"] = np.arange(4096)
    agg.ingest(KeySource("h", 1, None, owner=(1000, 1)), recs, NAMES)
    assert agg.nkeys == 101 and agg.keys.capacity == 128  # doubling from 64, as one by one
    assert agg.keys.shares.refused == 4096 - 100 and agg.count[:101].sum() == 4096
    assert agg.keys.shares.room((1000, 1), 50) == 0 and agg.keys.shares.room((1000, 2), 50) == 50
    assert agg.keys.shares.room(None, 7) == 7


def test_prometheus_view_is_not_reset():
    agg = Aggregator(clock=Clock())
    agg.ingest(KeySource("h", 1, None), make_records(4, durations=1000), NAMES)
    agg.reset()
    view = agg.prometheus_view()
    assert sum(count for _, _, count, _ in view) == 4


def test_settings_precedence(tmp_path: Path):
    cfg = tmp_path / "a.toml"
    cfg.write_text('disk_cap = "2GiB"\nflush_interval = "500ms"\nlog_level = "warning"\nwindows = ["5s", "1m"]\n')
    env = {"ACLPROFD_LOG_LEVEL": "error", "ACLPROFD_FLUSH_INTERVAL": "2", "XDG_RUNTIME_DIR": "/run/user/7",
           "XDG_STATE_HOME": "/st"}
    s = config.load({"config": str(cfg), "flush_interval_s": "3s"}, environ=env)
    assert s.disk_bytes == 2 << 30 and s.log_level == "error" and s.flush_interval_s == 3.0
    assert s.windows == (5, 60) and s.socket == "/run/user/7/aclprof/aclprofd.sock"
    assert s.data_dir == "/st/aclprof" and s.prometheus_port == 9464 and s.prometheus_host == "127.0.0.1"
    assert config.load({}, environ={"ACLPROF_SOCKET": "/x.sock"}).socket == "/x.sock"
    assert config.load({}, environ={"ACLPROFD_CONFIG": str(cfg)}).disk_bytes == 2 << 30
    # the segment size is kept well under the disk cap
    assert config.load({"disk_bytes": "1MiB", "segment_bytes": "1GiB"}, environ={}).segment_bytes == 256 << 10


@pytest.mark.parametrize("text,msg", [
    ("disk_cap = 'huge'", "disk_cap: bad size"),
    ("nope = 1", "unknown key 'nope'"),
    ("prometheus_port = 70000", "not in 0..65535"),
    ("log_format = 'xml'", "not one of"),
    ("= broken", "config file"),
])
def test_settings_errors(tmp_path: Path, text, msg):
    cfg = tmp_path / "a.toml"
    cfg.write_text(text + "\n")
    with pytest.raises(config.ConfigError, match=msg) as info:
        config.load({"config": str(cfg)}, environ={})
    assert "\n" not in str(info.value)


def test_readme_documents_every_setting():
    readme = (Path(__file__).resolve().parent.parent / "daemon" / "README.md").read_text()
    for o in config.OPTIONS:
        assert f"`{o.toml}`" in readme and f"`{o.env}`" in readme and f"`{o.flag}`" in readme, o.field
    example = (Path(__file__).resolve().parent.parent / "daemon" / "aclprofd" / "aclprofd.example.toml").read_text()
    import tomllib
    keys = {line.lstrip("# ").split(" =")[0] for line in example.splitlines() if " = " in line}
    assert keys == {o.toml for o in config.OPTIONS}
    tomllib.loads(example)


def test_storage_round_trip_torn_tail_and_restart(tmp_path: Path):
    st = Storage(str(tmp_path), segment_bytes=1 << 20, disk_bytes=1 << 30)
    ident = {"host": "h", "pid": 1, "service": "s", "labels": {}}
    names = list(NAMES.items())
    r = make_records(100)
    st.write("c1", ident, names, [(10.0, r.tobytes()), (11.0, r.tobytes())])
    st.write("c1", ident, names, [(12.0, r.tobytes())])
    st.flush()
    chunks = list(st.read())
    assert sum(len(c.records) for c in chunks) == 300
    assert chunks[1].names == NAMES  # defined once per segment, known to later chunks
    assert [len(c.records) for c in st.read(since_ts=10.5, until_ts=11.5)] == [100]
    st.close()
    # torn tail: a chunk cut in the middle ends the file quietly
    [seg] = [p for p in tmp_path.iterdir() if p.suffix == ".acps"]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 10)  # into the last chunk (~1/8 of 5.6 KB: records are stored encoded)
    assert sum(len(c.records) for c in read_segment(str(seg))) == 200
    # a restarted writer continues with a new segment; both are read
    st2 = Storage(str(tmp_path))
    st2.write("c2", ident, names, [(20.0, r.tobytes())])
    st2.flush()
    assert sum(len(c.records) for c in st2.read()) == 300
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".acps"]) == 2
    assert st2.stats()["segments"] == 2


def test_storage_write_failure_is_counted_not_raised(tmp_path: Path, monkeypatch):
    import aclprofd.storage as storage_mod

    st = Storage(str(tmp_path))
    t0 = time.time()  # receive times: older than max_age would be deleted at the flush
    r = make_records(10)
    real_writev = os.writev

    def half_then_enospc(fd, bufs):  # part of the chunk reaches the file, then the disk is full
        real_writev(fd, [bytes(bufs[0])[:10]])
        raise OSError(28, "No space left on device")

    st.write("c", {"host": "h"}, [], [(t0 + 1, r.tobytes())])
    st.flush()
    monkeypatch.setattr(storage_mod.os, "writev", half_then_enospc)
    st.write("c", {"host": "h"}, [], [(t0 + 2, r.tobytes())])
    assert st.write_errors == 1 and st.records_lost == 10 and "No space" in st.last_error
    monkeypatch.setattr(storage_mod.os, "writev", real_writev)
    st.write("c", {"host": "h"}, [], [(t0 + 3, r.tobytes())])  # the same segment goes on
    st.flush()
    assert st.stats()["segments"] == 1
    assert sum(len(c.records) for c in st.read()) == 20


def test_sd_notify(tmp_path: Path, monkeypatch):
    from aclprofd.sockets import sd_notify
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    path = f"/tmp/acld-notify-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert sd_notify("READY=1")
        assert s.recv(100) == b"READY=1"
    finally:
        s.close()
        os.unlink(path)
    assert RECORD_DTYPE.itemsize == 56


def test_socket_group_and_mode():
    import grp
    import shutil
    import tempfile

    from aclprofd.sockets import DaemonError
    from aclprofd.sockets import bind_socket as _bind
    tmp = tempfile.mkdtemp(prefix="acld-", dir="/tmp")
    try:
        path = os.path.join(tmp, "sub", "d.sock")  # the parent directory is created
        group = grp.getgrgid(os.getgid()).gr_name
        sock = _bind(path, group)
        st = os.stat(path)
        assert st.st_gid == os.getgid() and st.st_mode & 0o777 == 0o660
        sock.close()
        os.unlink(path)
        with pytest.raises(DaemonError, match="does not exist"):
            _bind(path, "no-such-group-aclprof")
        assert not os.path.exists(path)
        with pytest.raises(DaemonError, match="too long"):
            _bind("/tmp/" + "x" * 120, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_aggregates_save_and_load_round_trip(tmp_path: Path):
    clock = Clock()
    agg = Aggregator(max_keys=3, clock=clock)
    assert not agg.dirty  # a fresh aggregator has nothing to save
    names = {i: f"op{i}" for i in range(1, 21)}
    dur = np.arange(1, 11, dtype=np.uint64) * 1000
    agg.ingest(KeySource("h", 1, "svc"), make_records(10, types=tuple(range(1, 11)), names=tuple(range(11, 21)),
                                                        durations=dur), names)
    assert agg.dirty and agg.other_records == 7
    path = str(tmp_path / "aggregates.npz")
    agg.save(path)
    assert not agg.dirty and os.listdir(tmp_path) == ["aggregates.npz"]  # no temp file left
    clock.t += 100
    again = Aggregator(max_keys=3, clock=clock)
    info = again.load(path)
    assert info["records"] == 10 and info["since_ts"] == 1_000_000.0
    assert again.reset_ts == agg.reset_ts and again.other_records == 7 and not again.dirty
    for group_by in ("type", "name"):
        assert again.snapshot("all", group_by)["rows"] == agg.snapshot("all", group_by)["rows"]
    assert again.snapshot("10s", "type")["rows"] == []  # windows start empty
    # the same agent (host, pid) continues the same keys
    again.ingest(KeySource("h", 1, "svc"), make_records(10, types=tuple(range(1, 11)), names=tuple(range(11, 21)),
                                                          durations=dur), names)
    assert again.nkeys == 4 and sum(r["count"] for r in again.snapshot("all", "name")["rows"]) == 20
    # a lower cap: the keys beyond it join "(other)"
    small = Aggregator(max_keys=1, clock=clock)
    small.load(path)
    rows = {r["key"]: r["count"] for r in small.snapshot("all", "name")["rows"]}
    assert rows == {"op11": 1, "(other)": 9} and small.other_records == 9


def test_aggregates_load_rejects_other_files(tmp_path: Path):
    agg = Aggregator(clock=Clock())
    bad = tmp_path / "x.npz"
    np.savez(bad, meta=np.frombuffer(b'{"format": "something", "version": 1}', np.uint8))
    with pytest.raises(ValueError):
        agg.load(str(bad))
    bad.write_bytes(b"not a zip")
    with pytest.raises((ValueError, OSError)):
        agg.load(str(bad))
    with pytest.raises(FileNotFoundError):
        agg.load(str(tmp_path / "missing.npz"))


def test_socket_is_never_wider_than_0660_even_before_chmod(monkeypatch, tmp_path):
    """bind() creates the socket file under a umask, so no client can connect through wider
    permissions in the moment before chmod; observed by looking at the file when chmod runs."""
    import aclprofd.sockets as sockets

    seen: list[int] = []
    real_chmod = os.chmod

    def spy(path, mode, *args, **kwargs):
        seen.append(os.stat(path).st_mode & 0o777)
        return real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(sockets.os, "chmod", spy)
    old = os.umask(0)  # the caller's umask must not matter
    try:
        sock = sockets.bind_socket(str(tmp_path / "d.sock"), None)
    finally:
        os.umask(old)
    sock.close()
    assert seen == [0o660]
    assert os.stat(tmp_path / "d.sock").st_mode & 0o777 == 0o660
