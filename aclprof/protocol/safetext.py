"""Peer strings made safe for a terminal, a log line or a UTF-8 encoder.

Op names, service, host, labels and loss reasons come from other processes (any agent
that can reach the socket). Printed raw, an escape sequence retitles the terminal or clears
the screen, a newline forges a ``tail`` line or a ``status`` problem, and a lone surrogate
(valid JSON, ``"\\ud800"``) makes every UTF-8 encoder raise. :func:`safe` is the one rule
for all of them: control characters (C0, DEL, C1), bidi overrides and lone surrogates are
shown as visible ``\\xNN`` / ``\\uNNNN`` escapes, so the text stays readable and nothing
is silently dropped. :func:`scrub` only replaces lone surrogates (for data that is kept,
such as a name table, where escapes would change the name).
"""

from __future__ import annotations

import re

__all__ = ["safe", "scrub", "truncate"]

# C0 controls, DEL, C1 controls, bidi embeddings/overrides/isolates, line/paragraph
# separators, and lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(text: object) -> str:
    """``text`` (str() of it) with every character that could drive a terminal, break a
    line or fail to encode shown as an escape."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, s)


def scrub(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (encodable as UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return re.sub("[\ud800-\udfff]", "\ufffd", text)


def truncate(text: str, limit: int) -> str:
    """At most ``limit`` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"
