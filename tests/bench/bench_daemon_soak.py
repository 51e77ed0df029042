"""Soak: well-behaved agents streaming while hostile clients attack the daemon.

    python tests/bench/bench_daemon_soak.py [--duration 300] [--rate 500000] [--agents 4]
                                            [--budget 256MiB] [--quick] [--no-prometheus]

Starts the installed ``aclprofd`` (``--memory-budget``, /metrics on a free loopback port,
temporary data dir) and ``--agents`` agent processes pacing ``--rate`` records/s in total (blocking sends: an
agent loses nothing itself). One hostile process runs these attacks in a loop until the
end, each of these attacks: a STREAM client sending STATUS requests without reading
replies; an agent defining millions of unused names; an agent sending impossible values
(durations 2^64-1 and 2^63, end < start, ids 2^32-1); an agent with escape sequences and
lone surrogates in its strings sending 40 loss reasons of 1 MiB; an agent with 4-6 KiB op
names while a tail client streams them; ``^(a+)+$`` as SNAPSHOT, EXPORT and STREAM filters;
65 k distinct model ids; 100 idle control clients held open; a hostile agent's chunk
metadata rewritten (valid JSON and CRC, wrong shape) followed by an EXPORT of the store;
the socket file removed; a second aclprofd started on the same data directory; and the
/metrics attacks (issue 19): 512 KB of long WATCH relabels, 10,050 short relabels, 20
parallel scrapes, 30 half-sent HTTP requests held past the read timeout, a scraper that
pipelines requests and never reads (held until the next round). Attacks of other parts
plug in as ``soak_attacks_*.py`` modules beside this file, each exposing ``ATTACKS``
(name -> ``(socket path) -> str``): every one found is run with the others. A scraper
thread GETs /metrics every 5 s (its duration, size and status are reported) and, when the
``prometheus`` binary is installed, a real Prometheus scrapes every 5 s too (its
``scrape_duration_seconds`` and ``up``). A probe thread measures STATUS round trips every
20 ms on one kept connection (the worst one bounds the event loop's longest stall). Reports:

- whether the daemon ever exited (it must not);
- each well-behaved agent's accounting: records emitted = records the daemon read from it
  (STATUS) + counted loss (its LOSS drops, storage records_lost), exact;
- the worst and p99 STATUS round trip (event-loop stall);
- peak RSS (VmHWM) against the budget, and RSS idle / after the attacks stopped. The peak is the
  kernel's own high-water mark, read and reset (``/proc/PID/clear_refs`` 5) every
  ``HWM_EVERY_S`` by a sampler thread: each interval's peak, even a transient of a few ms
  that an RSS sampler misses, is put down to the attacks running in it (the per-attack
  table's "VmHWM MiB" column), and the run's peak is the largest of them;
- /metrics: scrape durations and sizes, series shown and refused, requests refused.

``--quick``: 60 s. Default 5 minutes. Say the machine's load (uptime) with the numbers.
"""

from __future__ import annotations

import argparse
import glob
import http.client
import importlib
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tests/: helpers.prometheus

import numpy as np
from _benchlib import pct, table
from aclprofd.config import parse_size
from bench_daemon_ingest import _model, _proc_stats, _status

from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind, encode_batch, encode_json, recv_frame


def _connect(path: str, role: str, service: str = "svc", names: dict | None = None) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(encode_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": os.getpid(), "host": "soak",
                                       "service": service, "labels": {}}))
    assert recv_frame(s, FrameReader(), [])[0] == Kind.WELCOME
    if names is not None:
        s.sendall(encode_json(Kind.NAMES, {"names": {str(k): v for k, v in names.items()}}))
    return s


