"""A simulated inference process for the agent/CLI tests (not a test module).

    python tests/helpers/agent_worker.py --socket PATH [--service S] [--ops fixed|resnet] [--realtime]
                                  [--model-label NAME] [--model-version V] [--trace-dir DIR]
                                  [--unsubscribe drain|drop] [--writer-delay-us US]

Loads one mock model, starts ``aclprof.agent`` and watches it, then obeys commands read
line by line from stdin and answers each with one JSON line on stdout:

    run N       execute the model N times          -> {"emitted": total}
    step N      one step (aclprofGetStepTimestamp) around N executions; its keypoint
                record is routed to this model (as if CANN had stamped its id)
                                                    -> {"emitted": total}
    slow T F    from now on run a copy of the model (same names and labels) whose ops of
                type T take F times as long (the regression detector's and flight
                recorder's tests)               -> {"model": id}
    burst N     execute the model N times, without waiting for the mock's pipe writer
                (with --writer-delay-us, records are still queued after it)
                                                    -> {"emitted": total}
    fail OP N E run the model N times with op OP (a name) failing on the AI Core every E-th
                execution (E=1: every one), then disarm it (issue 24; needs --failures)
                                                    -> {"failed": executions that failed, "emitted": total}
    stats       the agent's and the mock's counters -> {...}
    stop        agent.stop(); final counters; exit  -> {...}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

os.environ.setdefault("ACLPROF_BACKEND", "mock")

#: Fixed durations, no jitter: `top --once --json` can be checked exactly.
FIXED_OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 40_000},
    {"name": "bn1", "type": "BatchNorm", "duration_ns": 5_000},
    {"name": "relu1", "type": "Relu", "duration_ns": 2_000},
    {"name": "conv2", "type": "Conv2D", "duration_ns": 20_000},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 10_000},
]


def _report(agent, mock, extra=None) -> dict:
    st = agent.stats()
    out = {"pid": os.getpid(), "agent": dataclasses.asdict(st), "mock": mock.stats()}
    out.update(extra or {})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--service", default="worker")
    parser.add_argument("--ops", default="fixed", choices=["fixed", "resnet", "transformer"])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--buffer", type=int, default=1 << 17)
    parser.add_argument("--realtime", action="store_true")
    parser.add_argument("--backoff-max", type=float, default=0.3)
    parser.add_argument("--model-label", default=None,
                        help='WATCH label "model" (default: the --ops name; "" sends none)')
    parser.add_argument("--model-version", default=None, help='WATCH label "version"')
    parser.add_argument("--trace-dir", default=None, help="agent.start(trace_dir=...) (aclprof trace)")
    parser.add_argument("--unsubscribe", default="drain", choices=["drain", "drop"],
                        help="mock.set_unsubscribe_policy (drop: as CANN, audit 3 row 1b)")
    parser.add_argument("--writer-delay-us", type=int, default=0, help="mock.set_writer_delay_us")
    parser.add_argument("--failures", action="store_true", help="agent.start(failures=True): report op failures")
    args = parser.parse_args(argv)

    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))

    import aclprof
    from aclprof import agent, mock
    from aclprof.demo import models as _models

    aclprof.use_mock()
    ops = {"fixed": FIXED_OPS, "resnet": _models.resnet_like_ops(),
           "transformer": _models.transformer_like_ops()}[args.ops]
    if args.failures:  # GE describes a failed op only when it has inputs and outputs (mock_acl/README.md)
        ops = [{**op, "inputs": [{"dtype": 1, "format": 2, "shape": [8, 64]}],
                "outputs": [{"dtype": 1, "format": 2, "shape": [8, 64]}]} for op in ops]
    model = mock.load_model(ops, device=args.device, seed=1)
    mock.set_realtime(args.realtime)
    mock.set_unsubscribe_policy(args.unsubscribe)
    mock.set_writer_delay_us(args.writer_delay_us)
    agent.start(args.socket, service=args.service, labels={"test": "1"}, buffer_records=args.buffer,
                backoff_max=args.backoff_max, trace_dir=args.trace_dir, failures=args.failures)
    labels = {"model": args.ops if args.model_label is None else args.model_label}
    if not labels["model"]:
        del labels["model"]
    if args.model_version is not None:
        labels["version"] = args.model_version
    agent.watch(model, labels=labels, device=args.device)
    print(json.dumps({"ready": True, "model": model, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            mock.execute(model, int(cmd[1]))
            mock.wait_writer_idle()
            print(json.dumps({"emitted": mock.stats()["recordsEmitted"]}), flush=True)
        elif cmd[0] == "burst":
            mock.execute(model, int(cmd[1]))
            print(json.dumps({"emitted": mock.stats()["recordsEmitted"]}), flush=True)
        elif cmd[0] == "step":
            mock.set_step_keypoints(True, model)
            step = aclprof.StepInfo()
            step.start()
            mock.execute(model, int(cmd[1]))
            step.end()
            mock.wait_writer_idle()
            print(json.dumps({"emitted": mock.stats()["recordsEmitted"]}), flush=True)
        elif cmd[0] == "slow":
            slowed = [dict(op, duration_ns=int(op["duration_ns"] * float(cmd[2])) if op["type"] == cmd[1]
                           else op["duration_ns"]) for op in ops]
            model = mock.load_model(slowed, device=args.device, seed=1)
            agent.watch(model, labels=labels, device=args.device)
            print(json.dumps({"model": model}), flush=True)
        elif cmd[0] == "fail":
            from aclprof.binding.errors import AclError

            mock.inject_op_failure(model, cmd[1], every=int(cmd[3]))
            failed = 0
            for _ in range(int(cmd[2])):
                try:
                    mock.execute(model)
                except AclError:
                    failed += 1
            mock.clear_op_failure(model)
            mock.wait_writer_idle()
            print(json.dumps({"failed": failed, "emitted": mock.stats()["recordsEmitted"]}), flush=True)
        elif cmd[0] == "stats":
            print(json.dumps(_report(agent, mock)), flush=True)
        elif cmd[0] == "stop":
            timeout = float(cmd[1]) if len(cmd) > 1 else 5.0
            agent.stop(timeout)
            print(json.dumps(_report(agent, mock)), flush=True)
            return 0
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
