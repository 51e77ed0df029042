"""The CLI's modules import one another without a cycle (issue 18: ``topview`` and ``toplive``
imported each other through a shim). Function-local imports count: a cycle hidden in a
function is still a cycle in the design. The package ``aclprof.cli`` itself is left out:
every submodule runs it, and it re-exports ``main`` for the entry point ``aclprof.cli:main``."""

from __future__ import annotations

from helpers.importgraph import Graph, build, sccs
from helpers.procs import REPO


def _graph() -> Graph:
    """The cli's modules and their imports of each other, the package itself left out."""
    g = build(REPO).sub("aclprof.cli")
    del g.paths["aclprof.cli"], g.edges["aclprof.cli"]
    for targets in g.edges.values():
        targets.pop("aclprof.cli", None)
    return g


def _cycles(edges: dict[str, set[str]] | Graph) -> list[list[str]]:
    g = edges if isinstance(edges, Graph) else _from_sets(edges)
    return sorted(c for c in sccs(g) if len(c) > 1)


def _from_sets(edges: dict[str, set[str]]) -> Graph:
    g = Graph()
    g.paths = {m: REPO for m in edges}
    g.edges = {m: dict.fromkeys(ts, True) for m, ts in edges.items()}
    return g


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_cli_modules_form_no_import_cycle():
    graph = _graph()
    assert "aclprof.cli.topview" in graph.edges["aclprof.cli.toplive"]  # the graph is read at all
    assert _cycles(graph) == []
