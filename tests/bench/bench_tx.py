"""msproftx marker cost: ``aclprof.annotate`` / ``range`` / ``mark`` per call, as ratios.

    python tests/bench/bench_tx.py [--quick] [--iterations N] [--rounds R]

Measures, interleaved in one run (every round runs every variant once, the order rotating),
the cost per enter/exit pair (or per call) of

* with an msproftx session running on the mock
  (``Profiler(tmp, devices=(0,), data_types=ACL_API | MSPROFTX)``, restarted every round so
  that the mock's ``msproftx.jsonl`` never grows past one round):
  ``with aclprof.annotate("m")`` (built each time, as users write it), the same with a
  pre-built annotate object, ``with aclprof.range("m")``, ``aclprof.mark("m")``,
  an ``@aclprof.annotate()``-decorated empty function, against
  ``with contextlib.nullcontext()``, a bare empty function, and the same C calls made
  directly through the raw cffi library with a pre-created stamp
  (``push(stamp); pop()``, ``range_start(stamp, out); range_stop(out[0])``, ``mark(stamp)``);
  and, side by side, the same pre-built context manager and the bare helper calls on
  ``aclprofPush``/``aclprofPop`` instead of ``aclprofRangeStart``/``Stop`` (aclprof does not
  use Push/Pop: the library's stack is process-wide, wrong with several threads; the
  comparison shows what the choice costs);
* with no session: the same markers (cheap no-ops) against nullcontext;
* with ``ACLPROF_TX_DISABLE=1`` (read at import, so in a child interpreter): the same.

If the ``nvtx`` package is importable, ``with nvtx.annotate("m")`` (no tool attached) is
measured too, as a same-machine reference for NVTX's published numbers.

The mock writes every event to a buffered jsonl file; that cost is part of the mock's C
calls and appears equally in the raw-cffi baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

GOAL_ANNOTATE_NS = 1000.0
GOAL_ANNOTATE_X_NULL = 3.0
GOAL_DISABLED_X_NULL = 1.5
NVTX_PUBLISHED = "NVTX published: ~558 ns (@annotate decorator), ~1.14 us (with annotate), 347 ns disabled"


def _timed(loop, n: int):
    def run() -> float:
        t0 = time.perf_counter_ns()
        loop(n)
        return (time.perf_counter_ns() - t0) / n
    return run


# --- loops (module level, so that every variant pays the same global lookups) -------------

def loop_empty(n):
    for _ in itertools.repeat(None, n):
        pass


def loop_nullcontext(n):
    nullcontext = contextlib.nullcontext
    for _ in itertools.repeat(None, n):
        with nullcontext():
            pass


def make_marker_loops(aclprof):
    annotate, range_, mark = aclprof.annotate, aclprof.range, aclprof.mark
    prebuilt = annotate("m")

    def loop_annotate(n):
        for _ in itertools.repeat(None, n):
            with annotate("m"):
                pass

    def loop_annotate_prebuilt(n):
        for _ in itertools.repeat(None, n):
            with prebuilt:
                pass

    def loop_range(n):
        for _ in itertools.repeat(None, n):
            with range_("m"):
                pass

    def loop_mark(n):
        for _ in itertools.repeat(None, n):
            mark("m")

    def bare():
        pass

    @annotate()
    def decorated():
        pass

    def loop_bare(n):
        for _ in itertools.repeat(None, n):
            bare()

    def loop_decorated(n):
        for _ in itertools.repeat(None, n):
            decorated()

    return {
        "nullcontext()": loop_nullcontext,
        "annotate('m')": loop_annotate,
        "annotate, pre-built": loop_annotate_prebuilt,
        "range('m')": loop_range,
        "mark('m')": loop_mark,
        "bare fn()": loop_bare,
        "@annotate() fn()": loop_decorated,
    }


def make_nvtx_loop():
    try:
        import nvtx  # optional: a same-machine reference
    except Exception:
        return None
    annotate = nvtx.annotate

    def loop_nvtx(n):
        for _ in itertools.repeat(None, n):
            with annotate("m"):
                pass
    return loop_nvtx


class _OldAnnotate:
    """``annotate.__enter__/__exit__`` on the helper's aclprofPush/Pop path (pre-built
    object): the same Python as annotate's, around that path instead of its range path."""

    __slots__ = ("_tx", "_key")

    def __init__(self, tx, message):
        self._tx = tx
        self._key = tx._key(message)

    def __enter__(self):
        if self._tx._active:
            rc = self._tx._fastlib.aclprof_tx_push_stamp(*self._key)
            if rc:
                raise RuntimeError(f"aclprofPush: {rc}")
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._tx._active:
            rc = self._tx._fastlib.aclprof_tx_pop_stamp()
            if rc:
                raise RuntimeError(f"aclprofPop: {rc}")


