"""``import aclprof`` time in fresh interpreters, against ``import json`` and ``import numpy``.

    python tests/bench/bench_import.py [--quick] [--runs N]

Each run starts a new interpreter with ``python -X importtime -c "import X"`` and reads the
cumulative time of X's own line from the importtime report (interpreter start-up is not
included). The three imports are interleaved run by run. Also reported, from the same
kind of fresh interpreter: the wall time from ``import aclprof`` to the first use of the
library (``use_mock()`` + ``library_info()``, which loads the cffi module and the mock),
and which heavy modules ``import aclprof`` pulled in (it should pull in neither numpy nor
structlog).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B

GOAL_MS = 60.0
# Not the repository: `python -c` puts the cwd first on sys.path, and the source tree must
# not shadow the installed package.
NEUTRAL_CWD = tempfile.gettempdir()
MODULES = ("aclprof", "json", "numpy")

FIRST_USE = r"""
import time, sys
t0 = time.perf_counter()
import aclprof
t1 = time.perf_counter()
aclprof.use_mock()
aclprof.library_info()
t2 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.3f} {(t2 - t1) * 1e3:.3f}")
"""

HEAVY = ("numpy", "structlog", "cffi", "aclprof.binding._acl_ffi", "aclprof.binding._fast", "aclprof.api.subscription")


def importtime_ms(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter, in ms."""
    env = dict(os.environ)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, env=env, timeout=60, cwd=NEUTRAL_CWD)
    if proc.returncode != 0:
        raise RuntimeError(f"import {module} failed: {proc.stderr[-500:]}")
    for line in proc.stderr.splitlines():
        # "import time:      self [us] |  cumulative | imported package"
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return int(parts[1]) / 1000.0
    raise RuntimeError(f"no importtime line for {module}")


def first_use_ms() -> tuple[float, float]:
    proc = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True,
                          timeout=60, cwd=NEUTRAL_CWD, env=dict(os.environ, ACLPROF_BACKEND="mock"))
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-500:])
    a, b = proc.stdout.split()
    return float(a), float(b)


def where() -> str:
    code = ("import aclprof, os, sys; p = os.path.dirname(aclprof.__file__); "
            "print(p, 'editable' if any('__editable__' in k for k in sys.modules) else 'installed')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=NEUTRAL_CWD)
    return proc.stdout.strip()


def loaded_by_import() -> list[str]:
    code = ("import sys, aclprof; print(' '.join(m for m in %r if m in sys.modules))" % (HEAVY,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=NEUTRAL_CWD)
    return proc.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 runs instead of 15")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 15)
    B.header(f"import time ({runs} fresh interpreters per module, interleaved; "
             "python -X importtime, cumulative ms)", args.quick)

    print(f"aclprof imported from: {where()}")
    print()
    for module in MODULES:  # warm the OS file cache and the .pyc files
        importtime_ms(module)
    variants = {m: (lambda m=m: importtime_ms(m)) for m in MODULES}
    variants["first use"] = lambda: sum(first_use_ms())
    samples = B.interleaved(variants, runs)

    rows = []
    for module in MODULES:
        values = samples[module]
        rows.append((f"import {module}", B.med(values), min(values), max(values),
                     B.med(B.per_round_ratio(samples, "aclprof", module))))
    values = samples["first use"]
    rows.append(("import aclprof + use_mock() + library_info() (wall)", B.med(values),
                 min(values), max(values), float("nan")))
    B.table(("", "median ms", "min ms", "max ms", "aclprof / this (median)"), rows)
    print()
    heavy = loaded_by_import()
    print("modules that `import aclprof` loads among", ", ".join(HEAVY) + ":",
          ", ".join(heavy) or "none")
    print()
    med = B.med(samples["aclprof"])
    B.table(("goal", "measured", "verdict"), [
        ("import aclprof <= 60 ms", f"{med:.1f} ms (min {min(samples['aclprof']):.1f})",
         B.verdict(med <= GOAL_MS)),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
