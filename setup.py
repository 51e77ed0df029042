"""Build glue that pyproject.toml cannot express: cffi modules and the bundled mock library.

- `aclprof.binding._acl_ffi`: out-of-line ABI-mode cffi module (pure Python; no CANN needed to build).
- `aclprof.binding._fast`: a small API-mode helper (C) for the hot paths; it calls the loaded
  library through function pointers handed to it at run time, so it links to nothing.
- `aclprof.protocol._jsonl`: the daemon's JSON Lines record encoder, a plain CPython extension
  (the daemon imports aclprof.protocol and must not load cffi); `aclprof.protocol._batchgroup`:
  the aggregator's per-batch grouping of records, likewise; `aclprof.protocol._reccodec`: the
  storage's compact record codec, likewise; `aclprof.api._reqring`:
  aclprof.request's enter/exit and its event ring (issue 25).
- `aclprof/_mock/libascendcl.so`: the mock library from mock_acl/src, so that the demo and
  the tests need no separate build step.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


class BuildExtWithMock(build_ext):
    """build_ext that also builds the mock libascendcl into aclprof/_mock/.

    The mock has one recipe, mock_acl/Makefile (its flags, -Werror included, and the check
    that it exports only acl* symbols); this runs it into a build directory of its own and
    copies the library into the package.
    """

    def run(self):
        super().run()
        self._build_mock()

    def _build_mock(self):
        make = shutil.which("make")
        if make is None:
            raise SystemExit("building aclprof needs `make` (GNU make) to build the bundled mock "
                             "library (mock_acl/Makefile): install it, e.g. apt-get install make")
        build_dir = Path(self.build_temp).resolve() / "mock_acl"
        env = dict(os.environ)
        if self.compiler is not None and getattr(self.compiler, "compiler_so", None):
            env.setdefault("CC", self.compiler.compiler_so[0])
        subprocess.run([make, "-C", str(HERE / "mock_acl"), "--no-print-directory", f"BUILD={build_dir}", "all"],
                       check=True, env=env)
        out_dir = HERE / "aclprof" / "_mock" if self.inplace else Path(self.build_lib) / "aclprof" / "_mock"
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "libascendcl.so", out_dir / "libascendcl.so")

    def get_outputs(self):
        outputs = super().get_outputs()
        if not self.inplace:
            outputs.append(str(Path(self.build_lib) / "aclprof" / "_mock" / "libascendcl.so"))
        return outputs


if sys.platform != "linux":  # the mock uses pthreads, clock_gettime and Linux pipes
    raise SystemExit("aclprof builds on Linux only (CANN supports Linux only)")

setup(
    # _jsonl.c reads the wire record's layout from cdefs/aclprof_records.h (the one definition)
    ext_modules=[Extension("aclprof.protocol._jsonl", ["aclprof/protocol/_jsonl.c"],
                           include_dirs=["cdefs"], depends=["cdefs/aclprof_records.h", "cdefs/aclprof_unaligned.h"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"]),
                 # the aggregator's per-batch grouping (issue 21), beside _jsonl for the same reason
                 Extension("aclprof.protocol._batchgroup", ["aclprof/protocol/_batchgroup.c"],
                           include_dirs=["cdefs"],
                           depends=["cdefs/aclprof_records.h", "cdefs/aclprof_unaligned.h", "cdefs/aclprof_crc32c.h"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"]),
                 # the storage's compact record codec (issue 21: ~7x fewer bytes written per record)
                 Extension("aclprof.protocol._reccodec", ["aclprof/protocol/_reccodec.c"],
                           include_dirs=["cdefs"], depends=["cdefs/aclprof_records.h", "cdefs/aclprof_unaligned.h"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"]),
                 # aclprof.request's enter/exit and event ring (issue 25): a CPython extension, as a
                 # cffi call alone costs a fifth of its 1 us budget and releases the GIL
                 Extension("aclprof.api._reqring", ["aclprof/api/_reqring.c"],
                           extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror"])],
    cffi_modules=["cdefs/build_ffi.py:abi_ffi", "cdefs/build_ffi.py:fast_ffi"],
    cmdclass={"build_ext": BuildExtWithMock},
)
