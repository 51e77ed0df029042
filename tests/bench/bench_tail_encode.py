"""The daemon's per-record cost of STREAM/EXPORT: records -> JSON Lines frames, C vs Python.

    python tests/bench/bench_tail_encode.py [--quick] [--ops N] [--against PATH]

Encodes 2048-record chunks (one STREAM_RECORDS frame's worth, as the daemon's pump does) of
a realistic batch (``--ops`` op names like ``layer3/op31``, 100 by default, 4 op types, one
thread) with

* ``python``: the reference encoder (``aclprofd.records.encode_records_py`` +
  ``jsonl_payloads`` + ``append_frame`` into a ``bytearray``), what the daemon ran before;
* ``c``: ``aclprofd.records.encode_frames`` (``aclprof.protocol._jsonl``), what it runs now;
* ``c again``: ``c`` once more, the A/A row: what two measurements of the same code differ by;
* ``c, 4 clients``: the same chunk for four STREAM clients with the same filter, encoded
  once and the one ``bytes`` queued four times (``aclprofd.conn.OutQueue``);
* ``--against PATH``: ``c`` with another build of the extension (``PATH``: its ``.so``, e.g.
  main's ``aclprof/protocol/_jsonl*.so``), loaded beside this one.

Variants run interleaved; reported: CPU ns per record (this thread's CPU time: the machine
may be shared; median of rounds, min) and the ratios to ``python`` and to ``c`` within each
round. At 250 k records/s, ns per record x 250 k = the share of a core the encoding takes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
import numpy as np
from aclprofd.conn import OutQueue
from aclprofd.records import (
    FRAME_RECORDS,
    NameJson,
    append_frame,
    encode_frames,
    encode_records_py,
    identity_head,
    jsonl_payloads,
)

from aclprof.protocol.wire import FRAME_TARGET, MAX_PAYLOAD, RECORD_DTYPE, Kind


def make_batch(n: int, ops: int = 100, t0: int = 1_234_567_890_123_456) -> tuple[np.ndarray, dict[int, str]]:
    """``n`` records of a model of ``ops`` ops (4 op types, one thread), starting at ``t0`` ns."""
    names = {i: f"layer{i // 10}/op{i}" for i in range(ops)}
    names.update({ops + i: t for i, t in enumerate(("MatMulV2", "Add", "Conv2D", "Relu"))})
    r = np.zeros(n, RECORD_DTYPE)
    i = np.arange(n)
    r["model_id"], r["device_id"], r["thread_id"] = 1, 0, 123_456
    r["op_name"], r["op_type"] = i % ops, ops + i % 4
    r["start"] = t0 + i * 5_000
    r["end"] = r["start"] + 4_321
    r["duration"] = 4_321
    return r, names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ops", type=int, default=100, help="distinct op names in the batch (a model's ops)")
    parser.add_argument("--against", metavar="PATH", help="another build of aclprof.protocol._jsonl (its .so)")
    args = parser.parse_args(argv)
    rounds, reps = (5, 20) if args.quick else (15, 60)
    recs, names = make_batch(FRAME_RECORDS, args.ops)
    n = len(recs)
    host, pid, service = "node-17", 4242, "resnet"
    head = identity_head(host, pid, service)

    def python() -> float:
        t0 = time.thread_time()
        for _ in range(reps):
            out = bytearray()
            nj = NameJson(names, {})  # per connection in the daemon; per chunk here is the cautious side
            for _k, payload in jsonl_payloads(encode_records_py(recs, 1.7e9, host, pid, service, nj)):
                append_frame(out, Kind.STREAM_RECORDS, payload)
        return (time.thread_time() - t0) / reps / n * 1e9

    cache: dict[int, bytes] = {}

    def c() -> float:
        t0 = time.thread_time()
        for _ in range(reps):
            out = OutQueue()
            out += encode_frames(recs, 1.7e9, head, NameJson(names, cache))
        return (time.thread_time() - t0) / reps / n * 1e9

    def c_with(encode: Any) -> Callable[[], float]:
        cache_other: dict[int, bytes] = {}

        def run() -> float:
            t0 = time.thread_time()
            for _ in range(reps):
                out = OutQueue()
                nj = NameJson(names, cache_other)
                out += encode(recs, 1.7e9, head, nj.cache, nj, int(Kind.STREAM_RECORDS), FRAME_RECORDS,
                              FRAME_TARGET, MAX_PAYLOAD)
            return (time.thread_time() - t0) / reps / n * 1e9
        return run

    def c4() -> float:
        t0 = time.thread_time()
        for _ in range(reps):
            frames = encode_frames(recs, 1.7e9, head, NameJson(names, cache))
            for _c in range(4):
                q = OutQueue()
                q += frames
        return (time.thread_time() - t0) / reps / n * 1e9

    assert encode_frames(recs, 1.7e9, head, NameJson(names)) == _reference(recs, host, pid, service, names)
    variants: dict[str, Callable[[], float]] = {"python": python, "c": c, "c again": c}
    if args.against:
        other = _load_build(args.against)
        want = _reference(recs, host, pid, service, names)
        assert other.encode_frames(recs, 1.7e9, head, {}, NameJson(names), int(Kind.STREAM_RECORDS), FRAME_RECORDS,
                                   FRAME_TARGET, MAX_PAYLOAD) == want
        variants[f"c ({args.against})"] = c_with(other.encode_frames)
    variants["c, 4 clients"] = c4
    B.header(f"STREAM/EXPORT encoding: CPU ns per record (2048-record chunks, {args.ops} ops)", args.quick)
    samples = B.interleaved(variants, rounds)
    rows = [(name, B.med(v), min(v), f"{B.med(B.per_round_ratio(samples, name, 'python')):.3f}x",
             f"{B.med(B.per_round_ratio(samples, name, 'c')):.3f}x") for name, v in samples.items()]
    B.table(("variant", "CPU ns/record (median)", "min", "vs python (per round)", "vs c (per round)"), rows)
    c_ns = B.med(samples["c"])
    print(f"\nat 250 k records/s: python {B.med(samples['python']) * 250e3 / 1e9 * 100:.1f} % of a core, "
          f"c {c_ns * 250e3 / 1e9 * 100:.1f} % (one client)")
    return 0


def _load_build(path: str) -> Any:
    """Another build of aclprof.protocol._jsonl, loaded from its file beside the installed one."""
    spec = importlib.util.spec_from_file_location("aclprof.protocol._jsonl", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not an extension module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _reference(recs: np.ndarray, host: str, pid: int, service: str, names: dict[int, str]) -> bytes:
    out = bytearray()
    for _k, payload in jsonl_payloads(encode_records_py(recs, 1.7e9, host, pid, service, NameJson(names))):
        append_frame(out, Kind.STREAM_RECORDS, payload)
    return bytes(out)


if __name__ == "__main__":
    sys.exit(main())
