"""Op failures (issue 24) as human text: the failures block of ``aclprof status`` (STATUS
``failures``) and the tensors of a failure, shared with ``aclprof tail``'s failure line."""

from __future__ import annotations

import time
from typing import Any

from aclprof.protocol.failurenames import failure_code_name, tensor_text
from aclprof.protocol.safetext import safe

__all__ = ["tensors_text", "failure_lines", "MAX_KEY_LINES", "MAX_LAST_LINES"]

MAX_KEY_LINES = 5  # largest counts shown
MAX_LAST_LINES = 3  # latest failures shown


def tensors_text(v: Any) -> str:
    """``float16[8x3x224x224] NCHW, float[?] ND`` for a failure's ``inputs`` or ``outputs``."""
    return ", ".join(safe(tensor_text(t)) for t in v) if isinstance(v, list) else "?"


def _op(e: dict[str, Any]) -> str:
    name = e.get("op_name")
    return safe(name) if name is not None else f"task {safe(e.get('task', '?'))}"


def failure_lines(st: dict[str, Any]) -> list[str]:
    """STATUS ``failures``: the totals, the largest counts per (service, model, op type,
    device, code) and the last few failures with their tensors; nothing when there are none."""
    f = st.get("failures")
    if not isinstance(f, dict) or not f.get("total"):
        return []
    extra = [f"{f[k]:,} {what}" for k, what in (
        ("unresolved", "without a known model and op type"), ("agent_dropped", "dropped by agents (counted only)"),
        ("keys_refused", "counted under (other)"), ("lines_skipped", "not streamed to slow tail clients"))
        if f.get(k)]
    lines = [f"op failures: {f['total']:,} total" + (f" ({', '.join(extra)})" if extra else "")]
    rows = [r for r in f.get("by_key") or [] if isinstance(r, dict)]
    for r in rows[:MAX_KEY_LINES]:
        code = r.get("code")
        lines.append(f"  {r.get('count', 0):,} x {r.get('service') or '-'}/{r.get('model') or '?'} "
                     f"{r.get('op_type') or '?'} dev {r.get('device', '?')} {code} {failure_code_name(code)}")
    keys = f.get("keys")
    if isinstance(keys, int) and keys > min(len(rows), MAX_KEY_LINES):
        lines.append(f"  ... {keys - min(len(rows), MAX_KEY_LINES):,} more (aclprof status --json)")
    last = [e for e in f.get("last") or [] if isinstance(e, dict)][-MAX_LAST_LINES:]
    for e in reversed(last):  # newest first
        ts = e.get("ts")
        when = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "-"
        code = e.get("code")
        lines.append(f"  last {when} {e.get('service') or '-'} pid {e.get('pid', '?')} dev {e.get('device', '?')} "
                     f"{e.get('model') or '?'} {e.get('op_type') or '?'} {_op(e)}: {code} "
                     f"{e.get('code_name') or failure_code_name(code)} in [{tensors_text(e.get('inputs'))}] "
                     f"out [{tensors_text(e.get('outputs'))}]")
    return lines
