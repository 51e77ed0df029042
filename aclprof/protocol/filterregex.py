"""The one rule for the ``type``/``name`` filter regexes of control requests: RE2 (linear
time, no backreferences or lookaround) with the byte limit of :data:`wire.MAX_REGEX_BYTES`.

The daemon compiles filters with it, and the CLI checks its flags with it before
connecting, so both accept and refuse exactly the same patterns, and say why in the same
words (:class:`BadFilterRegex`'s message; each caller prefixes what it checked).
"""

from __future__ import annotations

from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2: linear-time matching

from aclprof.protocol.wire import MAX_REGEX_BYTES

__all__ = ["BadFilterRegex", "compile_filter_regex", "RE2_SYNTAX"]

RE2_SYNTAX = "RE2 syntax: no backreferences or lookaround"

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the caller reports the error once, in its own words
_OPTIONS.max_mem = 8 << 20   # per compiled pattern


class BadFilterRegex(ValueError):
    """A pattern the filter rule refuses, its message saying why: ``size`` (bytes) when it
    is too long, else RE2's ``detail``."""

    def __init__(self, pattern: str, detail: str, size: int | None = None):
        if size is not None:
            message = f"regex is {size} bytes; at most {MAX_REGEX_BYTES}"
        else:
            message = f"RE2 rejects {pattern!r}: {detail} ({RE2_SYNTAX})"
        super().__init__(message)
        self.detail = detail
        self.size = size


def compile_filter_regex(pattern: str) -> Any:
    """``pattern`` compiled for RE2 (``.search`` like ``re``), or BadFilterRegex."""
    n = len(pattern.encode("utf-8", "surrogatepass"))
    if n > MAX_REGEX_BYTES:
        raise BadFilterRegex(pattern, f"longer than {MAX_REGEX_BYTES} bytes", size=n)
    try:
        return re2.compile(pattern, _OPTIONS)
    except UnicodeEncodeError as exc:  # a lone surrogate (JSON "\ud800", a non-UTF-8 argv byte)
        raise BadFilterRegex(pattern, f"not UTF-8 text: {exc.reason} at character {exc.start}") from None
    except re2.error as exc:
        msg = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise BadFilterRegex(pattern, msg) from None
