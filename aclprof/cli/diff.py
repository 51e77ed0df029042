"""``aclprof diff A B``: which op types (or names) got slower or faster from A to B.

For every op type (--by name: op name) present in both, the p50 and p99 of A and B with
their order-statistic confidence intervals, and the shift B/A with its bounds, judged as
the daemon's regression detector judges (aclprof/protocol/quantshift.py): "slower" when
a ratio's interval lies above 1 and the ratio is at least --min-effect above it, "faster"
in the other direction, "too few" below --min-count samples. Rows are ranked by the p99
shift, largest first. Services and models are merged (filter with --service).

With request bills on both sides (requests:KEY=VALUE, issue 25) the rows are per request:
its wall time, its device time and each op type's device time in it, one sample per
request; the quantiles, their intervals and the shift bounds are read from the requests'
values themselves (exact, nearest rank), the verdict by the same rule as for ops.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from aclprof.cli.argtypes import MAX_PID, checked, integer, name
from aclprof.cli.common import EXIT_OK, EXIT_UNREACHABLE, CliError, add_socket_arg, connect, format_ns
from aclprof.cli.diff_requests import load_requests, parse_attrs, sample_shift
from aclprof.cli.diff_sources import Histograms, check_spec, load_source, needs_daemon
from aclprof.protocol.detectorparams import MIN_COUNT, MIN_EFFECT, Z
from aclprof.protocol.quantshift import IMPROVEMENT, NBINS, REGRESSION, judge, shift
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_diff", "compare"]

_EXAMPLES = """sources (A is the reference, B is compared with it):
  baseline:NAME          a baseline the daemon saved (aclprof baseline save NAME)
  live:current           the daemon's detector now: current (30 s), trailing or recent window
  window:SINCE..UNTIL    records the daemon kept (times as in export: -2h, '10m ago', ISO, now)
  FILE.jsonl | -         an `aclprof export --format jsonl` file (- for stdin)
  FILE.json              a saved baseline file
  requests:KEY=VALUE,..  the request bills the daemon kept with these attributes (aclprof.request)
  DIR                    kernel_details.csv files below DIR (ascend export, torch_npu profiler)

