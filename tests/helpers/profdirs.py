"""Reading back what the mock wrote into a ``PROF_*`` directory (format: mock_acl/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_tx_events", "read_device_config", "read_session", "prof_dirs"]


def read_tx_events(prof_dir: Path) -> list[dict]:
    """Every event of ``host/msproftx.jsonl`` (marks, push/pop pairs, ranges, steps ...)."""
    path = Path(prof_dir) / "host" / "msproftx.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_device_config(prof_dir: Path, device: int) -> dict:
    """``device_<id>/mock_config.json``: the configuration the device ran with."""
    return json.loads((Path(prof_dir) / f"device_{device}" / "mock_config.json").read_text())


def read_session(prof_dir: Path) -> dict:
    """``host/mock_session.json``: the session's start (and stop, once stopped)."""
    return json.loads((Path(prof_dir) / "host" / "mock_session.json").read_text())


def prof_dirs(parent: Path) -> list[Path]:
    """The PROF_* directories directly under ``parent``, sorted by name."""
    if not Path(parent).is_dir():
        return []
    return sorted(p for p in Path(parent).iterdir() if p.name.startswith("PROF_"))
