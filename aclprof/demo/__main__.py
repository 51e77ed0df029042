"""``python -m aclprof.demo``: aclprof's main jobs on the bundled mock, with no setup.

1. A profiling session with msproftx markers, as an inference service would run one (two
   devices, marks, nested annotations, ranges ended on another thread, step timestamps);
   then what the mock wrote into the PROF_* directory, read back and summarised.
2. Operator subscription: a ResNet-like model runs in (simulated) real time while a
   subscription decodes its op records in the background; then per-op-type timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _simulated_service(steps: int) -> None:
    import aclprof

    @aclprof.annotate()
    def preprocess(i: int) -> None:
        time.sleep(0.0005)

    pending: list[aclprof.RangeHandle] = []
    for i in range(steps):
        with aclprof.StepInfo() as step:
            step.start()
            with aclprof.annotate("inference step"):
                preprocess(i)
                with aclprof.annotate("forward"):
                    time.sleep(0.001)
                pending.append(aclprof.range(f"request {i}").start())
            step.end()
        aclprof.mark(f"step {i} done")
    # Requests complete on another thread, as in an async server.
    def finish() -> None:
        for h in pending:
            h.end()

    finisher = threading.Thread(target=finish)
    finisher.start()
    finisher.join()


def _summarise(result_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in
              (result_dir / "host" / "msproftx.jsonl").read_text(encoding="utf-8").splitlines()]
    kinds = Counter(e["kind"] for e in events)
    durations: dict[str, list[float]] = {}
    for e in events:
        if e["kind"] in ("push_pop", "range") and e["end_ns"] >= e["start_ns"]:
            durations.setdefault(e.get("message", e["kind"]), []).append((e["end_ns"] - e["start_ns"]) / 1e3)
    devices = sorted(p.name for p in result_dir.iterdir() if p.name.startswith("device_"))
    return {"events": dict(kinds), "devices": devices, "durations_us": durations}


def _resnet_like_ops() -> list[dict[str, Any]]:
    from aclprof.demo.models import resnet_like_ops

    return resnet_like_ops()


def _subscription_demo(iterations: int) -> None:
    import numpy as np

    import aclprof
    from aclprof import mock
    from aclprof.api.records import OP_DTYPE

    model_id = mock.load_model(_resnet_like_ops(), seed=7)
    mock.set_realtime(True)
    try:
        with aclprof.subscribe(model_id) as sub:
            mock.execute(model_id, iterations)
    finally:
        mock.set_realtime(False)
        mock.unload(model_id)
    batches = list(sub.batches())
    data = np.concatenate([b.data for b in batches]) if batches else np.empty(0, OP_DTYPE)
    names = sub.names
    stats = sub.stats
    print(f"\nsubscription: model {model_id}, {iterations} inferences, {stats.delivered} op records "
          f"({stats.dropped} dropped), read {stats.bytes_read} bytes")
    total = float(data["duration"].sum()) or 1.0
    print("  op type         count   mean(us)    p50(us)    p99(us)   % time")
    by_type: dict[str, np.ndarray] = {}
    for type_id in np.unique(data["op_type"]):
        by_type[names[type_id]] = data["duration"][data["op_type"] == type_id].astype(np.float64)
    for name, d in sorted(by_type.items(), key=lambda kv: -kv[1].sum()):
        print(f"  {name[:14]:<14} {len(d):>6} {d.mean() / 1e3:>10.1f} {np.percentile(d, 50) / 1e3:>10.1f} "
              f"{np.percentile(d, 99) / 1e3:>10.1f} {100 * d.sum() / total:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclprof.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="inference steps to simulate (default 20)")
    parser.add_argument("--iterations", type=int, default=50,
                        help="inferences of the subscribed model (default 50, ~0.7 ms each)")
    parser.add_argument("--output", type=Path, default=None,
                        help="output directory (default: a temporary directory)")
    args = parser.parse_args(argv)

    import aclprof
    from aclprof import DataType

    aclprof.use_mock()
    try:
        info = aclprof.library_info()
    except (aclprof.LibraryNotFoundError, ImportError) as exc:
        print(f"python -m aclprof.demo: {exc}", file=sys.stderr)
        return 1
    print(f"library: {info.name} ({info.path})")
    out = args.output or Path(tempfile.mkdtemp(prefix="aclprof-demo-"))
    with aclprof.Profiler(out, devices=(0, 1),
                          data_types=DataType.ACL_API | DataType.TASK_TIME | DataType.MSPROFTX) as prof:
        _simulated_service(args.steps)
    for result_dir in prof.result_dirs:
        summary = _summarise(result_dir)
        print(f"\n{result_dir}")
        print(f"  devices: {', '.join(summary['devices'])}")
        print("  msproftx events: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["events"].items())))
        print("  region            count   mean(us)    max(us)")
        rows = sorted(summary["durations_us"].items(), key=lambda kv: -sum(kv[1]))[:8]
        for name, values in rows:
            print(f"  {name[:16]:<16} {len(values):>6} {sum(values) / len(values):>10.1f} {max(values):>10.1f}")
    _subscription_demo(args.iterations)
    return 0


def _run() -> int:
    """``main()``, quiet when the reader of stdout goes away (``python -m aclprof.demo | head``)."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point it at devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_run())
