"""``aclprof.lowlevel``: the public name of the 1:1 layer over every C function.

It lives in :mod:`aclprof.binding.lowlevel` with the rest of the binding; this module only
gives it the short public name (``from aclprof import lowlevel``).
"""

from aclprof.binding.lowlevel import *  # noqa: F403  (the public names, as listed in __all__)
from aclprof.binding.lowlevel import __all__  # noqa: F401
