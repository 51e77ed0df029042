"""Saved baselines on disk: ``<data_dir>/baselines/NAME.json``, one document each
(:mod:`aclprof.protocol.baselinefmt`).

Written atomically (temporary file, fsync, rename, directory fsync): a reader or a daemon
killed mid-save sees the old file or the new one. Bounded: at most ``MAX_BASELINES`` files
(saving over an existing name is always allowed) and ``MAX_BYTES`` read per file.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aclprof.protocol.baselinefmt import check_name

from .atomicfile import private_dir, replace_file

__all__ = ["BaselineStore", "MAX_BASELINES", "MAX_BYTES"]

MAX_BASELINES = 256
MAX_BYTES = 12 << 20  # under the wire's 16 MiB payload limit, so BASELINE_GET can send it


class BaselineStore:
    """The baselines directory of one daemon (created on first save)."""

    def __init__(self, data_dir: str) -> None:
        self.dir = os.path.join(data_dir, "baselines")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, check_name(name) + ".json")

    def save(self, name: str, doc: dict[str, Any]) -> int:
        """Write ``doc`` as baseline ``name``; returns its size. ValueError when the name is
        bad, the document too large or there are MAX_BASELINES others; OSError from disk."""
        path = self.path(name)
        data = json.dumps(doc, separators=(",", ":")).encode()
        if len(data) > MAX_BYTES:
            raise ValueError(f"baseline {name!r} would be {len(data)} bytes; at most {MAX_BYTES}")
        if not os.path.exists(path) and len(self.names()) >= MAX_BASELINES:
            raise ValueError(f"{MAX_BASELINES} baselines are saved already: delete one from {self.dir}")
        private_dir(self.dir)  # 0750 whatever was there (atomicfile.private_dir)
        replace_file(path, lambda f: f.write(data))
        return len(data)

    def load(self, name: str) -> dict[str, Any]:
        """The document saved as ``name``. FileNotFoundError if there is none; ValueError if
        it is too large or not JSON (the caller decodes and checks the document itself)."""
        path = self.path(name)
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ValueError(f"baseline file {path} is larger than {MAX_BYTES} bytes")
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"baseline file {path} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"baseline file {path} does not hold a JSON object")
        return doc

    def names(self) -> list[str]:
        try:
            entries = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(e[:-5] for e in entries if e.endswith(".json") and _valid(e[:-5]))

    def listing(self) -> list[dict[str, Any]]:
        """``[{"name", "saved_ts", "bytes", "rows", "source"}]``; a file that cannot be read
        is listed with its ``error`` instead of hiding it."""
        out: list[dict[str, Any]] = []
        for name in self.names():
            item: dict[str, Any] = {"name": name}
            try:
                item["bytes"] = os.path.getsize(self.path(name))
                doc = self.load(name)
                rows = doc.get("rows")
                item.update(saved_ts=doc.get("saved_ts"), source=doc.get("source"),
                            rows=len(rows) if isinstance(rows, list) else None)
            except (OSError, ValueError) as exc:
                item["error"] = str(exc)
            out.append(item)
        return out


def _valid(name: str) -> bool:
    try:
        check_name(name)
    except ValueError:
        return False
    return True
