"""Shutdown latency: ``Subscription.close()`` until the reader is joined and every record
delivered.

    python tests/bench/bench_shutdown.py [--quick] [--closes N]

Two cases, alternating close by close:

* ``idle``: the subscription's records (one execution of a 200-op model) were all
  delivered before close() is called, so the pipe is idle: close() unsubscribes (the mock
  flushes nothing and closes the write end), the reader sees EOF and is joined.
* ``in flight``: close() is called right after executing the model N times, so records
  are still in the mock's queue, in its writer, in the pipe and in the reader: close()
  must get every one of them delivered before it returns (checked after every close).

Also reported: the time of ``aclprof.subscribe()`` itself (pipe, config, subscribe, thread
start), and the same close latency for the pyACL sample's shutdown through aclprof.compat
(model_unsubscribe + stop_thread, idle pipe) as a reference.

Reports median, p99 and max over all closes. The benchmark waits for delivery with an
event set by the callback, never with a fixed sleep.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

GOAL_IDLE_MS = 20.0


def make_ops(n: int = 200) -> list[dict]:
    return [{"name": f"layer{i // 16}/attention/MatMul_{i % 16}", "type": "MatMulV2",
             "duration_ns": 20_000} for i in range(n)]


class Counter:
    def __init__(self, target: int):
        self.n = 0
        self.target = target
        self.done = threading.Event()

    def __call__(self, batch) -> None:
        self.n += len(batch)
        if self.n >= self.target:
            self.done.set()


def close_idle(aclprof, model_id: int, ops: int, out: dict) -> float:
    mock = aclprof.mock
    counter = Counter(ops)
    t0 = time.perf_counter()
    sub = aclprof.subscribe(model_id, batch_callback=counter)
    out.setdefault("subscribe", []).append((time.perf_counter() - t0) * 1e3)
    mock.execute(model_id, 1)
    if not counter.done.wait(30):
        raise RuntimeError("records were not delivered within 30 s")
    t0 = time.perf_counter()
    sub.close()
    ms = (time.perf_counter() - t0) * 1e3
    _check(sub, ops, counter.n, "idle")
    return ms


def close_in_flight(aclprof, model_id: int, ops: int, iterations: int, out: dict) -> float:
    mock = aclprof.mock
    counter = Counter(ops * iterations)
    sub = aclprof.subscribe(model_id, batch_callback=counter)
    mock.execute(model_id, iterations)
    pending = ops * iterations - counter.n
    t0 = time.perf_counter()
    sub.close()
    ms = (time.perf_counter() - t0) * 1e3
    out.setdefault("pending", []).append(pending)
    _check(sub, ops * iterations, counter.n, "in flight")
    return ms


def close_pyacl(aclprof, model_id: int, ops: int) -> float:
    """The pyACL sample's shutdown: model_unsubscribe, then stop_thread (join), idle pipe."""
    from aclprof.compat import acl

    r, w = os.pipe()
    cfg = acl.prof.create_subscribe_config(1, 0xFF, w)
    assert acl.prof.model_subscribe(model_id, cfg) == 0
    done = threading.Event()
    count = [0]

    def reader(args):
        fd, _ = args
        size, _ = acl.prof.get_op_desc_size()
        while True:
            data = os.read(fd, size * 10)
            if not data:
                break
            ptr = acl.util.bytes_to_ptr(data)
            n, _ = acl.prof.get_op_num(ptr, len(data))
            for i in range(n):
                acl.prof.get_op_type(ptr, len(data), i, 65)
                acl.prof.get_op_name(ptr, len(data), i, 275)
            count[0] += n
            if count[0] >= ops:
                done.set()
    tid, _ = acl.util.start_thread(reader, [r, None])
    aclprof.mock.execute(model_id, 1)
    if not done.wait(30):
        raise RuntimeError("pyACL reader did not get the records within 30 s")
    t0 = time.perf_counter()
    acl.prof.model_unsubscribe(model_id)
    acl.util.stop_thread(tid)
    ms = (time.perf_counter() - t0) * 1e3
    os.close(r)
    acl.prof.destroy_subscribe_config(cfg)
    return ms


def _check(sub, expected: int, got: int, what: str) -> None:
    if got != expected or sub.stats.dropped or not sub.closed:
        raise RuntimeError(f"{what}: delivered {got} of {expected} records "
                           f"(dropped {sub.stats.dropped}) after close()")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 closes per case instead of 200")
    parser.add_argument("--closes", type=int, default=None)
    parser.add_argument("--in-flight-runs", type=int, default=20,
                        help="model executions (x200 records) before an in-flight close")
    args = parser.parse_args(argv)
    closes = args.closes or (50 if args.quick else 200)

    aclprof = B.use_mock()
    import aclprof.mock

    ops = make_ops()
    aclprof.mock.set_realtime(False)
    model_id = aclprof.mock.load_model(ops)
    n_flight = args.in_flight_runs * len(ops)
    B.header(f"shutdown latency ({closes} closes per case, interleaved; in flight: "
             f"{n_flight:,} records emitted just before close)", args.quick)
    extra: dict[str, list[float]] = {}
    try:
        close_idle(aclprof, model_id, len(ops), {})  # warm-up
        samples = B.interleaved({
            "idle pipe": lambda: close_idle(aclprof, model_id, len(ops), extra),
            "records in flight": lambda: close_in_flight(aclprof, model_id, len(ops),
                                                         args.in_flight_runs, extra),
            "pyACL sample shutdown (idle)": lambda: close_pyacl(aclprof, model_id, len(ops)),
        }, closes)
    finally:
        aclprof.mock.unload(model_id)

    rows = []
    for name, values in [*samples.items(), ("aclprof.subscribe() itself", extra.get("subscribe", []))]:
        rows.append((name, B.med(values), B.pct(values, 99), max(values), min(values),
                     len(values)))
    B.table(("close() latency, ms", "median", "p99", "max", "min", "n"), rows)
    pending = extra.get("pending", [])
    if pending:
        print(f"\nrecords not yet delivered when close() was called (in flight): median "
              f"{B.med(pending):,.0f}, max {max(pending):,}; all delivered after every close")
    print()
    idle = samples["idle pipe"]
    B.table(("goal", "measured", "verdict"), [
        ("close() <= 20 ms with an idle pipe (p99)", f"{B.pct(idle, 99):.2f} ms "
         f"(median {B.med(idle):.2f}, max {max(idle):.2f})",
         B.verdict(B.pct(idle, 99) <= GOAL_IDLE_MS)),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
