"""The library loader. The loader caches what it opened, so every case runs in a fresh
interpreter. Covers the search order, the errors when nothing is found, the backend switch,
library_info(), and a library lacking the optional (newer) symbols, compiled here."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import aclprof
from aclprof import mock

CDEFS = Path(__file__).resolve().parent.parent / "cdefs"

# The functions of the old header (HDR-old, reference 2.3) as trivial stubs. The newer ones
# (SetConfig, GetOpFlag, GetOpAttriValue, SetStampTraceMessage, Mark, MarkEx, Str2Id,
# RangePushEx, RangePop) are missing. Including the cdefs headers makes the compiler check
# the prototypes.
OLD_LIBRARY_C = r"""
#include <stddef.h>
#include <stdint.h>
#include "acl_base.h"
#include "acl_prof.h"

static char g_object[64];

aclError aclprofInit(const char *p, size_t n) { (void)p; (void)n; return 0; }
aclError aclprofFinalize(void) { return 0; }
aclError aclprofStart(const aclprofConfig *c) { (void)c; return 0; }
aclError aclprofStop(const aclprofConfig *c) { (void)c; return 0; }
aclprofConfig *aclprofCreateConfig(uint32_t *l, uint32_t n, aclprofAicoreMetrics m,
                                   const aclprofAicoreEvents *e, uint64_t t)
{ (void)l; (void)n; (void)m; (void)e; (void)t; return (aclprofConfig *)g_object; }
aclError aclprofDestroyConfig(const aclprofConfig *c) { (void)c; return 0; }
aclError aclprofModelSubscribe(uint32_t id, const aclprofSubscribeConfig *c) { (void)id; (void)c; return 0; }
aclError aclprofModelUnSubscribe(uint32_t id) { (void)id; return 0; }
aclprofSubscribeConfig *aclprofCreateSubscribeConfig(int8_t t, aclprofAicoreMetrics m, void *fd)
{ (void)t; (void)m; (void)fd; return (aclprofSubscribeConfig *)g_object; }
aclError aclprofDestroySubscribeConfig(const aclprofSubscribeConfig *c) { (void)c; return 0; }
aclError aclprofGetOpDescSize(size_t *s) { *s = 72; return 0; }
aclError aclprofGetOpNum(const void *d, size_t l, uint32_t *n) { (void)d; (void)l; *n = 0; return 0; }
aclError aclprofGetOpTypeLen(const void *d, size_t l, uint32_t i, size_t *n) { (void)d; (void)l; (void)i; (void)n; return 100000; }
aclError aclprofGetOpType(const void *d, size_t l, uint32_t i, char *b, size_t n) { (void)d; (void)l; (void)i; (void)b; (void)n; return 100000; }
aclError aclprofGetOpNameLen(const void *d, size_t l, uint32_t i, size_t *n) { (void)d; (void)l; (void)i; (void)n; return 100000; }
aclError aclprofGetOpName(const void *d, size_t l, uint32_t i, char *b, size_t n) { (void)d; (void)l; (void)i; (void)b; (void)n; return 100000; }
uint64_t aclprofGetOpStart(const void *d, size_t l, uint32_t i) { (void)d; (void)l; (void)i; return 0; }
uint64_t aclprofGetOpEnd(const void *d, size_t l, uint32_t i) { (void)d; (void)l; (void)i; return 0; }
uint64_t aclprofGetOpDuration(const void *d, size_t l, uint32_t i) { (void)d; (void)l; (void)i; return 0; }
size_t aclprofGetModelId(const void *d, size_t l, uint32_t i) { (void)d; (void)l; (void)i; return 100000; }
aclError aclprofGetStepTimestamp(aclprofStepInfo *s, aclprofStepTag t, aclrtStream st) { (void)s; (void)t; (void)st; return 0; }
aclprofStepInfo *aclprofCreateStepInfo(void) { return (aclprofStepInfo *)g_object; }
void aclprofDestroyStepInfo(aclprofStepInfo *s) { (void)s; }
void *aclprofCreateStamp(void) { return g_object; }
void aclprofDestroyStamp(void *s) { (void)s; }
aclError aclprofPush(void *s) { (void)s; return 0; }
aclError aclprofPop(void) { return 0; }
aclError aclprofRangeStart(void *s, uint32_t *id) { (void)s; *id = 0; return 0; }
aclError aclprofRangeStop(uint32_t id) { (void)id; return 0; }
"""

NEW_SYMBOLS = ("aclprofMarkEx", "aclprofGetOpFlag", "aclprofGetOpAttriValue", "aclprofStr2Id",
               "aclprofRangePushEx")
#: The op-failure calls (issue 24) the stub libraries here do not define.
OP_FAILURE_PREFIXES = ("aclGetTensorDesc", "aclDestroyTensorDesc")
HDR_OLD_LACKS = (*NEW_SYMBOLS, "aclprofSetConfig", "aclprofSetStampTraceMessage", "aclprofMark",
                 "aclprofRangePop")


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no C compiler found, and CI=true: the old-library tests must run in CI")
        pytest.skip("no C compiler to build the stub library")
    return cc


def _build(source: str, target: Path) -> Path:
    c_file = target.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run([_compiler(), "-shared", "-fPIC", "-Wall", "-Werror", "-I", str(CDEFS),
                    "-o", str(target), str(c_file)], check=True, capture_output=True, text=True)
    return target


@pytest.fixture(scope="module")
def old_library(tmp_path_factory) -> Path:
    """A libascendcl.so with only the old header's functions."""
    directory = tmp_path_factory.mktemp("old_cann") / "lib64"
    directory.mkdir()
    return _build(OLD_LIBRARY_C, directory / "libascendcl.so")


