"""What agents, the daemon and the CLI share on the wire: framing and the record dtype
(:mod:`.wire`), the socket path rule (:mod:`.paths`) and the version (:mod:`.version`).

Pure Python plus numpy: importing it never loads cffi, the C helper or the library, so
the daemon (``aclprofd``) and the CLI client carry no binding.
"""
