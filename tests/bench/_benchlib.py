"""Small helpers shared by the benchmarks in this folder (not a test module).

The machines these run on are small and shared, so absolute numbers drift from run to
run. Every benchmark therefore runs its variants *interleaved* (round 1: A B C, round 2:
B C A, ...) and reports, besides median and min, ratios computed within each round
(variant / baseline of the same round), whose median is far steadier than either number.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def interleaved(variants: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each variant once per round, rotating the order; returns name -> samples.

    Each variant is a callable that measures itself and returns one sample (for example
    ns per call, or records per second).
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(variants[name]())
    return samples


def per_round_ratio(samples: Mapping[str, Sequence[float]], num: str, den: str) -> list[float]:
    return [a / b for a, b in zip(samples[num], samples[den]) if b]


def med(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    values = sorted(values)
    if not values:
        return float("nan")
    rank = max(1, min(len(values), round(q / 100 * len(values) + 0.4999)))
    return values[rank - 1]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, out=None) -> str:
    """A plain aligned text table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print(text, file=out or sys.stdout)
    return text


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if value != value:  # nan
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def header(title: str, quick: bool) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"== {title} ==")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  python {platform.python_version()}  "
          f"{os.cpu_count()} cpus  load {load[0]:.2f}  {'--quick' if quick else 'full'} run")
    print()


def compile_helper(cmd: Sequence[str], out: str) -> tuple[str | None, str]:
    """Run a compiler command that builds ``out`` (a helper a benchmark builds at run time:
    no binary is committed): (``out``, "") when it succeeded, else (None, why not), for a
    benchmark that then skips the rows that need it."""
    import subprocess

    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=180)
    except OSError as exc:
        return None, f"cannot run {cmd[0]}: {exc}"
    if proc.returncode != 0:
        return None, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return out, ""


def use_mock():
    """Import aclprof with the bundled mock selected."""
    import aclprof

    aclprof.use_mock()
    return aclprof


class GilProbe:
    """Measures GIL contention directly: a Python thread that asks to wake every
    ``period_s`` and records how late it runs. Sleeping releases the GIL, so the lateness
    is (scheduler noise +) the wait for the GIL held by other Python threads; with the
    default 5 ms switch interval one long holder costs up to 5 ms.

        with GilProbe() as probe:
            ...                      # the workload
        probe.summary()              # {"n", "p50_us", "p99_us", "p999_us", "max_us"}
    """

    def __init__(self, period_s: float = 0.001):
        import threading

        self.period_s = period_s
        self.late_ns: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gil-probe", daemon=True)

    def _run(self) -> None:
        period_ns = int(self.period_s * 1e9)
        late = self.late_ns
        while not self._stop.is_set():
            due = time.perf_counter_ns() + period_ns
            time.sleep(self.period_s)
            late.append(max(0, time.perf_counter_ns() - due))

    def __enter__(self) -> GilProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def summary(self) -> dict[str, float]:
        v = [x / 1e3 for x in self.late_ns]
        return {"n": len(v), "p50_us": pct(v, 50), "p99_us": pct(v, 99), "p999_us": pct(v, 99.9),
                "max_us": max(v) if v else float("nan")}
