"""W3C Trace Context ``traceparent`` (https://www.w3.org/TR/trace-context/#traceparent-header),
parsed by the rules a receiver must apply: ``aclprof.request(id, traceparent=...)`` checks the
value it is given with :func:`parse`, and the OTLP trace export of request bills
(:mod:`aclprof.exportfmt.otlp_traces`) parents each bill's span on it.

``version-traceid-parentid-flags``: lower-case hex fields of 2, 32, 16 and 2 digits. Version
``ff`` is invalid; a trace id or parent id of all zeros is invalid. Version ``00`` is exactly
55 characters; a later version may append fields after a ``-`` (the spec tells a receiver to
read the four it knows and ignore the rest). Bit 0 of the flags is *sampled*.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["TraceParent", "parse", "check", "SAMPLED"]

SAMPLED = 0x01
_FIELDS = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_V00 = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ZERO_TRACE, _ZERO_PARENT = "0" * 32, "0" * 16
_SHAPE = "'00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>' (lower-case hex)"


class TraceParent(NamedTuple):
    """A parsed ``traceparent``: ids as integers (as OpenTelemetry's ``SpanContext`` takes them)."""

    version: int
    trace_id: int
    parent_id: int
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def parse(text: object) -> TraceParent:
    """The fields of the ``traceparent`` header ``text``; ``ValueError`` naming the value and the
    rule it breaks (the message starts with the value, so callers prefix their own name)."""
    if not isinstance(text, str):
        raise ValueError(f"traceparent must be a string {_SHAPE}, got {type(text).__name__} {text!r}")
    m = _FIELDS.match(text)
    if m is None:
        raise ValueError(f"traceparent {text!r} is not {_SHAPE}")
    version = int(m.group(1), 16)
    if version == 0xFF:
        raise ValueError(f"traceparent {text!r}: version ff is invalid")
    if version == 0 and len(text) != 55:
        raise ValueError(f"traceparent {text!r}: version 00 is exactly 55 characters, this is {len(text)}")
    if len(text) > 55 and text[55] != "-":
        raise ValueError(f"traceparent {text!r}: fields of a later version follow a '-' after the flags")
    trace_id, parent_id = int(m.group(2), 16), int(m.group(3), 16)
    if trace_id == 0:
        raise ValueError(f"traceparent {text!r}: a trace id of all zeros is invalid")
    if parent_id == 0:
        raise ValueError(f"traceparent {text!r}: a parent id of all zeros is invalid")
    return TraceParent(version, trace_id, parent_id, int(m.group(4), 16))


def check(text: object) -> None:
    """:func:`parse`'s ``ValueError`` if ``text`` is not a valid ``traceparent``, else nothing:
    a valid version-00 value (the common case, per request in ``aclprof.request``) costs one
    regex match and two compares, not the integer conversions."""
    if (type(text) is str and len(text) == 55 and _V00.fullmatch(text) is not None
            and text[3:35] != _ZERO_TRACE and text[36:52] != _ZERO_PARENT):
        return
    parse(text)
