"""``aclprof otlp --traces``: push the request bills the daemon kept as OTLP spans (issue 25;
the mapping: :mod:`aclprof.exportfmt.otlp_traces`).

The bills come from the daemon's REQUESTS (the last 256 per service), selected by receive time
(``--since``/``--until``, both ends included: a timer whose windows tile pushes every bill once;
a bill pushed twice anyway is the same span, its ids derived from it) and by ``--service`` /
``--model``. The daemon sends at most :data:`MAX_BILLS` per call (the slowest): when more
matched, the ones sent are pushed and the command exits 1 saying how many were left out.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse

from aclprof.cli.common import EXIT_OK, EXIT_UNREACHABLE, CliError, connect
from aclprof.exportfmt.otlp import OtlpPushFailed, OtlpUnavailable
from aclprof.protocol import wire

__all__ = ["cmd_otlp_traces", "MAX_BILLS", "RECORD_ONLY_OPTIONS"]

MAX_BILLS = 1000  # the daemon's REQUESTS top limit (aclprofd.bills.MAX_TOP)
#: ``aclprof otlp`` options that select op records: bills have no single device, op type or name
RECORD_ONLY_OPTIONS = {"pid": "--pid", "device": "--device", "type": "--type", "name": "--name",
                       "min_duration": "--min-duration", "host": "--host"}


def _check(args: argparse.Namespace) -> None:
    given = [opt for dest, opt in RECORD_ONLY_OPTIONS.items() if getattr(args, dest, None)]
    if given:
        raise CliError(f"aclprof otlp --traces: {', '.join(given)} select op records, not request bills "
                       "(filter bills with --service, --model, --since, --until)", 2)
    if urllib.parse.urlsplit(args.endpoint).path.rstrip("/").endswith("/v1/metrics"):
        raise CliError(f"aclprof otlp --traces: {args.endpoint} is a metrics endpoint; spans go to the traces "
                       "endpoint (e.g. http://collector:4318/v1/traces)", 2)


def cmd_otlp_traces(args: argparse.Namespace) -> int:
    """Exit 0 once every bill that matched was pushed (or none matched); 1 if some could not be."""
    from aclprof.exportfmt.otlp_traces import push_spans, require, spans

    _check(args)
    try:
        require()
    except OtlpUnavailable as exc:
        raise CliError(f"aclprof otlp --traces: {exc}", 2) from None
    client = connect(args, timeout=30.0)
    try:
        protocol = int(client.welcome.get("protocol", 1))
        if protocol < 4:
            raise CliError(f"aclprof otlp --traces: the daemon speaks protocol {protocol}; request bills need 4 "
                           "(upgrade aclprofd)", EXIT_UNREACHABLE)
        reply = client.request(wire.Kind.REQUESTS, {
            "service": args.service, "model": args.model, "attrs": {}, "since": args.since, "until": args.until,
            "top": MAX_BILLS}, wire.Kind.REQUESTS_REPLY)
    finally:
        client.close()
    bills = reply.get("bills") or []
    left_out = max(0, int(reply.get("matched", len(bills))) - len(bills))
    try:
        made = spans(bills)
        push_spans(made, args.endpoint, dict(args.header), args.timeout)
    except OtlpUnavailable as exc:
        raise CliError(f"aclprof otlp --traces: {exc}", 2) from None
    except OtlpPushFailed as exc:
        raise CliError(f"aclprof otlp --traces: {exc}", 1) from None
    if not bills:
        print(f"no request bills matched (the daemon received {reply.get('total', 0):,}; check --since/--until "
              "and the filters); nothing pushed", file=sys.stderr)
    else:
        print(f"pushed {len(made.spans):,} request bills as spans to {args.endpoint}", file=sys.stderr)
    if made.bad_traceparent:
        print(f"{made.bad_traceparent:,} of them had a traceparent that does not parse: each is the root of a trace "
              "of its own, the error in its aclprof.request.traceparent_error attribute", file=sys.stderr)
    problems = []
    if made.no_start:
        problems.append(f"{made.no_start:,} bills have no start time (sent by an agent older than start_unix_ns) "
                        "and were not pushed")
    if left_out:
        problems.append(f"{left_out:,} more bills matched but the daemon sends at most {MAX_BILLS:,} per call "
                        "(the slowest): push shorter windows (--since/--until)")
    if problems:
        raise CliError("aclprof otlp --traces: " + "; ".join(problems), 1)
    return EXIT_OK