def _run(run_python, env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    return run_python(code, env=env)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


REPORT_ERROR = r"""
import json, aclprof, aclprof.binding.loader as loader
assert loader._loaded is None  # importing loaded nothing
out = {}
for attempt in range(2):  # a failure is not cached as a success
    try:
        aclprof.library_info()
        out["loaded"] = True
    except Exception as exc:
        out["type"] = type(exc).__name__
        out["oserror"] = isinstance(exc, OSError)
        out["not_found"] = isinstance(exc, aclprof.LibraryNotFoundError)
        out["msg"] = str(exc)
print(json.dumps(out))
"""


# ---- nothing found ----------------------------------------------------------------------------

def test_explicit_library_missing(run_python, make_env):
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY="/nonexistent/libascendcl.so"), REPORT_ERROR))
    assert "loaded" not in out
    assert out["type"] == "LibraryNotFoundError" and out["oserror"] and out["not_found"]
    msg = out["msg"]
    assert "/nonexistent/libascendcl.so (ACLPROF_LIBRARY)" in msg
    for name in ("ACLPROF_BACKEND", "ASCEND_HOME_PATH", "ACLPROF_LIBRARY", "use_mock"):
        assert name in msg
    # An explicit path is never replaced by another library, the mock included.
    assert "bundled mock" not in msg and "dynamic loader" not in msg


def test_nothing_set_lists_every_path_tried(run_python, make_env, tmp_path):
    env = make_env(ASCEND_HOME_PATH=str(tmp_path / "home"), ASCEND_TOOLKIT_HOME=str(tmp_path / "toolkit"))
    out = _json(_run(run_python, env, REPORT_ERROR))
    assert out["not_found"] and out["oserror"]
    msg = out["msg"]
    home = f"{tmp_path}/home/lib64/libascendcl.so ($ASCEND_HOME_PATH/lib64)"
    toolkit = f"{tmp_path}/toolkit/lib64/libascendcl.so ($ASCEND_TOOLKIT_HOME/lib64)"
    system = "libascendcl.so (dynamic loader search path"
    assert home in msg and toolkit in msg and system in msg
    assert msg.index(home) < msg.index(toolkit) < msg.index(system)
    assert "ACLPROF_BACKEND=mock" in msg


def test_no_variables_at_all(run_python, make_env):
    out = _json(_run(run_python, make_env(), REPORT_ERROR))
    assert out["not_found"]
    assert "dynamic loader search path" in out["msg"] and "$ASCEND_HOME_PATH" not in out["msg"]
    assert "ASCEND_HOME_PATH" in out["msg"]  # named in the fix


def test_not_an_acl_library(run_python, make_env):
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to point at")
    path = next((str(p) for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib")
                 for p in [Path(d) / libm] if p.exists()), libm)
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY=path), REPORT_ERROR))
    assert out["not_found"] and path in out["msg"]


def test_bogus_backend(run_python, make_env):
    out = _json(_run(run_python, make_env(ACLPROF_BACKEND="bogus"), REPORT_ERROR))
    assert out["type"] == "ValueError"
    assert "ACLPROF_BACKEND='bogus'" in out["msg"] and "mock" in out["msg"]


