"""A simulated inference service for ``aclprof demo`` (and the benchmarks): runs a mock
model in (simulated) real time at a steady request rate, with the aclprof agent streaming
its op records to the daemon.

    python -m aclprof.demo.service --socket S --model resnet --service resnet50 [--rate 200]

It runs until SIGTERM/SIGINT, end of stdin, or ``--duration``; then stops the agent and
prints one JSON line with its counters (mock emitted, agent sent/dropped).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import signal
import sys
import time
from types import FrameType

os.environ.setdefault("ACLPROF_BACKEND", "mock")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclprof.demo.service")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--model", choices=("resnet", "transformer"), default="resnet")
    parser.add_argument("--service", default=None)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--rate", type=float, default=200.0, help="inferences per second (0: back to back)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds (0: until stopped)")
    parser.add_argument("--watch-stdin", action="store_true", help="stop at end of stdin (parent gone)")
    parser.add_argument("--requests", action="store_true",
                        help="mark each inference as a request (aclprof.request); every 10th is slow: it also "
                             "runs a re-ranking model three times (issue 25: the bills show which ops)")
    args = parser.parse_args(argv)

    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr),
                        wrapper_class=structlog.make_filtering_bound_logger(30))

    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    import aclprof
    from aclprof import agent, mock
    from aclprof.demo import models as _models

    aclprof.use_mock()
    model = mock.load_model(_models.MODELS[args.model](), device=args.device, seed=os.getpid())
    mock.set_realtime(True)
    agent.start(args.socket, service=args.service or args.model, labels={"demo": "1"})
    agent.watch(model, labels={"model": args.model}, device=args.device)
    rerank = None
    if args.requests:
        mock.set_stamp_thread(True)  # records carry the executing thread, as CANN's do
        rerank = mock.load_model(_models.rerank_ops(), device=args.device, seed=os.getpid() + 1)
        agent.watch(rerank, labels={"model": "rerank"}, device=args.device)
    start = time.monotonic()
    period = 1.0 / args.rate if args.rate > 0 else 0.0
    i = 0
    while not stopping:
        now = time.monotonic()
        if args.duration and now - start >= args.duration:
            break
        if args.watch_stdin:
            ready, _, _ = select.select([sys.stdin], [], [], 0)
            if ready and not sys.stdin.buffer.read(1):  # EOF: the demo closed our stdin
                break
        if rerank is None:
            mock.execute(model, 1)
        else:
            slow = i % 10 == 9
            with aclprof.request(f"{args.service or args.model}-{i}", kind="slow" if slow else "fast"):
                mock.execute(model, 1)
                if slow:
                    mock.execute(rerank, 3)
        i += 1
        if period:
            delay = start + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    final = agent.stop(timeout=3.0)
    mock.wait_writer_idle()
    out = {"pid": os.getpid(), "service": args.service or args.model, "inferences": i,
           "emitted": mock.stats()["recordsEmitted"], "agent": dataclasses.asdict(final) if final else None}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
