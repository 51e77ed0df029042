"""Mutation score of the modules whose tests must bite, with mutmut 3.

Usage (from the checkout, with the ``mutation`` extra and an editable install built)::

    python tests/bench/mutation.py                    # every module of [tool.aclprof.mutation.modules]
    python tests/bench/mutation.py wire stats         # some of them
    python tests/bench/mutation.py --ci               # the fixed small sample .ci/run runs
    python tests/bench/mutation.py --max-children 1   # on a busy machine

Why a staging copy: mutmut 3 names a mutant after its file's path (``daemon/aclprofd/x.py``
would be ``daemon.aclprofd.x``, but the tests import ``aclprofd.x``) and imports the mutated
tree from ``mutants/`` first on sys.path. So the script lays out a flat copy (``aclprof/``
with its compiled extensions and bundled mock ``.so`` as built by the editable install,
``daemon/aclprofd`` as ``aclprofd/``, ``tests/``) in a temporary directory, writes its
pyproject.toml from this one's ``[tool.mutmut]`` plus, per module, ``only_mutate`` and the
module's focused test files, and runs ``mutmut run`` there, once per module.

Each mutant runs only the focused tests of its module (and of those, mutmut runs only the
ones that called the mutated function). Tests that start a daemon or worker in a subprocess
import the installed, unmutated package, so only in-process tests can kill a mutant.

Output: per module, the mutants, killed, survived (excluding the ones judged equivalent in
tests/bench/MUTATION.md), the kill rate of the non-equivalent ones, and each survivor's diff.
Exit status 1 if a module is below ``min_kill_rate`` (or, with --ci, the sample is).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
MUTATION_MD = ROOT / "tests" / "bench" / "MUTATION.md"

SURVIVED = {0}
NO_TESTS = {5, 33}
# A mutant that makes its tests hang past mutmut's time limit was detected too (the suite
# would fail by its own timeout): counted as killed, and shown apart.
TIMEOUT = {36, -24, 24, 152, 255}
KILLED = {1, 3} | TIMEOUT


SHOW_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant
keys = json.loads(sys.stdin.read())
print(json.dumps({k: get_diff_for_mutant(k, path=find_mutant(k).path) for k in keys}))
"""


def load_config() -> tuple[dict, dict]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool = data["tool"]
    return tool["mutmut"], tool["aclprof"]["mutation"]


