"""The one place that finds and opens the ACL library (real CANN or the bundled mock).

Search order (first hit wins, nothing falls back to the mock silently):

1. ``ACLPROF_BACKEND=mock`` or :func:`use_mock` selects the bundled mock
   (``aclprof/_mock/libascendcl.so``), always: ``ACLPROF_LIBRARY`` is ignored then (it names
   the real library a deployment uses, and a test run must not pick it up by accident).
   ``ACLPROF_MOCK_LIBRARY`` names another mock build (a sanitizer build, say); a library
   named there that is not the aclprof mock is an error.
2. ``ACLPROF_LIBRARY``: an explicit path. If it cannot be opened, that is the error: an
   explicit choice is never replaced by another library.
3. ``$ASCEND_HOME_PATH/lib64/libascendcl.so``, then ``$ASCEND_TOOLKIT_HOME/lib64/libascendcl.so``.
4. The system search (``ctypes.util.find_library("ascendcl")``, then ``libascendcl.so``
   through the dynamic loader's own path, ``LD_LIBRARY_PATH`` included).

When every candidate fails, :class:`~aclprof.binding.errors.LibraryNotFoundError` lists each path
tried with the reason, and the variables that would fix it.

Symbols are resolved once at load, group by group (:data:`aclprof.binding.libset.GROUPS`): a group
the named library lacks comes from its home library in the same directory, as current CANN
ships it: ``aclprof*`` from ``libmsprofiler.so``, ``aclInit``/``aclFinalize``/``aclrt*`` from
``libacl_rt.so``, ``aclmdl*`` from ``libacl_mdl.so`` (``libascendcl.so`` is CANN's deprecated
compatibility path; ``$ASCEND_HOME_PATH/lib64/libmsprofiler.so`` is therefore tried before it).
Only the profiling functions are required; the runtime and model groups are optional (profiling
does not need them). :func:`library_info` says which file provided which group (by ``dladdr``).
A library whose dependency the dynamic loader cannot find (CANN links without RPATH, and
``libprofapi.so`` opens ``libprofimpl.so``/``libruntime.so`` by bare name) raises
:class:`~aclprof.binding.libset.LibraryDependencyError` at once, naming the library, the missing
file and the fix, instead of trying other candidates. Symbols missing from older CANN versions are
recorded; calling one raises :class:`~aclprof.binding.errors.UnsupportedError`.

Only this module and ``aclprof.binding.lowlevel`` touch cffi objects.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

from aclprof.binding import libset
from aclprof.binding.errors import LibraryNotFoundError, UnsupportedError
from aclprof.binding.libset import GroupSource, LibraryDependencyError

__all__ = ["LibraryInfo", "library_info", "use_mock", "mock_library_path"]

ENV_BACKEND = "ACLPROF_BACKEND"
ENV_LIBRARY = "ACLPROF_LIBRARY"
ENV_MOCK_LIBRARY = "ACLPROF_MOCK_LIBRARY"
_ASCEND_ENV = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
_LIBNAME = "libascendcl.so"
_MDL_LIBNAME = "libacl_mdl.so"
_MDL_PROBE = "aclmdlExecute"  # the model runtime is there when this one is

# Functions a library must export to be usable at all (present since the oldest header).
_REQUIRED = ("aclprofInit", "aclprofFinalize", "aclprofStart", "aclprofStop", "aclprofCreateConfig")


def mock_library_path() -> Path:
    """Where ``pip install`` put the bundled mock library."""
    return Path(__file__).resolve().parent.parent / "_mock" / _LIBNAME


class LibraryInfo(NamedTuple):
    """What :func:`library_info` reports about the loaded library."""

    name: str
    path: str
    is_mock: bool
    op_desc_size: int | None
    missing_symbols: tuple[str, ...]
    #: The library the ``aclmdl*`` functions come from (``path`` itself, or the
    #: ``libacl_mdl.so`` beside it); None when no library has them.
    model_library: str | None = None
    #: Which file provided each function group (:data:`aclprof.binding.libset.GROUPS`).
    groups: tuple[GroupSource, ...] = ()


class _Library:
    """An opened library: resolved functions by C name, plus facts about it."""

    def __init__(self, path: str, opened: _Opened, ffi: Any):
        self.path = path
        self.model_library = opened.model_library
        self.model_library_error = opened.group_errors.get("model")
        self.group_errors = opened.group_errors
        self.ffi = ffi
        self._handles = opened.handles  # keep every dlopen handle alive
        self._keep = opened.keep        # and the dependencies opened for CANN
        self.functions: dict[str, Any] = {}
        missing = []
        handles = [h for _, h in opened.handles]
        for name in dir(handles[0]):
            if not name.startswith("acl"):
                continue
            fn = None
            for handle in handles:
                fn = _symbol(handle, name, ffi)
                if fn is not None:
                    break
            if isinstance(fn, int):
                continue  # a #define constant, not a function
            if fn is not None:
                self.functions[name] = fn
            elif not name.startswith("aclmock"):
                missing.append(name)
        self.missing = tuple(sorted(missing))
        self.is_mock = "aclmockVersion" in self.functions
        # Constants (#define and enum values) are read through any handle.
        self.constants = handles[0]
        self.groups = self._group_sources(opened.handles)

    def _group_sources(self, opened: list[tuple[str, Any]]) -> tuple[GroupSource, ...]:
        files: dict[str, list[str]] = {g.name: [] for g in libset.GROUPS}
        found = dict.fromkeys(files, 0)
        missing: dict[str, list[str]] = {g.name: [] for g in libset.GROUPS}
        for name, fn in sorted(self.functions.items()):
            group = libset.group_of(name)
            where = libset.provider_of(int(self.ffi.cast("uintptr_t", fn)))
            if where is None:  # no dladdr: the first opened library that has it
                where = next(os.path.realpath(p) for p, h in opened if _symbol(h, name, self.ffi) is not None)
            if where not in files[group]:
                files[group].append(where)
            found[group] += 1
        for name in self.missing:
            missing[libset.group_of(name)].append(name)
        return tuple(GroupSource(g.name, tuple(files[g.name]), found[g.name], tuple(missing[g.name]))
                     for g in libset.GROUPS if found[g.name] or missing[g.name])

    def fn(self, name: str) -> Any:
        """The C function ``name``; raises UnsupportedError if the library lacks it."""
        try:
            return self.functions[name]
        except KeyError:
            detail = None
            group = libset.group_of(name)
            if name.startswith("aclmock"):
                detail = "it exists only in the aclprof mock (ACLPROF_BACKEND=mock)"
            elif group == "model" and self.model_library is None:
                detail = (
                    f"the model runtime is in neither {self.path} nor "
                    f"{_beside(self.path, _MDL_LIBNAME)} ({self.model_library_error}); "
                    f"install CANN's model runtime ({_MDL_LIBNAME}) next to {_LIBNAME}")
            elif group == "runtime" and group in self.group_errors:
                detail = (f"{self.path} lacks the runtime and {self.group_errors[group]}; "
                          f"CANN ships it in {libset.RUNTIME_LIB} beside {libset.PROFILER_LIB}")
            raise UnsupportedError(function=name, detail=detail) from None


_lock = threading.Lock()
_loaded: _Library | None = None
_want_mock = False


def use_mock() -> None:
    """Select the bundled mock library. Call before the first use of the library.

    Raises:
        RuntimeError: a real (non-mock) library is already loaded in this process.
    """
    global _want_mock
    with _lock:
        if _loaded is not None and not _loaded.is_mock:
            raise RuntimeError(
                f"use_mock() called after the real ACL library was loaded from {_loaded.path}; "
                "call it before the first aclprof call, or set ACLPROF_BACKEND=mock"
            )
        _want_mock = True


def _backend() -> str:
    value = os.environ.get(ENV_BACKEND, "").strip().lower()
    if value not in ("", "mock", "real", "cann"):
        raise ValueError(f"{ENV_BACKEND}={value!r} is not understood; use 'mock' or 'real'")
    return "mock" if (_want_mock or value == "mock") else "real"


def _candidates() -> tuple[list[tuple[str, str]], bool]:
    """(list of (origin, path-or-name), is_exclusive) in search order."""
    env = os.environ
    if _backend() == "mock":
        # ACLPROF_LIBRARY is deliberately not read here: the mock backend means the mock,
        # whatever real library the environment names; another mock build has its own variable.
        explicit = env.get(ENV_MOCK_LIBRARY)
        if explicit:
            return [(f"{ENV_MOCK_LIBRARY} (mock backend)", explicit)], True
        bundled = mock_library_path()
        if not bundled.is_file():
            from aclprof.binding.built import not_built_hint

            raise LibraryNotFoundError(not_built_hint(f"the bundled mock library {bundled}"))
        return [("bundled mock", str(bundled))], True
    explicit = env.get(ENV_LIBRARY)
    if explicit:
        return [(ENV_LIBRARY, explicit)], True
    found: list[tuple[str, str]] = []
    for var in _ASCEND_ENV:
        root = env.get(var)
        if root:
            # Current CANN's profiling library first (when present), then the deprecated
            # compatibility library (libset's docstring has the sources).
            profiler = os.path.join(root, "lib64", libset.PROFILER_LIB)
            if os.path.isfile(profiler):
                found.append((f"${var}/lib64", profiler))
            found.append((f"${var}/lib64", os.path.join(root, "lib64", _LIBNAME)))
    import ctypes.util  # here, not at import: it costs ~20 ms and only the real search needs it

    for short in ("msprofiler", "ascendcl"):
        system = ctypes.util.find_library(short)
        if system:
            found.append((f"ctypes.util.find_library({short!r})", system))
    found.append(("dynamic loader search path (LD_LIBRARY_PATH, ld.so.cache)", _LIBNAME))
    return found, False


def _symbol(handle: Any, name: str, ffi: Any) -> Any:
    """``handle.name``, or None when the library lacks the symbol. (A cffi ABI-mode library
    raises ``ffi.error``, not AttributeError, for a declared but missing symbol.)"""
    try:
        return getattr(handle, name)
    except (AttributeError, ffi.error):
        return None


def _beside(path: str, name: str) -> str:
    """``name`` in ``path``'s directory (a bare name: the dynamic loader searches it too)."""
    return os.path.join(os.path.dirname(path), name)