def test_mock_backend_rejects_a_non_mock_library(run_python, make_env, old_library):
    out = _json(_run(run_python, make_env(ACLPROF_BACKEND="mock", ACLPROF_MOCK_LIBRARY=str(old_library)),
                     REPORT_ERROR))
    assert out["not_found"] and "not the aclprof mock" in out["msg"] and str(old_library) in out["msg"]
    assert "ACLPROF_MOCK_LIBRARY" in out["msg"]


def test_mock_backend_ignores_aclprof_library(run_python, make_env, old_library):
    # ACLPROF_BACKEND=mock means the bundled mock, even with a (real) ACLPROF_LIBRARY set.
    out = _json(_run(run_python, make_env(ACLPROF_BACKEND="mock", ACLPROF_LIBRARY=str(old_library)), INFO))
    assert out["is_mock"] and out["path"] == aclprof.library_info().path
    assert out["path"] != str(old_library.resolve())


def test_mock_library_variable_names_another_mock_build(run_python, make_env, tmp_path):
    copy = tmp_path / "sanitize" / "libascendcl.so"
    copy.parent.mkdir()
    shutil.copy(aclprof.library_info().path, copy)
    out = _json(_run(run_python, make_env(ACLPROF_BACKEND="mock", ACLPROF_MOCK_LIBRARY=str(copy)), INFO))
    assert out["is_mock"] and out["path"] == str(copy.resolve())
    # Without the mock backend the variable is not read: the real search runs.
    out = _json(_run(run_python, make_env(ACLPROF_MOCK_LIBRARY=str(copy)), REPORT_ERROR))
    assert out["not_found"] and str(copy) not in out["msg"]


def test_library_without_profiling_symbols_says_so(run_python, make_env, tmp_path):
    # A library that loads but exports no aclprof* (and has no libmsprofiler.so beside it)
    # is reported as lacking them, not only as "libmsprofiler.so could not be loaded".
    lib64 = tmp_path / "wrong" / "lib64"
    lib64.mkdir(parents=True)
    _build("int aclDummyRuntimeSymbol(void) { return 0; }\n", lib64 / "libascendcl.so")
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY=str(lib64 / "libascendcl.so")), REPORT_ERROR))
    assert out["not_found"]
    assert "exports no aclprof* profiling functions" in out["msg"] and "aclprofInit" in out["msg"]
    assert str(lib64 / "libmsprofiler.so") in out["msg"]


# ---- what gets loaded --------------------------------------------------------------------------

INFO = r"""
import json, aclprof
info = aclprof.library_info()
print(json.dumps({"name": info.name, "path": info.path, "is_mock": info.is_mock,
                  "size": info.op_desc_size, "missing": list(info.missing_symbols)}))
"""


def test_library_info_on_the_mock():
    info = aclprof.library_info()  # this process runs on the mock (conftest)
    assert info.is_mock is True
    assert info.op_desc_size == 80
    assert info.missing_symbols == ()
    package = Path(aclprof.__file__).resolve().parent
    assert Path(info.path).is_file() and package in Path(info.path).parents
    assert "mock" in info.name
    mock.set_op_desc_size(72)  # what the library reports, asked each time
    assert aclprof.library_info().op_desc_size == 72
    aclprof.use_mock()  # selecting the mock again is harmless


def test_use_mock_before_first_use(run_python, make_env):
    out = _json(_run(run_python, make_env(),
                     "import aclprof; aclprof.use_mock()\n" + INFO.replace("import json, aclprof", "import json")))
    assert out["is_mock"] and out["size"] == 80 and out["missing"] == []


def test_search_order_of_the_ascend_variables(run_python, make_env, old_library, tmp_path):
    toolkit = old_library.parent.parent  # <root>/lib64/libascendcl.so
    # ASCEND_HOME_PATH has nothing: the toolkit's library is taken.
    out = _json(_run(run_python, make_env(ASCEND_HOME_PATH=str(tmp_path / "empty"),
                                          ASCEND_TOOLKIT_HOME=str(toolkit)), INFO))
    assert out["path"] == str(old_library.resolve()) and not out["is_mock"]
    # Both have one: ASCEND_HOME_PATH wins.
    home = tmp_path / "home" / "lib64"
    home.mkdir(parents=True)
    shutil.copy(old_library, home / "libascendcl.so")
    out = _json(_run(run_python, make_env(ASCEND_HOME_PATH=str(home.parent),
                                          ASCEND_TOOLKIT_HOME=str(toolkit)), INFO))
    assert out["path"] == str((home / "libascendcl.so").resolve())
    # ACLPROF_LIBRARY beats both.
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY=str(aclprof.library_info().path),
                                          ASCEND_HOME_PATH=str(home.parent)), INFO))
    assert out["is_mock"]


