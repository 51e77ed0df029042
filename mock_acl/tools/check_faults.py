#!/usr/bin/env python3
"""Checks that the mock's fault check is written once and used everywhere (issue 18).

Rules, read from mock_acl/src/*.c:
- `mock_fault(` is called only by the MOCK_FAULT_RETURN* macros (mock_internal.h) and defined in
  common.c: no hand-written copy of the check;
- every exported acl* function (the CANN API; not the aclmock* controls) starts with one of
  MOCK_FAULT_RETURN(...), MOCK_FAULT_RETURN_CODE(), MOCK_FAULT_RETURN_VOID();
- the functions that start so are exactly the names aclmockFailNext accepts
  (`k_fault_functions` in common.c), so a fault can be armed for every one and only for them.

    python3 mock_acl/tools/check_faults.py [SRC_DIR]

Exit status: 0 ok, 1 a rule broken (each named on stderr), 2 bad usage.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

EXPORT = re.compile(r"^MOCK_EXPORT\s[^(;]*?\b(acl\w+)\s*\(", re.M)
FAULT_FIRST = re.compile(r"\A\s*MOCK_FAULT_RETURN(?:_CODE|_VOID)?\s*\(")
FAULT_LIST = re.compile(r"k_fault_functions\[\]\s*=\s*\{(.*?)\};", re.S)


def _body_start(text: str, pos: int) -> int:
    """Index just after the `{` that opens the function whose signature starts at pos."""
    depth = 0
    for i in range(pos, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "{" and depth == 0:
            return i + 1
        elif c == ";" and depth == 0:
            return -1   # a declaration, not a definition
    return -1


def check(src: Path) -> list[str]:
    problems: list[str] = []
    checked: set[str] = set()
    for path in sorted(src.glob("*.c")):
        text = path.read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            code = line.split("//")[0]
            if "mock_fault(" in code and not code.lstrip().startswith(("/*", "*")):
                if not (path.name == "common.c" and code.startswith("bool mock_fault(")):
                    problems.append(f"{path.name}:{lineno}: hand-written fault check; "
                                    "use MOCK_FAULT_RETURN*() from mock_internal.h")
        for m in EXPORT.finditer(text):
            name = m.group(1)
            if name.startswith("aclmock"):
                continue
            start = _body_start(text, m.end() - 1)
            if start < 0:
                continue
            if not FAULT_FIRST.match(text[start:]):
                lineno = text.count("\n", 0, m.start()) + 1
                problems.append(f"{path.name}:{lineno}: {name} does not start with "
                                "MOCK_FAULT_RETURN*()")
            checked.add(name)
    common = src / "common.c"
    found = FAULT_LIST.search(common.read_text()) if common.exists() else None
    listed = set(re.findall(r'"(\w+)"', found.group(1))) if found else set()
    if not listed:
        problems.append("common.c: k_fault_functions not found")
    else:
        for name in sorted(checked - listed):
            problems.append(f"{name} checks for faults but aclmockFailNext rejects it: "
                            "add it to k_fault_functions in common.c")
        for name in sorted(listed - checked):
            problems.append(f"k_fault_functions lists {name}, which no exported function of "
                            "src/ defines with a fault check")
    return problems


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "src"
    if not src.is_dir():
        print(f"check_faults: {src} is not a directory", file=sys.stderr)
        return 2
    problems = check(src)
    for msg in problems:
        print(f"check_faults: {msg}", file=sys.stderr)
    if not problems:
        print(f"check_faults: ok ({src})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
