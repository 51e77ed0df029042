"""The decode loop's op prediction (``_fast_names.c``, issue 21) changes nothing it decodes.

The loop guesses each record's (type, name) ids from the record before (the op that followed
it last time: model order) and checks the guess against the fetched bytes; only a miss
hashes. These tests hold the C loop to a plain Python model of what it decoded before the
prediction (every string looked up, nothing guessed):

- hypothesis: models of ops whose names are prefixes of each other, empty, missing, at and
  past the name limit (cut, with UTF-8 characters across it), the step keypoint, run in
  changing orders and interleaved, with corrupt records, 80- and 72-byte records, devId 0,
  a small name table (overflow), split into arbitrary decode calls sharing one table,
  through fake getters under both readings of CANN's getter: rows, names, counts, the
  getter calls and the library entries consumed are exactly the model's;
- the mock: one model run in order hits the guess for every string but the first pass's
  (the count is pinned), and a model whose order changes or two models in one pipe miss
  more and still decode exactly as the mock's emit log says.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np
import pytest
from helpers.fakegetters import FakeLibrary, bound, expected_string
from helpers.records import capture_records
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof import mock
from aclprof.binding import lowlevel
from aclprof.binding.enums import AicoreMetrics
from aclprof.binding.layout import OP_ROW_DTYPE
from aclprof.binding.opdecode import NAME_LIMIT, NameTable, signature

pytestmark = pytest.mark.usefixtures("no_leaks")

ROW_FIELDS = ("model_id", "op_name", "op_type", "flag", "thread_id", "device_id", "start", "end",
              "duration", "execution_time", "keypoint")


def build(index: int, size: int, fields: tuple[int, ...], corrupt: int) -> bytes:
    """A signed record with opIndex ``index``; ``corrupt`` != 0 flips a byte of the signature
    (the fields stay: unvalidated, the record decodes as written)."""
    model, flag, thread, duration, start, end, execution, device = fields
    body = struct.pack("<IIIIQQQQQQQ", 0, model, flag, thread, index, duration, start, end, execution, 7, 9)
    if size == 80:
        body += struct.pack("<II", device, 0)
    rec = bytearray(struct.pack("<I", signature(body, size)) + body[4:])
    if corrupt:
        rec[corrupt % 4] ^= 0x5A
    return bytes(rec)


class Model:
    """What the loop decoded before the prediction, in Python: every string looked up."""

    def __init__(self, max_names: int):
        self.max_names = max(2, max_names)
        self.names: list[bytes] = [b"?"]
        self.overflows = self.cut = self.corrupt = self.missing = self.keypoints = self.max_end = 0

    def intern(self, s: bytes) -> int:
        if s in self.names:
            return self.names.index(s)
        if len(self.names) >= self.max_names:
            self.overflows += 1
            return 0
        self.names.append(s)
        return len(self.names) - 1

    def fetch(self, s: bytes | None) -> int | None:
        if s is None:
            return None
        if len(s) > NAME_LIMIT:
            self.cut += 1
        return self.intern(expected_string(s, NAME_LIMIT))

    def decode(self, records: list[tuple[bool, tuple[int, ...], bytes | None, bytes | None]], size: int,
               validate: bool, default_device: int) -> list[tuple[int, ...]]:
        rows = []
        for corrupt, fields, name, op_type in records:
            if validate and corrupt:
                self.corrupt += 1
                continue
            t, m = self.fetch(op_type), self.fetch(name)
            self.missing += t is None or m is None
            model, flag, thread, duration, start, end, execution, device = fields
            keypoint = (t is not None and m is not None and self.names[m] == b"keypoint_op"
                        and self.names[t] == b"na")
            self.keypoints += keypoint
            self.max_end = max(self.max_end, end)
            rows.append((model, m or 0, t or 0, flag, thread,
                         device if size == 80 and device else default_device,
                         start, end, duration, execution, int(keypoint)))
        return rows


# Strings that make guesses fail in every way: prefixes of each other ("ab" guessed where
# "abc" came, and the reverse), the empty string, the keypoint pair, and lengths around the
# limit whose cut lands inside a UTF-8 character (two long strings cut to the same bytes).
LONG = [b"n" * NAME_LIMIT, b"n" * (NAME_LIMIT + 1), b"n" * (NAME_LIMIT + 2), b"n" * (NAME_LIMIT + 5),
        b"a" * (NAME_LIMIT - 1) + "é".encode() + b"x", b"a" * (NAME_LIMIT - 1) + "é".encode()]
SHORT = [b"", b"a", b"ab", b"abc", b"abcdefgh", b"abcdefghi", "ab\u00e9".encode(), b"keypoint_op", b"na",
         b"layer0/attention/MatMul_0", b"layer0/attention/MatMul_1", b"MatMulV2"]
STRING = st.one_of(st.none(), st.sampled_from(SHORT), st.sampled_from(SHORT), st.sampled_from(LONG))
FIELDS = st.tuples(st.integers(0, 9), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                   st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
                   st.integers(0, 2**64 - 1), st.sampled_from([0, 0, 1, 5, 2**32 - 1]))
MODEL = st.lists(st.tuples(STRING, STRING), min_size=1, max_size=6)


@st.composite
def streams(draw: Any) -> tuple[list[tuple[bytes | None, bytes | None]], list[int]]:
    """Ops of one to three models, run iteration by iteration: each iteration one model in
    its order, or reordered, or two models' iterations merged op by op."""
    models = draw(st.lists(MODEL, min_size=1, max_size=3))
    ops: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["in order", "in order", "reordered", "interleaved"]))
        first = models[draw(st.integers(0, len(models) - 1))]
        if kind == "in order":
            ops += first
        elif kind == "reordered":
            ops += draw(st.permutations(first))
        else:
            second = list(models[draw(st.integers(0, len(models) - 1))])
            merged, a = [], list(first)
            while a or second:
                take_a = bool(a) and (not second or draw(st.booleans()))
                merged.append((a if take_a else second).pop(0))
            ops += merged
    cuts = draw(st.lists(st.integers(1, len(ops)), max_size=5))
    return ops, sorted(set(cuts))