OLD_LIBRARY_SCRIPT = r"""
import json, sys
import aclprof
import aclprof.mock
from aclprof.binding import lowlevel as ll

info = aclprof.library_info()
out = {"is_mock": info.is_mock, "missing": list(info.missing_symbols), "size": info.op_desc_size,
       "path": info.path, "name": info.name, "errors": {}}
calls = {
    "mark_ex": lambda: ll.mark_ex("x", ll.Stream(1, None)),
    "str2id": lambda: ll.str2id("x"),
    "range_push_ex": lambda: ll.range_push_ex(1, 2),
    "range_pop": ll.range_pop,
    "get_op_flag": lambda: ll.get_op_flag(b"", 0),
    "get_op_attri_value": lambda: ll.get_op_attri_value(b"", 0),
    "set_config": lambda: ll.set_config(aclprof.ConfigType.SYS_IO_FREQ, "1"),
    "push_ok": lambda: ll.push(ll.create_stamp()),  # present in the old header: works
}
for name, call in calls.items():
    try:
        call()
        out["errors"][name] = None
    except aclprof.UnsupportedError as exc:
        out["errors"][name] = {"function": exc.function, "msg": str(exc),
                               "not_impl": isinstance(exc, NotImplementedError)}
# A session runs; the high-level marker needs aclprofSetStampTraceMessage.
with aclprof.Profiler(sys.argv[1], data_types=aclprof.DataType.ACL_API | aclprof.DataType.MSPROFTX):
    try:
        aclprof.mark("x")
        out["mark"] = None
    except aclprof.UnsupportedError as exc:
        out["mark"] = exc.function
try:
    aclprof.mock.mode()
    out["mock_controls"] = None
except RuntimeError as exc:
    out["mock_controls"] = str(exc)
try:
    aclprof.use_mock()
    out["use_mock"] = None
except RuntimeError as exc:
    out["use_mock"] = str(exc)
print(json.dumps(out))
"""


def test_library_lacking_the_optional_symbols(run_python, make_env, old_library, tmp_path):
    proc = run_python("", env=make_env(ACLPROF_LIBRARY=str(old_library)),
                      args=["-c", OLD_LIBRARY_SCRIPT, str(tmp_path / "out")])
    out = _json(proc)
    assert out["is_mock"] is False and out["size"] == 72
    assert out["path"] == str(old_library.resolve()) and out["name"] == "libascendcl.so"
    assert set(HDR_OLD_LACKS) <= set(out["missing"])
    # Only the old header's gaps and the runtime (not in this stub) are missing.
    assert all(s in HDR_OLD_LACKS or s.startswith(("aclrt", "aclmdl", "aclInit", "aclFinalize",
                                                        "aclCreateDataBuffer", "aclDestroyDataBuffer",
                                                        *OP_FAILURE_PREFIXES))
               for s in out["missing"])
    expected = {"mark_ex": "aclprofMarkEx", "str2id": "aclprofStr2Id",
                "range_push_ex": "aclprofRangePushEx", "range_pop": "aclprofRangePop",
                "get_op_flag": "aclprofGetOpFlag", "get_op_attri_value": "aclprofGetOpAttriValue",
                "set_config": "aclprofSetConfig"}
    for call, symbol in expected.items():
        err = out["errors"][call]
        assert err is not None, f"{call} did not raise UnsupportedError"
        assert err["function"] == symbol and symbol in err["msg"] and err["not_impl"]
    assert out["errors"]["push_ok"] is None
    assert out["mark"] == "aclprofSetStampTraceMessage"
    assert "needs the mock library" in out["mock_controls"]
    assert "use_mock() called after the real ACL library was loaded" in out["use_mock"]


