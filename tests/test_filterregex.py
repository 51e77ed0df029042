"""The type/name filter regex rule (``aclprof.protocol.filterregex``) is refused in the same
words by the CLI (before connecting) and by the daemon (a malformed request): the message
is written once, in the protocol layer; each side only says which filter it was."""

from __future__ import annotations

import re

import pytest
from aclprofd.filters import Filter

from aclprof.cli.argtypes import regex_problem
from aclprof.protocol.filterregex import RE2_SYNTAX
from aclprof.protocol.wire import MAX_REGEX_BYTES, ProtocolError

LONG = "a" * (MAX_REGEX_BYTES + 1)


@pytest.mark.parametrize("pattern,want", [
    ("(?<=x)y", rf"^RE2 rejects '\(\?<=x\)y': .+ \({RE2_SYNTAX}\)$"),
    (LONG, rf"^regex is {MAX_REGEX_BYTES + 1} bytes; at most {MAX_REGEX_BYTES}$"),
], ids=["lookbehind", "too-long"])
def test_cli_and_daemon_refuse_a_regex_in_the_same_words(pattern, want):
    cli = regex_problem(pattern)
    assert cli is not None
    assert re.match(want, cli), cli
    for key in ("type", "name"):
        with pytest.raises(ProtocolError) as exc:
            Filter.parse({key: pattern})
        assert str(exc.value) == f"filter {key}: {cli}"


def test_a_good_regex_passes_both():
    assert regex_problem("^conv.*") is None
    assert Filter.parse({"type": "^conv.*", "name": "x"}).type_re is not None
