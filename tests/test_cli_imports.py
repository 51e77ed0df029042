"""The CLI's modules import one another without a cycle (issue 18: ``topview`` and ``toplive``
imported each other through a shim; the package re-exported ``main``, so every submodule's
import ran the package that imported them all). Function-local imports count: a cycle hidden
in a function is still a cycle in the design."""

from __future__ import annotations

from helpers.importgraph import Graph, build, sccs
from helpers.procs import REPO


def _graph() -> Graph:
    """The cli's modules (the package included) and their imports of each other."""
    return build(REPO).sub("aclprof.cli")


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
    assert "aclprof.cli.top.view" in graph.edges["aclprof.cli.top.live"]  # the graph is read at all
    assert _cycles(graph) == []


def test_the_cli_package_imports_none_of_its_modules():
    """Importing ``aclprof.cli.common`` runs ``aclprof/cli/__init__.py`` first: an import
    there would load every command for any one of them, and close a cycle."""
    assert build(REPO).edges["aclprof.cli"] == {}
