"""The mock's structure rules (issue 18) and the two tools that check them.

mock_acl/tools/depgraph.py reads the file dependency graph from `nm` and finds its cycles;
mock_acl/tools/check_faults.py checks that the fault check is written once (MOCK_FAULT_RETURN*)
and starts every exported acl* function. `make -C mock_acl test` runs both on the real build;
these tests check that the tools find what they are meant to find, and run the source check.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "mock_acl" / "tools"
SRC = REPO / "mock_acl" / "src"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"mock_tools_{name}", TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


depgraph = _load("depgraph")
check_faults = _load("check_faults")


def _edges(pairs: list[tuple[str, str]], nodes: list[str]) -> dict[str, dict[str, set[str]]]:
    edges: dict[str, dict[str, set[str]]] = {n: {} for n in nodes}
    for a, b in pairs:
        edges[a].setdefault(b, set()).add(f"{b[:-2]}_fn")
    return edges


def test_cycles_are_the_strongly_connected_components() -> None:
    nodes = ["a.c", "b.c", "c.c", "d.c", "e.c", "f.c"]
    # a <-> b, c -> d -> e -> c (a 3-cycle), f alone, and edges between the groups
    edges = _edges([("a.c", "b.c"), ("b.c", "a.c"), ("b.c", "c.c"), ("c.c", "d.c"), ("d.c", "e.c"),
                    ("e.c", "c.c"), ("e.c", "f.c")], nodes)
    assert depgraph.cycles(edges) == [["c.c", "d.c", "e.c"], ["a.c", "b.c"]]


def test_check_names_a_base_that_calls_an_area_and_a_called_control_file() -> None:
    nodes = ["common.c", "control.c", "model.c", "session.c"]
    ok = _edges([("control.c", "model.c"), ("control.c", "common.c"), ("model.c", "common.c"),
                 ("session.c", "common.c")], nodes)
    assert depgraph.check(ok, 3) == []
    # the shape issue 18 describes: the base calls an area's reset hook (a cycle through the base)
    bad = _edges([("common.c", "model.c"), ("model.c", "common.c"), ("session.c", "control.c")], nodes)
    problems = depgraph.check(bad, 1)
    assert any(p.startswith("common.c is the base") and "model.c: model_fn" in p for p in problems)
    assert any(p.startswith("control.c (the control API)") and "session.c" in p for p in problems)
    assert any("a cycle of 2 files (limit 1): common.c model.c" in p for p in problems)


def test_the_mock_sources_write_the_fault_check_once() -> None:
    assert check_faults.check(SRC) == []


def test_check_faults_finds_a_hand_written_check_and_a_missing_one(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    stepinfo = src / "stepinfo.c"
    text = stepinfo.read_text()
    first = "    MOCK_FAULT_RETURN(NULL);\n"
    assert first in text
    stepinfo.write_text(text.replace(first, "    int32_t c;\n    if (mock_fault(__func__, &c))\n"
                                            "        return NULL;\n", 1))
    problems = check_faults.check(src)
    assert any(p.startswith("stepinfo.c:") and "hand-written fault check" in p for p in problems)
    assert any("aclprofCreateStepInfo does not start with MOCK_FAULT_RETURN" in p for p in problems)

    # A function that checks for faults but that aclmockFailNext would refuse to arm.
    stepinfo.write_text(text)
    common = src / "common.c"
    common.write_text(common.read_text().replace('"aclprofCreateStepInfo", ', "", 1))
    problems = check_faults.check(src)
    assert problems == ["aclprofCreateStepInfo checks for faults but aclmockFailNext rejects it: "
                        "add it to k_fault_functions in common.c"]
