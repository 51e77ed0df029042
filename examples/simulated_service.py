"""A simulated inference service of your own, streaming its op records to aclprofd.

It runs a model on aclprof's bundled mock of libascendcl, in (simulated) real time at a
steady request rate, with the aclprof agent streaming every op record to the daemon, so
that ``aclprof top``, ``tail``, ``status``, ``export`` and Prometheus show it as they would
show a real service on an NPU. Edit ``OPS`` (or pass ``--ops FILE.json``) to model yours.

    aclprofd &                                          # a daemon (see the README)
    python examples/simulated_service.py --service ranker --rate 100
    aclprof top --service ranker                        # in another terminal

It uses the public API only: ``aclprof.use_mock``, ``aclprof.mock.load_model``,
``set_realtime`` and ``execute`` stand in for ``aclmdlLoadFromFile`` / ``aclmdlExecute``;
``aclprof.agent.start``, ``watch`` and ``stop`` are what a real service calls. It runs until
Ctrl-C / SIGTERM or ``--duration``, then stops the agent (flushing what it holds) and prints
one JSON line: inferences, records the mock emitted, and the agent's sent / dropped counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

# An op is {"name", "type", "duration_ns"} and optionally "jitter" (ns, uniform +/-).
# A small CNN: ~0.3 ms of device time per inference.
OPS: list[dict[str, Any]] = [
    {"name": "stem/conv", "type": "Conv2D", "duration_ns": 40_000, "jitter": 4_000},
    *[op for i in range(8) for op in (
        {"name": f"block{i}/conv", "type": "Conv2D", "duration_ns": 25_000, "jitter": 2_500},
        {"name": f"block{i}/bn", "type": "BatchNorm", "duration_ns": 4_000, "jitter": 400},
        {"name": f"block{i}/relu", "type": "Relu", "duration_ns": 1_500, "jitter": 150},
    )],
    {"name": "head/pool", "type": "AvgPool", "duration_ns": 6_000, "jitter": 600},
    {"name": "head/fc", "type": "MatMulV2", "duration_ns": 12_000, "jitter": 1_200},
]


def _non_negative(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value >= 0:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value"
    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulated_service.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", help="the daemon's socket (default: ACLPROF_SOCKET, else the daemon's default)")
    p.add_argument("--service", default="simulated", help="the service name shown by aclprof (default simulated)")
    p.add_argument("--model-label", default="simulated-cnn", help="the model label (default simulated-cnn)")
    p.add_argument("--device", type=_non_negative(int), default=0, help="mock device id (default 0)")
    p.add_argument("--rate", type=_non_negative(float), default=100.0,
                   help="inferences per second (default 100; 0: back to back)")
    p.add_argument("--duration", type=_non_negative(float), default=0.0,
                   help="seconds to run (default 0: until stopped)")
    p.add_argument("--ops", metavar="FILE.json", help="the model's ops: a JSON list like OPS in this file")
    return p


def _load_ops(parser: argparse.ArgumentParser, path: str | None) -> list[dict[str, Any]]:
    """OPS, or the list in ``path``; a file that cannot be used is a usage error (exit 2)."""
    if path is None:
        return OPS
    try:
        with open(path, encoding="utf-8") as f:
            ops = json.load(f)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read --ops {path}: {exc}")
    if not isinstance(ops, list) or not ops or not all(isinstance(op, dict) for op in ops):
        parser.error(f"--ops {path}: expected a non-empty JSON list of op objects")
    return ops


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    ops = _load_ops(parser, args.ops)

    import aclprof
    from aclprof import agent, mock

    aclprof.use_mock()  # before the first call: the simulated device
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        model = mock.load_model(ops, device=args.device)
    except (TypeError, ValueError) as exc:  # an op the mock cannot take: the message says which
        parser.error(f"--ops: {exc}")
    mock.set_realtime(True)  # execute() takes the ops' durations, like a device would
    agent.start(args.socket, service=args.service)  # no daemon yet: not an error, it reconnects
    inferences = 0
    try:
        agent.watch(model, labels={"model": args.model_label}, device=args.device)
        period = 1.0 / args.rate if args.rate > 0 else 0.0
        start = time.monotonic()
        while not stop.is_set():
            if args.duration and time.monotonic() - start >= args.duration:
                break
            mock.execute(model, 1)
            inferences += 1
            if period:  # keep a steady rate: wait for the next request's slot
                stop.wait(max(0.0, start + inferences * period - time.monotonic()))
    finally:
        final = agent.stop(timeout=3.0)  # flushes; records it could not send are counted
        mock.wait_writer_idle()
        mock.unload(model)
    out = {"service": args.service, "pid": os.getpid(), "inferences": inferences,
           "emitted": mock.stats()["recordsEmitted"],
           "sent": final.records_sent if final else 0,
           "dropped": (final.dropped_buffer + final.dropped_subscription + final.dropped_unread) if final else 0}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
