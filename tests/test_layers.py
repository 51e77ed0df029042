"""The import rules of the package layout (README "Layout"), checked on the source.

Layers, bottom to top: protocol and binding (independent of each other) <- api <- compat,
mock, agent <- cli, demo; the daemon (aclprofd) sits on protocol and exportfmt (export file
formats, on protocol alone; the CLI uses it too). A module may import its own layer and the
layers below it, never one above (an import that runs back up makes
the daemon or the CLI drag in the binding, or creates cycles). ``aclprof._log`` (the logging
policy), ``aclprof.protocol.version`` and ``aclprof.protocol.traceparent`` (W3C header
parsing: the api checks what it is given, exportfmt parents spans on it) may be imported
from anywhere.

Only cffi-aware modules may use ``ffi``: the binding layer, by rule.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ALWAYS = ("aclprof._log", "aclprof.protocol.version", "aclprof.protocol.traceparent")

# layer -> the aclprof/aclprofd packages it may import (besides ALWAYS and itself)
ALLOWED: dict[str, tuple[str, ...]] = {
    "aclprof.protocol": (),
    "aclprof.binding": (),
    "aclprof.api": ("aclprof.binding",),
    "aclprof.compat": ("aclprof.binding", "aclprof.api"),
    "aclprof.mock": ("aclprof.binding", "aclprof.api"),
    "aclprof.lowlevel": ("aclprof.binding",),
    "aclprof.agent": ("aclprof.binding", "aclprof.api", "aclprof.protocol"),
    # export file formats, shared by the CLI and the daemon's flight recorder
    "aclprof.exportfmt": ("aclprof.protocol",),
    "aclprof.cli": ("aclprof.protocol", "aclprof.exportfmt"),
    # `aclprof doctor` reports which library loads: the one command that opens the binding
    # (imported inside the command, so importing the CLI still loads none of it).
    "aclprof.cli.doctor": ("aclprof.cli", "aclprof.protocol", "aclprof.exportfmt", "aclprof.binding"),
    # `aclprof doctor --check` runs the api layer's self-check (a session and a subscription)
    "aclprof.cli.doctor_check": ("aclprof.cli", "aclprof.protocol", "aclprof.exportfmt", "aclprof.binding",
                                 "aclprof.api"),
    "aclprof.demo": ("aclprof", "aclprof.binding", "aclprof.api", "aclprof.mock", "aclprof.agent",
                     "aclprof.protocol"),
    "aclprofd": ("aclprof.protocol", "aclprof.exportfmt"),
}


@functools.cache
def _modules() -> list[tuple[str, Path]]:
    """Every module of the two packages (walked once: _known asked it for every import of
    every module, ~400 walks of the tree per test run)."""
    out = []
    for root, prefix in ((REPO / "aclprof", "aclprof"), (REPO / "daemon" / "aclprofd", "aclprofd")):
        for path in sorted(root.rglob("*.py")):
            if path.name == "_acl_ffi.py":
                continue
            rel = path.relative_to(root).with_suffix("").parts
            name = ".".join((prefix, *rel)).removesuffix(".__init__")
            out.append((name, path))
    return out


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for both tests."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(module: str, path: Path) -> list[str]:
    tree = _tree(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(target)
            found += [f"{target}.{a.name}" for a in node.names]  # `from pkg import module`
    return [f for f in found if f.split(".")[0] in ("aclprof", "aclprofd")]


@functools.cache
def _module_names() -> frozenset[str]:
    return frozenset(m for m, _ in _modules())


def _known(name: str) -> bool:
    return name in _module_names()


@pytest.mark.parametrize("module,path", _modules(), ids=[m for m, _ in _modules()])
def test_no_import_runs_back_up(module, path):
    layer = _layer(module)
    if layer is None:  # the root package (lazy re-exports) and its __main__
        return
    allowed = (layer, *ALLOWED[layer], *ALWAYS)
    bad = [imp for imp in _imports(module, path)
           if _known(imp) or imp in ("aclprof", "aclprofd")
           if not any(imp == a or imp.startswith(a + ".") for a in allowed)
           and not (imp == "aclprof" and "aclprof" in allowed)]
    assert bad == [], f"{module} (layer {layer}) imports {bad}"


def _uses_cffi(module: str, path: Path) -> bool:
    tree = _tree(path)
    uses = sorted({n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
                   if (isinstance(n, ast.Name) and n.id == "ffi")
                   or (isinstance(n, ast.Attribute) and n.attr == "ffi")})
    imports = [imp for imp in _imports(module, path) if imp.endswith(("._fast", "._acl_ffi"))]
    return bool(uses or imports)


@pytest.mark.parametrize("module,path", _modules(), ids=[m for m, _ in _modules()])
def test_only_the_binding_touches_cffi(module, path):
    if _layer(module) == "aclprof.binding":
        return
    assert not _uses_cffi(module, path), f"{module} uses cffi; move that into aclprof.binding"