def equivalent_mutants() -> dict[str, str]:
    """``| `name` | reason |`` rows of MUTATION.md: mutants judged equivalent, with why."""
    if not MUTATION_MD.exists():
        return {}
    out = {}
    for line in MUTATION_MD.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([^`]+__mutmut_\d+)`\s*\|\s*(.*?)\s*\|\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


TIMEOUT_KEYS = ("timeout_multiplier", "timeout_constant")


def module_timeouts(spec: dict) -> dict[str, float]:
    """A module's own limit on a mutant's wall time, ``(clean time of the mutant's tests +
    timeout_constant) * timeout_multiplier`` (mutmut's rule; the clean time is what the
    same tests took in the unmutated run mutmut starts with). A module whose tests wait on
    sockets (httpd) sets a tighter one than ``[tool.mutmut]``'s: a mutant that stops its
    listener leaves each test waiting for a client timeout of seconds, and at 4x the clean
    time those waits, not the tests, made up most of its run."""
    out = {}
    for key in TIMEOUT_KEYS:
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                sys.exit(f"mutation.py: {spec['path']}: {key} = {value!r} is not a positive number "
                         "(see [tool.aclprof.mutation.modules] in pyproject.toml)")
            out[key] = float(value)
    return out


def staged_path(path: str) -> str:
    """Where a repository path lives in the flat staging copy."""
    return path.removeprefix("daemon/")


def stage(workdir: Path) -> list[str]:
    """Copies the checkout's files that git tracks or would (not ignored; tests read READMEs,
    headers, ...; a new test file counts before it is committed), aclprof's built
    extensions, and daemon/aclprofd as aclprofd/; returns what mutmut must copy beside the
    mutated packages (everything else at the top level)."""
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout.split("\0")
    for rel in filter(None, tracked):
        src = ROOT / rel
        if not src.is_file() or rel.startswith(".ci/"):
            continue
        dst = workdir / (staged_path(rel) if rel.startswith("daemon/aclprofd/") else rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        if rel.startswith("daemon/aclprofd/") and not rel.endswith(".py"):
            # its data files at their repository path too: tests read daemon/aclprofd/*.toml there
            (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, workdir / rel)
    # every extension the editable install built (a new C module in aclprof/protocol or
    # aclprof/api, like _batchgroup or _reqring, is found by its source: missing, its
    # importers fail the clean run)
    for pattern in ("aclprof/**/*.so", "aclprof/binding/_acl_ffi.py"):
        for src in ROOT.glob(pattern):
            shutil.copy2(src, workdir / src.relative_to(ROOT))
    needed = ["aclprof/binding/_fast*.so", "aclprof/_mock/*.so", "aclprof/binding/_acl_ffi.py",
              *(f"{c.parent.relative_to(ROOT)}/{c.stem}*.so"
                for c in sorted([*ROOT.glob("aclprof/protocol/_*.c"), *ROOT.glob("aclprof/api/_*.c")]))]
    missing = [pattern for pattern in needed if not list(workdir.glob(pattern))]
    if missing:
        sys.exit(f"mutation.py: {', '.join(missing)} missing: "
                 "run `pip install -e .` in the checkout first (the staging copy reuses the build)")
    return sorted(p.name for p in workdir.iterdir() if p.name not in ("aclprof", "aclprofd", "pyproject.toml"))


def write_pyproject(workdir: Path, base: dict, pytest_opts: dict, module: str, tests: list[str],
                    also_copy: list[str], timeouts: dict[str, float]) -> None:
    conf = dict(base)
    conf["source_paths"] = ["aclprof", "aclprofd"]
    conf["only_mutate"] = [staged_path(module)]
    conf["also_copy"] = also_copy
    conf["pytest_add_cli_args_test_selection"] = list(tests)
    conf.update(timeouts)

    def toml_value(v: object) -> str:
        return json.dumps(v)  # lists of strings, numbers and booleans: JSON is valid TOML here

    lines = ["[tool.mutmut]"] + [f"{k} = {toml_value(v)}" for k, v in conf.items()]
    lines += ["", "[tool.pytest.ini_options]"] + [f"{k} = {toml_value(v)}" for k, v in pytest_opts.items()]
    (workdir / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_module(name: str, spec: dict, base: dict, pytest_opts: dict, max_children: int,
               keep: Path | None, only: list[str] | None = None) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"aclprof-mut-{name}-")) if keep is None else keep / name
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        also_copy = stage(workdir)
        write_pyproject(workdir, base, pytest_opts, spec["path"], spec["tests"], also_copy, module_timeouts(spec))
        env = dict(os.environ, ACLPROF_BACKEND="mock", PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)] + (only or [])
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - t0
        metas = sorted((workdir / "mutants").glob(staged_path(spec["path"]) + ".meta"))
        if not metas:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            return {"error": f"mutmut produced no results (exit {proc.returncode})", "elapsed": elapsed}
        codes = {}
        for meta in metas:
            codes.update(json.loads(meta.read_text())["exit_code_by_key"])
        if only:  # names or mutmut's shell-style patterns (``...xǁControlǁsnapshot__mutmut_*``)
            codes = {k: v for k, v in codes.items() if any(k == o or fnmatch.fnmatchcase(k, o) for o in only)}
        if None in codes.values():  # mutmut stopped before checking every mutant (e.g. a red clean run)
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            return {"error": f"mutmut left mutants unchecked (exit {proc.returncode})", "elapsed": elapsed}
        # Every survivor's diff in one process (`mutmut show` per mutant costs a second each).
        shown = subprocess.run([sys.executable, "-c", SHOW_DIFFS], cwd=workdir, env=env, check=True,
                               input=json.dumps([k for k, c in codes.items() if c not in KILLED]),
                               capture_output=True, text=True)
        diffs = json.loads(shown.stdout)
        return {"codes": codes, "diffs": diffs, "elapsed": elapsed}
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def report(name: str, result: dict, equivalent: dict[str, str], min_rate: float) -> bool:
    if "error" in result:  # counts as a failure of the run, the other modules still run
        print(f"{name:12s} FAILED: {result['error']} ({result['elapsed']:.0f} s)")
        return False
    codes = result["codes"]
    killed = [k for k, c in codes.items() if c in KILLED]
    equiv = [k for k, c in codes.items() if c not in KILLED and k in equivalent]
    live = [k for k, c in codes.items() if c not in KILLED and k not in equivalent]
    counted = len(codes) - len(equiv)
    rate = len(killed) / counted if counted else 1.0
    ok = rate >= min_rate
    timeouts = sum(1 for c in codes.values() if c in TIMEOUT)
    print(f"{name:12s} mutants {len(codes):4d}  killed {len(killed):4d} ({timeouts} by timeout)  "
          f"equivalent {len(equiv):3d}  "
          f"not killed {len(live):3d}  kill rate {100 * rate:5.1f} %  ({result['elapsed']:.0f} s)"
          f"{'' if ok else f'  BELOW {100 * min_rate:.0f} %'}")
    for key in live:
        code = codes[key]
        status = "survived" if code in SURVIVED else "no tests" if code in NO_TESTS else f"exit {code}"
        print(f"  -- {key}: {status}")
        diff = [ln for ln in result["diffs"].get(key, "").splitlines() if ln.startswith(("-", "+"))
                and not ln.startswith(("---", "+++"))]
        for ln in diff[:6]:
            print(f"     {ln}")
    return ok


def main(argv: list[str] | None = None) -> int:
    base, conf = load_config()
    modules: dict = conf["modules"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"of: {', '.join(modules)} (default: all)")
    parser.add_argument("--ci", action="store_true", help="the fixed sample .ci/run runs (tool.aclprof.mutation.ci)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", type=Path, help="stage into this directory and keep it (for `mutmut browse`)")
    parser.add_argument("--only", type=Path, metavar="FILE",
                        help="check only the mutants named in FILE, one a line, or shell-style patterns of "
                             "their names (e.g. the survivors of a run, against tests added since); one module")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; known: {list(modules)}")
    min_rate = float(conf.get("min_kill_rate", 0.9))
    pytest_opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    equivalent = equivalent_mutants()
    names = [conf["ci"]["module"]] if args.ci else (args.modules or list(modules))
    sets = conf.get("test_sets", {})
    for spec in modules.values():  # "@name": the shared list [tool.aclprof.mutation.test_sets] name
        spec["tests"] = [t for item in spec["tests"] for t in (sets[item[1:]] if item.startswith("@") else [item])]
    print(f"mutmut on {len(names)} module(s), {args.max_children} worker(s); load {os.getloadavg()[0]:.2f}")
    ok = True
    only = [n.strip() for n in args.only.read_text(encoding="utf-8").splitlines() if n.strip()] if args.only else None
    if only is not None and len(names) != 1:
        parser.error("--only needs exactly one module")
    for name in names:
        result = run_module(name, modules[name], base, pytest_opts, args.max_children, args.keep, only)
        ok = report(name, result, equivalent, min_rate) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
