"""End-to-end subscription throughput: records/s from the mock's writer to decoded records.

    python tests/bench/bench_subscribe.py [--quick] [--rounds R] [--records N]

Every sample runs one whole pipeline on the mock (realtime off): subscribe, start the
clock, ``aclmdlExecute`` the model until N records were emitted, wait until the mock's
pipe writer is idle, close/unsubscribe and join the reader; the clock stops when the last
record is decoded (with its name and type). Variants, interleaved round by round:

* ``aclprof``: ``aclprof.subscribe(model, batch_callback=..., read_records=R)`` for
  R = 10, 64, 512, 4096; the iterator path (``for rec in sub`` on another thread, one
  :class:`OpRecord` per op) and ``Subscription.batches()``, both with ``on_full="block"``
  so that nothing is dropped;
* ``pyACL pattern``: the official sample's reader (tests/pyacl_samples/subscribe_sample.py)
  through ``aclprof.compat``: ``os.read(fd, size*N)``, then per op in Python
  get_model_id, get_op_type(..., 65), get_op_name(..., 275), get_op_start, get_op_end,
  get_op_duration on the WHOLE buffer (quadratic in N: the library re-checks every
  record's signature per call), at N = 10 and 4096 (fewer records for 4096). Its pipe is
  enlarged to 1 MiB like aclprof's, so a 4096-record read really returns 4096 records;
* ``C-only``: tests/bench/c_reader.c, compiled here with ``cc -O2`` into a temp dir and
  linked against the mock, making the same getter calls per record on one-record slices
  (the practical limit), at the same read sizes; and ``C read-only``: the same program
  reading the pipe without decoding anything. That is not faster than C-only: a reader
  that is always waiting makes every one of the writer's one-record write() calls wake it
  up, so the mock's emit + writer (one write() per record, as CANN) is the ceiling.

A second table times the decode step alone, on bytes read from the pipe beforehand (so
the mock's writer is out of the picture): aclprof's reader decoder (``Decoder.feed``, what
the reader thread runs per chunk) against the pyACL sample's ``get_model_info`` loop on the
same kind of chunks. This is where the two differ; end to end, the mock's writer (one
write() per record, as CANN does) is the ceiling for every reader.

The model has ~200 ops with realistic names ("layer7/attention/MatMul_2", "MatMulV2").
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

HERE = os.path.dirname(os.path.abspath(__file__))
READ_SIZES = (10, 64, 512, 4096)
GOAL_X_PYACL = 100.0
GOAL_RATE = 1_000_000.0
GOAL_X_C = 3.0
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def model_ops() -> list[dict]:
    """~200 ops of a 12-layer transformer, with realistic names and types."""
    ops = [
        {"name": "embeddings/Gather", "type": "GatherV2", "duration_ns": 12_000, "jitter": 1_000},
        {"name": "embeddings/Add", "type": "Add", "duration_ns": 3_000, "jitter": 300},
        {"name": "embeddings/LayerNorm", "type": "LayerNormV3", "duration_ns": 6_000, "jitter": 500},
    ]
    layer_ops = [
        ("attention/MatMul_0", "MatMulV2", 40_000), ("attention/MatMul_1", "MatMulV2", 40_000),
        ("attention/MatMul_2", "MatMulV2", 40_000), ("attention/Transpose_0", "TransposeD", 5_000),
        ("attention/Transpose_1", "TransposeD", 5_000), ("attention/BatchMatMul_0", "BatchMatMulV2", 30_000),
        ("attention/RealDiv", "RealDiv", 2_000), ("attention/Add_mask", "Add", 2_000),
        ("attention/Softmax", "SoftmaxV2", 8_000), ("attention/BatchMatMul_1", "BatchMatMulV2", 30_000),
        ("attention/MatMul_3", "MatMulV2", 40_000), ("attention/Add_residual", "Add", 3_000),
        ("attention/LayerNorm", "LayerNormV3", 6_000), ("ffn/MatMul_0", "MatMulV2", 80_000),
        ("ffn/FastGelu", "FastGelu", 9_000), ("ffn/MatMul_1", "MatMulV2", 80_000),
    ]
    for layer in range(12):
        for name, op_type, ns in layer_ops:
            ops.append({"name": f"encoder/layer{layer}/{name}", "type": op_type,
                        "duration_ns": ns, "jitter": ns // 10})
    ops += [
        {"name": "pooler/MatMul", "type": "MatMulV2", "duration_ns": 20_000, "jitter": 2_000},
        {"name": "pooler/Tanh", "type": "Tanh", "duration_ns": 2_000, "jitter": 200},
        {"name": "classifier/MatMul", "type": "MatMulV2", "duration_ns": 5_000, "jitter": 500},
        {"name": "classifier/Cast", "type": "Cast", "duration_ns": 1_000, "jitter": 100},
        {"name": "output/ArgMaxD", "type": "ArgMaxD", "duration_ns": 1_500, "jitter": 100},
    ]
    return ops  # 200 ops


# --- the variants ---------------------------------------------------------------------------

class Context:
    def __init__(self, aclprof, model_id: int, ops_per_run: int):
        self.aclprof = aclprof
        self.mock = aclprof.mock
        self.model_id = model_id
        self.ops = ops_per_run
        self.info: dict[str, list] = {}

    def emitted(self) -> int:
        return self.mock.stats()["recordsEmitted"]

    def note(self, name: str, **values) -> None:
        self.info.setdefault(name, []).append(values)


def run_aclprof(ctx: Context, name: str, iterations: int, read_records: int, mode: str) -> float:
    """One sample of aclprof.subscribe; returns records/s."""
    aclprof, mock = ctx.aclprof, ctx.mock
    got = [0]
    consumer = None
    before = ctx.emitted()
    if mode == "callback":
        def on_batch(batch):
            got[0] += len(batch)
        sub = aclprof.subscribe(ctx.model_id, batch_callback=on_batch, read_records=read_records)
    else:
        sub = aclprof.subscribe(ctx.model_id, read_records=read_records, on_full="block")

        def consume():
            n = 0
            if mode == "iterator":
                for rec in sub:
                    n += 1
            else:
                for batch in sub.batches():
                    n += len(batch)
            got[0] = n
        consumer = threading.Thread(target=consume)
        consumer.start()
    t0 = time.perf_counter()
    mock.execute(ctx.model_id, iterations)
    mock.wait_writer_idle(600)
    sub.close(timeout=600)
    if consumer is not None:
        consumer.join()
    elapsed = time.perf_counter() - t0
    emitted = ctx.emitted() - before
    stats = sub.stats
    ctx.note(name, records=got[0], emitted=emitted, dropped=stats.dropped, reads=None)
    if got[0] != emitted or stats.dropped:
        print(f"WARNING: {name}: delivered {got[0]} of {emitted} "
              f"(dropped {stats.dropped})", file=sys.stderr)
    return got[0] / elapsed


def run_pyacl(ctx: Context, name: str, iterations: int, n_per_read: int) -> float:
    """The official pyACL sample's reader, through aclprof.compat (whole-buffer getters)."""
    import numpy as np

    from aclprof.compat import acl

    mock = ctx.mock
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)  # same pipe size as aclprof's reader
    except OSError:
        pass
    ACL_AICORE_NONE = 0xFF
    subscribe_config = acl.prof.create_subscribe_config(1, ACL_AICORE_NONE, w)
    ret = acl.prof.model_subscribe(ctx.model_id, subscribe_config)
    assert ret == 0, ret
    counts = {"records": 0, "reads": [], "failed": 0}

    # --- from tests/pyacl_samples/subscribe_sample.py, unchanged but for the counters ---
    def get_model_info(data, data_len):
        op_number, ret = acl.prof.get_op_num(data, data_len)
        for i in range(op_number):
            model_id = acl.prof.get_model_id(data, data_len, i)
            op_type, ret = acl.prof.get_op_type(data, data_len, i, 65)
            op_name, ret = acl.prof.get_op_name(data, data_len, i, 275)
            op_start = acl.prof.get_op_start(data, data_len, i)
            op_end = acl.prof.get_op_end(data, data_len, i)
            op_duration = acl.prof.get_op_duration(data, data_len, i)
            if ret != 0 or not op_name or not op_type or not (model_id and op_start and op_end
                                                               and op_duration):
                counts["failed"] += 1
        counts["records"] += op_number

    def prof_data_read(args):
        fd, ctx_ = args  # the sample calls acl.rt.set_context(ctx) here (no context needed on the mock)
        buffer_size, ret = acl.prof.get_op_desc_size()
        N = n_per_read
        data_len = buffer_size * N
        while True:
            data = os.read(fd, data_len)
            if len(data) == 0:
                break
            counts["reads"].append(len(data) // buffer_size)
            np_data = np.array(data)
            bytes_data = np_data.tobytes()
            np_data_ptr = acl.util.bytes_to_ptr(bytes_data)
            size = np_data.itemsize * np_data.size
            get_model_info(np_data_ptr, size)
    # ---------------------------------------------------------------------------------

    before = ctx.emitted()
    thr_id, ret = acl.util.start_thread(prof_data_read, [r, None])
    t0 = time.perf_counter()
    mock.execute(ctx.model_id, iterations)
    mock.wait_writer_idle(600)
    ret = acl.prof.model_unsubscribe(ctx.model_id)  # closes w: the reader sees EOF
    ret = acl.util.stop_thread(thr_id)
    elapsed = time.perf_counter() - t0
    os.close(r)
    acl.prof.destroy_subscribe_config(subscribe_config)
    emitted = ctx.emitted() - before
    ctx.note(name, records=counts["records"], emitted=emitted, dropped=0, reads=counts["reads"])
    if counts["records"] != emitted or counts["failed"]:
        print(f"WARNING: {name}: decoded {counts['records']} of {emitted}, "
              f"{counts['failed']} failed", file=sys.stderr)
    return counts["records"] / elapsed


def build_c_reader(tmp: str) -> tuple[str | None, str]:
    from aclprof.binding.loader import mock_library_path

    lib = mock_library_path()
    exe = os.path.join(tmp, "c_reader")
    cc = os.environ.get("CC", "cc")
    return B.compile_helper([cc, "-O2", "-I", os.path.join(B.REPO, "cdefs"), os.path.join(HERE, "c_reader.c"),
                             str(lib), f"-Wl,-rpath,{lib.parent}", "-lpthread", "-o", exe], exe)


def run_c(ctx: Context, name: str, exe: str, model_path: str, iterations: int,
          read_records: int, raw: bool = False) -> float:
    env = dict(os.environ)
    env.pop("ACLMOCK_REALTIME", None)
    cmd = [exe, model_path, str(iterations), str(read_records)] + (["raw"] if raw else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    fields = dict(kv.split("=", 1) for kv in proc.stdout.split() if "=" in kv)
    if proc.returncode != 0:
        print(f"WARNING: {name}: exit {proc.returncode} {proc.stdout} "
              f"{proc.stderr}", file=sys.stderr)
    if "rate" not in fields:
        return float("nan")
    ctx.note(name, records=int(fields["records"]), emitted=int(fields["emitted"]),
             dropped=int(fields["dropped"]), reads=None)
    return float(fields["rate"])


# --- the decode step alone ------------------------------------------------------------------

def capture(ctx: Context, iterations: int) -> bytes:
    """Subscribe with a plain pipe, run the model, return the raw bytes (names stay in the
    library's table until a decoder fetches them)."""
    from aclprof.binding import lowlevel
    from aclprof.binding.enums import AicoreMetrics

    r, w = os.pipe()
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    cell = lowlevel.FdCell(w)
    config = lowlevel.create_subscribe_config(True, AicoreMetrics.NONE, cell)
    lowlevel.model_subscribe(ctx.model_id, config)
    chunks: list[bytes] = []

    def drain():
        while True:
            data = os.read(r, 1 << 20)
            if not data:
                return
            chunks.append(data)
    reader = threading.Thread(target=drain)
    reader.start()
    ctx.mock.execute(ctx.model_id, iterations)
    ctx.mock.wait_writer_idle(600)
    lowlevel.model_unsubscribe(ctx.model_id)  # closes w
    reader.join()
    os.close(r)
    config.close()
    return b"".join(chunks)


def decode_aclprof(ctx: Context, name: str, iterations: int, read_records: int) -> float:
    from aclprof.api.subscription.decoder import Decoder

    data = capture(ctx, iterations)
    decoder = Decoder(80, max_records=read_records)
    t0 = time.perf_counter()
    batches = decoder.feed(data)
    elapsed = time.perf_counter() - t0
    n = sum(len(b) for b in batches)
    ok = n == len(data) // 80 and decoder.names_missing == 0 and decoder.corrupt == 0
    if not ok:
        print(f"WARNING: {name}: decoded {n} of {len(data) // 80}", file=sys.stderr)
    ctx.note(name, records=n, emitted=len(data) // 80, dropped=0, reads=None)
    return n / elapsed


def decode_pyacl(ctx: Context, name: str, iterations: int, n_per_read: int) -> float:
    """The sample's get_model_info() on chunks of N records (one os.read's worth each)."""
    import numpy as np

    from aclprof.compat import acl

    data = capture(ctx, iterations)
    size = 80
    done = [0]

    def get_model_info(data, data_len):  # as in the sample
        op_number, ret = acl.prof.get_op_num(data, data_len)
        for i in range(op_number):
            model_id = acl.prof.get_model_id(data, data_len, i)
            op_type, ret = acl.prof.get_op_type(data, data_len, i, 65)
            op_name, ret = acl.prof.get_op_name(data, data_len, i, 275)
            op_start = acl.prof.get_op_start(data, data_len, i)
            op_end = acl.prof.get_op_end(data, data_len, i)
            op_duration = acl.prof.get_op_duration(data, data_len, i)
        done[0] += op_number

    t0 = time.perf_counter()
    step = size * n_per_read
    for offset in range(0, len(data), step):
        chunk = data[offset:offset + step]
        np_data = np.array(chunk)
        bytes_data = np_data.tobytes()
        np_data_ptr = acl.util.bytes_to_ptr(bytes_data)
        get_model_info(np_data_ptr, np_data.itemsize * np_data.size)
    elapsed = time.perf_counter() - t0
    if done[0] != len(data) // size:
        print(f"WARNING: {name}: decoded {done[0]} of {len(data) // size}", file=sys.stderr)
    ctx.note(name, records=done[0], emitted=len(data) // size, dropped=0, reads=None)
    return done[0] / elapsed


# --- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds (< 20 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--records", type=int, default=None,
                        help="records per aclprof/C sample (at most 150000: the mock's ring holds 200000)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    records = min(args.records or (40_000 if args.quick else 100_000), 150_000)

    aclprof = B.use_mock()
    import aclprof.mock

    ops = model_ops()
    per_run = len(ops)
    iterations = max(1, records // per_run)
    records = iterations * per_run
    # pyACL: N=10 costs ~10 us per op; N=4096 ~1 ms per op (quadratic): one full read.
    py_small_iters = max(1, (10_000 if args.quick else 20_000) // per_run)
    py_big_iters = 21  # 4200 records: after a few small reads, reads of ~4096

    B.header(f"subscription throughput (records/s, {records:,} records per sample, "
             f"{rounds} interleaved rounds; pyACL N=10: {py_small_iters * per_run:,} records, "
             f"N=4096: {py_big_iters * per_run:,})", args.quick)

    tmp = tempfile.mkdtemp(prefix="aclprof-bench-sub-")
    try:
        aclprof.mock.set_realtime(False)
        model_path = os.path.join(tmp, "model.txt")
        aclprof.mock.model_file(ops, model_path, seed=1)
        from aclprof.binding import lowlevel
        model_id = lowlevel.mdl_load_from_file(model_path)
        ctx = Context(aclprof, model_id, per_run)
        exe, why = build_c_reader(tmp)
        if exe is None:
            print(f"C reader not available: {why}", file=sys.stderr)

        variants = {}
        for r in READ_SIZES:
            name = f"aclprof batch_callback R={r}"
            variants[name] = lambda n=name, r=r: run_aclprof(ctx, n, iterations, r, "callback")
        name = "aclprof iterator R=4096"
        variants[name] = lambda n=name: run_aclprof(ctx, n, iterations, 4096, "iterator")
        name = "aclprof batches() R=4096"
        variants[name] = lambda n=name: run_aclprof(ctx, n, iterations, 4096, "batches")
        name = "pyACL pattern N=10"
        variants[name] = lambda n=name: run_pyacl(ctx, n, py_small_iters, 10)
        name = "pyACL pattern N=4096"
        variants[name] = lambda n=name: run_pyacl(ctx, n, py_big_iters, 4096)
        if exe is not None:
            for r in READ_SIZES:
                name = f"C-only R={r}"
                variants[name] = lambda n=name, r=r: run_c(ctx, n, exe, model_path, iterations, r)
            name = "C read-only R=4096 (no decode)"
            variants[name] = lambda n=name: run_c(ctx, n, exe, model_path, iterations, 4096, raw=True)

        # warm-up: grows the mock's ring and name table, loads numpy and the compat layer
        run_aclprof(ctx, "warm-up", iterations, 4096, "callback")
        run_pyacl(ctx, "warm-up", 2, 10)
        ctx.info.clear()

        samples = B.interleaved(variants, rounds)

        dec = {}
        name = "aclprof decoder R=4096"
        dec[name] = lambda n=name: decode_aclprof(ctx, n, iterations, 4096)
        name = "aclprof decoder R=10"
        dec[name] = lambda n=name: decode_aclprof(ctx, n, iterations // 4, 10)
        name = "pyACL get_model_info N=10"
        dec[name] = lambda n=name: decode_pyacl(ctx, n, py_small_iters, 10)
        if not args.quick:  # one 4096-record chunk takes seconds
            name = "pyACL get_model_info N=4096"
            dec[name] = lambda n=name: decode_pyacl(ctx, n, 4096 // per_run + 1, 4096)
        decode = B.interleaved(dec, rounds)
        aclprof.mock.unload(model_id)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    for name, values in samples.items():
        infos = ctx.info.get(name, [])
        reads = [n for i in infos for n in (i.get("reads") or ())]
        # records-weighted mean read size: the read size the average record arrived in
        per_read = f"{sum(n * n for n in reads) / sum(reads):,.0f}" if reads else ""
        rows.append((name, B.med(values), max(values), min(values),
                     (B.med(values) / 1e6), per_read))
    print("-- end to end: mock writer -> pipe -> decoded records with names --")
    B.table(("variant", "median rec/s", "best rec/s", "worst rec/s", "M rec/s",
             "recs/read (weighted)"), rows)
    print()

    def ratio(a: str, b: str) -> tuple[float, float]:
        r = B.per_round_ratio(samples, a, b)
        return B.med(r), min(r)

    ratios = []
    for r in READ_SIZES:
        name = f"aclprof batch_callback R={r}"
        ratios.append((f"aclprof R={r} / pyACL N=10", *ratio(name, "pyACL pattern N=10")))
        ratios.append((f"aclprof R={r} / pyACL N=4096", *ratio(name, "pyACL pattern N=4096")))
        if exe is not None:
            ratios.append((f"aclprof R={r} / C-only R={r}", *ratio(name, f"C-only R={r}")))
    for name in ("aclprof iterator R=4096", "aclprof batches() R=4096"):
        if exe is not None:
            ratios.append((f"{name.replace('aclprof ', '')} / C-only R=4096",
                           *ratio(name, "C-only R=4096")))
    if exe is not None:
        ratios.append(("C-only R=4096 / C read-only", *ratio("C-only R=4096", "C read-only R=4096 (no decode)")))
        ratios.append(("aclprof R=4096 / C read-only", *ratio("aclprof batch_callback R=4096",
                                                            "C read-only R=4096 (no decode)")))
    B.table(("ratio (per round)", "median", "worst"), ratios)
    print()

    print("-- decode step alone (bytes read beforehand; records/s) --")
    drows = []
    for name, values in decode.items():
        drows.append((name, B.med(values), max(values), min(values)))
    B.table(("variant", "median rec/s", "best rec/s", "worst rec/s"), drows)
    dratios = [(f"aclprof decoder R=4096 / {k}",
                B.med(B.per_round_ratio(decode, "aclprof decoder R=4096", k)),
                min(B.per_round_ratio(decode, "aclprof decoder R=4096", k)))
               for k in decode if k.startswith("pyACL")]
    dratios.append(("aclprof decoder R=10 / pyACL get_model_info N=10",
                    B.med(B.per_round_ratio(decode, "aclprof decoder R=10", "pyACL get_model_info N=10")),
                    min(B.per_round_ratio(decode, "aclprof decoder R=10", "pyACL get_model_info N=10"))))
    print()
    B.table(("ratio (per round)", "median", "worst"), dratios)
    print()

    best = "aclprof batch_callback R=4096"
    rate = B.med(samples[best])
    x_py = ratio(best, "pyACL pattern N=4096")[0]
    goals = [
        ("aclprof >= 100x pyACL pattern at 4096-record reads", f"{x_py:,.0f}x",
         B.verdict(x_py >= GOAL_X_PYACL)),
        ("aclprof >= 1 M records/s end to end (R=4096)", f"{rate / 1e6:.2f} M/s",
         B.verdict(rate >= GOAL_RATE)),
    ]
    if exe is not None:
        c_rate = B.med(samples["C-only R=4096"])
        x_c = ratio("C-only R=4096", best)[0]
        goals.append(("aclprof within 3x of C-only (C / aclprof, R=4096)", f"{x_c:.2f}x",
                      B.verdict(x_c <= GOAL_X_C)))
        goals.append(("  C-only reader R=4096", f"{c_rate / 1e6:.2f} M/s", "info"))
    B.table(("goal", "measured", "verdict"), goals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