@settings(max_examples=150, deadline=None)
@given(stream=streams(), size=st.sampled_from([80, 72]), rule=st.sampled_from(["source", "docs"]),
       validate=st.booleans(), max_names=st.sampled_from([3, 6, 1 << 16]), default_device=st.integers(0, 3),
       data=st.data())
def test_decode_is_the_lookup_model_exactly(stream, size, rule, validate, max_names, default_device, data):
    ops, cuts = stream
    n = len(ops)
    fields = data.draw(st.lists(FIELDS, min_size=n, max_size=n))
    corrupt = data.draw(st.lists(st.sampled_from([0, 0, 0, 0, 1, 17, 60]), min_size=n, max_size=n))
    raw = b"".join(build(i + 1, size, fields[i], corrupt[i]) for i in range(n))
    fake = FakeLibrary(rule, {i + 1: op for i, op in enumerate(ops)}, size)

    table = NameTable(max_names)
    counts = table.new_counts()
    out = np.zeros(n, OP_ROW_DTYPE)
    rows: list[tuple[int, ...]] = []
    with bound(fake.fns):
        for lo, hi in zip([0, *cuts], [*cuts, n]):
            if lo == hi:
                continue
            got = table.decode_ops(bytearray(raw[lo * size:hi * size]), hi - lo, size, validate,
                                   default_device, out, counts)
            rows += [tuple(int(r[f]) for f in ROW_FIELDS) for r in out[:got]]

    model = Model(max_names)
    want = model.decode([(bool(corrupt[i]), fields[i], *ops[i]) for i in range(n)], size, validate, default_device)
    assert rows == want
    assert table.entries(0) == model.names
    assert (counts.corrupt, counts.missing_names, counts.keypoints, counts.max_end) == (
        model.corrupt, model.missing, model.keypoints, model.max_end)
    assert (table.cut, table.overflows) == (model.cut, model.overflows)
    # the library: every string of a record passed to the getters consumed, the others kept
    for i, op in enumerate(ops):
        assert fake.table[i + 1] == ((None, None) if not (validate and corrupt[i]) else op)
    # one Get per string (a refused one under the source rule: Len + Get; a missing one: Len)
    passed = [op for i, op in enumerate(ops) if not (validate and corrupt[i])]
    strings = [s for op in passed for s in op]
    refused = sum(s is not None and len(s) > NAME_LIMIT + 2 for s in strings) if rule == "source" else 0
    absent = sum(s is None for s in strings)
    assert (fake.calls["get"], fake.calls["len"]) == (len(strings) + refused, refused + absent)
    assert table.predicted <= len(strings) - absent


