"""Where the independent readers of our exports are (issue 23): installed by ``.ci/run``,
looked up here, and skipped with a reason naming what is missing on a machine without them.

- ``msprof-analyze`` (PyPI, the ``interop`` extra): beside this interpreter or on PATH.
- Go's ``pprof`` (built by ``.ci/run`` from Debian's golang-github-google-pprof-dev into the
  venv's bin): ``$ACLPROF_PPROF``, beside this interpreter or on PATH.
- npm's ``pprof-format``: a ``node_modules`` directory holding it, ``$ACLPROF_NODE_MODULES`` or
  ``.ci/node/node_modules`` (``.ci/run``'s ``npm install --prefix .ci/node``).
- google/pprof's ``profile.proto`` (the Debian package's copy), compiled with PyPI
  ``grpcio-tools`` into a temporary directory, for the protobuf package's own parser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "PROFILE_PROTO", "msprof_analyze", "go_pprof", "node_modules", "compile_profile_proto"]

ROOT = Path(__file__).resolve().parents[2]
PROFILE_PROTO = Path("/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")
_BIN = os.path.dirname(sys.executable)


def msprof_analyze() -> str | None:
    return shutil.which("msprof-analyze", path=_BIN) or shutil.which("msprof-analyze")


def go_pprof() -> str | None:
    given = os.environ.get("ACLPROF_PPROF")
    if given:
        return given
    return shutil.which("pprof", path=_BIN) or shutil.which("pprof")


def node_modules(package: str) -> str | None:
    """A node_modules directory that holds ``package``, when node is installed too."""
    if shutil.which("node") is None:
        return None
    for d in (os.environ.get("ACLPROF_NODE_MODULES"), str(ROOT / ".ci" / "node" / "node_modules")):
        if d and os.path.isfile(os.path.join(d, package, "package.json")):
            return d
    return None


def compile_profile_proto(out: Path) -> str | None:
    """``profile_pb2`` compiled into ``out``: its directory, or None without grpcio-tools or the
    proto file."""
    if not PROFILE_PROTO.is_file():
        return None
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        return None
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROFILE_PROTO.parent}", f"--python_out={out}",
                    PROFILE_PROTO.name], check=True, capture_output=True, timeout=60)
    return str(out)
