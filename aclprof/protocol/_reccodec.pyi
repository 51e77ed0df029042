from collections.abc import Sequence
from typing import Any

def encode_into(out: Any, parts: Sequence[Any], /) -> int: ...
def decode(data: Any, count: int, /) -> bytes: ...

#: the format's version (aclprofd.storage's chunk magic "ACK3" is version 1)
CODEC_VERSION: int
#: the most bytes one record encodes to (a buffer of len(records) // 56 * this always fits)
RECORD_MAX_BYTES: int
#: the fewest bytes one record encodes to
RECORD_MIN_BYTES: int