# --- the three parts ------------------------------------------------------------------------

def measure_session(aclprof, n: int, rounds: int) -> dict[str, list[float]]:
    from aclprof import DataType
    from aclprof.binding.loader import get_library

    lib = get_library()
    ffi = lib.ffi
    c_push, c_pop = lib.fn("aclprofPush"), lib.fn("aclprofPop")
    c_mark = lib.fn("aclprofMark")
    c_rstart, c_rstop = lib.fn("aclprofRangeStart"), lib.fn("aclprofRangeStop")
    from aclprof.binding._fast import lib as fast
    state = {"stamp": ffi.NULL}

    def loop_raw_push_pop(n):
        stamp = state["stamp"]
        for _ in itertools.repeat(None, n):
            c_push(stamp)
            c_pop()

    def loop_raw_range(n):
        stamp = state["stamp"]
        out = ffi.new("uint32_t *")
        for _ in itertools.repeat(None, n):
            c_rstart(stamp, out)
            c_rstop(out[0])

    def loop_raw_mark(n):
        stamp = state["stamp"]
        for _ in itertools.repeat(None, n):
            c_mark(stamp)

    def loop_fast_push_pop(n):  # aclprof's compiled helper (stamp cache), no Python around it
        key, push, pop = aclprof.api.markers._key("m"), fast.aclprof_tx_push, fast.aclprof_tx_pop
        for _ in itertools.repeat(None, n):
            push(*key)
            pop()

    def loop_fast_stamp_push_pop(n):  # the same helper on the pre-#3 aclprofPush/Pop path
        key, push, pop = aclprof.api.markers._key("m"), fast.aclprof_tx_push_stamp, fast.aclprof_tx_pop_stamp
        for _ in itertools.repeat(None, n):
            push(*key)
            pop()

    old_annotate = _OldAnnotate(aclprof.api.markers, "m")

    def loop_old_annotate(n):
        for _ in itertools.repeat(None, n):
            with old_annotate:
                pass

    loops = {"empty loop": loop_empty}
    loops.update(make_marker_loops(aclprof))
    loops["raw cffi push+pop"] = loop_raw_push_pop
    loops["raw cffi range start+stop"] = loop_raw_range
    loops["raw cffi mark"] = loop_raw_mark
    loops["_fast push+pop (API mode)"] = loop_fast_push_pop
    loops["_fast push+pop, Push/Pop path"] = loop_fast_stamp_push_pop
    loops["annotate pre-built, Push/Pop path"] = loop_old_annotate
    nvtx_loop = make_nvtx_loop()
    if nvtx_loop is not None:
        loops["nvtx.annotate('m') (no tool)"] = nvtx_loop

    samples: dict[str, list[float]] = {name: [] for name in loops}
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    names = list(loops)
    for r in range(rounds):
        out_dir = tempfile.mkdtemp(prefix="aclprof-bench-tx-", dir=base)
        try:
            with aclprof.Profiler(out_dir, devices=(0,),
                                  data_types=DataType.ACL_API | DataType.MSPROFTX):
                stamp = lib.fn("aclprofCreateStamp")()
                assert stamp != ffi.NULL
                assert lib.fn("aclprofSetStampTraceMessage")(stamp, b"m", 1) == 0
                state["stamp"] = stamp
                # warm up: aclprof creates and caches its stamp for "m" on first use
                for loop in loops.values():
                    loop(1000)
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    samples[name].append(_timed(loops[name], n)())
                lib.fn("aclprofDestroyStamp")(stamp)
                state["stamp"] = ffi.NULL
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
    return samples


