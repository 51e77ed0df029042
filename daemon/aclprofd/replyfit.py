"""Replies that fit their frame by construction (issue 19, item 3).

Peers choose much of what a reply carries (hosts, services, labels, op names): a string of
control characters grows six-fold in JSON (``\\u0001``), so a reply built from them could
pass the wire's 16 MiB payload limit (``wire.MAX_PAYLOAD``) and fail for *every* client
that asks. So every variable-length part of a reply is measured as it is built (compact
JSON, ``ensure_ascii``: one character of the output is one byte on the wire) and cut at a
byte budget; what is left out is counted in the reply itself (``"truncated": {what: n}``)
and in the daemon's ``replies_truncated`` counters (STATUS, /metrics). The budgets
(:data:`REPLY_BUDGET` and its shares) add up to well below ``MAX_PAYLOAD``, whatever the
strings are; a reply whose fixed part alone would not fit is a bug, never a peer's doing.

- :func:`json_size`: the exact bytes of a value in a reply.
- :func:`take`: a list's prefix within a budget (stops measuring at the first item that
  does not fit: the cost is bounded by the budget, not by the list).
- :func:`fair_shares`: max-min fair bytes per sender (water filling), so that one sender
  with huge entries cannot push the others out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from aclprof.protocol.wire import MAX_PAYLOAD

__all__ = ["REPLY_BUDGET", "json_size", "take", "take_encoded", "fair_shares", "Truncations", "cut_text",
           "ERROR_TEXT_MAX", "STEP_BYTES"]

T = TypeVar("T")

#: bytes of JSON that the variable-length parts of one reply may take in all; the rest of
#: MAX_PAYLOAD (4 MiB) is far more than any reply's fixed fields
REPLY_BUDGET = MAX_PAYLOAD - (4 << 20)
#: characters of an ERROR frame's message (peers' strings can be in it)
ERROR_TEXT_MAX = 4096
_CHUNK = 64  # items measured in one json.dumps call (one C call for many small rows)
#: take_encoded yields after about this many bytes of JSON encoded (a step of a few ms)
STEP_BYTES = 256 << 10


def json_size(obj: Any) -> int:
    """Bytes of ``obj`` as the reply's compact JSON (``ensure_ascii``: output is ASCII)."""
    return len(json.dumps(obj, separators=(",", ":")))


def take(items: Sequence[T], budget: int, size: Callable[[Any], int] = json_size) -> tuple[list[T], int, int]:
    """``(kept, left_out, bytes)``: the longest prefix of ``items`` whose JSON (with the
    separating commas) fits in ``budget`` bytes. Measures chunks of items in one call and
    stops at the first item that does not fit, so a list of huge items costs the budget,
    not its own size."""
    used, n = 2, len(items)  # the brackets
    i = 0
    while i < n:
        chunk = items[i:i + _CHUNK]
        s = size(list(chunk)) - 2 + (1 if i else 0)  # without its brackets, with the comma before it
        if used + s <= budget:
            used += s
            i += len(chunk)
            continue
        for item in chunk:  # the chunk does not fit whole: one by one
            s = size(item) + (1 if i else 0)
            if used + s > budget:
                return list(items[:i]), n - i, used
            used += s
            i += 1
    return list(items), 0, used


def take_encoded(items: Sequence[Any], budget: int, parts: list[str]) -> Generator[None, None, tuple[int, int]]:
    """:func:`take` in steps, keeping the JSON: appends to ``parts`` the compact JSON of the
    kept prefix's items (``"[" + ",".join(parts) + "]"`` is ``json.dumps`` of the kept list,
    byte for byte), yields between chunks of about ``STEP_BYTES`` of JSON (sized from the
    previous chunk's bytes per item; the first is one item), and returns ``(kept,
    left_out)``. A reply built on it encodes its rows once, over several loop turns."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    used, n, i, chunk_len = 2, len(items), 0, 1
    while i < n:
        if i:
            yield
        chunk = items[i:i + chunk_len]
        text = dumps(list(chunk))
        # the next chunk: about STEP_BYTES at this chunk's bytes per item (a step of a few ms)
        chunk_len = max(1, min(_CHUNK, STEP_BYTES * len(chunk) // max(len(text), 1)))
        s = len(text) - 2 + (1 if i else 0)
        if used + s <= budget:
            used += s
            if len(text) > 2:
                parts.append(text[1:-1])
            i += len(chunk)
            continue
        for item in chunk:  # the chunk does not fit whole: one by one
            one = dumps(item)
            if used + len(one) + (1 if i else 0) > budget:
                return i, n - i
            used += len(one) + (1 if i else 0)
            parts.append(one)
            i += 1
    return i, 0


def fair_shares(needs: Sequence[int], budget: int) -> list[int]:
    """Bytes each sender may have of ``budget``: max-min fair (water filling). A sender that
    needs less than an equal share gets what it needs; the rest is split equally among the
    others. One sender with huge entries gets its share, never the others' bytes."""
    shares = [0] * len(needs)
    left, n = budget, len(needs)
    for i in sorted(range(n), key=lambda j: needs[j]):
        share = left // n if n else 0
        shares[i] = min(needs[i], share)
        left -= shares[i]
        n -= 1
    return shares


def cut_text(text: str, limit: int = ERROR_TEXT_MAX) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (an ERROR message
    may quote a peer's value: its reply must stay small whatever the value)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class Truncations:
    """Counts of what replies left out, by ``what`` (``"status.agents"``,
    ``"snapshot.rows"``, ...), since the daemon started: STATUS ``replies_truncated`` and
    ``aclprofd_reply_items_truncated_total{what}``. Loop thread only."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}
        self.replies = 0  # replies that left something out

    def note(self, reply: dict[str, Any], prefix: str, cut: dict[str, int]) -> None:
        """Mark ``reply`` with ``"truncated": cut`` (non-zero entries) and count them."""
        cut = {k: v for k, v in cut.items() if v}
        if not cut:
            return
        reply.setdefault("truncated", {}).update(cut)
        self.replies += 1
        for k, v in cut.items():
            key = f"{prefix}.{k}"
            self.items[key] = self.items.get(key, 0) + v

    def as_dict(self) -> dict[str, Any]:
        return {"replies": self.replies, "items": dict(sorted(self.items.items()))}
