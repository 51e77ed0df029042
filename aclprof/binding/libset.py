"""CANN's library set: which file each function group lives in, where a resolved function
really came from, and the dependencies CANN opens by bare name.

Current CANN (hicann/runtime ``docs/zh/api_ref/01_overview.md`` table 2, read at
``2d1945e7``; hicann/runtime ``src/dfx/msprof/collector/dvvp/msprofiler/CMakeLists.txt:40-55``
at ``681ef7610``) ships ``acl/acl_prof.h`` in ``libmsprofiler.so`` and ``acl/acl_rt.h``
(``aclInit``, ``aclFinalize``, ``aclrt*``) in ``libacl_rt.so``; ``libascendcl.so`` still
exports both as a compatibility path the docs call deprecated. GE builds ``aclmdl*`` into
``libacl_mdl.so``. :data:`GROUPS` names each group with that home library.

``libmsprofiler.so`` needs ``libprofapi.so``, which ``dlopen``\\s ``libprofimpl.so``
(``dvvp/profapi/src/prof_cann_plugin.cpp:27,55-69``) and ``libruntime.so``
(``prof_runtime_plugin.cpp:22,47-57``) by bare name, and CANN links with no RPATH
(``cmake/func.cmake:171``): CANN's ``lib64`` must be on the dynamic loader's path even when
aclprof opens a library by absolute path. :func:`check_runtime_opens` makes those opens at
load time, so a missing one is one clear :class:`LibraryDependencyError` instead of a failed
``aclprofInit`` later; :func:`dependency_error` turns the loader's "cannot open shared object
file" for a DT_NEEDED library into the same error.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, NamedTuple

from aclprof.binding.errors import LibraryNotFoundError

__all__ = ["GROUPS", "Group", "GroupSource", "LibraryDependencyError", "check_runtime_opens",
           "dependency_error", "group_of", "provider_of"]

PROFILER_LIB = "libmsprofiler.so"
RUNTIME_LIB = "libacl_rt.so"
MODEL_LIB = "libacl_mdl.so"
COMPAT_LIB = "libascendcl.so"

_TX = frozenset({
    "aclprofCreateStamp", "aclprofDestroyStamp", "aclprofSetStampTraceMessage", "aclprofPush",
    "aclprofPop", "aclprofMark", "aclprofMarkEx", "aclprofRangeStart", "aclprofRangeStop",
    "aclprofRangePushEx", "aclprofRangePop", "aclprofStr2Id",
})
_STEP = frozenset({"aclprofCreateStepInfo", "aclprofDestroyStepInfo", "aclprofGetStepTimestamp"})
_GETTERS_PREFIX = ("aclprofGetOp", "aclprofGetModelId")


class Group(NamedTuple):
    """A function group: its name, the library current CANN builds it into (None: wherever
    the named library is), and a function whose presence says a library has the group."""

    name: str
    home: str | None
    probe: str


#: In the order :func:`aclprof.library_info` reports them.
GROUPS: tuple[Group, ...] = (
    Group("session", PROFILER_LIB, "aclprofInit"),
    Group("op-desc getters", PROFILER_LIB, "aclprofGetOpType"),
    Group("msproftx", PROFILER_LIB, "aclprofCreateStamp"),
    Group("step info", PROFILER_LIB, "aclprofCreateStepInfo"),
    Group("runtime", RUNTIME_LIB, "aclrtSetDevice"),
    Group("model", MODEL_LIB, "aclmdlExecute"),
    Group("mock controls", None, "aclmockVersion"),
)


def group_of(name: str) -> str:
    """The group of the C function ``name`` (one of :data:`GROUPS`' names)."""
    if name.startswith("aclmock"):
        return "mock controls"
    if name.startswith(("aclmdl", "aclCreateDataBuffer", "aclDestroyDataBuffer", "aclGetTensorDesc",
                        "aclDestroyTensorDesc")):  # the last two: GE's api/acl/acl_model (issue 24)
        return "model"
    if name.startswith(("aclrt", "aclInit", "aclFinalize")):
        return "runtime"
    if name in _TX:
        return "msproftx"
    if name in _STEP:
        return "step info"
    if name.startswith(_GETTERS_PREFIX) or name == "aclprofGetOpDescSize":
        return "op-desc getters"
    return "session"


class GroupSource(NamedTuple):
    """Where one group's functions came from (:attr:`aclprof.LibraryInfo.groups`)."""

    group: str
    #: The files (resolved paths) that provided the group's functions; empty when none did.
    files: tuple[str, ...]
    found: int
    missing: tuple[str, ...]


class LibraryDependencyError(LibraryNotFoundError):
    """A CANN library was found but a library it needs was not (no RPATH: the directory
    must be on the dynamic loader's path). Names the library, the missing file and the fix."""

    def __init__(self, library: str, missing: str, detail: str):
        self.library = library
        self.missing = missing
        super().__init__(_dependency_message(library, missing, detail))


def _dependency_message(library: str, missing: str, detail: str) -> str:
    directory = os.path.dirname(library) or "CANN's lib64"
    beside = os.path.join(directory, missing)
    where = (f"{missing} is in {directory}, but that directory is not on the dynamic loader's path"
             if os.path.exists(beside) else
             f"{missing} is not in {directory} either (an incomplete CANN install?)")
    return (
        f"{library} was found, but it needs {missing}, which the dynamic loader cannot find "
        f"({detail}). CANN's libraries carry no RPATH and open their dependencies by bare name, "
        f"so CANN's lib64 must be on the search path even when aclprof opens a library by "
        f"absolute path; {where}.\nFix: source CANN's set_env.sh (it sets LD_LIBRARY_PATH), or "
        f"start the process with LD_LIBRARY_PATH={directory}:$LD_LIBRARY_PATH (it is read when "
        "the process starts: setting os.environ from Python is too late)"
    )


_CANNOT_OPEN = re.compile(r"([^\s:'\"]+\.so[\w.]*): cannot open shared object file")


def dependency_error(path: str, exc: OSError) -> LibraryDependencyError | None:
    """The dependency error hidden in ``dlopen(path)``'s failure ``exc``, or None when the
    failure is about ``path`` itself (absent, not a library) rather than a library it needs."""
    for match in _CANNOT_OPEN.finditer(str(exc)):
        name = match.group(1)
        if name != path and os.path.basename(name) != os.path.basename(path):
            return LibraryDependencyError(path, name, "cannot open shared object file")
    return None


#: Libraries CANN opens at run time with a bare-name dlopen, by the library that opens them.
RUNTIME_OPENS: dict[str, tuple[str, ...]] = {
    "libprofapi.so": ("libprofimpl.so", "libruntime.so"),
}


def check_runtime_opens(library: str, ffi: Any) -> list[Any]:
    """Make the bare-name opens CANN will make later (:data:`RUNTIME_OPENS`), for every opener
    that the loaded libraries pulled in (``ffi``: the binding's cffi ABI module, whose
    ``dlopen`` takes flags); returns the handles (keep them: CANN's own dlopen then finds the
    same objects). Raises :class:`LibraryDependencyError` naming ``library``, the opener and
    the missing file."""
    handles = []
    for opener, names in RUNTIME_OPENS.items():
        try:
            ffi.dlopen(opener, ffi.RTLD_NOLOAD | ffi.RTLD_LAZY)
        except OSError:
            continue  # not part of this library set
        for name in names:
            try:
                handles.append(ffi.dlopen(name, ffi.RTLD_LAZY | ffi.RTLD_LOCAL | ffi.RTLD_NODELETE))
            except OSError as exc:
                raise LibraryDependencyError(
                    library, name, f"{opener}, which {os.path.basename(library)} loads, opens it "
                    f"by bare name: {exc}") from exc
    return handles


def provider_of(address: int) -> str | None:
    """The file (resolved path) that defines the function at ``address``: ``dlsym`` on a
    handle also searches the handle's dependencies, so only ``dladdr`` says which file it is
    (in the compiled helper: no ctypes import on the loader's path)."""
    from aclprof.binding._fast import ffi, lib

    buf = ffi.new("char[]", 4096)
    n = lib.aclprof_fast_dl_file(address, buf, 4096)
    if n == 0 or n >= 4096:
        return None
    return _realpath(os.fsdecode(ffi.string(buf)))


@functools.lru_cache(maxsize=64)
def _realpath(path: str) -> str:
    """Resolved once per file: every function of a library names the same one."""
    return os.path.realpath(path)
