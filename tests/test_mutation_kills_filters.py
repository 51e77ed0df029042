"""The daemon's filters (``aclprofd.filters``) and the regex rule they share with the CLI
(``aclprof.protocol.filterregex``), unit by unit (issue 20): unanchored and anchored
patterns, the incremental name matcher as the name table grows, every record-level field
at its edge, the sender-level fields, and the refusals' exact words. Before these, the
matcher and ``Filter.mask`` were reached only through daemons in subprocesses, where no
mutant can be seen (tests/bench/mutation.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from aclprofd.filters import Filter, NameMatcher
from helpers.records import make_records

from aclprof.cli.argtypes import regex_problem
from aclprof.protocol.filterregex import RE2_SYNTAX, BadFilterRegex, compile_filter_regex
from aclprof.protocol.wire import MAX_REGEX_BYTES, ProtocolError

# one id space for op types and op names, as an agent's name table has
NAMES = {1: "MatMul", 2: "Mul", 3: "Conv2D", 4: "Add", 10: "model/layer1/MatMul_7", 11: "head/Mul_2",
         12: "layer10/Conv"}


def _records():
    # (type, name) pairs: (MatMul, layer1/MatMul_7), (Mul, head/Mul_2), (Conv2D, layer10/Conv), (Add, head/Mul_2)
    r = make_records(4, types=(1, 2, 3, 4), names=(10, 11, 12, 11), durations=np.array([100, 200, 300, 400]))
    r["model_id"] = [1, 1, 2, 2]
    r["device_id"] = [0, 1, 0, 1]
    return r


def _selected(obj, records=None, names=NAMES):
    records = _records() if records is None else records
    m = Filter.parse(obj).mask(records, NameMatcher(), names)
    return None if m is None else np.flatnonzero(m).tolist()


# ---- regexes: unanchored, anchored -------------------------------------------------------------

@pytest.mark.parametrize("pattern,want", [
    ("Mul", [0, 1]),           # unanchored: `--type Mul` finds MatMul too
    ("^Mul$", [1]),            # anchored: Mul only
    ("^Mat", [0]),
    ("Mul$", [0, 1]),
    ("^(Conv2D|Add)$", [2, 3]),
    ("mul", []),               # case-sensitive, as RE2 and re are
    ("(?i)mul", [0, 1]),
    ("^Relu$", []),
])
def test_type_patterns_search_unless_anchored(pattern, want):
    assert _selected({"type": pattern}) == want


@pytest.mark.parametrize("pattern,want", [
    ("layer1", [0, 2]),        # "layer1" is inside "layer10/Conv" too: a search, not a match
    ("layer1/", [0]),
    ("^head/", [1, 3]),
    ("Mul_\\d$", [0, 1, 3]),
])
def test_name_patterns_match_the_op_name_not_the_type(pattern, want):
    assert _selected({"name": pattern}) == want


def test_type_and_name_together_must_both_match():
    assert _selected({"type": "Mul", "name": "^head/"}) == [1]
    assert _selected({"type": "^Add$", "name": "Mul"}) == [3]  # the name says Mul, the type decides the type


# ---- the record-level fields at their edges ---------------------------------------------------

def test_min_duration_is_inclusive_at_its_edge():
    assert _selected({"min_duration_ns": 300}) == [2, 3]
    assert _selected({"min_duration_ns": 301}) == [3]
    assert _selected({"min_duration_ns": 299}) == [2, 3]
    assert _selected({"min_duration_ns": 0}) == [0, 1, 2, 3]


def test_model_and_device_select_and_combine_with_and():
    assert _selected({"model": 2}) == [2, 3]
    assert _selected({"device": 1}) == [1, 3]
    assert _selected({"device": 0}) == [0, 2]  # equal, not "at least" (cosmic-ray's survivor: >= for ==)
    assert _selected({"model": 1}) == [0, 1]
    assert _selected({"model": 2, "device": 1}) == [3]
    assert _selected({"model": 1, "device": 1, "min_duration_ns": 201}) == []
    assert _selected({"model": 2, "type": "Mul"}) == []
    assert _selected({"device": 0, "name": "layer"}) == [0, 2]


def test_no_record_level_field_is_no_mask():
    """None means "every record": the caller sends the batch as it is, without a copy."""
    assert Filter.parse(None).mask(_records(), NameMatcher(), NAMES) is None
    assert Filter.parse({"pid": 5, "host": "h", "service": "s"}).mask(_records(), NameMatcher(), NAMES) is None
    assert Filter.parse({}).empty and Filter.parse(None).empty
    assert not Filter.parse({"min_duration_ns": 1}).empty and not Filter.parse({"type": "x"}).empty


def test_source_level_fields_decide_per_sender():
    f = Filter.parse({"host": "h1", "pid": 42, "service": "svc"})
    assert f.source_matches("h1", 42, "svc")
    assert not f.source_matches("h2", 42, "svc")
    assert not f.source_matches("h1", 43, "svc")
    assert not f.source_matches("h1", 42, "other")
    assert not f.source_matches("h1", 42, None)
    anyone = Filter.parse(None)
    assert anyone.source_matches("h2", 1, None) and anyone.source_matches("", 0, "x")
    assert Filter.parse({"pid": 42}).source_matches("any", 42, None)
    assert not Filter.parse({"pid": 42}).source_matches("any", 41, None)
    assert Filter.parse({"service": "svc"}).source_matches("h", 1, "svc")
    assert Filter.parse({"host": "h1"}).source_matches("h1", 9, "x")


# ---- the incremental matcher ------------------------------------------------------------------

class CountingRegex:
    """A compiled pattern that counts the strings it is asked about."""

    def __init__(self, pattern: str):
        self.rx = compile_filter_regex(pattern)
        self.asked: list[str] = []

    def search(self, s: str):
        self.asked.append(s)
        return self.rx.search(s)


def test_matcher_extends_its_ids_as_the_name_table_grows_and_matches_each_name_once():
    names: dict[int, str] = {5: "MatMul", 2: "Add"}
    rx = CountingRegex("Mul")
    m = NameMatcher()
    assert m.ids(rx, "type", names).tolist() == [5]
    assert m.ids(rx, "type", names).tolist() == [5]  # unchanged table: cached, nothing asked again
    assert rx.asked == ["MatMul", "Add"]
    names[9] = "BatchMatMul"  # the sender registered more names (ids in any order)
    names[1] = "Relu"
    names[7] = "Mul"
    ids = m.ids(rx, "type", names)
    assert ids.dtype == np.uint32 and ids.tolist() == [5, 9, 7]
    assert rx.asked == ["MatMul", "Add", "BatchMatMul", "Relu", "Mul"]  # only the new names
    names[3] = "Sub"
    assert m.ids(rx, "type", names).tolist() == [5, 9, 7]
    assert rx.asked[-1] == "Sub" and len(rx.asked) == 6


def test_matcher_keeps_type_and_name_apart():
    names = {1: "MatMul", 2: "head/MatMul_1", 3: "Add"}
    m = NameMatcher()
    assert m.ids(compile_filter_regex("^Mat"), "type", names).tolist() == [1]
    assert m.ids(compile_filter_regex("^head/"), "name", names).tolist() == [2]
    names[4] = "MatMulV2"
    names[5] = "head/Add_3"
    assert m.ids(compile_filter_regex("^Mat"), "type", names).tolist() == [1, 4]
    assert m.ids(compile_filter_regex("^head/"), "name", names).tolist() == [2, 5]


def test_matcher_on_a_table_of_one_name():
    assert NameMatcher().ids(compile_filter_regex("Mul"), "type", {4: "MatMul"}).tolist() == [4]
    assert NameMatcher().ids(compile_filter_regex("Add"), "name", {4: "MatMul"}).tolist() == []


def test_matcher_on_an_empty_table_then_a_filled_one():
    names: dict[int, str] = {}
    m = NameMatcher()
    assert m.ids(compile_filter_regex("Mul"), "type", names).tolist() == []
    names[0] = "Mul"  # id 0 is a valid id
    assert m.ids(compile_filter_regex("Mul"), "type", names).tolist() == [0]


def test_mask_follows_records_of_names_registered_after_the_first_batch():
    """A stream's second batch names ops its first did not: they are matched then, and the
    first batch's answers stay."""
    flt = Filter.parse({"type": "Mul"})
    names = {1: "MatMul", 2: "Add"}
    matcher = NameMatcher()
    first = make_records(2, types=(1, 2), names=(1, 2))
    assert np.flatnonzero(flt.mask(first, matcher, names)).tolist() == [0]
    names[3] = "Mul"
    second = make_records(3, types=(3, 2, 1), names=(3, 2, 1))
    assert np.flatnonzero(flt.mask(second, matcher, names)).tolist() == [0, 2]


