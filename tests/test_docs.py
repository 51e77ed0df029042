"""The READMEs name only what exists: repository paths, Python names, CLI commands and options.

A doc that names a file, a module or a flag that was renamed sends a reader to nothing; this
test reads the user-facing docs and checks every such name against the tree, the importable
packages and the real argparse parsers (built once, never shelled out per flag).

What counts as a name (the extraction rules; a doc that follows them is checked, one that
needs an exception says so in ``NOT_CHECKED`` with the reason):

- **Repository paths**: a token with a slash (``a/b``, ``daemon/README.md``, ``aclprofd/capture*.py``),
  in prose, inline code or a code block, whose first component is an entry of the repository's
  root or of the doc's own directory (``src/`` in mock_acl/README.md), must exist (globs must
  match). Other slash tokens (``before/``, ``ASCEND_PROFILER_OUTPUT/...``, ``p50/p99``, other
  repositories' files written ``runtime:src/...``) are not repository paths, nor are absolute
  ones (``/etc/...``) and those with ``$``, ``~`` or ``<placeholders>``. Two suffixes are checked wherever the
  path starts: ``.md`` (docs point at docs) and ``.py`` (also looked up under ``aclprof/`` and
  ``daemon/``: MUTATION.md names ``api/records.py``). ``file.py::test_name`` also needs the test.
  Bare file names in inline code with a source suffix (``test_capture.py``,
  ``aclprofd.service``) must be the name of some file of the repository.
- **Python names**: inline code ``aclprof.x.y``, ``aclprofd.x.y`` (optionally called: ``(...)``)
  must import, the rest resolved with ``getattr``; ``wire.X`` is ``aclprof.protocol.wire.X``.
  ``daemon.x`` is always wrong: the daemon's package installs as ``aclprofd``.
  ``python -m aclprof...`` / ``aclprofd`` in code names a module whose file must exist.
  mutmut's generated names (``...__mutmut_N``, MUTATION.md) exist only in its copies.
- **Commands**: in code blocks (after an optional ``$ `` prompt) and inline code, a command
  line starting ``aclprof`` / ``aclprofd`` / ``python -m aclprof[d]`` / ``python examples/NAME.py``
  (checked against that file's ``_parser()``) runs up to ``|``, ``#``, ``;``, ``&&`` or ``>``:
  its subcommands (``baseline save``) must exist in ``build_parser()``
  and every ``-x`` / ``--long`` token must be an option string of the parser it reaches.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "daemon/README.md", "daemon/PROTOCOL.md", "mock_acl/README.md", "tests/bench/README.md",
        "tests/bench/MUTATION.md", "tests/pyacl_samples/README.md")
# (doc, name) pairs deliberately not checked, with the reason
#: what a build makes, named by any doc: absent from a clean checkout (and, for the mock in
#: aclprof/_mock, from a checkout whose package was installed rather than built in place)
BUILD_OUTPUTS = {
    "build/libascendcl.so": "made by `make -C mock_acl`",
    "build/sanitize/": "made by `make -C mock_acl sanitize`",
    "aclprof/_mock/libascendcl.so": "made by pip install (in place only for an editable install)",
}
NOT_CHECKED: dict[tuple[str, str], str] = {
    ("tests/bench/MUTATION.md", "mutants/"): "mutmut's scratch directory",
    ("tests/bench/MUTATION.md", "daemon.aclprofd.storage"): "the name mutmut would wrongly give (the point made)",
    ("README.md", "set_env.sh"): "CANN's script, not this repository's",
}
SOURCE_SUFFIXES = (".py", ".c", ".h", ".md", ".toml", ".service", ".yml", ".sh")
MODULE_ALIASES = {"wire": "aclprof.protocol.wire"}


@dataclass(frozen=True)
class Place:
    doc: str
    line: int
    kind: str  # "prose", "inline", "block" (fenced code) or "indented" (a line indented 4 spaces)
    text: str


def _places(doc: str, text: str | None = None) -> Iterator[Place]:
    """Every line of a doc (or of ``text`` as if it were that doc), split into prose, inline code
    spans and code-block lines."""
    fence = False
    if text is None:
        text = (REPO / doc).read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            yield Place(doc, n, "block", line)
            continue
        if line.startswith("    ") and not line.lstrip().startswith(("-", "|")):
            yield Place(doc, n, "indented", line)  # an indented code block, or a list's text: commands only
        spans = re.findall(r"`([^`]+)`", line)
        for s in spans:
            yield Place(doc, n, "inline", s)
        yield Place(doc, n, "prose", re.sub(r"`[^`]+`", " ", line))


def _all_places() -> list[Place]:
    return [p for doc in DOCS for p in _places(doc)]


# ---------------------------------------------------------------------------------------- paths

_URL = re.compile(r"\w+://\S+")
_PATH = re.compile(r"(?<![\w./:@-])((?:\.\.?/)*[\w.*-]+(?:/[\w.*-]+)*/(?:[\w.*-]+)?(?:::\w+)?)")


@cache
def _repo_files() -> frozenset[str]:
    """The names of the repository's files and directories (not git's, nor build output)."""
    names: set[str] = set()
    for _top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in (".git", "build", "__pycache__") and not d.endswith(".egg-info")]
        names.update(dirs)
        names.update(files)
    return frozenset(names)


def _path_candidates(doc: str, path: str) -> list[Path] | None:
    """Where ``path`` may be, or None when it is not a repository path."""
    docdir = (REPO / doc).parent
    rel = path
    while rel.startswith(("./", "../")):
        rel = rel.split("/", 1)[1]
    first = rel.split("/", 1)[0]
    bases = []
    if path.startswith("../"):
        bases.append(docdir)
    elif (REPO / first).exists() or glob.glob(str(REPO / first)):
        bases.append(REPO)
    if (docdir / first).exists() and docdir != REPO:
        bases.append(docdir)
    if path.endswith(".py") and not bases:
        bases = [REPO, docdir, REPO / "aclprof", REPO / "daemon"]
    if path.endswith(".md") and not bases:
        bases = [REPO, docdir]
    if not bases:
        return None
    return [base / path for base in bases]


def _exists(candidate: Path) -> bool:
    return bool(glob.glob(str(candidate))) if any(c in str(candidate) for c in "*?[") else candidate.exists()


def _path_errors(place: Place) -> Iterator[str]:
    if place.kind == "indented":
        return  # its prose and inline code are checked as such
    text = _URL.sub(" ", place.text)
    for m in _PATH.finditer(text):
        token = m.group(1).rstrip(".")
        if any(c in token for c in "<>{}$~") or token in BUILD_OUTPUTS or (place.doc, token) in NOT_CHECKED:
            continue
        path, _, test_name = token.partition("::")
        candidates = _path_candidates(place.doc, path)
        if candidates is None:
            continue
        found = [c for c in candidates if _exists(c)]
        if not found:
            looked = ", ".join(_rel(c) for c in candidates)
            yield f"{place.doc}:{place.line}: `{path}` does not exist (looked at {looked})"
        elif test_name and not any(re.search(rf"^\s*(?:async )?def {re.escape(test_name)}\(", f.read_text(), re.M)
                                   for f in found if f.is_file()):
            yield f"{place.doc}:{place.line}: `{token}`: no test {test_name} in {_rel(found[0])}"
    name = place.text.split("::")[0]
    if place.kind == "inline" and "/" not in name and " " not in name and name.endswith(SOURCE_SUFFIXES) \
            and (place.doc, name) not in NOT_CHECKED and not re.search(r"[<>*{}$]", name):
        if name not in _repo_files():
            yield f"{place.doc}:{place.line}: file name `{name}` is no file of the repository"


def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------------- python names

_PYNAME = re.compile(r"^(aclprof|aclprofd|daemon|wire)((?:\.\w+)+)(?:\(.*\))?$")


def _resolve(dotted: str) -> str | None:
    """None when ``dotted`` names a module or an attribute that exists, else why not."""
    parts = dotted.split(".")
    if parts[0] == "daemon":
        return "the daemon's package is `aclprofd` (nothing installs a `daemon` package of aclprof)"
    if parts[0] in MODULE_ALIASES:
        parts = MODULE_ALIASES[parts[0]].split(".") + parts[1:]
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name) and exc.name != module_name.split(".")[0]:
                continue
            if exc.name == module_name:
                continue
            raise
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:i])} has no attribute path {'.'.join(parts[i:])}"
            obj = getattr(obj, attr)
        return None
    return f"no module {parts[0]}"


def _pyname_errors(place: Place) -> Iterator[str]:
    if place.kind == "inline" and (place.doc, place.text) not in NOT_CHECKED and "__mutmut_" not in place.text:
        # (mutmut's generated names, MUTATION.md's table of equivalent mutants, exist only in its copies)
        m = _PYNAME.match(place.text.strip())
        if m:
            why = _resolve(m.group(1) + m.group(2))
            if why:
                yield f"{place.doc}:{place.line}: `{place.text}`: {why}"
    if place.kind in ("inline", "block"):
        for m in re.finditer(r"python3? -m ((?:aclprof|aclprofd|daemon)\b[\w.]*)", place.text):
            module = m.group(1)
            rel = module.replace(".", "/")
            roots = [REPO / rel, REPO / "daemon" / rel]
            if not any((r.with_suffix(".py")).exists() or (r / "__main__.py").exists() for r in roots):
                yield f"{place.doc}:{place.line}: `python -m {module}`: no such module in the repository"


# ------------------------------------------------------------------------------------- commands

@cache
def _parsers() -> dict[str, argparse.ArgumentParser]:
    from aclprofd.main import build_parser as aclprofd_parser

    from aclprof.cli.main import build_parser as aclprof_parser

    parsers = {"aclprof": aclprof_parser(), "aclprofd": aclprofd_parser()}
    for example in sorted((REPO / "examples").glob("*.py")):  # each has a _parser(), see examples/
        spec = importlib.util.spec_from_file_location(f"_docs_example_{example.stem}", example)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        parsers[f"examples/{example.name}"] = module._parser()
    return parsers


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


_COMMAND = re.compile(r"(?:^|\$ |^\s*)(?:python3? -m |python3? (?=examples/))?(aclprofd?|examples/\w+\.py)"
                      r"(?=\s|$)(.*)$")
_FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)(?:=.*)?$")


def command_errors(text: str) -> list[str]:
    """What is wrong with a command line ``aclprof ...`` / ``aclprofd ...`` (empty: nothing)."""
    m = _COMMAND.match(text.strip())
    if not m:
        return []
    prog, rest = m.group(1), re.split(r"\s(?:\||#|;|&&|>|2>)", " " + m.group(2))[0]
    parser = _parsers()[prog]
    where = [prog]
    errors = []
    tokens = rest.replace("[", " ").replace("]", " ").split()
    descend = True
    for tok in tokens:
        subs = _subparsers(parser)
        if descend and subs and not tok.startswith("-"):
            word = tok.rstrip(":,.'")
            if word in subs:
                parser = subs[word]
                where.append(word)
                continue
            if re.fullmatch(r"[a-z]+", word) and len(where) == 1:
                errors.append(f"`{prog} {word}`: no such command (commands: {', '.join(sorted(subs))})")
            descend = False
            continue
        if not tok.startswith("-"):
            descend = False  # a positional argument: later words are its values, not commands
            continue
        fm = _FLAG.match(tok.split("|")[0])
        if fm and fm.group(1) not in _options(parser):
            errors.append(f"`{' '.join(where)}` has no option {fm.group(1)}")
    return errors


def _command_errors(place: Place) -> Iterator[str]:
    if place.kind not in ("inline", "block", "indented"):
        return
    for e in command_errors(place.text):
        yield f"{place.doc}:{place.line}: {e}"


# ---------------------------------------------------------------------------------------- tests

def test_every_path_the_docs_name_exists() -> None:
    errors = [e for p in _all_places() for e in _path_errors(p)]
    assert not errors, "\n".join(errors)


def test_every_python_name_the_docs_give_imports() -> None:
    errors = [e for p in _all_places() for e in _pyname_errors(p)]
    assert not errors, "\n".join(errors)


def test_every_command_and_option_the_docs_show_is_accepted() -> None:
    errors = [e for p in _all_places() for e in _command_errors(p)]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(("doc_text", "expected"), [
    ("`aclprof/wire.py`", "does not exist"),
    ("see `shared/reference/acl_prof_api.md`", "does not exist"),
    ("`daemon.storage.read_segment(path)`", "package is `aclprofd`"),
    ("`aclprof.protocol.wire.no_such_thing`", "no attribute"),
    ("`aclprof tops`", "no such command"),
    ("`aclprof top --no-such-flag`", "no option --no-such-flag"),
    ("`aclprof baseline save x --nope`", "`aclprof baseline save` has no option --nope"),
    ("`aclprofd --socket-grup x`", "no option --socket-grup"),
    ("`tests/test_docs.py::test_not_here`", "no test test_not_here"),
    ("the unit `aclprofd-unit.service`", "is no file of the repository"),
    ("```\npython -m aclprof.nosuch\n```", "no such module"),
    ("```\n$ aclprof status --jsn   # typo\n```", "`aclprof status` has no option --jsn"),
    ("```\npython examples/simulated_service.py --rat 5\n```", "has no option --rat"),
])
def test_the_checks_catch_a_stale_name(doc_text: str, expected: str) -> None:
    """Each rule finds what it is for (so a passing run means the docs are right, not the rules blind)."""
    errors = [e for p in _places("README.md", f"{doc_text}\n")
              for check in (_path_errors, _pyname_errors, _command_errors) for e in check(p)]
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize("line", [
    "$ aclprof top --group service         # which service spends the NPU time",
    "aclprof export --since -10m --format csv -o ops.csv | head",
    "aclprof top: window 10s, by service, sorted by total",
    "python -m aclprofd --config /etc/aclprof/aclprofd.toml",
    "aclprof baseline save NAME [--source recent|current|trailing]",
])
def test_real_command_lines_pass(line: str) -> None:
    assert command_errors(line) == []