def _agent(path: str, idx: int, batch: int, stop_at: float, rate: float, out: mp.Queue) -> None:
    names, types, op_names, means = _model(200)
    rng = np.random.default_rng(idx)
    s = _connect(path, "agent", f"good{idx}", names)
    s.settimeout(120)  # a stalled loop shows in the STATUS probe; a send timeout would break the stream
    frames = []
    for _ in range(8):
        r = np.zeros(batch, RECORD_DTYPE)
        k = np.arange(batch) % len(types)
        r["model_id"], r["device_id"], r["thread_id"] = 1, idx % 2, 1
        r["op_type"], r["op_name"] = types[k], op_names[k]
        r["duration"] = (means[k] * rng.lognormal(0, 0.3, batch)).astype(np.uint64)
        frames.append(r)
    emitted = i = 0
    t0 = time.monotonic()
    while time.time() < stop_at:
        delay = t0 + i * batch / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        r = frames[i % len(frames)]
        now = time.monotonic_ns()
        r["end"] = now
        r["start"] = now - r["duration"]
        try:
            s.sendall(encode_batch(r))
        except OSError as exc:  # reported, not a dead bench: the daemon did not read for 120 s
            print(f"good{idx}: send failed after {emitted} records: {exc}", file=sys.stderr)
            s.close()
            out.put((idx, os.getpid(), emitted, -1))
            return
        emitted += batch
        i += 1
    # wait until the daemon has read everything (STATUS), then leave
    read = -1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            st = _status(path)
        except OSError:  # the socket file is being removed and recreated by an attack
            time.sleep(0.2)
            continue
        ours = [a for a in st["agents"] if a["pid"] == os.getpid()]
        read = ours[0]["records"] if ours else -1
        if read >= emitted:
            break
        time.sleep(0.2)
    s.close()
    out.put((idx, os.getpid(), emitted, read))


ESC = "\x1b]0;pwned\x07\x1b[2J\r\nFAKE"


def _attack_status_flood(path: str) -> str:
    s = _connect(path, "control")
    s.sendall(encode_json(Kind.STREAM, {"filter": {}}))
    s.settimeout(2)
    req = encode_json(Kind.STATUS, {}) * 500
    try:
        for _ in range(400):
            s.sendall(req)
        return "not closed"
    except OSError:
        return "closed"
    finally:
        s.close()


def _attack_names(path: str) -> str:
    s = _connect(path, "agent", "names")
    try:
        for base in range(0, 4_000_000, 100_000):
            s.sendall(encode_json(Kind.NAMES, {"names": {str(base + i + 1): f"unused/{base + i:09d}/" + "x" * 40
                                                         for i in range(100_000)}}))
        return "not refused"
    except OSError:
        return "refused"
    finally:
        s.close()