class _Opened(NamedTuple):
    """What :func:`_open` opened: (path, handle) pairs in search order, the file with aclmdl*
    (or None), why an optional group's home library was not used, by group, and the
    dependencies opened for CANN (kept loaded)."""

    handles: list[tuple[str, Any]]
    model_library: str | None
    group_errors: dict[str, str]
    keep: list[Any]


def _dlopen(path: str, ffi: Any) -> Any:
    """``ffi.dlopen(path)``, never unloaded; a library it needs that cannot be found is a
    LibraryDependencyError."""
    # RTLD_NODELETE: at interpreter exit cffi frees its Lib objects, and their dlclose would
    # unmap the library while its own threads still run in it (CANN's response thread waits
    # up to 30 s and nothing at exit stops it): the exiting process then dies of SIGSEGV
    # (issue 22: 8 of 600 exits under load before this flag, 0 of 900 after).
    try:
        return ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_NODELETE)
    except OSError as exc:
        dependency = libset.dependency_error(path, exc)
        if dependency is not None:
            raise dependency from exc
        raise


def _open(path: str, ffi: Any) -> _Opened:
    """Open ``path`` and, for each group it lacks, the group's home library beside it."""
    handles = [(path, _dlopen(path, ffi))]
    model_library: str | None = None
    errors: dict[str, str] = {}
    for group in libset.GROUPS:
        if group.home is None:
            continue
        having = next((p for p, h in handles if _symbol(h, group.probe, ffi) is not None), None)
        if having is not None:
            if group.name == "model":
                model_library = having
            continue
        beside = _beside(path, group.home)
        try:
            extra = _dlopen(beside, ffi)
        except LibraryDependencyError:
            raise
        except OSError as exc:
            if group.name == "session":
                # When libmsprofiler.so is absent too, say first that this library lacks the
                # functions: the missing libmsprofiler.so alone reads as a broken install when
                # the path may simply name the wrong file.
                raise OSError(
                    "opened, but it exports no aclprof* profiling functions (aclprofInit is "
                    f"missing), and {beside}, where current CANN keeps them, could not be "
                    f"loaded ({exc}): not an ACL library, or a CANN install without "
                    f"{libset.PROFILER_LIB}") from exc
            # The runtime and the model groups are optional: recorded, named when called.
            errors[group.name] = f"{group.home}: {exc}"
            continue
        if _symbol(extra, group.probe, ffi) is None:
            errors[group.name] = f"{beside} does not export {group.probe}"
            continue
        handles.append((beside, extra))
        if group.name == "model":
            model_library = beside
    for name in _REQUIRED:
        if all(_symbol(h, name, ffi) is None for _, h in handles):
            raise OSError(f"opened, but it does not export {name}: not an ACL library")
    return _Opened(handles, model_library, errors, libset.check_runtime_opens(path, ffi))


