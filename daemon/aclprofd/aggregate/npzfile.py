"""The aggregates file (``aggregates.npz``): the since-start figures kept across restarts.

An uncompressed ``.npz`` with the int64 arrays ``count``, ``total``, ``min``, ``max`` (one
row per key), the sparse histogram ``hist_key`` (int32), ``hist_bin`` (int16),
``hist_count``, and ``meta``: UTF-8 JSON with ``format``, ``version``, ``nbins``,
``bins_per_octave``, ``since_ts``, ``saved_ts``, ``other_records`` and ``keys`` (one
``[host, pid, device, model, op_type, op_name, service, model_label]`` per row), as
daemon/README.md documents. Version 1 files (keys without ``model_label``) still load,
their keys with the model label ``""`` (unknown). Written atomically: a reader, or a
daemon restarted after ``kill -9``, sees the previous file or the new one, never a mix.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..atomicfile import replace_file
from .quantiles import BINS_PER_OCTAVE, I64, NBINS

__all__ = ["STATE_FORMAT", "STATE_VERSION", "READABLE_VERSIONS", "write_state", "read_state", "ARRAYS"]

STATE_FORMAT = "aclprofd-aggregates"
STATE_VERSION = 2
#: versions :func:`read_state` accepts (1: keys had no model label)
READABLE_VERSIONS = (1, 2)
ARRAYS = ("count", "total", "min", "max", "hist_key", "hist_bin", "hist_count")


def write_state(path: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write ``arrays`` and ``meta`` (format, version and histogram layout added) to ``path``:
    a temporary file in the same directory, fsync, rename, fsync of the directory."""
    meta = {"format": STATE_FORMAT, "version": STATE_VERSION, "nbins": NBINS,
            "bins_per_octave": BINS_PER_OCTAVE, **meta}
    keys = meta.pop("keys", [])
    # one small json.dumps per key, not one call over all of them: a C call holds the GIL
    # throughout, and 4096 keys of 4 KiB control-character names are ~180 MB of JSON
    # (~0.7 s) that would stall the loop thread while the writer thread encodes them
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    text = b"".join((dumps(meta)[:-1].encode(), b',"keys":[', b",".join(dumps(k).encode() for k in keys), b"]}"))
    members: dict[str, Any] = {**arrays, "meta": np.frombuffer(text, np.uint8)}
    replace_file(path, lambda f: np.savez(f, **members))


def read_state(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a file :func:`write_state` wrote, arrays as int64 (the keys as
    written: 7 fields in version 1, 8 in version 2). Raises FileNotFoundError,
    or ValueError/KeyError for a file of another format, version or histogram layout, or
    whose key arrays and key list differ in length."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        if meta.get("format") != STATE_FORMAT or meta.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"not {STATE_FORMAT} version {' or '.join(map(str, READABLE_VERSIONS))}")
        if meta.get("nbins") != NBINS or meta.get("bins_per_octave") != BINS_PER_OCTAVE:
            raise ValueError("histogram layout differs")
        arrays = {k: np.asarray(z[k], dtype=I64) for k in ARRAYS}
    if not all(len(arrays[k]) == len(meta["keys"]) for k in ("count", "total", "min", "max")):
        raise ValueError("key arrays and key list differ in length")
    return meta, arrays
