"""The Chrome trace writer's number and string helpers (aclprof.exportfmt.chrome: also used by
the Kineto writer), against exact expected text. Written against the survivors of the
mutation run of 2026-12-02 night (tests/bench/MUTATION.md)."""

from __future__ import annotations

import json

import pytest

from aclprof.exportfmt.chrome import format_us, json_string, meta_json, short_us


@pytest.mark.parametrize("ns, text", [
    (1234567, "1234.567"), (0, "0.000"), (5, "0.005"), (1000, "1.000"), (999, "0.999"),
    (-1234567, "-1234.567"), (-5, "-0.005"), (2**60 + 1, f"{(2**60 + 1) // 1000}.{(2**60 + 1) % 1000:03d}"),
])
def test_format_us_writes_exact_microseconds(ns, text):
    assert format_us(ns) == text


@pytest.mark.parametrize("ns, text", [
    (10000, "10"), (2000500, "2000.5"), (1, "0.001"), (0, "0"), (1234567, "1234.567"), (1230, "1.23"),
    (1000, "1"), (999, "0.999"),
])
def test_short_us_is_as_short_as_json_writes_the_number(ns, text):
    assert short_us(ns) == text
    assert json.loads(text) == pytest.approx(ns / 1000, abs=0)


def test_meta_json_is_compact_utf8_and_escapes_only_what_utf8_cannot_carry():
    assert meta_json({"name": "process_name", "args": {"name": "Übersetzung 1"}}) == \
        '{"name":"process_name","args":{"name":"Übersetzung 1"}}'
    assert meta_json({"name": "x\ud800", "ph": "M"}) == '{"name":"x\\ud800","ph":"M"}'


def test_json_string_writes_utf8_escapes_a_lone_surrogate_and_remembers():
    memo: dict[str, str] = {}
    assert json_string("Übersetzung", memo) == '"Übersetzung"'
    assert json_string('a"b\n', memo) == '"a\\"b\\n"'
    assert json_string("x\ud800", memo) == '"x\\ud800"'
    assert memo == {"Übersetzung": '"Übersetzung"', 'a"b\n': '"a\\"b\\n"', "x\ud800": '"x\\ud800"'}
    assert json_string("Übersetzung", memo) == '"Übersetzung"'
