"""How the C decode loop fetches op names and types (``_fast_names.c`` fetch(), issue 21).

The library's getters are one-shot (a successful Get erases the string), so a name can be
asked for once. The loop makes one Get call per string into a zeroed buffer of
``NAME_LIMIT + 2`` bytes and calls Len only when that Get is refused. These tests check:

- the number of library calls per record (one Type and one Name call; no Len call) on the
  mock's real getters, through counting wrappers bound in place of the library's pointers;
- names up to ``NAME_LIMIT`` bytes come back exactly as the old Len+Get pair gave them, and
  longer ones are cut to ``NAME_LIMIT`` bytes at a UTF-8 character boundary and counted,
  with the mock (CANN's source rule: a Get whose buffer is shorter than the string is
  refused and keeps the entry) and with fake getters that follow the other reading (CANN's
  docs: a short buffer truncates), which must give the same result;
- a string the library does not have is counted as missing, as before, and the count
  reaches ``Subscription.stats``.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers.fakegetters import GETTERS, FakeLibrary, bind, bound, counting, expected_string
from helpers.records import capture_records
from hypothesis import given, settings
from hypothesis import strategies as st

import aclprof
from aclprof import mock
from aclprof.api.subscription.decoder import Decoder
from aclprof.binding._fast import lib as fast
from aclprof.binding.layout import OP_ROW_DTYPE
from aclprof.binding.loader import get_library
from aclprof.binding.opdecode import NAME_LIMIT, NameTable

pytestmark = pytest.mark.usefixtures("no_leaks")

@pytest.fixture
def bind_getters() -> Iterator[Callable[[dict[str, Any]], None]]:
    """Bind other getter pointers into the C loop, keeping them (cffi callbacks) alive until
    the library's own are put back after the test."""
    library = get_library()
    kept: list[dict[str, Any]] = []

    def bind_kept(fns: dict[str, Any]) -> None:
        kept.append(fns)
        bind(fns)

    yield bind_kept
    bind({name: library.functions[name] for name in GETTERS})
    kept.clear()


def decode(raw: bytes, validate: bool = True) -> tuple[NameTable, list[tuple[bytes, bytes]], Any]:
    """Run the C loop over ``raw`` (80-byte records); (table, [(name, type)], counts)."""
    table = NameTable(1 << 16)
    n = len(raw) // 80
    out = np.zeros(n, dtype=OP_ROW_DTYPE)
    counts = table.new_counts()
    rows = table.decode_ops(bytearray(raw), n, 80, validate, 0, out, counts)
    strings = table.entries(0)
    return table, [(strings[r["op_name"]], strings[r["op_type"]]) for r in out[:rows]], counts


def decode_counted(bind_getters: Callable[[dict[str, Any]], None], ops: list[dict[str, Any]], runs: int
                   ) -> tuple[NameTable, list[tuple[bytes, bytes]], Any, Counter]:
    """Run ``ops`` on the mock ``runs`` times and decode the records through getters that
    count their calls: (table, [(name, type)], counts, calls)."""
    raw = capture_records(mock.load_model(ops), runs)
    calls: Counter = Counter()
    bind_getters(counting(calls))
    table, names, counts = decode(raw)
    return table, names, counts, calls


def expected(name: bytes) -> bytes:
    """What the loop keeps of ``name`` (cut to NAME_LIMIT at a UTF-8 boundary if longer)."""
    return expected_string(name, NAME_LIMIT)


def test_the_limit_is_the_compiled_one():
    assert NAME_LIMIT == fast.ACLPROF_NAME_LIMIT


def test_one_get_call_per_string_and_no_len_call(bind_getters):
    """Two library calls per record (was four: TypeLen, Type, NameLen, Name)."""
    ops = [{"name": f"layer{i}/conv", "type": "Conv2D" if i % 2 else "MatMul", "duration_ns": 100}
           for i in range(5)]
    table, names, counts, calls = decode_counted(bind_getters, ops, 3)
    assert names == [(op["name"].encode(), op["type"].encode()) for op in ops] * 3
    assert calls == Counter({"aclprofGetOpType": 15, "aclprofGetOpName": 15})
    assert counts.missing_names == 0 and table.cut == 0
    assert mock.stats()["nameTableEntries"] == 0  # every entry was fetched (and so freed)


LENGTHS = [0, 1, NAME_LIMIT - 1, NAME_LIMIT, NAME_LIMIT + 1, NAME_LIMIT + 2, NAME_LIMIT + 3,
           3 * NAME_LIMIT]


