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

Symbols are resolved once at load. The profiling functions live in ``libmsprofiler.so`` on
some CANN installs; if ``libascendcl.so`` does not export ``aclprofInit``, the loader also
opens the ``libmsprofiler.so`` beside it. Likewise the model runtime (``aclmdl*``) is
built into ``libacl_mdl.so`` in CANN's split packages: if neither library exports
``aclmdlExecute``, the loader also opens the ``libacl_mdl.so`` beside ``libascendcl.so``
(optional: profiling does not need it). Symbols missing from older CANN versions are
recorded; calling one raises :class:`~aclprof.binding.errors.UnsupportedError`.

Only this module and ``aclprof.binding.lowlevel`` touch cffi objects.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

from aclprof.binding.errors import LibraryNotFoundError, UnsupportedError

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


class _Library:
    """An opened library: resolved functions by C name, plus facts about it."""

    def __init__(self, path: str, handles: list[Any], ffi: Any,
                 model_library: str | None = None, model_library_error: str | None = None):
        self.path = path
        self.model_library = model_library
        self.model_library_error = model_library_error
        self.ffi = ffi
        self._handles = handles  # keep every dlopen handle alive
        self.functions: dict[str, Any] = {}
        missing = []
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

    def fn(self, name: str) -> Any:
        """The C function ``name``; raises UnsupportedError if the library lacks it."""
        try:
            return self.functions[name]
        except KeyError:
            detail = None
            if name.startswith("aclmock"):
                detail = "it exists only in the aclprof mock (ACLPROF_BACKEND=mock)"
            elif name.startswith("aclmdl") and self.model_library is None:
                detail = (
                    f"the model runtime is in neither {self.path} nor "
                    f"{_beside(self.path, _MDL_LIBNAME)} ({self.model_library_error}); "
                    f"install CANN's model runtime ({_MDL_LIBNAME}) next to {_LIBNAME}")
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
            found.append((f"${var}/lib64", os.path.join(root, "lib64", _LIBNAME)))
    import ctypes.util  # here, not at import: it costs ~20 ms and only the real search needs it

    system = ctypes.util.find_library("ascendcl")
    if system:
        found.append(("ctypes.util.find_library('ascendcl')", system))
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


def _open(path: str, ffi: Any) -> tuple[list[Any], str | None, str | None]:
    """(dlopen handles, the library with aclmdl* or None, why libacl_mdl.so was not used)."""
    handle = ffi.dlopen(path)
    handles = [handle]
    if _symbol(handle, "aclprofInit", ffi) is None:
        # Profiling symbols may live in libmsprofiler.so next to libascendcl.so. When that is
        # absent too, say first that this library lacks them: the missing libmsprofiler.so
        # alone reads as a broken install when the path may simply name the wrong file.
        profiler = _beside(path, "libmsprofiler.so")
        try:
            handles.append(ffi.dlopen(profiler))
        except OSError as exc:
            raise OSError(
                "opened, but it exports no aclprof* profiling functions (aclprofInit is "
                f"missing), and {profiler}, where some CANN installs keep them, could not be "
                f"loaded ({exc}): not an ACL library, or a CANN install without libmsprofiler.so"
            ) from exc
    for name in _REQUIRED:
        if all(_symbol(h, name, ffi) is None for h in handles):
            raise OSError(f"opened, but it does not export {name}: not an ACL library")
    if any(_symbol(h, _MDL_PROBE, ffi) is not None for h in handles):
        return handles, path, None
    # Split packages build aclmdl* into libacl_mdl.so (GE api/acl/acl_model/CMakeLists.txt).
    # Profiling works without it, so a failure here is recorded, not raised.
    mdl_path = _beside(path, _MDL_LIBNAME)
    try:
        mdl = ffi.dlopen(mdl_path)
    except OSError as exc:
        return handles, None, f"{_MDL_LIBNAME}: {exc}"
    if _symbol(mdl, _MDL_PROBE, ffi) is None:
        return handles, None, f"{mdl_path} does not export {_MDL_PROBE}"
    return [*handles, mdl], mdl_path, None


def _load() -> _Library:
    from aclprof.binding.built import import_built

    ffi = import_built("_acl_ffi").ffi  # generated by setup.py (out-of-line ABI mode)

    candidates, _ = _candidates()
    tried: list[str] = []
    for origin, path in candidates:
        try:
            handles, model_library, model_error = _open(path, ffi)
        except OSError as exc:
            tried.append(f"  {path} ({origin}): {exc}")
            continue
        library = _Library(path, handles, ffi, model_library, model_error)
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
    )