def measure_no_session(aclprof, n: int, rounds: int) -> dict[str, list[float]]:
    loops = {"empty loop": loop_empty}
    loops.update(make_marker_loops(aclprof))
    for loop in loops.values():
        loop(1000)
    return B.interleaved({name: _timed(loop, n) for name, loop in loops.items()}, rounds)


def measure_disabled(n: int, rounds: int) -> dict[str, list[float]] | str:
    """Run the no-session loops in a child with ACLPROF_TX_DISABLE=1; returns its samples."""
    env = dict(os.environ, ACLPROF_TX_DISABLE="1", ACLPROF_BACKEND="mock")
    cmd = [sys.executable, os.path.abspath(__file__), "--disabled-child",
           "--iterations", str(n), "--rounds", str(rounds)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return f"child failed ({proc.returncode}): {proc.stderr.strip()[-500:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    samples = out["samples"]
    samples["_identity"] = out["identity"]
    return samples


def _disabled_child(n: int, rounds: int) -> int:
    aclprof = B.use_mock()
    from aclprof.api import markers  # aclprof is lazy: load the submodule this reads
    if not markers.DISABLED:
        print("ACLPROF_TX_DISABLE is not in effect", file=sys.stderr)
        return 1
    def f():
        pass
    identity = aclprof.annotate()(f) is f and aclprof.annotate("m")(f) is f
    print(json.dumps({"samples": measure_no_session(aclprof, n, rounds), "identity": identity}))
    return 0


# --- report ---------------------------------------------------------------------------------

def _rows(samples, baselines: dict[str, str]):
    rows = []
    for name, values in samples.items():
        base = baselines.get(name)
        if base:
            ratios = B.per_round_ratio(samples, name, base)
            ratio = f"{B.med(ratios):.2f}x {base}"
            rmin = min(values) / min(samples[base])
            rmin = f"{rmin:.2f}x"
        else:
            ratio, rmin = "", ""
        rows.append((name, B.med(values), min(values), ratio, rmin))
    return rows


HEAD = ("variant", "median ns", "min ns", "ratio (median of rounds)", "ratio of mins")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (< 20 s)")
    parser.add_argument("--iterations", type=int, default=None, help="loop iterations per sample")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", metavar="PATH", help="also write the raw samples here")
    parser.add_argument("--disabled-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = args.iterations or (30_000 if args.quick else 200_000)
    rounds = args.rounds or (3 if args.quick else 7)
    if args.disabled_child:
        return _disabled_child(n, rounds)

    aclprof = B.use_mock()
    from aclprof.api import markers  # aclprof is lazy: load the submodule this reads
    if markers.DISABLED:  # read at import: measure in a child without it
        env = {k: v for k, v in os.environ.items() if k != "ACLPROF_TX_DISABLE"}
        argv = sys.argv[1:] if argv is None else list(argv)
        return subprocess.run([sys.executable, os.path.abspath(__file__), *argv], env=env).returncode
    B.header(f"msproftx marker cost ({n:,} iterations x {rounds} interleaved rounds; "
             "ns per call or enter/exit pair, loop overhead included)", args.quick)

    session = measure_session(aclprof, n, rounds)
    print("-- with an msproftx session running on the mock --")
    B.table(HEAD, _rows(session, {
        "annotate('m')": "nullcontext()",
        "annotate, pre-built": "nullcontext()",
        "range('m')": "nullcontext()",
        "mark('m')": "nullcontext()",
        "@annotate() fn()": "bare fn()",
        "raw cffi push+pop": "nullcontext()",
        "annotate pre-built, Push/Pop path": "nullcontext()",
        "nvtx.annotate('m') (no tool)": "nullcontext()",
    }))
    print()
    vs_raw = [
        ("annotate('m') / raw cffi push+pop", "annotate('m')", "raw cffi push+pop"),
        ("annotate pre-built / raw cffi push+pop", "annotate, pre-built", "raw cffi push+pop"),
        ("range('m') / raw cffi range start+stop", "range('m')", "raw cffi range start+stop"),
        ("mark('m') / raw cffi mark", "mark('m')", "raw cffi mark"),
        ("@annotate() fn() / raw cffi push+pop", "@annotate() fn()", "raw cffi push+pop"),
        ("_fast push+pop / raw cffi push+pop", "_fast push+pop (API mode)", "raw cffi push+pop"),
        ("_fast push+pop / raw cffi range start+stop", "_fast push+pop (API mode)",
         "raw cffi range start+stop"),
        ("annotate pre-built: ranges / Push/Pop", "annotate, pre-built",
         "annotate pre-built, Push/Pop path"),
        ("_fast push+pop: ranges / Push/Pop", "_fast push+pop (API mode)",
         "_fast push+pop, Push/Pop path"),
    ]
    B.table(("ratio against the raw C calls", "median", "min", "overhead ns (median)"), [
        (label, B.med(B.per_round_ratio(session, a, b)), min(B.per_round_ratio(session, a, b)),
         B.med([x - y for x, y in zip(session[a], session[b])]))
        for label, a, b in vs_raw])
    print()

    idle = measure_no_session(aclprof, n, rounds)
    print("-- no session (markers are no-ops) --")
    no_session_base = {k: "nullcontext()" for k in ("annotate('m')", "annotate, pre-built",
                                                   "range('m')", "mark('m')")}
    no_session_base["@annotate() fn()"] = "bare fn()"
    B.table(HEAD, _rows(idle, no_session_base))
    print()

    disabled = measure_disabled(n, rounds)
    print("-- ACLPROF_TX_DISABLE=1 (child interpreter) --")
    identity = False
    if isinstance(disabled, str):
        print(disabled)
    else:
        identity = bool(disabled.pop("_identity"))
        B.table(HEAD, _rows(disabled, no_session_base))
        print("@annotate() returns the undecorated function itself:", identity)
    print()

    # Goals
    ann = B.med(session["annotate('m')"])
    ann_x = B.med(B.per_round_ratio(session, "annotate('m')", "nullcontext()"))
    pre = B.med(session["annotate, pre-built"])
    pre_x = B.med(B.per_round_ratio(session, "annotate, pre-built", "nullcontext()"))
    rows = [
        ("annotate('m') per pair <= 1000 ns", f"{ann:.0f} ns", B.verdict(ann <= GOAL_ANNOTATE_NS)),
        ("  (pre-built annotate object)", f"{pre:.0f} ns", B.verdict(pre <= GOAL_ANNOTATE_NS)),
        ("annotate('m') <= 3x nullcontext", f"{ann_x:.2f}x", B.verdict(ann_x <= GOAL_ANNOTATE_X_NULL)),
        ("  (pre-built annotate object)", f"{pre_x:.2f}x", B.verdict(pre_x <= GOAL_ANNOTATE_X_NULL)),
    ]
    if not isinstance(disabled, str):
        for name in ("annotate('m')", "annotate, pre-built", "range('m')", "mark('m')"):
            x = B.med(B.per_round_ratio(disabled, name, "nullcontext()"))
            rows.append((f"disabled {name} <= 1.5x nullcontext", f"{x:.2f}x",
                         B.verdict(x <= GOAL_DISABLED_X_NULL)))
        if identity:  # the same function object: any measured difference is noise
            rows.append(("disabled @annotate() fn() <= 1.5x bare fn()", "1.00x (same function)",
                         B.verdict(True)))
        else:
            x = B.med(B.per_round_ratio(disabled, "@annotate() fn()", "bare fn()"))
            rows.append(("disabled @annotate() fn() <= 1.5x bare fn()", f"{x:.2f}x",
                         B.verdict(x <= GOAL_DISABLED_X_NULL)))
    old = B.med(session["annotate pre-built, Push/Pop path"])
    rows.append(("  annotate on the aclprofPush/Pop path (not used), pre-built", f"{old:.0f} ns", "info"))
    if "nvtx.annotate('m') (no tool)" in session:
        x = B.med(B.per_round_ratio(session, "annotate('m')", "nvtx.annotate('m') (no tool)"))
        rows.append(("annotate('m') / nvtx.annotate('m') on this machine", f"{x:.2f}x", "info"))
    B.table(("goal", "measured", "verdict"), rows)
    print(NVTX_PUBLISHED)
    null_ns = B.med(session["nullcontext()"])
    print(f"nullcontext() costs {null_ns:.0f} ns on this machine: compare ratios, not only "
          "absolute numbers, with figures measured elsewhere.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"session": session, "no_session": idle, "disabled": disabled}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
