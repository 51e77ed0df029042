"""``python -m aclprof.demo``: a profiling session with msproftx markers on the bundled mock.

It runs what an inference service would (a session over two devices, marks, nested
annotations, ranges ended on another thread, step timestamps), then reads back what the
mock wrote into the PROF_* directory and prints a summary, so the whole path from Python
to the library's output is visible without an NPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

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
    finisher = threading.Thread(target=lambda: [h.end() for h in pending])
    finisher.start()
    finisher.join()


def _summarise(result_dir: Path) -> dict:
    events = [json.loads(line) for line in
              (result_dir / "host" / "msproftx.jsonl").read_text(encoding="utf-8").splitlines()]
    kinds = Counter(e["kind"] for e in events)
    durations: dict[str, list[float]] = {}
    for e in events:
        if "start_ns" in e and "end_ns" in e and e["end_ns"] >= e["start_ns"]:
            durations.setdefault(e.get("message", e["kind"]), []).append((e["end_ns"] - e["start_ns"]) / 1e3)
    devices = sorted(p.name for p in result_dir.iterdir() if p.name.startswith("device_"))
    return {"events": dict(kinds), "devices": devices, "durations_us": durations}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclprof.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="inference steps to simulate (default 20)")
    parser.add_argument("--output", type=Path, default=None,
                        help="output directory (default: a temporary directory)")
    args = parser.parse_args(argv)

    import aclprof
    from aclprof import DataType

    aclprof.use_mock()
    info = aclprof.library_info()
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
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
