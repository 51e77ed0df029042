"""A simulated inference service for the fleet tests, run as a script (not imported):

    python tests/helpers/fleetservice.py --socket PATH [--service S] [--rate N]
                                         [--slow-type T --slow-factor F]

One mock model (four op types, fixed durations with jitter; ``--slow-type`` multiplies one
type's durations by ``--slow-factor``), streamed to the daemon at ``PATH`` by
``aclprof.agent``: ``--rate`` model executions per second, in ticks of 50 ms, until stdin
is closed (then agent.stop() and exit 0). Prints one JSON line when ready.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys

os.environ.setdefault("ACLPROF_BACKEND", "mock")

#: (name, type, duration ns, jitter ns): durations inside one power-of-two bucket each
OPS = [("fc1", "MatMul", 90_000, 20_000), ("conv1", "Conv2D", 40_000, 8_000),
       ("relu1", "Relu", 3_000, 1_000), ("softmax", "Softmax", 20_000, 4_000)]
TICK_S = 0.05


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--service", default="llm")
    p.add_argument("--rate", type=int, default=200, help="model executions per second")
    p.add_argument("--slow-type", default=None)
    p.add_argument("--slow-factor", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))

    import aclprof
    from aclprof import agent, mock

    aclprof.use_mock()
    ops = []
    for name, typ, dur, jit in OPS:
        f = args.slow_factor if typ == args.slow_type else 1.0
        ops.append({"name": name, "type": typ, "duration_ns": int(dur * f), "jitter": int(jit * f)})
    model = mock.load_model(ops, seed=args.seed)
    agent.start(args.socket, service=args.service)
    agent.watch(model, labels={"model": "fleetnet", "version": "1"})
    print(json.dumps({"ready": True, "pid": os.getpid(), "model": model}), flush=True)
    per_tick = max(1, round(args.rate * TICK_S))
    try:
        while True:
            mock.execute(model, per_tick)
            ready, _, _ = select.select([sys.stdin], [], [], TICK_S)
            if ready and not sys.stdin.readline():
                break  # stdin closed: stop
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
