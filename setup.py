"""Build glue that pyproject.toml cannot express: cffi modules and the bundled mock library.

- `aclprof._acl_ffi`: out-of-line ABI-mode cffi module (pure Python; no CANN needed to build).
- `aclprof._fast`: a small API-mode helper (C) for the hot paths; it calls the loaded
  library through function pointers handed to it at run time, so it links to nothing.
- `aclprof/_mock/libascendcl.so`: the mock library from mock_acl/src, so that the demo and
  the tests need no separate build step.
"""

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
MOCK_SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "mock_acl" / "src").glob("*.c"))


class BuildExtWithMock(build_ext):
    """build_ext that also compiles the mock libascendcl into aclprof/_mock/."""

    def run(self):
        super().run()
        self._build_mock()

    def _build_mock(self):
        if self.inplace:
            out_dir = HERE / "aclprof" / "_mock"
        else:
            out_dir = Path(self.build_lib) / "aclprof" / "_mock"
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "libascendcl.so"
        objects = self.compiler.compile(
            MOCK_SOURCES,
            output_dir=os.path.join(self.build_temp, "mock"),
            include_dirs=[str(HERE / "cdefs")],
            extra_preargs=["-std=c11", "-D_GNU_SOURCE", "-fPIC", "-fvisibility=hidden", "-pthread"],
            extra_postargs=["-O2", "-Wall", "-Wextra"],
        )
        self.compiler.link_shared_object(
            objects,
            str(target),
            libraries=["pthread"],
            extra_preargs=["-pthread"],
            extra_postargs=["-Wl,-soname,libascendcl.so"],
        )

    def get_outputs(self):
        outputs = super().get_outputs()
        if not self.inplace:
            outputs.append(str(Path(self.build_lib) / "aclprof" / "_mock" / "libascendcl.so"))
        return outputs


if sys.platform != "linux":  # the mock uses pthreads, clock_gettime and Linux pipes
    raise SystemExit("aclprof builds on Linux only (CANN supports Linux only)")

setup(
    cffi_modules=["aclprof/_build_ffi.py:abi_ffi", "aclprof/_build_ffi.py:fast_ffi"],
    cmdclass={"build_ext": BuildExtWithMock},
)