def test_profiling_symbols_in_libmsprofiler(run_python, make_env, tmp_path):
    # Some CANN installs export the profiling API from libmsprofiler.so next to libascendcl.so.
    lib64 = tmp_path / "split" / "lib64"
    lib64.mkdir(parents=True)
    _build("int aclDummyRuntimeSymbol(void) { return 0; }\n", lib64 / "libascendcl.so")
    _build(OLD_LIBRARY_C, lib64 / "libmsprofiler.so")
    # Named explicitly, libascendcl.so lacks the profiling API: libmsprofiler.so beside it gives it.
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY=str(lib64 / "libascendcl.so")), INFO))
    assert out["path"] == str((lib64 / "libascendcl.so").resolve())
    assert out["size"] == 72 and not out["is_mock"]
    # Found through ASCEND_HOME_PATH, libmsprofiler.so (current CANN's home of aclprof*) is
    # taken before the deprecated compatibility library (issue 22).
    out = _json(_run(run_python, make_env(ASCEND_HOME_PATH=str(lib64.parent)), INFO))
    assert out["path"] == str((lib64 / "libmsprofiler.so").resolve())
    assert set(HDR_OLD_LACKS) <= set(out["missing"])
    assert "aclprofInit" not in out["missing"] and "aclprofPush" not in out["missing"]


# ---- the model runtime in libacl_mdl.so (fidelity audit row 16) ---------------------------------

# The model runtime and datasets as trivial stubs, for a libacl_mdl.so beside a libascendcl.so
# that lacks them (CANN's split packages). Execute returns a marker code to show which
# library answered.
MDL_LIBRARY_C = r"""
#include <stddef.h>
#include <stdint.h>
#include "acl_base.h"
#include "acl_runtime.h"

static char g_object[64];

aclError aclmdlLoadFromFile(const char *p, uint32_t *id) { (void)p; *id = 7; return 0; }
aclError aclmdlExecute(uint32_t id, const aclmdlDataset *i, aclmdlDataset *o)
{ (void)id; return (i && o) ? 123456 : 100000; }
aclError aclmdlUnload(uint32_t id) { (void)id; return 0; }
aclmdlDataset *aclmdlCreateDataset(void) { return (aclmdlDataset *)g_object; }
aclError aclmdlDestroyDataset(const aclmdlDataset *d) { (void)d; return 0; }
aclError aclmdlAddDatasetBuffer(aclmdlDataset *d, aclDataBuffer *b) { (void)d; (void)b; return 0; }
size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *d) { (void)d; return 0; }
"""

MDL_SCRIPT = r"""
import json
import aclprof
from aclprof.binding import lowlevel as ll

info = aclprof.library_info()
out = {"path": info.path, "model_library": info.model_library,
       "missing": list(info.missing_symbols)}
try:
    with ll.mdl_create_dataset() as inputs, ll.mdl_create_dataset() as outputs:
        ll.mdl_execute(ll.mdl_load_from_file("m.om"), inputs, outputs)
except aclprof.UnsupportedError as exc:
    out["unsupported"] = {"function": exc.function, "msg": str(exc)}
except aclprof.AclError as exc:
    out["code"] = exc.code
print(json.dumps(out))
"""


def test_model_runtime_found_in_libacl_mdl(run_python, make_env, tmp_path):
    lib64 = tmp_path / "split" / "lib64"
    lib64.mkdir(parents=True)
    _build(OLD_LIBRARY_C, lib64 / "libascendcl.so")
    _build(MDL_LIBRARY_C, lib64 / "libacl_mdl.so")
    out = _json(_run(run_python, make_env(ASCEND_HOME_PATH=str(lib64.parent)), MDL_SCRIPT))
    assert out["path"] == str((lib64 / "libascendcl.so").resolve())
    assert out["model_library"] == str((lib64 / "libacl_mdl.so").resolve())
    assert not any(s.startswith("aclmdl") and s != "aclmdlCreateAndGetOpDesc" for s in out["missing"])
    assert out["code"] == 123456  # the stub in libacl_mdl.so ran, with two datasets


def test_model_runtime_missing_from_both_libraries(run_python, make_env, old_library):
    out = _json(_run(run_python, make_env(ACLPROF_LIBRARY=str(old_library)), MDL_SCRIPT))
    assert out["model_library"] is None
    assert {"aclmdlExecute", "aclmdlLoadFromFile", "aclmdlCreateDataset"} <= set(out["missing"])
    err = out["unsupported"]
    assert err["function"] == "aclmdlCreateDataset"
    # Names both places it looked, and what to install.
    assert str(old_library) in err["msg"]
    assert str(old_library.parent / "libacl_mdl.so") in err["msg"]
    assert "install CANN's model runtime" in err["msg"]


def test_mock_reports_itself_as_the_model_library():
    info = aclprof.library_info()
    assert info.model_library == info.path
