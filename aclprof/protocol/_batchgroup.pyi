from typing import Any

def group(records: Any, upper: Any, out_dm: Any, out_code: Any, out_count: Any, out_total: Any, out_min: Any,
          out_max: Any, out_inv: Any, out_bin: Any, /) -> tuple[int, int]: ...
