"""The value types of ``aclprof``'s options: the one place where an option's text becomes its
value or is refused.

Each type is an argparse ``type=``: a refused value raises ``ArgumentTypeError`` with the value
and what would be valid, argparse puts the option in front (``aclprof status: error: argument
--timeout: '-1' is not a number of seconds above 0 ...``) and ``aclprof`` exits 2, before
anything connects or writes. What is refused everywhere: NaN and infinities, negative or zero
durations and timeouts (where zero means nothing), ids outside the range of their field on
the wire (model and device ids are uint32, pids positive), an empty string (a filter that
matches nothing, a path that silently means "the default"), names longer than the daemon
keeps, and values so large that they overflow the daemon's arithmetic or ``time.sleep``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from typing import NoReturn, TypeVar

from aclprof.protocol.filterregex import BadFilterRegex, compile_filter_regex
from aclprof.protocol.wire import MAX_IDENT_BYTES

__all__ = ["parse_duration_ns", "parse_time", "regex_problem", "seconds", "integer", "number", "name", "key_value",
           "socket_path", "output_path", "input_path", "regex", "min_duration", "point_in_time", "checked",
           "model_id", "pid", "device_id", "row_limit", "FLOAT_MAX", "MAX_U32", "MAX_PID", "MAX_SECONDS",
           "MAX_SOCKET_PATH_BYTES", "LATEST_TIME"]

T = TypeVar("T")

FLOAT_MAX = sys.float_info.max  # "any finite number" as an upper bound
MAX_U32 = 2**32 - 1          # model and device ids: uint32 fields of the wire record
MAX_PID = 2**31 - 1          # pid_t
MAX_SECONDS = 86_400.0       # the longest timeout, interval or demo: a day
MAX_DURATION_NS = 2**63 - 1  # a duration filter the daemon's int64 arithmetic holds
MAX_SOCKET_PATH_BYTES = 107  # sockaddr_un.sun_path, less its NUL
LATEST_TIME = 253_402_300_799.0  # 9999-12-31T23:59:59Z: later is a typo, not a time


def _refuse(message: str) -> NoReturn:
    raise argparse.ArgumentTypeError(message)


# -- durations and times ---------------------------------------------------------------------

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|min|m|h)?\s*$")


def parse_duration_ns(text: str, default_unit: str | None = None) -> int:
    """``"100us"`` -> 100000. Units: ns, us (or µs), ms, s, m/min, h. Never negative."""
    m = _DURATION.match(text)
    if not m:
        _refuse(f"{text!r} is not a duration (examples: 100us, 1.5ms, 2s)")
    digits, unit = m.group(1), m.group(2) or default_unit
    if len(digits) > 40:  # no clock holds that many digits (and int() refuses ~4300)
        _refuse(f"{text!r} is not a duration a clock can hold")
    # exact: a float loses whole nanoseconds beyond 2**53 ns (~104 days)
    value = Fraction(digits)
    if unit is None:
        if value == 0:
            return 0
        _refuse(f"{text!r} needs a unit (examples: 100us, 1.5ms, 2s)")
    return round(value * _UNITS_NS[unit])


_RELATIVE = re.compile(r"^\s*(?:-\s*(?P<a>.+?)|(?P<b>.+?)\s+ago)\s*$")


def parse_time(text: str, now: float | None = None) -> float:
    """A point in time as Unix seconds: ISO 8601 (``2026-11-29T10:00:00``, local time unless
    it has an offset or ``Z``), Unix seconds (``1764410000.5``), ``now``, or relative
    (``-5m``, ``10s ago``, ``1h ago``); from 1970 to the year 9999 (not NaN, not infinite)."""
    now = time.time() if now is None else now
    s = text.strip()
    t: float | None = None
    if s.lower() == "now":
        t = now
    m = _RELATIVE.match(s)
    if t is None and m:
        amount = m.group("a") or m.group("b")
        try:
            t = now - parse_duration_ns(amount, default_unit="s") / 1e9
        except argparse.ArgumentTypeError:
            pass
    if t is None:
        try:
            t = float(s)
        except ValueError:
            pass
    if t is None:
        from datetime import datetime

        try:
            t = datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            _refuse(f"{text!r} is not a time (examples: 2026-11-29T10:00:00, 1764410000, -5m, '10s ago', now)")
    if not (math.isfinite(t) and 0.0 <= t <= LATEST_TIME):
        _refuse(f"{text!r} is not a time between 1970 and the year 9999")
    return t


def point_in_time(text: str) -> float:
    """``--since``/``--until``: :func:`parse_time` now."""
    return parse_time(text)


def _seconds_value(text: str) -> float | None:
    """``5``, ``0.5``, ``1e3`` or a duration with a unit (``500ms``, ``2m``) as seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration_ns(text, default_unit="s") / 1e9
    except argparse.ArgumentTypeError:
        return None


