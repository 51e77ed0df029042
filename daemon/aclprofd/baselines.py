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
_HEAD_BYTES = 256 << 10  # a document's fields before "rows" (with 100 services named in "truncated")


class BaselineStore:
    """The baselines directory of one daemon (created on first save)."""

    def __init__(self, data_dir: str) -> None:
        self.dir = os.path.join(data_dir, "baselines")
        # name -> ((mtime_ns, size, inode), listing item): BASELINE_LIST parses a file once,
        # not 256 files of up to MAX_BYTES on every request (~50 ms each on the loop)
        self._listed: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.dir, check_name(name) + ".json")

    def save(self, name: str, doc: dict[str, Any]) -> int:
        """Write ``doc`` as baseline ``name``; returns its size. ValueError when the name is
        bad, the document too large or there are MAX_BASELINES others; OSError from disk."""
        return self.save_bytes(name, json.dumps(doc, separators=(",", ":")).encode())

    def save_bytes(self, name: str, data: bytes) -> int:
        """Write the document ``data`` (JSON, built by :mod:`aclprofd.baselinedoc`) as
        baseline ``name``: the rules of :meth:`save`."""
        path = self.path(name)
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
        return self._parse(name, self._read(name))

    def load_bytes(self, name: str) -> bytes:
        """The JSON saved as ``name``, checked as :meth:`load` checks it (BASELINE_GET sends
        these bytes as they are)."""
        data = self._read(name)
        self._parse(name, data)
        return data

    def _head(self, name: str) -> dict[str, Any] | None:
        """The fields before ``"rows"`` of a document written by :mod:`aclprofd.baselinedoc`
        (which puts ``row_count`` there), read from the file's first 256 KiB: listing 256
        baselines of 12 MiB must not parse 3 GiB on the loop. None for another layout."""
        with open(self.path(name), "rb") as f:
            data = f.read(_HEAD_BYTES)
        end = data.find(b',"rows":[')
        if end < 0:
            return None
        try:
            head = json.loads(data[:end] + b"}")
        except (ValueError, RecursionError):
            return None
        if not isinstance(head, dict) or type(head.get("row_count")) is not int:
            return None
        return head

    def _read(self, name: str) -> bytes:
        path = self.path(name)
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ValueError(f"baseline file {path} is larger than {MAX_BYTES} bytes")
        return data

    def _parse(self, name: str, data: bytes) -> dict[str, Any]:
        path = self.path(name)
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
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
        names = self.names()
        for gone in set(self._listed) - set(names):
            del self._listed[gone]
        for name in names:
            item: dict[str, Any] = {"name": name}
            try:
                st = os.stat(self.path(name))
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                cached = self._listed.get(name)
                if cached is not None and cached[0] == stamp:
                    out.append(dict(cached[1]))
                    continue
                item["bytes"] = st.st_size
                doc = self._head(name)
                if doc is None:  # written before row_count: the whole document
                    doc = self.load(name)
                    rows = doc.get("rows")
                    doc["row_count"] = len(rows) if isinstance(rows, list) else None
                item.update(saved_ts=doc.get("saved_ts"), source=doc.get("source"), rows=doc.get("row_count"))
                if isinstance(doc.get("truncated"), dict):
                    item["truncated"] = doc["truncated"].get("rows")
                self._listed[name] = (stamp, dict(item))
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
