"""Flight recorder cost: how long the worker takes to write a capture of N records, and what
the daemon's loop feels meanwhile (STATUS round trips while the capture is written, against
the same with no capture).

    python tests/bench/bench_capture.py [--quick] [--records N]

An in-process daemon (tests/helpers/daemons.py ``InProcess``, 1 GiB capture bound) gets N
records of one service from an agent connection (2,000-record batches of a 4-type model)
within its window; a detector flag is published for that service (the bench controls when;
the detector's own ticks are paused), and the capture is written by the worker thread
while this process sends STATUS requests back to back. Reports the write time, records/s,
the capture's size and bytes/record, and the STATUS p50/p99/max with and without a capture
being written, side by side (ratio).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from helpers.daemons import Client, InProcess, agent
from helpers.records import make_records

from aclprof.protocol.wire import Kind


def _status_latencies(c: Client, until: callable, min_n: int = 50) -> np.ndarray:  # type: ignore[valid-type]
    out = []
    while not until() or len(out) < min_n:
        t0 = time.perf_counter()
        c.request(Kind.STATUS)
        out.append(time.perf_counter() - t0)
    return np.asarray(out) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--quick", action="store_true", help="20,000 records")
    args = p.parse_args()
    n = 20_000 if args.quick else args.records
    from aclprofd.detector.engine import DetectorView

    with InProcess(capture_max_bytes="1GiB", capture_before_s="1h", capture_after_s="0.5s",
                   capture_min_interval_s="0") as d:
        d.daemon.detection.tick = lambda mono: None  # type: ignore[method-assign]
        a = agent(d.socket, service="svc", names={1: "Conv2D", 2: "MatMul", 3: "Relu", 4: "Add",
                                                   5: "conv1", 6: "fc1", 7: "relu1", 8: "add1"})
        for i in range(0, n, 2000):
            a.send_batch(make_records(min(2000, n - i), types=(1, 2, 3, 4), names=(5, 6, 7, 8)))
        c = Client(d.socket)
        while c.request(Kind.STATUS)["records_total"] < n:
            time.sleep(0.05)
        t_idle = time.monotonic() + 2.0
        idle = _status_latencies(c, lambda: time.monotonic() > t_idle)
        t = time.time()
        flag = {"service": "svc", "model": "1", "op_type": "MatMul", "quantile": "p99", "shift": 1.5,
                "lower": 1.3, "upper": 1.7, "since_ts": t}
        d.daemon.detection.detector.published = DetectorView(ts=t, flags=(flag,))
        caps = d.daemon.captures
        while not caps.busy and caps.made == 0:
            time.sleep(0.001)
        started = time.monotonic()
        busy = _status_latencies(c, lambda: caps.made + caps.errors > 0, min_n=1)
        took = time.monotonic() - started
        st = c.request(Kind.STATUS)["captures"]
        c.close()
        a.close()
    item = st["newest"]
    print(f"capture of {item['records']:,} records ({n:,} sent): written in {took:.2f} s "
          f"({item['records'] / took:,.0f} records/s), {item['bytes'] / 2**20:.1f} MiB "
          f"({item['bytes'] / item['records']:.0f} bytes/record), truncated {item['truncated']}")
    print(f"{'STATUS round trip (ms)':28} {'idle':>8} {'capture':>8} {'ratio':>7}")
    for name, f in (("p50", lambda x: np.percentile(x, 50)), ("p99", lambda x: np.percentile(x, 99)),
                    ("max", np.max)):
        print(f"{name:28} {f(idle):8.2f} {f(busy):8.2f} {f(busy) / f(idle):7.1f}x")
    print(f"({len(idle)} requests idle, {len(busy)} while writing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