def _attack_values(path: str) -> str:
    s = _connect(path, "agent", "values", {1: "MatMul", 2: "m"})
    r = np.zeros(4096, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["model_id"] = 1, 2, 1
    r["end"] = time.monotonic_ns()
    r["start"] = r["end"] - 1000
    r["duration"] = 1000
    r["duration"][::4] = 2**64 - 1
    r["duration"][1::4] = 2**63
    r["start"][2::4] = r["end"][2::4] + 5
    r["model_id"][3::4] = 2**32 - 1
    s.sendall(encode_batch(r))
    s.close()
    return "sent"


def _attack_strings(path: str) -> str:
    s = _connect(path, "agent", "svc" + ESC, {1: "Mat\ud800Mul" + ESC, 2: "n\udfff" + ESC})
    r = np.zeros(100, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["model_id"], r["duration"] = 1, 2, 1, 1000
    r["end"] = time.monotonic_ns()
    r["start"] = r["end"] - 1000
    s.sendall(encode_batch(r))
    reason = "z" * (1 << 20) + ESC
    for _ in range(40):
        s.sendall(encode_json(Kind.LOSS, {"dropped": 1, "reason": reason}))
    s.close()
    return "sent"


def _read_until_end(s: socket.socket, timeout: float = 60.0) -> tuple[int, Kind]:
    """Read EXPORT/STREAM frames until END or ERROR; (records in JSON Lines frames, last kind)."""
    s.settimeout(timeout)
    r, pend = FrameReader(), []
    n = 0
    while True:
        kind, payload = recv_frame(s, r, pend)
        if kind in (Kind.EXPORT_RECORDS, Kind.STREAM_RECORDS):
            n += bytes(payload).count(b"\n")
        elif kind in (Kind.END, Kind.ERROR):
            return n, kind


def _attack_long_names_tail(path: str) -> str:
    """An agent whose op names are 4 KiB and more (cut to 4096 bytes, counted) while a tail
    client (STREAM, reading) receives them: the stream's JSON is ~20 x the estimate per record."""
    tail = _connect(path, "control")
    tail.sendall(encode_json(Kind.STREAM, {"filter": {"service": "longnames"}}))
    got = [0]

    def read() -> None:
        tail.settimeout(1.0)
        r, pend = FrameReader(), []
        try:
            while True:
                kind, payload = recv_frame(tail, r, pend)
                if kind == Kind.STREAM_RECORDS:
                    got[0] += bytes(payload).count(b"\n")
        except OSError:
            pass

    th = threading.Thread(target=read, daemon=True)
    th.start()
    s = _connect(path, "agent", "longnames", {1: "a" * 4000 + "!", 2: "n" * 6000 + ESC, 3: "T" * 4096})
    r = np.zeros(2048, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["model_id"], r["duration"] = 1 + np.arange(2048) % 3, 2, 1, 1000
    for _ in range(20):
        r["end"] = time.monotonic_ns()
        r["start"] = r["end"] - 1000
        s.sendall(encode_batch(r))
    s.close()
    th.join(3)
    tail.close()
    return "tail got records" if got[0] else "tail got none"


def _attack_backtracking_filter(path: str) -> str:
    """``^(a+)+$`` (exponential on a backtracking engine) against 4000-character names, as
    SNAPSHOT, STREAM and EXPORT (the last 5 s) filters."""
    c = _connect(path, "control")
    r, pend = FrameReader(), []
    flt = {"name": "^(a+)+$", "type": "^(a+)+$"}
    c.sendall(encode_json(Kind.SNAPSHOT, {"window": "all", "group_by": "name", "filter": flt}))
    kind, _ = recv_frame(c, r, pend)
    c.sendall(encode_json(Kind.EXPORT, {"since_ts": time.time() - 5, "filter": flt}))
    n, end = _read_until_end(c)
    c.close()
    st = _connect(path, "control")
    st.sendall(encode_json(Kind.STREAM, {"filter": flt}))
    time.sleep(0.5)
    st.close()
    return f"{kind.name}, export {end.name}"


def _attack_model_ids(path: str) -> str:
    """Batches of 4096 records with 4096 distinct model ids each (the aggregate key cap)."""
    s = _connect(path, "agent", "models", {1: "Conv", 2: "c"})
    r = np.zeros(4096, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["duration"] = 1, 2, 1000
    base = int(time.monotonic_ns()) % (1 << 30)
    for j in range(16):
        r["model_id"] = base + j * 4096 + np.arange(4096)
        r["end"] = time.monotonic_ns()
        r["start"] = r["end"] - 1000
        s.sendall(encode_batch(r))
    s.close()
    return "sent"


_IDLE: list[socket.socket] = []


def _attack_idle_controls(path: str) -> str:
    """100 control connections that say HELLO and nothing more, held until the next round
    (more than max_control_connections: the longest idle are evicted; the daemon runs with
    control_idle_timeout 5 s here, so the rest are closed for idling)."""
    for s in _IDLE:
        s.close()
    _IDLE.clear()
    for _ in range(100):
        try:
            _IDLE.append(_connect(path, "control"))
        except (OSError, AssertionError):
            return f"{len(_IDLE)} connected"
    return "100 connected"


def _segments(data_dir: str) -> list[str]:
    return sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir) if f.endswith(".acps"))


def _attack_corrupt_metadata(path: str, data_dir: str) -> str:
    """In a closed segment, rewrite one hostile agent's chunk metadata to a JSON list of the
    same length with a matching CRC (valid JSON, valid CRC, wrong shape), then EXPORT all."""
    from aclprofd.storage import _CHUNK_HEADER, _CHUNK_MAGICS, _FILE_HEADER

    from aclprof.protocol._batchgroup import crc32c
    done = "no hostile chunk found"
    for seg in _segments(data_dir)[:-1]:
        try:
            with open(seg, "r+b") as f:
                buf = f.read()
                pos = _FILE_HEADER.unpack(buf[:_FILE_HEADER.size])[3]
                while pos + _CHUNK_HEADER.size <= len(buf):
                    magic, mlen, dlen, _ = _CHUNK_HEADER.unpack(buf[pos:pos + _CHUNK_HEADER.size])
                    mb = buf[pos + _CHUNK_HEADER.size:pos + _CHUNK_HEADER.size + mlen]
                    data = buf[pos + _CHUNK_HEADER.size + mlen:pos + _CHUNK_HEADER.size + mlen + dlen]
                    if magic not in _CHUNK_MAGICS or len(data) < dlen:
                        break
                    if b'"service":"good' not in mb and b'"service": "good' not in mb:
                        bad = b"[" + b" " * (mlen - 2) + b"]"
                        crc_of = zlib.crc32 if magic == b"ACK1" else crc32c  # "ACK2"/"ACK3": CRC-32C
                        crc = crc_of(data, crc_of(bad))
                        f.seek(pos)
                        f.write(_CHUNK_HEADER.pack(magic, mlen, dlen, crc) + bad)
                        done = "corrupted"
                        break
                    pos += _CHUNK_HEADER.size + mlen + dlen
        except (OSError, ValueError):
            continue  # deleted by the disk cap meanwhile
        if done == "corrupted":
            break
    c = _connect(path, "control")
    c.sendall(encode_json(Kind.EXPORT, {"filter": {"service": "values"}}))
    n, end = _read_until_end(c, 120)
    c.close()
    return f"{done}, export {end.name}"


def _attack_remove_socket(path: str) -> str:
    """Remove the socket file; the daemon must listen again at its next flush."""
    os.unlink(path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return "recreated"
        time.sleep(0.05)
    return "NOT recreated in 10 s"


def _attack_second_daemon(path: str, data_dir: str) -> str:
    """Start a second aclprofd on the same data directory (another socket): it must refuse."""
    other = path + ".2"
    p = subprocess.run([*daemon_argv(), "--socket", other, "--data-dir", data_dir, "--prometheus-port", "0"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0 and "in use by another aclprofd" in p.stderr:
        return "refused"
    return f"rc {p.returncode}: {p.stderr.strip()[-80:]}"


# ---- /metrics (issue 19 items 1, 2, 8) ----------------------------------------------------------

def _relabels(path: str, n: int, label_bytes: int, service: str) -> int:
    """One agent: ``n`` WATCH relabels of model 1, each followed by one record (a new key);
    returns the bytes of WATCH frames sent."""
    s = _connect(path, "agent", service, {1: "MatMul", 2: "m"})
    r = np.zeros(1, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["model_id"], r["duration"] = 1, 2, 1, 1000
    sent, out = 0, []
    pad = "L" * max(0, label_bytes - 12)
    for i in range(n):
        w = encode_json(Kind.WATCH, {"model_id": 1, "device": 0,
                                     "labels": {"model": f"{i}{pad}"[:label_bytes], "version": "v" * 8}})
        sent += len(w)
        r["end"] = time.monotonic_ns()
        r["start"] = r["end"] - 1000
        out += [w, encode_batch(r)]
        if len(out) >= 512:
            s.sendall(b"".join(out))
            out = []
    s.sendall(b"".join(out))
    s.close()
    return sent


def _attack_relabel_flood(path: str) -> str:
    """512 KB of long WATCH relabels (250-byte model labels) from one agent."""
    return f"{_relabels(path, 1700, 250, 'relabel-long') // 1024} KiB of WATCH"


def _attack_short_relabels(path: str) -> str:
    """10,050 short relabels from one agent: was 310k series and a 17.6 s scrape."""
    _relabels(path, 10_050, 6, "relabel-short")
    return "10050 relabels"


def _get(port: int, timeout: float = 30.0) -> tuple[int, int, float]:
    """(status, bytes, seconds) of one GET /metrics; status 0: no answer, -1: the body was cut
    (the daemon closed the connection mid-body, e.g. its write timeout on a slow reader)."""
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            n = len(r.read())
            return r.status, n, time.perf_counter() - t
    except urllib.error.HTTPError as exc:
        return exc.code, 0, time.perf_counter() - t
    except http.client.IncompleteRead as exc:
        return -1, len(exc.partial), time.perf_counter() - t
    except (OSError, http.client.HTTPException):
        return 0, 0, time.perf_counter() - t


def _attack_parallel_scrapes(port: int) -> str:
    res: list[int] = []
    threads = [threading.Thread(target=lambda: res.append(_get(port)[0])) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return ", ".join(f"{k}: {res.count(k)}" for k in sorted(set(res)))


def _attack_slow_http(port: int) -> str:
    """30 connections that send half a request head and wait past the read timeout (10 s)."""
    socks = []
    for _ in range(30):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append(c)
        except OSError:
            break
    deadline = time.monotonic() + 15
    closed = 0
    for c in socks:
        c.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while c.recv(4096):  # a 503 for those beyond the cap, then EOF
                pass
            closed += 1
        except OSError:
            pass
        c.close()
    return f"{closed}/{len(socks)} closed by the daemon"


_NEVER_READ: list[socket.socket] = []


def _attack_never_reading_scraper(port: int) -> str:
    """Pipelined GETs never read (held until the next round): the write timeout closes it."""
    for c in _NEVER_READ:
        c.close()
    _NEVER_READ.clear()
    try:
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.settimeout(5)
        c.connect(("127.0.0.1", port))
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 200)
        _NEVER_READ.append(c)
        return "sent 200 requests"
    except OSError as exc:
        return f"error {type(exc).__name__}"


def _plugged_attacks() -> dict[str, Callable[[str], str]]:
    """``ATTACKS`` of every ``soak_attacks_*.py`` beside this file (other parts' attacks)."""
    out: dict[str, Callable[[str], str]] = {}
    for f in sorted(glob.glob(os.path.join(HERE, "soak_attacks_*.py"))):
        mod = importlib.import_module(os.path.splitext(os.path.basename(f))[0])
        for name, fn in getattr(mod, "ATTACKS", {}).items():
            out[f"{name} ({mod.__name__})"] = fn
    return out


def _attacks(data_dir: str, port: int = 0) -> dict[str, Callable[[str], str]]:
    metrics: dict[str, Callable[[str], str]] = {}
    if port:
        metrics = {"512 KB of long WATCH relabels": _attack_relabel_flood,
                   "10,050 short relabels": _attack_short_relabels,
                   "20 parallel scrapes": lambda p: _attack_parallel_scrapes(port),
                   "30 half-sent HTTP requests": lambda p: _attack_slow_http(port),
                   "scraper that never reads": lambda p: _attack_never_reading_scraper(port)}
    return {**metrics, **_plugged_attacks(), "stream+STATUS never reading": _attack_status_flood, "4M unused names": _attack_names,
            "impossible values": _attack_values, "escapes + surrogates + 40 x 1 MiB reasons": _attack_strings,
            "4 KiB+ names with a tail client": _attack_long_names_tail,
            "^(a+)+$ filters (SNAPSHOT, EXPORT, STREAM)": _attack_backtracking_filter,
            "65 k distinct model ids": _attack_model_ids, "100 idle control clients": _attack_idle_controls,
            "corrupt segment metadata + EXPORT": lambda p: _attack_corrupt_metadata(p, data_dir),
            "socket file removed": _attack_remove_socket,
            "second daemon on the data dir": lambda p: _attack_second_daemon(p, data_dir)}


def _hostile(path: str, data_dir: str, stop_at: float, out: mp.Queue, port: int = 0,
             skip: tuple[str, ...] = ()) -> None:
    results: dict[str, dict[str, int]] = {}
    spans: list[tuple[str, float, float]] = []  # (attack, start, end): which one a stall fell in
    attacks = {k: v for k, v in _attacks(data_dir, port).items() if not any(x in k for x in skip)}
    while time.time() < stop_at:
        for name, fn in attacks.items():
            t0 = time.time()
            try:
                res = fn(path)
            except Exception as exc:  # an attack's own failure is an outcome, not the bench's end
                res = f"error {type(exc).__name__}"
            spans.append((name, t0, time.time()))
            results.setdefault(name, {})[res] = results.setdefault(name, {}).get(res, 0) + 1
            if time.time() >= stop_at:
                break
    for s in (*_IDLE, *_NEVER_READ):
        s.close()
    out.put((results, spans))


def _rss(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        d = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.startswith(("VmRSS", "VmHWM"))}
    return d["VmRSS"], d["VmHWM"]


HWM_EVERY_S = 0.1  # the peak RSS (VmHWM) is read and reset this often


class HwmSampler:
    """The kernel's peak RSS of ``pid`` per interval: every ``HWM_EVERY_S`` a thread reads
    VmHWM and resets it to the current RSS (``/proc/PID/clear_refs`` 5, Linux 4.0+), so a
    transient peak of a few ms is seen and dated. :attr:`peaks` is ``(interval start, interval
    end, VmHWM bytes)``; :attr:`peak` the largest (the process's VmHWM before the first reset
    included). Without the right to reset (another user's process): one interval, the whole run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peaks: list[tuple[float, float, int]] = []
        self.resettable = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hwm")
        self._last = time.time()

    def start(self) -> HwmSampler:
        self._thread.start()
        return self

    def _sample(self) -> None:
        hwm = _rss(self.pid)[1]
        now = time.time()
        if self.resettable:
            try:
                with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                self.resettable = False
        self.peaks.append((self._last, now, hwm))
        self._last = now

    def _run(self) -> None:
        while not self._stop.wait(HWM_EVERY_S):
            try:
                self._sample()
            except OSError:  # the daemon is gone
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self._sample()
        except OSError:
            pass

    @property
    def peak(self) -> int:
        return max((p for _, _, p in self.peaks), default=0)

    def peak_between(self, a: float, b: float) -> int:
        """The largest peak of the intervals that overlap [a, b]."""
        return max((p for s, e, p in self.peaks if s <= b and e >= a), default=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    ap.add_argument("--rate", type=float, default=500_000, help="records/s of all good agents together")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--budget", default="256MiB", help="the daemon's --memory-budget")
    ap.add_argument("--quick", action="store_true", help="60 s")
    ap.add_argument("--skip", default="", help="comma separated: leave out the attacks whose names contain these")
    ap.add_argument("--no-prometheus", action="store_true", help="no real Prometheus (the 5 s scraper thread stays)")
    args = ap.parse_args(argv)
    duration = 60.0 if args.quick else args.duration
    budget = parse_size(args.budget)
    tmp = tempfile.mkdtemp(prefix="acls-", dir="/tmp")
    path = os.path.join(tmp, "d.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(os.path.join(tmp, "notify"))
    notify.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=os.path.join(tmp, "notify"))
    log = os.path.join(tmp, "log")
    data_dir = os.path.join(tmp, "data")
    from helpers.procs import free_port
    from helpers.prometheus import PROMETHEUS, Prometheus
    port = free_port()
    daemon = subprocess.Popen([*daemon_argv(), "--socket", path, "--data-dir", data_dir,
                               "--prometheus-port", str(port), "--disk-cap", "512MiB", "--segment-size", "32MiB",
                               "--memory-budget", str(budget), "--control-idle-timeout", "5s",
                               "--log-format", "json", "--log-file", log], env=env, cwd=tmp)
    rtts: list[float] = []
    probe_failures: list[str] = []
    rtt_at: list[float] = []
    exited_during = None
    scrapes: list[tuple[int, int, float]] = []
    prom: Prometheus | None = None
    prom_figures: dict[str, str] = {}
    try:
        assert b"READY=1" in notify.recv(100)
        if PROMETHEUS is not None and not args.no_prometheus:
            prom = Prometheus([f"127.0.0.1:{port}"], interval="5s").start()
        rss_idle = _rss(daemon.pid)[0]
        hwm_sampler = HwmSampler(daemon.pid).start()
        cpu0 = _proc_stats(daemon.pid)[0]
        stop_at = time.time() + duration
        ctx = mp.get_context("fork")
        q: mp.Queue = ctx.Queue()
        hq: mp.Queue = ctx.Queue()
        agents = [ctx.Process(target=_agent, args=(path, i, args.batch, stop_at, args.rate / args.agents, q))
                  for i in range(args.agents)]
        hostile = ctx.Process(target=_hostile, args=(path, data_dir, stop_at, hq, port,
                                                              tuple(x for x in args.skip.split(",") if x)))
        for p in (*agents, hostile):
            p.start()
        stop_probe = threading.Event()

        def probe() -> None:
            # one connection, kept (reconnecting only if the daemon closed it): a connect
            # would also measure the socket-removal attack, not the loop
            s = None
            while not stop_probe.is_set():
                try:
                    if s is None:
                        s = _connect(path, "control")
                        r, pend = FrameReader(), []
                    t, wall = time.perf_counter(), time.time()
                    s.sendall(encode_json(Kind.STATUS, {}))
                    kind, payload = recv_frame(s, r, pend)
                    if kind != Kind.STATUS_REPLY:  # ERROR: the daemon closed us (eviction, ...)
                        raise OSError(bytes(payload).decode(errors="replace")[:120])
                    rtts.append(time.perf_counter() - t)
                    rtt_at.append(wall)
                except (OSError, AssertionError) as exc:
                    probe_failures.append(str(exc)[:120])
                    if s is not None:
                        s.close()
                    s = None
                time.sleep(0.02)
            if s is not None:
                s.close()

        th = threading.Thread(target=probe, daemon=True)
        th.start()

        def scraper() -> None:  # Prometheus's rhythm: one scrape every 5 s, 10 s timeout
            while not stop_probe.wait(5.0):
                scrapes.append(_get(port, 10.0))
        sth = threading.Thread(target=scraper, daemon=True)
        sth.start()
        peak_seen = 0
        while time.time() < stop_at:
            time.sleep(0.5)
            if daemon.poll() is not None:
                exited_during = daemon.returncode
                break
            peak_seen = max(peak_seen, _rss(daemon.pid)[0])
        attacks, spans = hq.get(timeout=120)
        hostile.join(30)
        accounts = [q.get(timeout=120) for _ in agents]
        for p in agents:
            p.join(30)
        stop_probe.set()
        th.join(10)
        sth.join(15)
        if prom is not None:
            for label, q in (("max scrape_duration_seconds", "max_over_time(scrape_duration_seconds[15m])"),
                             ("min up (1 = every scrape succeeded)", "min_over_time(up[15m])"),
                             ("max scrape_samples_scraped", "max_over_time(scrape_samples_scraped[15m])")):
                try:
                    res = prom.query(q)
                    prom_figures[label] = res[0]["value"][1] if res else "no data"
                except (OSError, AssertionError, KeyError) as exc:
                    prom_figures[label] = f"error {exc}"
        time.sleep(12)  # a flush trims the heap after a large connection closed
        hwm_sampler.stop()
        rss_after, hwm = _rss(daemon.pid)
        hwm = max(hwm, hwm_sampler.peak)
        cpu = _proc_stats(daemon.pid)[0] - cpu0
        st = _status(path)
    finally:
        if prom is not None:
            prom.cleanup()
        daemon.terminate()
        rc = daemon.wait(30)
        notify.close()
    log_bytes = os.path.getsize(log) if os.path.exists(log) else 0
    rows = []
    exact = True
    for idx, pid, emitted, read in sorted(accounts):
        dropped = 0  # the good agents use blocking sends and send no LOSS: nothing to count
        ok = emitted == read + dropped
        exact &= ok
        rows.append((f"good{idx} (pid {pid})", f"{emitted:,}", f"{read:,}", dropped, "exact" if ok else "MISMATCH"))
    table(["agent", "emitted", "read by daemon", "counted loss", "accounting"], rows)
    print()
    storage = st.get("storage") or {}
    table(["summary", "value"], [
        ("load (uptime)", open("/proc/loadavg").read().split()[:3]),
        ("duration s / target records/s", f"{duration:.0f} / {args.rate:,.0f}"),
        ("daemon exited during the run", "no" if exited_during is None else f"YES ({exited_during})"),
        ("daemon exit code at SIGTERM", rc),
        ("good agents' accounting", "exact" if exact else "MISMATCH"),
        ("storage records_lost / write_errors", f"{storage.get('records_lost', 0)} / {storage.get('write_errors', 0)}"),
        ("records refused (impossible values)", st.get("records_rejected")),
        ("memory refusals", (st.get("memory") or {}).get("refused")),
        ("memory MiB at the end: base / tables / slack / clients' share",
         " / ".join(f"{m[k] / 2**20:.0f}" if k in m else "n/a"
                    for m in [st.get("memory") or {}]
                    for k in ("base_bytes", "tables_bytes", "slack_bytes", "clients_share_bytes"))),
        ("stream records skipped", st.get("stream_skipped")),
        ("connections refused / idle closed / accept errors / internal errors",
         " / ".join(str((st.get("connections") or {}).get(k)) for k in
                    ("refused", "idle_closed", "accept_errors", "internal_errors"))),
        ("names truncated / corrupt chunks met / protocol errors",
         f"{st.get('names_truncated')} / {storage.get('corrupt_chunks')} / {st.get('protocol_errors')}"),
        ("aggregate keys / cap / records in (other)",
         f"{(st.get('aggregates') or {}).get('keys')} / {(st.get('aggregates') or {}).get('cap')} / "
         f"{(st.get('aggregates') or {}).get('other_bucket_records')}"),
        ("STATUS round trips / probe reconnects", f"{len(rtts)} / {len(probe_failures)}"),
        ("worst / p99 / median round trip ms (loop stall)",
         f"{max(rtts) * 1e3:.1f} / {pct(rtts, 99) * 1e3:.1f} / {pct(rtts, 50) * 1e3:.2f}" if rtts else "-"),
        ("budget MiB", f"{budget / 2**20:.0f}"),
        ("peak RSS (VmHWM) vs budget", f"{hwm / 2**20:.0f} / {budget / 2**20:.0f} MiB: "
         f"{'within' if hwm <= budget else 'OVER'}"
         f"{'' if hwm_sampler.resettable else ' (VmHWM not resettable: one interval)'}"),
        ("RSS MiB idle / peak (VmHWM) / peak sampled / 12 s after", f"{rss_idle / 2**20:.0f} / {hwm / 2**20:.0f} / "
         f"{peak_seen / 2**20:.0f} / {rss_after / 2**20:.0f}"),
        ("daemon CPU s", f"{cpu:.1f}"),
        ("log bytes", f"{log_bytes:,}"),
    ])
    print()
    m = st.get("metrics") or {}
    ok = [x for x in scrapes if x[0] == 200]
    durs = [x[2] for x in scrapes]
    table(["/metrics", "value"], [
        ("scrapes every 5 s: answered 200 / all", f"{len(ok)} / {len(scrapes)} "
         f"(others: {sorted({x[0] for x in scrapes if x[0] != 200})})"),
        ("scrape seconds worst / median", f"{max(durs):.2f} / {pct(durs, 50):.2f}" if durs else "-"),
        ("scrape MiB largest", f"{max((x[1] for x in ok), default=0) / 2**20:.1f}"),
        ("series shown / refused (last rendering)", f"{m.get('series')} / {m.get('series_refused')}"),
        ("agents over their share", m.get("agents_over_share")),
        ("renders / render s (last) / held bytes", f"{m.get('renders')} / {m.get('render_s')} / {m.get('held_bytes')}"),
        ("requests answered / refused", f"{m.get('requests')} / {m.get('requests_refused')}"),
        *[(f"prometheus: {k}", v) for k, v in prom_figures.items()],
    ])
    print()
    table(["attack (rounds in the loop)", "outcomes"], [(k, ", ".join(f"{r} x{n}" for r, n in v.items()))
                                                        for k, v in attacks.items()])
    ls = (st.get("loop") or {}).get("stalls") or {}
    print("loop stalls (the daemon's attribution, turns >= 100 ms by longest step):", ls.get("by_step"))
    for turn in ls.get("worst") or [ls.get("longest")]:
        print("long loop turn:", turn)
    print("problems at the end:", [p[:100] for p in st.get("problems") or []])
    worst = sorted(range(len(rtts)), key=lambda i: -rtts[i])[:5]
    table(["worst STATUS round trips ms", "attacks running then"], [
        (f"{rtts[i] * 1e3:.0f}", ", ".join(sorted({n for n, a, b in spans if a <= rtt_at[i] + rtts[i] and b >= rtt_at[i]}))
         or "none") for i in worst])
    top = sorted(hwm_sampler.peaks, key=lambda x: -x[2])[:5]
    table([f"largest VmHWM MiB per {HWM_EVERY_S:g} s", "attacks running then"], [
        (f"{p / 2**20:.0f}", ", ".join(sorted({n for n, a, b in spans if a <= e and b >= s})) or "none")
        for s, e, p in top])
    per_attack: dict[str, list[float]] = {}
    for i, rtt in enumerate(rtts):  # each round trip counts for every attack running during it
        for n, a, b in spans:
            if a <= rtt_at[i] + rtt and b >= rtt_at[i]:
                per_attack.setdefault(n, []).append(rtt)
    hwm_of = {n: 0 for n, _, _ in spans}
    for n, a, b in spans:
        hwm_of[n] = max(hwm_of[n], hwm_sampler.peak_between(a, b))
    table(["attack", "STATUS round trips during it", "worst ms", "p99 ms", "median ms", "VmHWM MiB"],
          [(n, len(v), f"{max(v) * 1e3:.0f}", f"{pct(v, 99) * 1e3:.0f}", f"{pct(v, 50) * 1e3:.0f}",
            f"{hwm_of.get(n, 0) / 2**20:.0f}") for n, v in sorted(per_attack.items())])
    if probe_failures:
        print("probe connection lost:", sorted(set(probe_failures)))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if exited_during is None and exact else 1


if __name__ == "__main__":
    sys.exit(main())
