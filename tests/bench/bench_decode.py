"""The subscription reader's decode cost per op record, in CPU instructions (callgrind).

    python tests/bench/bench_decode.py [--quick] [--records N] [--batch R] [--model agent|subscribe|mixed]
                                       [--baseline OTHER_VENV/bin/python]

What runs: the model(s) are subscribed to a pipe of our own; each iteration executes them
once (realtime off), waits until the mock's writer is idle, and reads the pipe R records at
a time (R = 200 by default: one 2 ms batch at 100 k ops/s), each chunk through
``aclprof_read_ops`` (``NameTable.read_ops``: poll, read, check each signature, one Type
and one Name Get per record on a one-record slice, intern, write the rows), which is what
the reader thread runs per wake-up. The first iteration is decoded before the count starts
(``decode_ops``, not counted), so the interner is warm, as in a long-running reader; the
library's name table then holds at most one iteration's entries, as a reader that keeps up.

How it is counted: the decoding runs in a child interpreter under
``valgrind --tool=callgrind --toggle-collect=aclprof_read_ops``, so only instructions
executed inside ``aclprof_read_ops`` (and what it calls) are counted; instruction counts
are deterministic, unlike time on this shared 2-core machine. ``library`` is the inclusive
count of the mock's four getters (``aclprofGetOpType``/``Name`` and their ``Len``
forms: CheckData's CRC-32C of the record, the side table's lookup and erasure, its
mutex): the floor a reader cannot remove, the API being one-shot Get calls on
one-record slices. ``ours`` is the rest (our CRC check, interning, row writing, the
read syscalls' user-space side). The counted iterations are two halves, dumped apart
(``A`` and ``A again``: the same code on the same kind of records, the A/A row; the child
calls ``aclprof_interner_cut`` between them, callgrind's dump marker). The child also
prints a digest of every row's columns that do not depend on time (ids, model, flag,
device, keypoint) and of every interned name; ``--baseline`` measures another
interpreter's aclprof first (a venv of main) and says whether it decoded the same.

Models: ``agent`` is ``bench_agent_overhead.py``'s (1000 ops, names like
``layer3/attention/MatMul_7``); ``subscribe`` is ``bench_subscribe.py``'s (200 ops of a
12-layer transformer); ``mixed`` runs both models in turn, one iteration of each, into
the same pipe and interner (what one agent watching two models sees).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
LIBRARY_FUNCTIONS = ("aclprofGetOpType", "aclprofGetOpName", "aclprofGetOpTypeLen", "aclprofGetOpNameLen")
TOGGLE = "aclprof_read_ops"
MARKER = "aclprof_interner_cut"  # the child calls it once, between its two halves


def _ops(model: str) -> list[dict]:
    if model == "agent":
        from bench_distortion import make_ops
        return make_ops(1000, 10_000)
    from bench_subscribe import model_ops
    return model_ops()


def _stable(rows) -> bytes:
    """The row columns that do not depend on when the run happened (times do)."""
    return b"".join(rows[c].tobytes() for c in ("model_id", "op_name", "op_type", "flag", "device_id", "keypoint"))


def inner(args: argparse.Namespace) -> int:
    """The measured child: subscribe the models to a pipe of our own, then per iteration
    run them (realtime off) and decode what they wrote from that pipe; print a digest."""
    aclprof = B.use_mock()
    import numpy as np

    import aclprof.mock as mock
    from aclprof.binding import lowlevel
    from aclprof.binding.enums import AicoreMetrics
    from aclprof.binding.layout import OP_ROW_DTYPE
    from aclprof.binding.opdecode import NameTable

    mock.set_realtime(False)
    models = ["agent", "subscribe"] if args.model == "mixed" else [args.model]
    ids = [mock.load_model(_ops(m), seed=1) for m in models]
    per_iteration = sum(len(_ops(m)) for m in models)
    half = max(1, args.records // per_iteration // 2)
    iterations = 1 + 2 * half  # the warm-up, then the two halves (A, A again)
    size = 80
    r, w = os.pipe()
    fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)  # one iteration of every model fits
    cell = lowlevel.FdCell(w)
    config = lowlevel.create_subscribe_config(True, AicoreMetrics.NONE, cell)
    for m in ids:
        lowlevel.model_subscribe(m, config)
    table = NameTable(1 << 20)
    counts = table.new_counts()
    out = np.zeros(max(args.batch, per_iteration), OP_ROW_DTYPE)
    buffer = bytearray(args.batch * size)
    digest = hashlib.sha256()
    total = 0
    counted = [0, 0]
    for it in range(iterations):
        if it == 1 + half:
            _ = table.cut  # the marker: callgrind dumps the first half's counts after this call
        for m in ids:
            mock.execute(m, 1)
        mock.wait_writer_idle(600)
        expect = per_iteration * size
        if it == 0:  # the warm-up, not counted (decode_ops is not the toggled function)
            data = bytearray()
            while len(data) < expect:
                data += os.read(r, expect - len(data))
            rows = table.decode_ops(data, per_iteration, size, True, 0, out, counts)
            digest.update(_stable(out[:rows]))
            total += per_iteration
            continue
        while expect:
            n, _flags = table.read_ops(r, -1, buffer, 0, min(len(buffer), expect), size, 0, True, 0,
                                       out, counts)
            assert n % size == 0 and counts.left == 0, (n, counts.left)
            digest.update(_stable(out[:counts.rows]))
            expect -= n
            counted[it > half] += n // size
        total += per_iteration
    for m in ids:
        lowlevel.model_unsubscribe(m)  # the last one closes w
    os.close(r)
    config.close()
    for name in table.entries(0):
        digest.update(len(name).to_bytes(4, "little") + name)
    print(f"records={total} counted={counted[0]},{counted[1]} corrupt={counts.corrupt} missing={counts.missing_names} "
          f"keypoints={counts.keypoints} names={len(table)} predicted={getattr(table, 'predicted', 0)} digest={digest.hexdigest()[:16]}")
    for m in ids:
        mock.unload(m)
    del aclprof
    return 0


def _inclusive(out_file: str) -> tuple[int, dict[str, int]]:
    """The toggled function's inclusive Ir (the run's total) and each library getter's."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file],
                          check=True, capture_output=True, text=True).stdout
    total = 0
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?\S*?:?(\w+)\s*(?:\[.*\])?\s*$", line)
        if not m:
            continue
        ir, fn = int(m.group(1).replace(",", "")), m.group(2)
        if fn == TOGGLE:
            total = max(total, ir)
        elif fn in LIBRARY_FUNCTIONS or fn == "table_resize":
            found[fn] = max(found.get(fn, 0), ir)
    return total, found


