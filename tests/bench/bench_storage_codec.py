"""The storage's record encoding ("ACK3" chunks, aclprof.protocol._reccodec; issue 21): bytes per
record, encode and decode CPU per record, and the CPU of writing a flush's chunk raw vs encoded.

    python tests/bench/bench_storage_codec.py [--quick]

Record sets:

* ``agent mix (mock)``: the records of the agent benchmark's model (bench_agent_overhead:
  ``make_ops(1000, 10_000)``, 1000 ops x 10 us, six op types), run on the bundled mock through
  ``aclprof.subscribe`` (not realtime) and laid out as wire records (keypoint -> flag bit);
* ``synthetic realistic``: four streams of two models interleaved (thread per stream), 300 ops
  of lognormal durations (median ~8 us) with +-10 % jitter and 0-3 us gaps, execution time
  70-98 % of the duration, a keypoint per 1000 ops;
* ``random bits``: every field random (the worst case: larger encoded, so stored raw).

Reported: bytes per record encoded (and the ratio to 56), encode and decode CPU ns per record
(this thread's CPU time, median of interleaved rounds; ``encode again`` is the A/A row), and
``Storage.write`` of one flush's chunk of 77 k agent-mix records (one agent at 100 k ops/s with a
~0.8 s flush: the lead's 4.3 MB chunk) into a segment file, raw (``segment_format = "raw"``) vs
encoded, as this process's CPU (user + system: the kernel's copy into the page cache is the
system part) per record, with ``raw again`` as A/A. The daemon's CPU at 100 k ops/s, base vs
this build, is the curve of ``bench_agent_overhead.py --curve --curve-daemon ...``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
import numpy as np
from aclprofd.storage import Storage
from bench_distortion import make_ops, run_steps

from aclprof.protocol import _reccodec
from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE

REC = RECORD_DTYPE.itemsize


def agent_mix(n: int) -> np.ndarray:
    """Records of the agent benchmark's model from the mock, as wire records."""
    aclprof = B.use_mock()
    import aclprof.mock as mock

    model = mock.load_model(make_ops(1000, 10_000))
    got: list[np.ndarray] = []
    sub = aclprof.subscribe(model, batch_callback=lambda b: got.append(b.data.copy()))
    try:
        run_steps(mock, model, -(-n // 1000))
        mock.wait_writer_idle(60)
        deadline = time.monotonic() + 30
        while sum(len(g) for g in got) < n and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sub.close()
        mock.unload(model)
    rows = np.concatenate(got)[:n]
    r = np.zeros(len(rows), RECORD_DTYPE)
    for f in RECORD_DTYPE.names:
        r[f] = rows[f]
    r["flag"] |= np.where(rows["keypoint"], np.uint32(FLAG_KEYPOINT), np.uint32(0))
    return r


def synthetic(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    nops, streams = 300, 4
    base = (rng.lognormal(9, 1.0, nops) + 500).astype(np.uint64)
    r = np.zeros(n, RECORD_DTYPE)
    stream = rng.integers(0, streams, n)
    pos = np.zeros(streams, np.int64)
    clock = np.full(streams, 1_764_000_000_000_000_000, np.uint64)
    jitter = rng.uniform(0.9, 1.1, n)
    gaps = rng.integers(0, 3000, n).astype(np.uint64)
    ex = rng.integers(70, 99, n).astype(np.uint64)
    for k in range(n):  # per stream: its next op, after its previous end and a gap
        s = stream[k]
        p = pos[s]
        pos[s] = (p + 1) % nops
        d = np.uint64(base[p] * jitter[k])
        start = clock[s] + gaps[k]
        clock[s] = start + d
        r[k] = (1 + s // 2, 100 + p, 1 + p % 20, FLAG_KEYPOINT if p == 0 else 0, 4000 + s, s // 2,
                start, start + d, d, d * ex[k] // 100)
    return r


def random_bits(n: int) -> np.ndarray:
    return np.frombuffer(np.random.default_rng(3).integers(0, 256, n * REC, dtype=np.uint8).tobytes(), RECORD_DTYPE)


def codec_rows(sets: dict[str, np.ndarray], rounds: int) -> None:
    rows = []
    for name, recs in sets.items():
        raw = recs.tobytes()
        out = bytearray(len(recs) * _reccodec.RECORD_MAX_BYTES)
        size = _reccodec.encode_into(out, [raw])
        data = bytes(out[:size])
        assert _reccodec.decode(data, len(recs)) == raw

        def enc(out: bytearray = out, raw: bytes = raw, n: int = len(recs)) -> float:
            t = time.thread_time_ns()
            _reccodec.encode_into(out, [raw])
            return (time.thread_time_ns() - t) / n

        def dec(data: bytes = data, n: int = len(recs)) -> float:
            t = time.thread_time_ns()
            _reccodec.decode(data, n)
            return (time.thread_time_ns() - t) / n

        s = B.interleaved({"encode": enc, "decode": dec, "encode again": enc}, rounds)
        rows.append((name, len(recs), size / len(recs), REC / (size / len(recs)), B.med(s["encode"]),
                     B.med(s["encode again"]), B.med(s["decode"]), min(s["encode"]), min(s["decode"])))
    B.table(("records", "n", "bytes/record", "x smaller", "encode ns/rec", "encode again (A/A)",
             "decode ns/rec", "encode min", "decode min"), rows)


def write_rows(recs: np.ndarray, rounds: int) -> None:
    """Storage.write of one flush's chunk, raw vs encoded: this process's CPU per record."""
    batches = [(time.time(), recs[i:i + 2000].tobytes()) for i in range(0, len(recs), 2000)]  # frames
    root = tempfile.mkdtemp(prefix="bench-scodec-")
    stores = {"raw": Storage(os.path.join(root, "raw"), segment_bytes=256 << 20, encode=False),
              "encoded": Storage(os.path.join(root, "enc"), segment_bytes=256 << 20, encode=True)}
    stores["raw again"] = stores["raw"]
    sizes: dict[str, float] = {}
    system: dict[str, list[float]] = {n: [] for n in stores}

    def one(name: str):
        def run() -> float:
            st = stores[name]
            before = st.bytes
            t, k = time.process_time_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
            st.write("c", {"host": "h", "pid": 1, "service": "s"}, [], batches)
            u, k2 = time.process_time_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
            sizes[name] = (st.bytes - before) / len(recs)
            system[name].append((k2 - k) * 1e9 / len(recs))
            return (u - t) / len(recs)
        return run

    try:
        s = B.interleaved({n: one(n) for n in stores}, rounds)
        sys_rows = [(n, sizes[n], B.med(s[n]), B.med(system[n]), min(s[n]), B.med(s[n]) / B.med(s["raw"]))
                    for n in stores]
        B.table(("Storage.write of a flush", "file bytes/record", "CPU ns/record", "of it system", "min",
                 "vs raw"), sys_rows)
        print(f"(a chunk of {len(recs):,} records, {len(recs) * REC / 1e6:.1f} MB raw, in {len(batches)} batches; "
              f"CPU = user + system of this process, the page-cache copy included)")
    finally:
        for st in {id(v): v for v in stores.values()}.values():
            st.close()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    n = 20_000 if args.quick else 200_000
    rounds = 5 if args.quick else 15
    B.header("storage record codec: bytes and CPU per record", args.quick)
    mix = agent_mix(n)
    sets = {"agent mix (mock)": mix, "synthetic realistic": synthetic(n // 4 if args.quick else n // 2),
            "random bits": random_bits(n // 4)}
    codec_rows(sets, rounds)
    print()
    write_rows(np.concatenate([mix] * (-(-77_000 // len(mix))))[:77_000], rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
