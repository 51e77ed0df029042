"""Grafana's published dashboard schema as an independent reader of the shipped dashboards:
npm ``@grafana/schema`` (its TypeScript types) and ``typescript``'s ``tsc``, run by Node.

Each dashboard's JSON is inlined as a TypeScript object literal typed ``Dashboard`` (importing
the JSON file instead would widen its literals and give false errors), and ``tsc --noEmit
--strict`` reports every property the schema does not know and every required one missing.
``.ci/run`` installs the two packages into ``.ci/node`` (pinned: :data:`PACKAGES`);
``ACLPROF_GRAFANA_NODE_DIR`` names another directory holding their ``node_modules``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .procs import REPO

__all__ = ["PACKAGES", "NODE_DIR", "missing", "schema_version", "check", "Deviation"]

#: what .ci/run installs (npm), pinned
PACKAGES = ("@grafana/schema@13.2.3", "typescript@5.9.3")
NODE_DIR = Path(os.environ.get("ACLPROF_GRAFANA_NODE_DIR", REPO / ".ci" / "node"))
_TSC = NODE_DIR / "node_modules" / "typescript" / "bin" / "tsc"
_SCHEMA = NODE_DIR / "node_modules" / "@grafana" / "schema" / "package.json"
_ERROR = re.compile(r"^dashboard\.ts\((\d+),(\d+)\): error (TS\d+): (.*)$")

Deviation = tuple[int, str, str]  # (line in the inlined literal, TS code, message)


def missing() -> str | None:
    """Why the check cannot run here (a sentence naming what to install), or None."""
    if shutil.which("node") is None:
        return "node is not installed (Debian package `nodejs`): the @grafana/schema check needs it"
    if not _TSC.exists() or not _SCHEMA.exists():
        return (f"npm packages {' and '.join(PACKAGES)} are not in {NODE_DIR}/node_modules "
                f"(.ci/run installs them: npm install --prefix .ci/node {' '.join(PACKAGES)})")
    return None


def schema_version() -> str:
    return str(json.loads(_SCHEMA.read_text())["version"])


def check(dashboard: dict) -> list[Deviation]:
    """The schema's complaints about ``dashboard`` (empty: it type-checks)."""
    with tempfile.TemporaryDirectory(prefix="aclp-grafana-") as tmp:
        src = Path(tmp) / "dashboard.ts"
        src.write_text("import type { Dashboard } from '@grafana/schema';\n"
                       f"export const dashboard: Dashboard = {json.dumps(dashboard, indent=2)};\n")
        # tsc resolves '@grafana/schema' from the file's directory upwards: point it at NODE_DIR
        (Path(tmp) / "node_modules").symlink_to(NODE_DIR / "node_modules")
        p = subprocess.run(["node", str(_TSC), "--noEmit", "--strict", "--skipLibCheck", "--moduleResolution", "node",
                            "--module", "commonjs", "--target", "es2020", "--pretty", "false", "dashboard.ts"],
                           cwd=tmp, capture_output=True, text=True, timeout=120)
    out = []
    for line in (p.stdout + p.stderr).splitlines():
        m = _ERROR.match(line)
        if m:
            out.append((int(m.group(1)) - 1, m.group(3), m.group(4)))
        elif line.strip() and not line.startswith(" "):
            raise AssertionError(f"tsc: unexpected output {line!r} (exit {p.returncode})")
    if p.returncode != 0 and not out:
        raise AssertionError(f"tsc exited {p.returncode} without a diagnostic: {p.stdout}{p.stderr}")
    return out
