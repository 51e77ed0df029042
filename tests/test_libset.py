"""CANN's library set (issue 22, "The real library set"): the loader finds each function group
in the file current CANN builds it into, says which file gave which group, and turns a
dependency the dynamic loader cannot find into one error naming the library, the missing file
and the fix. Runs on the mock built as several libraries (``make -C mock_acl split``), each
case in a fresh interpreter (the loader caches what it opened; LD_LIBRARY_PATH is read at
process start)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from aclprof.binding.loader import mock_library_path

REPO = Path(__file__).resolve().parent.parent

GROUPS_SCRIPT = r"""
import json, aclprof
from aclprof.binding import lowlevel as ll
out = {}
try:
    info = aclprof.library_info()
except aclprof.LibraryNotFoundError as exc:
    print(json.dumps({"error": type(exc).__name__, "msg": str(exc),
                      "library": getattr(exc, "library", None), "missing": getattr(exc, "missing", None)}))
    raise SystemExit(0)
out["path"] = info.path
out["groups"] = {g.group: [list(g.files), g.found, list(g.missing)] for g in info.groups}
try:
    ll.rt_set_device(0)
    out["rt"] = None
except aclprof.UnsupportedError as exc:
    out["rt"] = str(exc)
ll.init(".")
ll.finalize()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory) -> Path:
    """The mock built as CANN's library set, in a fresh directory of this module's own."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
        if os.environ.get("CI") == "true":
            pytest.fail("make or cc missing, and CI=true: the split-library tests must run in CI")
        pytest.skip("make and a C compiler are needed to build the split mock (make -C mock_acl split)")
    out = tmp_path_factory.mktemp("cann") / "lib64"
    subprocess.run(["make", "-s", "-C", str(REPO / "mock_acl"), "split", f"SPLIT_DIR={out}"],
                   check=True, capture_output=True, text=True)
    return out


def _run(run_python, make_env, lib64: Path, ld_path: bool = True, **env: str) -> dict:
    extra = {"LD_LIBRARY_PATH": str(lib64)} if ld_path else {}
    proc = run_python(GROUPS_SCRIPT, env=make_env(**extra, **env))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_group_comes_from_its_cann_library(run_python, make_env, split_dir):
    out = _run(run_python, make_env, split_dir, ACLPROF_LIBRARY=str(split_dir / "libmsprofiler.so"))
    prof = str((split_dir / "libmsprofiler.so").resolve())
    groups = out["groups"]
    for group in ("session", "op-desc getters", "msproftx", "step info", "mock controls"):
        assert groups[group][0] == [prof], group
    assert groups["runtime"][0] == [str((split_dir / "libacl_rt.so").resolve())]
    assert groups["model"][0] == [str((split_dir / "libacl_mdl.so").resolve())]
    assert all(not missing for _, _, missing in groups.values())
    assert out["rt"] is None  # aclrtSetDevice ran, from libacl_rt.so


def test_ascend_home_prefers_libmsprofiler_over_the_compat_library(run_python, make_env, split_dir,
                                                                  tmp_path):
    # A libascendcl.so beside it (the deprecated path) is not the one taken.
    home = tmp_path / "home"
    shutil.copytree(split_dir, home / "lib64")
    # the installed mock (an installed package, editable or not: not necessarily the checkout)
    shutil.copy(mock_library_path(), home / "lib64" / "libascendcl.so")
    out = _run(run_python, make_env, home / "lib64", ASCEND_HOME_PATH=str(home))
    assert out["path"] == str((home / "lib64" / "libmsprofiler.so").resolve())


def test_missing_runtime_library_is_named_when_called(run_python, make_env, split_dir, tmp_path):
    lib64 = tmp_path / "lib64"
    shutil.copytree(split_dir, lib64)
    (lib64 / "libacl_rt.so").unlink()
    out = _run(run_python, make_env, lib64, ACLPROF_LIBRARY=str(lib64 / "libmsprofiler.so"))
    assert "aclrtSetDevice" in out["groups"]["runtime"][2] and out["groups"]["runtime"][0] == []
    assert "libacl_rt.so" in out["rt"] and "aclrtSetDevice" in out["rt"]


def test_needed_library_off_the_loader_path_is_one_clear_error(run_python, make_env, split_dir):
    # libmsprofiler.so needs libprofapi.so (DT_NEEDED, no RPATH): opening it by absolute
    # path is not enough. The same install under ASCEND_HOME_PATH gives the same error (no
    # silent fall-through to another candidate).
    lib = str(split_dir / "libmsprofiler.so")
    for env in ({"ACLPROF_LIBRARY": lib}, {"ASCEND_HOME_PATH": str(split_dir.parent)}):
        out = _run(run_python, make_env, split_dir, ld_path=False, **env)
        assert out["error"] == "LibraryDependencyError"
        assert out["library"] == lib and out["missing"] == "libprofapi.so"
        msg = out["msg"]
        assert f"libprofapi.so is in {split_dir}" in msg
        assert "set_env.sh" in msg and f"LD_LIBRARY_PATH={split_dir}:$LD_LIBRARY_PATH" in msg


def test_bare_name_open_of_libprofimpl_checked_at_load(run_python, make_env, split_dir, tmp_path):
    # libprofapi.so is found, but libprofimpl.so (which CANN's libprofapi.so dlopens by bare
    # name at run time) is not in the install: the load says so, not a later aclprofInit.
    lib64 = tmp_path / "lib64"
    shutil.copytree(split_dir, lib64)
    (lib64 / "libprofimpl.so").unlink()
    out = _run(run_python, make_env, lib64, ACLPROF_LIBRARY=str(lib64 / "libmsprofiler.so"))
    assert out["error"] == "LibraryDependencyError" and out["missing"] == "libprofimpl.so"
    assert "libprofapi.so" in out["msg"] and "not in" in out["msg"] and "set_env.sh" in out["msg"]


def test_the_bundled_mock_gives_every_group_itself(run_python, make_env):
    out = _run(run_python, make_env, REPO, ld_path=False, ACLPROF_BACKEND="mock")
    files = {tuple(v[0]) for v in out["groups"].values()}
    assert len(files) == 1 and next(iter(files))[0].endswith("libascendcl.so")
    assert set(out["groups"]) == {"session", "op-desc getters", "msproftx", "step info", "runtime",
                                  "model", "mock controls"}


# Loaded libraries are never unloaded: at interpreter exit cffi frees its Lib objects, and a
# dlclose then unmapped the library under CANN's still-waiting response thread (SIGSEGV at exit).
KEPT_MAPPED = r"""
import gc, sys
from aclprof.binding import _acl_ffi, loader
path = sys.argv[1]
handle = loader._dlopen(path, _acl_ffi.ffi)
assert handle.aclprofInit is not None
del handle
gc.collect()
print(any(line.rstrip().endswith(path) for line in open("/proc/self/maps")))
"""


def test_a_loaded_library_stays_mapped_when_its_handles_are_freed(run_python, make_env, tmp_path):
    copy = tmp_path / "libcopy.so"  # a file no other handle in the process has opened
    shutil.copy(mock_library_path(), copy)
    proc = run_python("", env=make_env(ACLPROF_BACKEND="mock"), args=["-c", KEPT_MAPPED, str(copy)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]