def _load() -> _Library:
    from aclprof.binding.built import import_built

    ffi = import_built("_acl_ffi").ffi  # generated by setup.py (out-of-line ABI mode)

    candidates, _ = _candidates()
    tried: list[str] = []
    for origin, path in candidates:
        try:
            opened = _open(path, ffi)
        except LibraryDependencyError:
            raise  # the install is found but broken: trying another candidate would hide it
        except OSError as exc:
            tried.append(f"  {path} ({origin}): {exc}")
            continue
        library = _Library(path, opened, ffi)
        if _backend() == "mock" and not library.is_mock:
            tried.append(f"  {path} ({origin}): loaded, but it is not the aclprof mock "
                         "(it lacks aclmockVersion); point it at a mock_acl build")
            continue
        _bind_fast_paths(library)
        return library
    raise LibraryNotFoundError(
        "no ACL library could be loaded. Tried, in order:\n"
        + "\n".join(tried)
        + "\nFix: source CANN's set_env.sh (sets ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME), "
        f"or set {ENV_LIBRARY}=/path/to/libascendcl.so, or add its directory to "
        f"LD_LIBRARY_PATH; to run without an NPU use the mock: {ENV_BACKEND}=mock or "
        "aclprof.use_mock()"
    )


def _bind_fast_paths(library: _Library) -> None:
    """Hand the library's msproftx and op getter function pointers to the compiled helpers."""
    from aclprof.binding._fast import lib as fast

    def address(name: str) -> int:
        fn = library.functions.get(name)
        return int(library.ffi.cast("uintptr_t", fn)) if fn is not None else 0

    fast.aclprof_fast_bind_tx(
        address("aclprofCreateStamp"),
        address("aclprofDestroyStamp"),
        address("aclprofSetStampTraceMessage"),
        address("aclprofPush"),
        address("aclprofPop"),
        address("aclprofMark"),
        address("aclprofRangeStart"),
        address("aclprofRangeStop"),
    )
    fast.aclprof_fast_bind_ops(
        address("aclprofGetOpTypeLen"),
        address("aclprofGetOpType"),
        address("aclprofGetOpNameLen"),
        address("aclprofGetOpName"),
    )


def get_library() -> _Library:
    """The loaded library, loading it on first use (thread-safe)."""
    global _loaded
    lib = _loaded
    if lib is not None:
        return lib
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def library_info() -> LibraryInfo:
    """Which library is loaded (loading it if needed), its path, and what it reports."""
    lib = get_library()
    size: int | None = None
    if "aclprofGetOpDescSize" in lib.functions:
        out = lib.ffi.new("size_t *")
        if lib.functions["aclprofGetOpDescSize"](out) == 0:
            size = int(out[0])
    name = "aclprof mock libascendcl" if lib.is_mock else os.path.basename(lib.path)

    def shown(path: str) -> str:
        return str(Path(path).resolve()) if os.path.sep in path else path

    return LibraryInfo(
        name=name,
        path=shown(lib.path),
        is_mock=lib.is_mock,
        op_desc_size=size,
        missing_symbols=lib.missing,
        model_library=None if lib.model_library is None else shown(lib.model_library),
        groups=lib.groups,
    )
