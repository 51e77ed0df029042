"""The CLI's modules import one another without a cycle (issue 18: ``topview`` and ``toplive``
imported each other through a shim). Function-local imports count: a cycle hidden in a
function is still a cycle in the design. The package ``aclprof.cli`` itself is left out:
every submodule runs it, and it imports none of them."""

from __future__ import annotations

from test_layers import _imports, _modules


def _graph() -> dict[str, set[str]]:
    cli = {m: p for m, p in _modules() if m.startswith("aclprof.cli.")}
    return {m: {i for i in _imports(m, p) if i in cli and i != m} for m, p in cli.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_cli_modules_form_no_import_cycle():
    graph = _graph()
    assert "aclprof.cli.toplive" in graph and "aclprof.cli.topview" in graph["aclprof.cli.toplive"]
    assert _cycles(graph) == []
