"""aclprof: fast, safe Python bindings for Huawei Ascend's profiling API (``acl_prof.h``).

- :class:`Profiler`: a profiling session (init, config, start ... stop, finalize).
- msproftx markers: :func:`mark`, :func:`push`/:func:`pop`, :class:`range`, :class:`annotate`.
- :class:`StepInfo`: step timestamps.
- :func:`request`: mark a service request, for its op bill (:mod:`aclprof.api.requests`).
- :func:`subscribe`: operator records of a model, decoded by a background reader.
- :mod:`aclprof.lowlevel`: a 1:1 layer over every C function.
- :mod:`aclprof.mock`: controls of the bundled mock library (``ACLPROF_BACKEND=mock``).
- :mod:`aclprof.agent`: streams a process's op records to the host daemon ``aclprofd``.

Every public name is imported on first use: ``import aclprof`` loads no C library, no cffi
and no numpy, so the daemon and the CLI, which import parts of this package, never carry
the binding (a test checks ``sys.modules``). The names are written once, in ``__init__.pyi``:
type checkers read that stub, and this module reads the same lines on the first lookup of a
name it does not hold yet (``__all__`` included; :mod:`aclprof._lazy`).
"""

from __future__ import annotations

import os

from aclprof._lazy import LazyNames
from aclprof.protocol.version import __version__ as __version__

_LAZY = LazyNames(__name__, os.path.join(os.path.dirname(__file__), "__init__.pyi"), globals())
__getattr__ = _LAZY.getattr
__dir__ = _LAZY.dir