examples:
  aclprof diff baseline:good-v42 live:current
  aclprof diff before.jsonl after.jsonl --by name --limit 20
  aclprof diff window:-1d..-23h window:-1h..now
  aclprof diff baseline:good baseline:canary --json | jq '.rows[] | select(.verdict=="slower")'
  aclprof diff requests:version=A requests:version=B --service chat --min-count 50
                         p99 request device time (and each op type's) of version B against A

exit codes: 0 done (whatever it found), 1 error, 2 usage error (a malformed input file too) or daemon
unreachable
"""


def _check_spec(text: str) -> str:
    """:func:`check_spec`, with ``requests:KEY=VALUE`` specs (aclprof.cli.diff_requests)."""
    kind, _, rest = text.partition(":")
    if kind == "requests" and rest:
        parse_attrs(rest)
        return text
    return check_spec(text)


def _load(spec: str, client: Any, service: str | None = None) -> Histograms:
    """:func:`load_source`, with ``requests:`` specs: the daemon's kept request bills."""
    kind, _, rest = spec.partition(":")
    if kind == "requests" and rest:
        if client is None:
            raise CliError(f"{spec}: needs the daemon", EXIT_UNREACHABLE)
        return load_requests(spec, client, service)
    return load_source(spec, client, service=service)


def add_parser(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("diff", help="op latency shifts between two baselines, exports or windows",
                       formatter_class=fmt, description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       epilog=_EXAMPLES)
    p.add_argument("a", type=checked(_check_spec), metavar="A", help="the reference")
    p.add_argument("b", type=checked(_check_spec), metavar="B", help="compared with A")
    p.add_argument("--by", choices=("type", "name"), default="type", help="rows per op type (default) or name")
    p.add_argument("--service", metavar="NAME", default=None, type=name("service name"), help="only this service's ops")
    # the same rules as the daemon's detector_* settings (aclprof.protocol.detectorparams)
    p.add_argument("--min-effect", type=checked(MIN_EFFECT.check), default=0.05, metavar="F",
                   help="smallest shift called slower/faster (default 0.05 = 5 %%)")
    p.add_argument("--min-count", type=checked(MIN_COUNT.check), default=200, metavar="N",
                   help="samples needed on each side (default 200)")
    p.add_argument("--z", type=checked(Z.check), default=4.0,
                   help="interval half-width in standard errors (default 4)")
    p.add_argument("--limit", type=integer("a row count", 1, MAX_PID), default=None, metavar="N",
                   help="show the first N rows")
    p.add_argument("--json", action="store_true", help="one JSON object (rows, only_in_a, only_in_b)")
    add_socket_arg(p)
    p.set_defaults(func=cmd_diff)


def _grouped(h: Histograms, by: str, service: str | None) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for (svc, _model, op_type, op_name), row in zip(h.cells, h.hists):
        if service is not None and svc != service:
            continue
        key = op_type if by == "type" else op_name
        out[key] = out[key] + row if key in out else row.copy()
    return out


def _num(x: float, digits: int = 4) -> float | None:
    return round(float(x), digits) if math.isfinite(x) else None


def compare(a: Histograms, b: Histograms, *, by: str = "type", service: str | None = None,
            min_effect: float = 0.05, min_count: int = 200, z: float = 4.0) -> dict[str, Any]:
    """The diff as a JSON-ready object (what ``--json`` prints)."""
    if (a.samples is None) != (b.samples is None):
        raise CliError(f"aclprof diff: {a.spec} and {b.spec}: compare request bills (requests:KEY=VALUE) with "
                       "request bills only; op sources have no per-request rows", 2)
    ga, gb = _grouped(a, by, service), _grouped(b, by, service)
    keys = sorted(set(ga) & set(gb))
    base = np.stack([ga[k] for k in keys]) if keys else np.zeros((0, NBINS))
    cur = np.stack([gb[k] for k in keys]) if keys else np.zeros((0, NBINS))
    rows: list[dict[str, Any]] = [{"key": k, "n_a": round(float(base[i].sum()), 1),
                                   "n_b": round(float(cur[i].sum()), 1)} for i, k in enumerate(keys)]
    verdicts = np.zeros(len(keys), np.int8)
    exact = a.samples is not None and b.samples is not None
    for q, qn in ((0.5, "p50"), (0.99, "p99")):
        if exact:  # request bills: the raw samples, exact (aclprof.cli.diff_requests)
            s = sample_shift([a.samples[k] for k in keys], [b.samples[k] for k in keys], q, z)  # type: ignore[index]
        else:
            s = shift(base, cur, q, z)
        v = judge(s, min_effect, min_count)
        verdicts = np.where(v == REGRESSION, REGRESSION, np.where((v == IMPROVEMENT) & (verdicts != REGRESSION),
                                                                   IMPROVEMENT, verdicts))
        for i, r in enumerate(rows):
            r[qn] = {"a_ns": _num(s.base[i], 1), "b_ns": _num(s.cur[i], 1), "shift": _num(s.ratio[i]),
                     "lower": _num(s.lower[i]), "upper": _num(s.upper[i])}
    for i, r in enumerate(rows):
        few = r["n_a"] < min_count or r["n_b"] < min_count
        r["verdict"] = ("too few" if few else "slower" if verdicts[i] == REGRESSION
                        else "faster" if verdicts[i] == IMPROVEMENT else "")
    rows.sort(key=lambda r: (r["p99"]["shift"] is None, -(r["p99"]["shift"] or 0.0), r["key"]))
    return {"a": a.spec, "b": b.spec, "by": by, "service": service, "min_effect": min_effect,
            "min_count": min_count, "z": z, "exact": exact, "rows": rows,
            "only_in_a": sorted(set(ga) - set(gb)), "only_in_b": sorted(set(gb) - set(ga))}


def _shift_cell(d: dict[str, Any]) -> str:
    if d["shift"] is None:
        return "-"
    lo = f"{d['lower']:.2f}" if d["lower"] is not None else "?"
    hi = f"{d['upper']:.2f}" if d["upper"] is not None else "?"
    return f"{d['shift']:.3f} [{lo},{hi}]"


def _table(result: dict[str, Any], limit: int | None) -> str:
    head = ["OP TYPE" if result["by"] == "type" else "OP NAME", "N A", "N B", "P50 A", "P50 B", "P50 B/A [CI]",
            "P99 A", "P99 B", "P99 B/A [CI]", "VERDICT"]
    rows = result["rows"][:limit] if limit else result["rows"]
    if result.get("exact"):  # request bills: per-request rows, exact quantiles
        head[0] = "PER REQUEST"
    cells = [[safe(r["key"]), f"{r['n_a']:.0f}", f"{r['n_b']:.0f}", format_ns(r["p50"]["a_ns"]),
              format_ns(r["p50"]["b_ns"]), _shift_cell(r["p50"]), format_ns(r["p99"]["a_ns"]),
              format_ns(r["p99"]["b_ns"]), _shift_cell(r["p99"]), r["verdict"]] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *cells)]
    lines = ["  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [head, *cells]]
    if not rows:
        lines.append("(no op present in both)")
    for side in ("a", "b"):
        only = result[f"only_in_{side}"]
        if only:
            shown = ", ".join(safe(k) for k in only[:10]) + (f", ... ({len(only)} in all)" if len(only) > 10 else "")
            lines.append(f"only in {side.upper()}: {shown}")
    return "\n".join(lines)


def cmd_diff(args: argparse.Namespace) -> int:
    if args.a == "-" and args.b == "-":
        raise CliError("A and B cannot both be stdin", 2)
    if needs_daemon(args.a) or needs_daemon(args.b):
        with connect(args) as client:
            client.settimeout(60.0)  # an export of a long window streams for a while
            a, b = (_load(s, client, service=args.service) for s in (args.a, args.b))
    else:
        a, b = _load(args.a, None), _load(args.b, None)
    result = compare(a, b, by=args.by, service=args.service, min_effect=args.min_effect,
                     min_count=args.min_count, z=args.z)
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result, args.limit))
    return EXIT_OK
