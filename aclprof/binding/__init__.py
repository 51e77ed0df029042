"""The binding layer: the only code that touches cffi and the C library.

- :mod:`.loader`: finds and opens the library (one loader), binds the compiled helper.
- :mod:`.lowlevel`: one Python function per C function, raising through :mod:`.errors`.
- :mod:`.errors` (one error funnel: code, name, function), :mod:`.enums` (the C constants).
- :mod:`.handles` (owned C objects with idempotent ``close()``), :mod:`.state` (facts
  learnt from successful calls), :mod:`.built` (the compiled parts, with a clear error
  when they are missing).
- ``_acl_ffi`` (generated, ABI mode) and ``_fast`` (compiled helper for hot paths), built
  from ``cdefs/build_ffi.py`` at install time.

Nothing here imports from the layers above (api, agent, cli, demo).
"""