def _ops(names: list[str]) -> list[dict]:
    return [{"name": nm, "type": f"T{len(nm) % 3}", "duration_ns": 100} for nm in names]


def _decode(raw: bytes, table: NameTable, chunk: int = 7) -> list[tuple[bytes, bytes]]:
    """Decode raw 80-byte records through table, chunk records per call; (name, type) per row."""
    counts = table.new_counts()
    n = len(raw) // 80
    out = np.zeros(chunk, OP_ROW_DTYPE)
    got: list[tuple[int, int]] = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        rows = table.decode_ops(bytearray(raw[lo * 80:hi * 80]), hi - lo, 80, True, 0, out, counts)
        got += [(int(r["op_name"]), int(r["op_type"])) for r in out[:rows]]
    assert counts.corrupt == counts.missing_names == 0
    names = table.entries(0)
    return [(names[m], names[t]) for m, t in got]


def test_a_model_in_order_is_named_by_the_guess_after_its_first_pass(emit_log):
    """n ops run k times: the first pass and the first record of the second are looked up
    (nothing to guess from yet), every other string is the guess's: 2 * (n * (k - 1) - 1)."""
    names = [f"layer{i // 4}/op_{i}" for i in range(12)]
    model = mock.load_model(_ops(names))
    raw = capture_records(model, 5)
    table = NameTable(1 << 16)
    got = _decode(raw, table)
    assert got == [(e.name_bytes, e.type_bytes) for e in emit_log.read()]
    assert table.predicted == 2 * (12 * 4 - 1)


def test_order_changes_and_two_models_in_one_pipe_decode_exactly(emit_log):
    """The same op names in another order (a model reloaded reordered), and models whose
    records share one pipe, one table and one guess chain: the guesses miss at every change
    and the names are still the mock's, record for record."""
    names = [f"block{i}/MatMul" for i in range(10)]
    forward = mock.load_model(_ops(names))
    backward = mock.load_model(_ops(names[::-1]))
    other = mock.load_model(_ops([f"head/{i}" for i in range(7)] + names[:3]))
    models = (forward, backward, other)
    r, w = os.pipe()
    cell = lowlevel.FdCell(w)
    config = lowlevel.create_subscribe_config(True, AicoreMetrics.NONE, cell)
    table = NameTable(1 << 16)
    got: list[tuple[bytes, bytes]] = []
    try:
        for m in models:
            lowlevel.model_subscribe(m, config)
        for m in (forward, forward, backward, forward, other, backward, other, other, forward):
            mock.execute(m, 1)
            mock.wait_writer_idle(10)
            want = 80 * (len(emit_log.read()) - len(got))
            data = b""
            while len(data) < want:
                data += os.read(r, want - len(data))
            got += _decode(data, table, chunk=4)
        for m in models:
            lowlevel.model_unsubscribe(m)  # the last one closes w
    finally:
        os.close(r)
        config.close()
        if cell.value >= 0:
            os.close(cell.value)
    emitted = emit_log.read()
    assert got == [(e.name_bytes, e.type_bytes) for e in emitted]
    distinct = len({e.name_bytes for e in emitted})
    assert 0 < table.predicted < 2 * (len(emitted) - distinct)  # the changes missed
    assert mock.stats()["nameTableEntries"] == 0
