"""`aclprof fleet` on a synthetic fleet: one refresh from the raw histograms against one from
the recording rules (``--rules``), side by side, on a real Prometheus server.

    python tests/bench/bench_fleet.py [--quick] [--hosts N] [--rounds R]

A fake exporter on 127.0.0.1 serves the op histograms of N hosts as aclprofd does (label
``host``; 2 devices, 30 op types each): `aclprofd_op_duration_seconds` per device (28
power-of-two buckets) and `aclprofd_op_duration_fine_seconds` with the devices summed (217
buckets, 8 per power of two: what the fleet view reads since issue 23); counts grow
linearly, 100 calls/s per device series; host 0 three times slower), scraped every 2 s
by a Prometheus started like the tests' (tests/helpers/prometheus.py) with
daemon/prometheus/recording.rules.yml loaded. Once the rules cover every host, the two
variants run interleaved, in this process (no interpreter start-up): wall time of
`Fleet.fetch()` and reply bytes. Prints medians and the per-round ratio raw / rules.
"""

from __future__ import annotations

import argparse
import http.server
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _benchlib as B
from helpers.prometheus import PROMETHEUS, RULES_DIR, SKIP_REASON, Prometheus

from aclprof.cli.fleet.prom import PromClient
from aclprof.cli.fleet.view import Fleet

OPS = 30
DEVICES = 2
EXPONENTS = range(7, 35)  # 2**7 .. 2**34 ns, as aclprofd


FINE_EIGHTHS = range(56, 273)  # 2**(j/8) ns, as aclprofd's fine histogram


def exposition(hosts: int, t: float) -> bytes:
    """The exporter's text at ``t`` seconds after start."""
    out = ["# TYPE aclprofd_op_duration_seconds histogram"]
    for h in range(hosts):
        for d in range(DEVICES):
            for o in range(OPS):
                k = 14 + o % 8 + (1 if h == 0 and o == 0 else 0)  # op o lives in bucket 2**k ns
                n = 100.0 * t
                lab = f'host="h{h:04d}",service="llm",device="{d}",model="m@1",op_type="Op{o:02d}"'
                for e in EXPONENTS:
                    le = repr(2.0**e * 1e-9)
                    v = 0.0 if e < k else (0.5 * n if e == k else n)
                    out.append(f'aclprofd_op_duration_seconds_bucket{{{lab},le="{le}"}} {v}')
                out.append(f'aclprofd_op_duration_seconds_bucket{{{lab},le="+Inf"}} {n}')
                out.append(f"aclprofd_op_duration_seconds_count{{{lab}}} {n}")
                out.append(f"aclprofd_op_duration_seconds_sum{{{lab}}} {n * 2.0**k * 1e-9}")
    out.append("# TYPE aclprofd_op_duration_fine_seconds histogram")
    for h in range(hosts):
        for o in range(OPS):
            k = 14 + o % 8 + (1 if h == 0 and o == 0 else 0)
            n = 100.0 * t * DEVICES
            lab = f'host="h{h:04d}",service="llm",model="m@1",op_type="Op{o:02d}"'
            for j in FINE_EIGHTHS:
                le = repr(2.0 ** (j / 8) * 1e-9)
                v = 0.0 if j < 8 * k - 8 else (n if j >= 8 * k else n * (j - 8 * k + 9) / 9)
                out.append(f'aclprofd_op_duration_fine_seconds_bucket{{{lab},le="{le}"}} {v}')
            out.append(f'aclprofd_op_duration_fine_seconds_bucket{{{lab},le="+Inf"}} {n}')
            out.append(f"aclprofd_op_duration_fine_seconds_count{{{lab}}} {n}")
            out.append(f"aclprofd_op_duration_fine_seconds_sum{{{lab}}} {n * 2.0**k * 1e-9}")
    return ("\n".join(out) + "\n").encode()


def exporter(hosts: int) -> tuple[http.server.ThreadingHTTPServer, str]:
    t0 = time.monotonic()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(hosts, time.monotonic() - t0 + 1)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"127.0.0.1:{srv.server_address[1]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10 hosts, 5 rounds")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    if PROMETHEUS is None:
        print(f"skipped: {SKIP_REASON}")
        return 0
    hosts, rounds = (10, 5) if args.quick else (args.hosts, args.rounds)
    series = hosts * (DEVICES * OPS * 31 + OPS * 220)
    B.header(f"aclprof fleet: raw histograms vs recording rules, {hosts} hosts ({series:,} raw series)", args.quick)
    srv, target = exporter(hosts)
    prom = Prometheus([target], [RULES_DIR / "recording.rules.yml"], interval="2s")
    try:
        prom.start()
        # rate(...[1m]) needs two scrapes; the rules one evaluation after that
        want = hosts * OPS
        deadline = time.monotonic() + 120
        while len(prom.query("host_service_op_type:aclprofd_op_duration_seconds:p99_1m > 0")) < want:
            assert time.monotonic() < deadline, "recording rules never covered every host"
            time.sleep(0.5)
        received = {"n": 0}

        class Counting(PromClient):
            def _get(self, path: str, shared_deadline: float | None = None) -> tuple[int, bytes]:
                status, body = super()._get(path, shared_deadline)
                received["n"] += len(body)
                return status, body

        client = Counting(prom.url, timeout=60, max_bytes=1 << 30)
        nbytes: dict[str, int] = {}

        def measure(rules: bool) -> float:
            fleet = Fleet(client, "1m", rules=rules)
            received["n"] = 0
            t = time.perf_counter()
            rows = fleet.fetch()
            took = time.perf_counter() - t
            slow = [(h.host, r.op_type) for r in rows for h in r.outliers]
            assert len(rows) == OPS and slow == [("h0000", "Op00")], slow
            nbytes["rules" if rules else "raw"] = received["n"]
            return took * 1e3

        samples = B.interleaved({"raw": lambda: measure(False), "rules": lambda: measure(True)}, rounds)
        B.table(["source", "median ms/refresh", "min ms", "reply bytes"],
                [[name, B.med(v), min(v), nbytes[name]] for name, v in samples.items()])
        ratio = B.per_round_ratio(samples, "raw", "rules")
        print(f"\nraw / rules per round: median {B.med(ratio):.2f}x (min {min(ratio):.2f}x, max {max(ratio):.2f}x); "
              f"both flag exactly h0000's Op00")
    finally:
        prom.cleanup()
        srv.shutdown()
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
