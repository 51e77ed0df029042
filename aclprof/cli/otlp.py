"""``aclprof otlp``: push a window of kept records to an OpenTelemetry endpoint as OTLP metrics
(exponential histograms of op durations, bucket for bucket the daemon's histogram), for
users whose metrics live in OpenTelemetry. Optional: needs ``pip install 'aclprof[otlp]'``.

A CLI command, not a daemon setting: the OpenTelemetry SDK aggregates raw measurements, one
Python call per op record, which the daemon's ingest (numpy batches of up to 10^5 records/s)
must not pay, and the daemon's deployment needs no SDK. Run from a timer with windows that
tile (``--since``/``--until``), the pushes are deltas that add up to the exact totals.
What is pushed and the bucket arithmetic: :mod:`aclprof.exportfmt.otlp`.

With ``--traces``, the request bills the daemon kept instead, as spans
(:mod:`aclprof.cli.otlp_traces`, :mod:`aclprof.exportfmt.otlp_traces`).
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import Any

from aclprof.cli.argtypes import checked, point_in_time, seconds
from aclprof.cli.common import EXIT_OK, CliError, add_filter_args, add_socket_arg, connect, filter_from_args
from aclprof.cli.exportloss import has_record_filters, lost_error
from aclprof.cli.otlp_traces import cmd_otlp_traces
from aclprof.exportfmt.otlp import METRIC, OtlpPushFailed, OtlpUnavailable, collect, push

__all__ = ["add_parser", "cmd_otlp"]

_EXAMPLES = """examples:
  aclprof otlp --endpoint http://collector:4318/v1/metrics --since -1m
  aclprof otlp --endpoint https://otlp.example/v1/metrics --header 'Authorization=Bearer T' --since -5m --until now
  aclprof otlp --traces --endpoint http://collector:4318/v1/traces --since -1m --until now
"""


def _endpoint(text: str) -> str:
    """An http(s) URL with a host: the OTLP/HTTP metrics endpoint, path included."""
    u = urllib.parse.urlsplit(text)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL with a host (e.g. http://collector:4318/v1/metrics)")
    return text


def _header(text: str) -> tuple[str, str]:
    """``NAME=VALUE``: an HTTP header sent with the push."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or any(c in text for c in "\r\n\0"):
        raise ValueError(f"{text!r} is not NAME=VALUE (one line)")
    return name.strip(), value


def add_parser(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("otlp", help="push kept records to OpenTelemetry (OTLP exponential histograms)",
                       formatter_class=fmt, description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
                       epilog=_EXAMPLES)
    p.add_argument("--endpoint", required=True, metavar="URL", type=checked(_endpoint),
                   help="OTLP/HTTP (protobuf) metrics endpoint, path included (http://host:4318/v1/metrics); "
                        "with --traces the traces endpoint (http://host:4318/v1/traces)")
    p.add_argument("--traces", action="store_true",
                   help="push the request bills the daemon kept as spans (aclprof.request; README \"Request bills "
                        "in OpenTelemetry traces\"); --since/--until select by receive time")
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE", type=checked(_header),
                   help="HTTP header to send (repeatable), e.g. authorization")
    p.add_argument("--timeout", type=seconds(0.0, 600.0), default=10.0, metavar="S",
                   help="seconds to wait for the endpoint (default 10)")
    p.add_argument("--since", type=point_in_time, metavar="T", default=None,
                   help="first receive time (default: the oldest kept record)")
    p.add_argument("--until", type=point_in_time, metavar="T", default=None, help="last receive time (default: now)")
    add_filter_args(p)
    add_socket_arg(p)
    p.set_defaults(func=cmd_otlp)


def cmd_otlp(args: argparse.Namespace) -> int:
    if args.since is not None and args.until is not None and args.since > args.until:
        raise CliError("--since is after --until", 2)
    if args.traces:
        return cmd_otlp_traces(args)
    client = connect(args, timeout=30.0)
    try:
        collected = collect(client.export(args.since, args.until, filter_from_args(args)))
    except OtlpUnavailable as exc:
        raise CliError(f"aclprof otlp: {exc}", 2) from None
    finally:
        client.close()
    lost = lost_error(client.export_lost, collected.records, record_filters=has_record_filters(args))
    if lost is not None:
        raise lost  # exit 1: pushing a window with a hole would undercount downstream
    if collected.ops == 0:
        print("no op records matched (check --since/--until and the filters); nothing pushed", file=sys.stderr)
        return EXIT_OK
    try:
        push(collected, args.endpoint, dict(args.header), args.timeout)
    except OtlpUnavailable as exc:
        raise CliError(f"aclprof otlp: {exc}", 2) from None
    except OtlpPushFailed as exc:
        raise CliError(f"aclprof otlp: {exc}", 1) from None
    print(f"pushed {collected.ops:,} op records as {collected.series:,} {METRIC} histograms to {args.endpoint}",
          file=sys.stderr)
    return EXIT_OK
