"""Export file formats written from export records (daemon/PROTOCOL.md "record" objects):
the Chrome trace (:mod:`aclprof.exportfmt.chrome`), torch_npu's ``ascend`` directories
(:mod:`aclprof.exportfmt.ascend`), our op statistics csv (:mod:`aclprof.exportfmt.opcsv`) and
JSON Lines (:mod:`aclprof.exportfmt.jsonl`).

A layer of its own between the protocol and its users: the CLI's ``aclprof export`` and the
daemon's flight recorder (which may not import the CLI) write the same files with it. It
imports ``aclprof.protocol`` only.
"""

__all__ = ["ascend", "chrome", "jsonl", "kineto", "opcsv", "perfetto", "tally", "tracks"]
