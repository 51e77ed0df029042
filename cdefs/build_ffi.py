"""cffi builders, run by setup.py at install time (outside the package: never shipped, never
imported at run time).

Two modules come out of this file:

- ``aclprof.binding._acl_ffi`` (out-of-line ABI mode): the declarations in ``cdefs/`` exactly as the C
  header has them. No CANN header or library is needed to build it; the library is opened at
  run time by ``aclprof.binding.loader``. The mock's C sources ``#include`` the same files, so the
  compiler checks that mock and declarations agree.
- ``aclprof.binding._fast`` (API mode, compiled): a few C helpers for the hot paths (msproftx calls,
  and later the op-record decoding loop). It links to no vendor library: the loader hands it
  the loaded library's function pointers, so the same binary serves the mock and real CANN.
"""

from pathlib import Path

from cffi import FFI

_CDEFS = Path(__file__).resolve().parent
_ROOT = _CDEFS.parent
_FAST = _ROOT / "aclprof" / "binding"  # the helper's C source lives beside the module it builds

# Order matters: later files use types from earlier ones.
CDEF_FILES = ("acl_base.h", "acl_prof.h", "acl_runtime.h", "aclmock.h")


def _read_cdefs() -> str:
    return "\n".join((_CDEFS / name).read_text(encoding="utf-8") for name in CDEF_FILES)


abi_ffi = FFI()
abi_ffi.cdef(_read_cdefs())
abi_ffi.set_source("aclprof.binding._acl_ffi", None)

fast_ffi = FFI()
fast_ffi.cdef((_FAST / "_fast.h").read_text(encoding="utf-8"))
fast_ffi.set_source(
    "aclprof.binding._fast",
    (_FAST / "_fast.c").read_text(encoding="utf-8"),
    extra_compile_args=["-O2", "-std=c11"],
)

if __name__ == "__main__":  # pragma: no cover - manual regeneration
    abi_ffi.compile(verbose=True)
    fast_ffi.compile(verbose=True)