# ---- parsing: the refusals' words -------------------------------------------------------------

@pytest.mark.parametrize("obj", [[], "type=Mul", 3, True])
def test_a_filter_that_is_not_an_object_is_refused_in_words(obj):
    with pytest.raises(ProtocolError) as exc:
        Filter.parse(obj)
    assert str(exc.value) == "filter must be a JSON object"


def test_unknown_keys_are_all_named_sorted():
    with pytest.raises(ProtocolError) as exc:
        Filter.parse({"zeta": 1, "alpha": 2, "model": 1})
    assert str(exc.value) == "unknown filter keys: alpha, zeta"


def test_parse_keeps_each_value_and_null_means_absent():
    f = Filter.parse({"model": 0, "pid": 0, "device": 0, "min_duration_ns": 5, "host": "", "service": "s",
                      "type": None, "name": None})
    assert (f.model, f.pid, f.device, f.min_duration_ns, f.host, f.service) == (0, 0, 0, 5, "", "s")
    assert f.type_re is None and f.name_re is None
    assert _selected({"model": 0}) == []  # 0 is a model id, not "any"


# ---- the regex rule (filterregex) at its edges ------------------------------------------------

def test_a_regex_of_exactly_the_byte_limit_is_accepted_one_byte_more_is_refused():
    compile_filter_regex("a" * MAX_REGEX_BYTES)
    compile_filter_regex("é" * (MAX_REGEX_BYTES // 2))  # 2 bytes each: exactly the limit
    with pytest.raises(BadFilterRegex) as exc:
        compile_filter_regex("a" * (MAX_REGEX_BYTES + 1))
    assert (exc.value.size, exc.value.detail) == (MAX_REGEX_BYTES + 1, f"longer than {MAX_REGEX_BYTES} bytes")
    with pytest.raises(BadFilterRegex) as exc:
        compile_filter_regex("é" * (MAX_REGEX_BYTES // 2) + "a")  # bytes counted, not characters
    assert str(exc.value) == f"regex is {MAX_REGEX_BYTES + 1} bytes; at most {MAX_REGEX_BYTES}"


def test_re2s_reason_is_given_once_in_the_callers_words(capfd):
    """RE2 would also print its own error line on stderr (the daemon's journal, the CLI's
    terminal); the rule turns that off and says it once, with RE2's reason decoded."""
    with pytest.raises(BadFilterRegex) as exc:
        compile_filter_regex("(?<=x)y")
    assert exc.value.size is None
    assert exc.value.detail == "invalid perl operator: (?<="
    assert str(exc.value) == f"RE2 rejects '(?<=x)y': invalid perl operator: (?<= ({RE2_SYNTAX})"
    with pytest.raises(BadFilterRegex) as exc:
        compile_filter_regex("(ÿ")  # RE2's reason quotes the pattern: non-ASCII decoded, not b'..'
    assert exc.value.detail == "missing ): (ÿ"
    assert capfd.readouterr().err == ""


def test_a_lone_surrogate_is_a_refusal_not_an_internal_error():
    """JSON can carry "\\ud800" and argv a non-UTF-8 byte (as "\\udcff"): RE2 takes UTF-8,
    and the encoding error used to escape as UnicodeEncodeError (an "internal error" that
    closed the daemon's connection, argparse's bare "invalid regex value" in the CLI)."""
    for pattern, at in ((json.loads('"x\\ud800"'), 1), ("\udcff", 0)):
        with pytest.raises(BadFilterRegex) as exc:
            compile_filter_regex(pattern)
        assert str(exc.value) == (f"RE2 rejects {pattern!r}: not UTF-8 text: surrogates not allowed at character {at}"
                                  f" ({RE2_SYNTAX})")
        with pytest.raises(ProtocolError, match=r"^filter type: RE2 rejects .*not UTF-8 text"):
            Filter.parse({"type": pattern})
        assert "not UTF-8 text" in (regex_problem(pattern) or "")


def test_a_short_pattern_beyond_re2s_memory_budget_is_refused_with_re2s_reason():
    """The byte limit is not the only one: RE2 compiles within a memory budget (8 MiB per
    pattern), and a 11-byte pattern can exceed it."""
    with pytest.raises(BadFilterRegex) as exc:
        compile_filter_regex("[\\pL]{1000}")
    assert exc.value.detail == "pattern too large - compile failed" and exc.value.size is None


def test_source_fields_compare_by_value_not_identity_or_order():
    """The filter's strings and the sender's come from different JSON documents: equal
    text in distinct objects must match, and a smaller or larger string must not
    (cosmic-ray's survivors: `is` and `>=` for `==`)."""
    f = Filter.parse(json.loads('{"host": "node-1", "service": "svc-a"}'))
    host, service = "".join(["node-", "1"]), "".join(["svc", "-a"])
    assert f.source_matches(host, 7, service)
    assert not f.source_matches("node-0", 7, service) and not f.source_matches("node-2", 7, service)
    assert not f.source_matches(host, 7, "svc-0") and not f.source_matches(host, 7, "svc-b")
    g = Filter.parse({"pid": 10})
    assert not g.source_matches(host, 9, None) and not g.source_matches(host, 11, None)
