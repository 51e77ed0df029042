"""The ``aclprof`` command: live per-operator timings from the host daemon, and tools.

    aclprof demo                  # everything on the built-in mock, no setup
    aclprof tail --type Conv      # a live stream of op records
    aclprof top                   # a live, sortable table of op timings
    aclprof status                # daemon health, connected processes, drops, lag
    aclprof export --since -5m --format chrome -o trace.json   # also csv, jsonl, ascend
    aclprof diff A B              # p50/p99 shifts per op type: baselines, windows, exports
    aclprof baseline save NAME    # pin the daemon's current latencies as a baseline
    aclprof captures              # the flight recorder's captures around regression flags
    aclprof trace --service S     # an on-demand Profiler session in a service's processes
    aclprof fleet --prometheus URL   # every host's op latencies from Prometheus, outliers flagged
    aclprof doctor                # which libascendcl, CANN variables, daemon reachability
    aclprof reset                 # admin: wipe the daemon's shared aggregates (asks first)

Exit codes: 0 success; 1 an error (or, for ``status``, an unhealthy daemon); 2 a usage
error or no daemon reachable; 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung
up (SIGHUP): each of these three cleans up first (:mod:`aclprof.cli.signals`). Errors are
one line on stderr.

Layout: :mod:`aclprof.cli.main` (parser, logging, dispatch; the entry point
``aclprof.cli.main:main``), :mod:`aclprof.cli.common` (what the commands share),
:mod:`aclprof.cli.argtypes` (every option's value type: the one place values are checked),
:mod:`aclprof.cli.signals` (SIGTERM and SIGHUP unwind as Ctrl-C does), one module per command
(``tail``, ``status``, ``export``, ``diff``, ``baseline``, ``captures``, ``trace``, ``demo``,
``doctor``, ``reset``) with its helpers beside it (``export_ascend``, ``staging``;
``diff_sources``; ``capturefmt``), one folder for each command with a screen of its own
(:mod:`aclprof.cli.top`, :mod:`aclprof.cli.fleet`: the command in ``command``),
:mod:`aclprof.cli.client` (the daemon's control protocol) and :mod:`aclprof.cli.launch`
(where the installed commands are).

The package itself imports nothing, so importing one of its modules loads only what that
module uses.
"""
