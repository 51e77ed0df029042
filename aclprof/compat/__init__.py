"""Compatibility layers for code written against other Ascend Python APIs.

``from aclprof.compat import acl`` gives a pyACL-compatible module (``acl.prof``,
``acl.rt``, ``acl.mdl``, ``acl.util``, ``acl.init``/``acl.finalize``): pyACL's names,
argument orders and ``(value, ret)`` return conventions, over whichever library aclprof
loaded (real CANN or the mock). Handles are plain ints, as in pyACL.
"""

from aclprof.compat import acl

__all__ = ["acl"]
