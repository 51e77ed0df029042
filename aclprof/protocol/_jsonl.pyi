from collections.abc import Callable
from typing import Any

def encode_frames(records: Any, ts: Any, head: bytes, names: dict[int, bytes], miss: Callable[[int], bytes],
                  kind: int, max_records: int, target: int, max_payload: int, /) -> bytes: ...
def encode_lines_into(buffer: Any, records: Any, ts: Any, head: bytes, names: dict[int, bytes],
                      miss: Callable[[int], bytes], /) -> tuple[int, int]: ...

#: ((name, offset, size), ...) of every field of aclprof_record (cdefs/aclprof_records.h), in order
RECORD_FIELDS: tuple[tuple[str, int, int], ...]
#: sizeof(aclprof_record): bytes of one wire record
RECORD_SIZE: int
#: ACLPROF_FLAG_KEYPOINT: the flag bit of a step keypoint record on the wire
FLAG_KEYPOINT: int
