"""An interpreter other users can run: a venv from /usr/bin/python3 with this checkout installed,
readable by all (the default ``python3`` here lives under /root, mode 0700). The tests that run
the daemon, a service or a client as another user (the shipped unit's service user, an
impostor in its own namespaces, an operator outside the groups) use its ``bin/python``.
Cached in /tmp while the sources are unchanged; the ``deploy_venv`` fixture (tests/conftest.py)
builds it once per session."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from helpers.procs import REPO

__all__ = ["SYSTEM_PY", "deploy_venv", "source_digest"]

SYSTEM_PY = "/usr/bin/python3"


class DeployVenvError(RuntimeError):
    """The venv could not be made (the message has pip's output)."""


def source_digest() -> str:
    """A digest of everything the installed package is built from."""
    h = hashlib.sha256()
    roots = [REPO / "aclprof", REPO / "daemon" / "aclprofd", REPO / "cdefs", REPO / "mock_acl"]
    files = [REPO / "pyproject.toml", REPO / "setup.py"]
    for r in roots:
        files += sorted(p for p in r.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and (p.suffix in (".py", ".c", ".h", ".toml") or p.name == "Makefile"))
    for f in files:
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def deploy_venv() -> Path:
    """The venv (README "Deployment"'s /opt/aclprof, elsewhere), made if missing."""
    digest = source_digest()
    venv = Path(f"/tmp/aclprof-deploy-venv-{digest}")
    if (venv / ".complete").exists():
        return venv
    # One build at a time: the suite's xdist workers (and concurrent sessions) each need it at
    # about the same time; the ones that wait find it made instead of building it again.
    with open(f"{venv}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").exists():
            return venv
        return _make(venv)


def _make(venv: Path) -> Path:
    """Builds the venv (called with its lock held)."""
    for old in Path("/tmp").glob("aclprof-deploy-venv-*"):
        # other sources' venvs (and their locks): another test session may be using one, so
        # only stale ones go
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > 86400:
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink()
    tmp = Path(f"{venv}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([SYSTEM_PY, "-m", "venv", str(tmp)], check=True, capture_output=True)
    p = subprocess.run([str(tmp / "bin" / "pip"), "install", "-q", str(REPO)], capture_output=True, text=True)
    if p.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DeployVenvError(f"pip install of the checkout into a {SYSTEM_PY} venv failed:\n{p.stderr[-3000:]}")
    os.chmod(tmp, 0o755)
    # the venv's scripts name their interpreter by path: give them the final name, then
    # move it there in one rename (a session building the same venv meanwhile wins or loses whole)
    for script in (tmp / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") and str(tmp).encode() in data:
                script.write_bytes(data.replace(str(tmp).encode(), str(venv).encode()))
    (tmp / "pyvenv.cfg").write_text((tmp / "pyvenv.cfg").read_text().replace(str(tmp), str(venv)))
    (tmp / ".complete").touch()
    try:
        os.rename(tmp, venv)
    except OSError:  # another session made it first (or a broken leftover is there)
        shutil.rmtree(tmp, ignore_errors=True)
        if not (venv / ".complete").exists():
            raise DeployVenvError(f"{venv} exists but is incomplete: remove it") from None
    return venv