def test_long_names_from_the_mock_are_cut_at_the_limit_and_counted(bind_getters):
    """The mock's getters (CANN's source rule). A string of NAME_LIMIT + 1 or + 2 bytes
    comes back from the one Get call as NAME_LIMIT + 1 bytes (a buffer exactly as long as
    the string drops its last byte), a longer one is refused and fetched by Len+Get: all of
    them are cut to NAME_LIMIT. A 2-byte character across the limit is not split."""
    names = [b"n" * k for k in LENGTHS] + [b"a" * (NAME_LIMIT - 1) + "é".encode() + b"tail"]
    types = [b"T" * k for k in reversed(LENGTHS)] + [b"Add"]
    ops = [{"name": n, "type": t, "duration_ns": 10} for n, t in zip(names, types)]
    table, got, counts, calls = decode_counted(bind_getters, ops, 1)
    assert got == [(expected(n), expected(t)) for n, t in zip(names, types)]
    assert got[-1][0] == b"a" * (NAME_LIMIT - 1)  # the é would not fit whole
    longer = sum(len(s) > NAME_LIMIT for s in names + types)
    assert table.cut == longer == 9
    refused = sum(len(s) > NAME_LIMIT + 2 for s in names + types)  # then Len + Get
    assert calls["aclprofGetOpTypeLen"] + calls["aclprofGetOpNameLen"] == refused == 5
    assert calls["aclprofGetOpType"] + calls["aclprofGetOpName"] == 2 * len(ops) + refused
    assert counts.missing_names == 0
    assert mock.stats()["nameTableEntries"] == 0


def record(index: int) -> bytes:
    return struct.pack("<IIIIQ", 0, 1, 0, 0, index) + bytes(56)


NEAR = st.sampled_from([NAME_LIMIT + d for d in range(-3, 4)] + [2 * NAME_LIMIT + 5])
TEXT = st.one_of(st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\0", b"x")),
                 st.tuples(NEAR, st.sampled_from([b"a", "é".encode(), "中".encode(), "😀".encode()]))
                 .map(lambda t: (t[1] * t[0])[:t[0]].replace(b"\0", b"x")))


@settings(max_examples=25, deadline=None)
@given(entries=st.lists(st.tuples(st.one_of(st.none(), TEXT), st.one_of(st.none(), TEXT)),
                        min_size=1, max_size=6))
def test_both_readings_of_the_getters_give_the_old_names_up_to_the_limit(entries):
    """Under the source rule and the docs rule alike: every string the library has comes
    back as the old Len+Get pair gave it (whole), cut to NAME_LIMIT if longer (counted);
    a record missing its name or type is counted as missing, as before; every entry the
    library had is consumed."""
    raw = b"".join(record(i + 1) for i in range(len(entries)))
    results = []
    for rule in ("source", "docs"):
        fake = FakeLibrary(rule, {i + 1: pair for i, pair in enumerate(entries)})
        with bound(fake.fns):
            table, got, counts = decode(raw, validate=False)
        assert all(pair == (None, None) for pair in fake.table.values()), rule
        assert got == [(b"?" if n is None else expected(n), b"?" if t is None else expected(t))
                       for n, t in entries], rule
        assert counts.missing_names == sum(n is None or t is None for n, t in entries)
        assert table.cut == sum(s is not None and len(s) > NAME_LIMIT for pair in entries for s in pair)
        present = [s for pair in entries for s in pair if s is not None]
        # one Get per string; a refused one (source rule, longer than the buffer) adds Len + Get;
        # a missing one is asked with Get then Len (both refused)
        absent = sum(s is None for pair in entries for s in pair)
        refused = sum(len(s) > NAME_LIMIT + 2 for s in present) if rule == "source" else 0
        assert (fake.calls["get"], fake.calls["len"]) == (len(present) + absent + refused,
                                                          refused + absent), rule
        results.append(got)
    assert results[0] == results[1]


def test_the_decoder_counts_cut_names_per_record():
    name, op_type = "é" * (NAME_LIMIT // 2 + 1), "t" * (NAME_LIMIT + 1)  # 2-byte characters
    model = mock.load_model([{"name": name, "type": "Add", "duration_ns": 10},
                             {"name": "short", "type": op_type, "duration_ns": 10},
                             {"name": "short", "type": "Add", "duration_ns": 10}])
    raw = capture_records(model, 3)
    decoder = Decoder(80)
    records = [r for b in decoder.feed(raw) for r in b.records()]
    assert [(r.op_name, r.op_type) for r in records] == [
        ("é" * (NAME_LIMIT // 2), "Add"), ("short", "t" * NAME_LIMIT), ("short", "Add")] * 3
    assert decoder.names_cut == 6 and decoder.names_missing == 0
    assert mock.stats()["nameTableEntries"] == 0


def test_a_cut_name_is_counted_in_the_subscription_stats():
    name = "x" * (NAME_LIMIT + 10)
    model = mock.load_model([{"name": name, "type": "Long", "duration_ns": 10},
                             {"name": "short", "type": "Add", "duration_ns": 10}])
    records: list = []
    sub = aclprof.subscribe(model, callback=records.append)
    mock.execute(model, 2)
    sub.close()
    assert [(r.op_name, r.op_type) for r in records] == [("x" * NAME_LIMIT, "Long"), ("short", "Add")] * 2
    st_ = sub.stats
    assert st_.names_cut == 2 and st_.names_missing == 0 and st_.delivered == 4  # per record, as names_missing
