"""Run :class:`aclprof.exportfmt.ascend.AscendWriter` into a fresh directory, as ``aclprof export
--format ascend`` does (through a directory fd), for the tests that read its files back."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aclprof.exportfmt.ascend import AscendWriter

__all__ = ["write_ascend"]


def write_ascend(root: Path, batches: Iterable[list[dict[str, Any]]],
                 window: Any = None) -> tuple[AscendWriter, dict[str, Path]]:
    """Write ``batches`` under ``root`` (created, must not exist); the writer and
    ``{process directory name: its path}``."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = AscendWriter(fd, window)
        try:
            for b in batches:
                w.add(b)
            w.finish()
        finally:
            w.close()
    finally:
        os.close(fd)
    return w, {d: root / d for d in sorted(os.listdir(root))}
