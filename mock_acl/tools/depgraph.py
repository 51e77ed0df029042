#!/usr/bin/env python3
"""The mock's file dependency graph, read from its object files with `nm`.

An edge A -> B means that A.o uses a symbol (function or global variable) that B.o defines:
exactly the link-time dependencies between the mock's translation units, static helpers and
header inlines excluded. Cycles are the strongly connected components (Tarjan) with more than
one file.

    python3 mock_acl/tools/depgraph.py [OBJ_DIR]          # summary, cycles and why
    python3 mock_acl/tools/depgraph.py OBJ_DIR --edges    # every edge with its symbols
    python3 mock_acl/tools/depgraph.py OBJ_DIR --check    # the rules below; exit 1 if broken

`--check` (run by `make -C mock_acl test`) keeps the structure from issue 18:
- `common.c`, the base every area calls, calls into no other file;
- `control.c`, the control API that calls every area's reset/stats/fork hooks, is called by none;
- no cycle is larger than --max-cycle files (the cycles left are areas whose files share globals).

Exit status: 0 ok, 1 a rule broken, 2 bad usage (no objects, nm missing).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

BASE = "common.c"
CONTROL = "control.c"
DEFAULT_MAX_CYCLE = 3


def read_symbols(obj_dir: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per source file (named `x.c` for `x.o`): the symbols it defines and those it uses."""
    nm = shutil.which("nm")
    if nm is None:
        raise SystemExit("depgraph: `nm` (binutils) not found; install binutils")
    objs = sorted(obj_dir.glob("*.o"))
    if not objs:
        raise SystemExit(f"depgraph: no *.o in {obj_dir}; build first (make -C mock_acl)")
    defined: dict[str, set[str]] = {}
    used: dict[str, set[str]] = {}
    for obj in objs:
        name = obj.stem + ".c"
        out = subprocess.run([nm, "--format=posix", str(obj)], check=True, capture_output=True,
                             text=True).stdout
        defs, uses = set(), set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                uses.add(sym)
            elif kind.isupper():   # global definitions only (lower case: file-local)
                defs.add(sym)
        defined[name], used[name] = defs, uses
    return defined, used


def build_graph(defined: dict[str, set[str]],
                used: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """edges[a][b] = the symbols a uses that b defines (a != b); symbols from libc are ignored."""
    owner: dict[str, str] = {}
    for f, syms in defined.items():
        for s in syms:
            owner[s] = f
    edges: dict[str, dict[str, set[str]]] = {f: {} for f in defined}
    for f, syms in used.items():
        for s in syms:
            g = owner.get(s)
            if g is not None and g != f:
                edges[f].setdefault(g, set()).add(s)
    return edges


def strongly_connected(nodes: Iterable[str], succ: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components in no particular order, members sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, {})))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def cycles(edges: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one file, largest first."""
    comps = [c for c in strongly_connected(edges, edges) if len(c) > 1]
    return sorted(comps, key=lambda c: (-len(c), c))


def check(edges: dict[str, dict[str, set[str]]], max_cycle: int) -> list[str]:
    """The broken rules (see the module docstring), as messages; empty when all hold."""
    problems = []
    if edges.get(BASE):
        problems.append(f"{BASE} is the base and must call no other file, but uses "
                        + "; ".join(f"{g}: {', '.join(sorted(s))}" for g, s in sorted(edges[BASE].items())))
    callers = sorted(f for f, out in edges.items() if CONTROL in out)
    if callers:
        problems.append(f"{CONTROL} (the control API) must be called by no file, but is used by "
                        + ", ".join(callers))
    for comp in cycles(edges):
        if len(comp) > max_cycle:
            problems.append(f"a cycle of {len(comp)} files (limit {max_cycle}): {' '.join(comp)}")
    return problems


def report(edges: dict[str, dict[str, set[str]]], show_edges: bool) -> str:
    n_edges = sum(len(out) for out in edges.values())
    comps = cycles(edges)
    in_cycles = sum(len(c) for c in comps)
    lines = [f"files: {len(edges)}  edges: {n_edges}  cycles: {len(comps)}  "
             f"files in cycles: {in_cycles}  largest cycle: {max((len(c) for c in comps), default=0)}"]
    for comp in comps:
        lines.append(f"cycle of {len(comp)}: {' '.join(comp)}")
        members = set(comp)
        for f in comp:
            for g, syms in sorted(edges[f].items()):
                if g in members:
                    lines.append(f"    {f} -> {g}: {', '.join(sorted(syms))}")
    if show_edges:
        lines.append("edges:")
        for f in sorted(edges):
            for g, syms in sorted(edges[f].items()):
                lines.append(f"    {f} -> {g}: {', '.join(sorted(syms))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("obj_dir", nargs="?", type=Path, default=here / "build" / "obj",
                   help="directory of the mock's object files (default: mock_acl/build/obj)")
    p.add_argument("--edges", action="store_true", help="also list every edge with its symbols")
    p.add_argument("--check", action="store_true", help="enforce the rules; exit 1 if one is broken")
    p.add_argument("--max-cycle", type=int, default=DEFAULT_MAX_CYCLE,
                   help=f"largest cycle --check accepts, in files (default {DEFAULT_MAX_CYCLE})")
    args = p.parse_args(argv)
    if not args.obj_dir.is_dir():
        print(f"depgraph: {args.obj_dir} is not a directory; build first (make -C mock_acl)",
              file=sys.stderr)
        return 2
    edges = build_graph(*read_symbols(args.obj_dir))
    print(report(edges, args.edges))
    if args.check:
        problems = check(edges, args.max_cycle)
        for msg in problems:
            print(f"depgraph: {msg}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
