"""``aclprof/binding/_fast.pyi`` describes the compiled helper as built: every constant and
function of ``_fast.lib`` and nothing else, each function with its arguments in order, a
pointer typed ``CData`` and an integer ``int``, its result likewise (``None`` for void). A
change to ``_fast.h`` that the stub does not follow fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from aclprof.binding import _fast

STUB = Path(__file__).resolve().parent.parent / "aclprof" / "binding" / "_fast.pyi"


def _kind(ctype) -> str:
    return {"void": "None", "pointer": "CData"}.get(ctype.kind, "int")


def _stub_lib(text: str | None = None) -> dict[str, object]:
    """name -> "int" (a constant) or (argument types, result type), from the stub's Lib."""
    tree = ast.parse(STUB.read_text(encoding="utf-8") if text is None else text)
    lib = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Lib")
    out: dict[str, object] = {}
    for node in lib.body:
        if isinstance(node, ast.AnnAssign):
            out[node.target.id] = ast.unparse(node.annotation)
        elif isinstance(node, ast.FunctionDef):
            args = node.args.posonlyargs[1:]  # after self; all positional-only, like C
            assert not node.args.args and not node.args.kwonlyargs, node.name
            out[node.name] = ([ast.unparse(a.annotation) for a in args], ast.unparse(node.returns))
    return out


def _built_lib() -> dict[str, object]:
    ffi, lib = _fast.ffi, _fast.lib
    out: dict[str, object] = {}
    for name in dir(lib):
        value = getattr(lib, name)
        if isinstance(value, int):
            out[name] = "int"
        else:
            t = ffi.typeof(value)
            out[name] = ([_kind(a) for a in t.args], _kind(t.result))
    return out


def test_the_stub_matches_the_built_helper():
    assert _stub_lib() == _built_lib()


def test_the_comparison_sees_a_wrong_argument_and_a_missing_function():
    text = STUB.read_text(encoding="utf-8")
    line = "    def aclprof_tx_mark(self, id: int, text: CData, len: int, /) -> int: ...\n"
    assert line in text
    assert _stub_lib(text) == _built_lib()
    assert _stub_lib(text.replace(line, "")) != _built_lib()
    assert _stub_lib(text.replace(line, line.replace("text: CData", "text: int"))) != _built_lib()