def seconds(minimum: float = 0.0, maximum: float = MAX_SECONDS, *, inclusive: bool = False) -> Callable[[str], float]:
    """A timeout, interval or duration in seconds (``5``, ``0.5``, ``500ms``, ``2m``): finite,
    above ``minimum`` (at least, with ``inclusive``) and at most ``maximum``."""
    low = f"at least {minimum:g}" if inclusive else f"above {minimum:g}"

    def parse(text: str) -> float:
        v = _seconds_value(text)
        if v is None or not math.isfinite(v) or v < minimum or (v == minimum and not inclusive) or v > maximum:
            _refuse(f"{text!r} is not a number of seconds {low} and at most {maximum:g} "
                    "(examples: 5, 0.5, 500ms, 2m)")
        return v

    parse.__name__ = "seconds"
    return parse


def min_duration(text: str) -> int:
    """``--min-duration``: a duration with a unit, at most what int64 nanoseconds hold."""
    ns = parse_duration_ns(text)
    if ns > MAX_DURATION_NS:
        _refuse(f"{text!r} is longer than any op (at most {MAX_DURATION_NS // 3_600_000_000_000:,}h)")
    return ns


# -- numbers ---------------------------------------------------------------------------------

def integer(what: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number from ``minimum`` to ``maximum`` (``what`` names it in the message)."""
    def parse(text: str) -> int:
        try:
            v = int(text.strip(), 10)
        except ValueError:  # also a number of more than 4300 digits
            v = None
        if v is None or not minimum <= v <= maximum:
            _refuse(f"{text!r} is not {what}: a whole number from {minimum:,} to {maximum:,}")
        return v

    parse.__name__ = "integer"
    return parse


def number(what: str, minimum: float, maximum: float, *, inclusive: bool = True) -> Callable[[str], float]:
    """A finite number from ``minimum`` (excluded unless ``inclusive``) to ``maximum``."""
    low = f"from {minimum:g}" if inclusive else f"above {minimum:g}"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and (v >= minimum if inclusive else v > minimum) and v <= maximum):
            _refuse(f"{text!r} is not {what}: a number {low} to {maximum:g}")
        return v

    parse.__name__ = "number"
    return parse


model_id = integer("a model id", 0, MAX_U32)
row_limit = integer("a row count", 0, MAX_PID)  # top/fleet --limit: 0 fits the screen
device_id = integer("a device id", 0, MAX_U32)
pid = integer("a process id", 1, MAX_PID)


# -- strings ---------------------------------------------------------------------------------

def name(what: str, max_bytes: int = MAX_IDENT_BYTES) -> Callable[[str], str]:
    """A service or host name: not empty (it would match nothing), at most ``max_bytes``
    bytes of UTF-8 (the daemon keeps no longer name, so a longer one matches nothing)."""
    def parse(text: str) -> str:
        if not text:
            _refuse(f"{text!r}: an empty {what} matches nothing (leave the option out for all)")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            _refuse(f"{text[:40]!r}...: a {what} is at most {max_bytes} bytes (this one has {size})")
        return text

    parse.__name__ = "name"
    return parse


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (a request attribute, ``aclprof requests --attr``): a non-empty key,
    each side at most 1024 characters (a request bill keeps no longer text)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        _refuse(f"{text[:40]!r} is not KEY=VALUE (e.g. version=B)")
    if len(key) > 1024 or len(value) > 1024:
        _refuse(f"{text[:40]!r}...: a key or value is at most 1024 characters")
    return key, value


def socket_path(text: str) -> str:
    """``--socket``: not empty (that would silently mean the default socket), and short
    enough for a Unix socket address."""
    if not text:
        _refuse("'': give the daemon's socket path, or leave --socket out for the default")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_SOCKET_PATH_BYTES:
        _refuse(f"{text[:40]!r}... is {size} bytes; a Unix socket path is at most {MAX_SOCKET_PATH_BYTES}")
    return text


def output_path(text: str) -> str:
    """``-o``: not empty (that would silently mean stdout; say ``-`` for it)."""
    if not text:
        _refuse("'': give a file (or '-' for stdout)")
    return text


def input_path(text: str) -> str:
    """A file to read (``doctor --unit``): not empty (that would silently check nothing)."""
    if not text:
        _refuse("'': give a file's path")
    return text


def regex_problem(text: str) -> str | None:
    """Why the daemon would refuse ``text`` as a type/name filter, or None. The daemon
    matches with RE2 (linear time; no backreferences or lookaround) and a length limit:
    the same engine here, so a pattern Python's ``re`` accepts but RE2 does not is caught
    before connecting, with the flag named, not as a protocol error from the daemon."""
    try:
        compile_filter_regex(text)
    except BadFilterRegex as exc:
        return str(exc)
    return None


def regex(text: str) -> str:
    """``--type``/``--name``: an RE2 pattern the daemon accepts; not empty (it would match
    every op: leave the option out for that)."""
    if not text:
        _refuse("'': an empty regex matches every op (leave the option out for all)")
    problem = regex_problem(text)
    if problem is not None:
        _refuse(problem)
    return text


def checked(check: Callable[[str], T]) -> Callable[[str], T]:
    """A domain check that raises ValueError (a diff spec, a baseline name) as an option type."""
    def parse(text: str) -> T:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(check, "__name__", "checked")
    return parse
