from collections.abc import Callable
from typing import Any

def encode_frames(records: Any, ts: Any, head: bytes, names: dict[int, bytes], miss: Callable[[int], bytes],
                  kind: int, max_records: int, target: int, max_payload: int, /) -> bytes: ...
