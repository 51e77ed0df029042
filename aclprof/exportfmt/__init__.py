"""Export file formats written from export records (daemon/PROTOCOL.md "record" objects):
the Chrome trace (:mod:`aclprof.exportfmt.chrome`), torch_npu's ``ascend`` directories
(:mod:`aclprof.exportfmt.ascend`), our op statistics csv (:mod:`aclprof.exportfmt.opcsv`),
JSON Lines (:mod:`aclprof.exportfmt.jsonl`), msMonitor's SQLite DB
(:mod:`aclprof.exportfmt.msmonitor`), pprof (:mod:`aclprof.exportfmt.pprof`) and OTLP metrics
(:mod:`aclprof.exportfmt.otlp`, optional: the ``otlp`` extra).

A layer of its own between the protocol and its users: the CLI's ``aclprof export`` and the
daemon's flight recorder (which may not import the CLI) write the same files with it. It
imports ``aclprof.protocol`` only.
"""

__all__ = ["ascend", "chrome", "jsonl", "kineto", "msmonitor", "opcsv", "otlp", "perfetto", "pprof", "tally",
           "tracks"]
