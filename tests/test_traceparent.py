"""W3C ``traceparent`` parsing (aclprof.protocol.traceparent; issue 25): the receiver's rules,
each broken one a clear ValueError naming the value, and ``aclprof.request`` refusing what the
parser refuses (it accepted version ff and all-zero ids before)."""

from __future__ import annotations

import pytest

import aclprof
from aclprof.protocol.traceparent import TraceParent, check, parse

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_fields_as_integers() -> None:
    assert parse(TP) == TraceParent(0, 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)
    assert parse(TP).sampled and not parse(TP[:-2] + "00").sampled
    # a later version: its extra fields follow a '-' and are ignored
    assert parse("01" + TP[2:] + "-what-comes-next") == TraceParent(1, *parse(TP)[1:])
    check(TP)
    check("01" + TP[2:] + "-what-comes-next")


@pytest.mark.parametrize(("bad", "rule"), [
    ("00-xyz", "is not '00-<32 hex"),
    (TP.upper(), "is not '00-<32 hex"),  # lower-case only
    (" " + TP, "is not '00-<32 hex"),
    (TP.replace("-", "_"), "is not '00-<32 hex"),
    ("ff" + TP[2:], "version ff is invalid"),
    (TP + "-extra", "version 00 is exactly 55 characters, this is 61"),
    ("01" + TP[2:] + "x", "fields of a later version follow a '-'"),
    ("00-" + "0" * 32 + TP[35:], "trace id of all zeros"),
    (TP[:36] + "0" * 16 + TP[52:], "parent id of all zeros"),
])
def test_each_broken_rule_is_named(bad: str, rule: str) -> None:
    for fn in (parse, check):  # check: the fast path aclprof.request takes, the same rules
        with pytest.raises(ValueError, match="traceparent") as info:
            fn(bad)
        assert rule in str(info.value) and repr(bad) in str(info.value)


def test_a_non_string_is_named() -> None:
    with pytest.raises(ValueError, match=r"must be a string .* got int 7"):
        parse(7)


@pytest.mark.parametrize("bad", ["ff" + TP[2:], "00-" + "0" * 32 + TP[35:], TP[:36] + "0" * 16 + TP[52:]])
def test_aclprof_request_refuses_what_a_receiver_would_ignore(bad: str) -> None:
    with pytest.raises(ValueError, match=r"aclprof.request: traceparent .* invalid"):
        aclprof.request("r", traceparent=bad)


def test_aclprof_request_keeps_the_four_known_fields_of_a_later_version() -> None:
    later = "01" + TP[2:] + "-" + "x" * 5000  # would not fit a bill frame's 1024-character text
    with aclprof.request("r", traceparent=later) as req:
        pass
    assert req.traceparent == later[:55]