def measure(args: argparse.Namespace, tmp: str, label: str, python: str) -> list[dict[str, Any]]:
    """One child under callgrind: the two halves' counts per op (``label``, ``label again``)."""
    out_file = os.path.join(tmp, f"callgrind.{label}")
    cmd = ["valgrind", "--tool=callgrind", f"--toggle-collect={TOGGLE}", f"--dump-after={MARKER}",
           f"--callgrind-out-file={out_file}", python, os.path.abspath(__file__), "--inner",
           "--records", str(args.records), "--batch", str(args.batch), "--model", args.model]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("records=")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"{label}: the callgrind child failed (exit {proc.returncode})")
    fields = dict(kv.split("=") for kv in line.split())
    runs = []
    # the marker's dump (the first half) is <file>.1, the end's (the second half) <file>
    for part, name, counted in ((out_file + ".1", label, fields["counted"].split(",")[0]),
                                (out_file, f"{label} again", fields["counted"].split(",")[1])):
        total, lib = _inclusive(part)
        n = int(counted)
        resize = lib.pop("table_resize", 0)  # called by the getters: inside their counts already
        library = sum(lib.values())
        runs.append({"label": name, "fields": {**fields, "counted": counted}, "total": total / n,
                     "library": library / n, "ours": (total - library) / n, "resize": resize / n,
                     "getters": {k: v / n for k, v in lib.items()}})
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records")
    parser.add_argument("--records", type=int, default=None, help="records decoded (default 20000, quick 2000)")
    parser.add_argument("--batch", type=int, default=200, help="records per read_ops call (default 200)")
    parser.add_argument("--model", choices=("agent", "subscribe", "mixed"), default="agent")
    parser.add_argument("--baseline", metavar="PYTHON", default=None,
                        help="also measure the aclprof another interpreter imports (e.g. a venv of main), first, "
                             "and check that it decodes the same rows and names")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.records = args.records or (2_000 if args.quick else 20_000)
    if args.inner:
        return inner(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind (callgrind) is not installed: nothing measured", file=sys.stderr)
        return 0
    B.header(f"reader decode cost per op record (callgrind Ir inside {TOGGLE}, model {args.model}, "
             f"{args.records:,} records, {args.batch} per read)", args.quick)
    tmp = tempfile.mkdtemp(prefix="aclprof-bench-decode-")
    try:
        runs = measure(args, tmp, "baseline", args.baseline) if args.baseline else []
        runs += measure(args, tmp, "A", sys.executable)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for run in runs:
        f = run["fields"]
        rows.append((run["label"], f"{run['total']:.1f}", f"{run['library']:.1f}", f"{run['resize']:.1f}",
                     f"{run['ours']:.1f}",
                     f"{100 * run['library'] / run['total']:.1f}", f["counted"], f["corrupt"], f["missing"],
                     f["names"], f["digest"]))
    B.table(("run", "Ir/op total", "library (mock getters)", "of it table resizes", "ours", "library %", "records counted",
             "corrupt", "missing", "names", "rows+names digest"), rows)
    a, b = runs[-2:]
    print(f"A/A: total {100 * (b['total'] / a['total'] - 1):+.3f} %, ours {100 * (b['ours'] / a['ours'] - 1):+.3f} %")
    if args.baseline:
        base = runs[0]  # its first half, as A is
        same = base["fields"]["digest"] == a["fields"]["digest"]
        print(f"A / baseline: total {a['total'] / base['total']:.3f}x, ours {a['ours'] / base['ours']:.3f}x; "
              f"rows and names {'identical' if same else 'DIFFERENT'}")
    print("library: the floor (one Type and one Name Get per record, each re-checking the record's CRC); "
          "its table resizes come from the bench's bursts (a whole iteration at once, realtime off)")
    print("getters (Ir/op): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(a["getters"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
