"""``aclprof export --format jsonl``: the daemon's JSON Lines (daemon/PROTOCOL.md "record"
objects), passed through as the daemon encoded them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

__all__ = ["write_jsonl"]


def write_jsonl(payloads: Iterable[bytes], out: BinaryIO) -> int:
    """The daemon's JSON Lines payloads, written as they came (no decoding); the count of lines."""
    n = 0
    for payload in payloads:
        out.write(payload)
        n += payload.count(b"\n")
    return n
