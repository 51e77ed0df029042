"""cffi builders, run by setup.py at install time (outside the package: never shipped, never
imported at run time).

Two modules come out of this file:

- ``aclprof.binding._acl_ffi`` (out-of-line ABI mode): the declarations in ``cdefs/`` exactly as the C
  header has them. No CANN header or library is needed to build it; the library is opened at
  run time by ``aclprof.binding.loader``. The mock's C sources ``#include`` the same files, so the
  compiler checks that mock and declarations agree.
- ``aclprof.binding._fast`` (API mode, compiled): a few C helpers for the hot paths (msproftx
  calls, the op-record name loop, CRC-32C). It links to no vendor library: the loader hands it
  the loaded library's function pointers, so the same binary serves the mock and real CANN.
  Its sources sit beside the module, one file per seam, compiled into the one extension:
  ``_fast_tx.c`` (msproftx stamp cache and per-thread stacks), ``_fast_ops.c`` (op-record
  pipe read and decode loop), ``_fast_names.c`` (its name fetch and interner), ``_fast_crc.c``
  (CRC-32C), ``_fast_agent.c`` (the agent's record conversion), ``_fast_aqueue.c`` (the agent's
  record queue: the reader loop that fills it and the sender's framing call, issue 21),
  ``_fast_apump.c`` (the agent's sender between Python's turns: wait, frame, write, all without
  the GIL), ``_fast_billtap.c`` (the request-bill tap the
  queue's readers feed, issue 25); ``_fast.h`` is both the cdef and the header the
  C files include, and ``_fast_internal.h`` brings in ``cdefs/`` so the function-pointer types
  derive from the library's real prototypes. One extension rather than three: the files share
  the bind step (the CRC is initialised when the op getters are bound) and a single import.
  No source is named ``_fast.c``: cffi writes its generated wrapper under that name.
  cffi also reads ``aclprof_records.h`` (the record layouts, which the C files include), so
  ``aclprof.binding.layout`` builds the numpy dtypes from the compiler's offsets.
"""

import re
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

FAST_SOURCES = ("_fast_tx.c", "_fast_ops.c", "_fast_names.c", "_fast_crc.c", "_fast_agent.c", "_fast_aqueue.c",
                "_fast_apump.c", "_fast_billtap.c", "_fast_dl.c")


def _source_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it.

    setuptools runs this from the project root, where setup() arguments are meant to be
    relative paths; a manual run from elsewhere gets absolute ones.
    """
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


#: The record layouts (cdefs/aclprof_records.h): the C files include it, and cffi reads it so
#: that aclprof.binding.layout builds the numpy dtypes from the compiler's offsets.
RECORDS_HEADER = "aclprof_records.h"


def _record_cdefs() -> tuple[str, str]:
    """The records header as cffi cdef text: (plain declarations, packed structs).

    cffi's parser takes no ``#include``/``#ifndef`` and no ``__attribute__``: those lines go,
    ``#define NAME <integer>`` stays, and the structs marked ACLPROF_PACKED are returned
    apart to be declared with ``packed=True``. In API mode cffi checks every offset and size
    it derives against the compiler's when the module is imported, so this reading of the
    header cannot drift from the C one unnoticed.
    """
    text = (_CDEFS / RECORDS_HEADER).read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = text.splitlines()
    defines = [ln for ln in lines if re.match(r"\s*#define \w+ \d+\s*$", ln)]
    body = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))
    plain, packed = list(defines), []
    for decl in re.findall(r"typedef struct \w+ \{.*?\}[^;]*;", body, flags=re.S):
        (packed if "ACLPROF_PACKED" in decl else plain).append(decl.replace("ACLPROF_PACKED", ""))
    return "\n".join(plain), "\n".join(packed)


fast_ffi = FFI()
_plain, _packed = _record_cdefs()
fast_ffi.cdef(_plain)
fast_ffi.cdef(_packed, packed=True)
fast_ffi.cdef((_FAST / "_fast.h").read_text(encoding="utf-8"))
fast_ffi.set_source(
    "aclprof.binding._fast",
    '#include "_fast_internal.h"\n',
    sources=[_source_path(_FAST / name) for name in FAST_SOURCES],
    include_dirs=[_source_path(_CDEFS), _source_path(_FAST)],
    depends=[_source_path(_FAST / name) for name in ("_fast.h", "_fast_internal.h")]
    + [_source_path(_CDEFS / name)
       for name in (*CDEF_FILES, RECORDS_HEADER, "aclprof_unaligned.h", "aclprof_crc32c.h")],
    # cffi's generated check of aclprof_op_row takes &row->rec (offset 0 of a packed struct)
    extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror=implicit-function-declaration",
                        "-Wno-address-of-packed-member"],
    libraries=["dl"],  # dladdr (_fast_dl.c): in libc since glibc 2.34, libdl before
)

if __name__ == "__main__":  # pragma: no cover - manual regeneration
    abi_ffi.compile(verbose=True)
    fast_ffi.compile(verbose=True)
