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


def test_every_filter_key_has_a_cli_option_the_daemon_parses():
    """One table of filter keys (``aclprof.protocol.filterkeys``): the CLI's filter options
    give each key, and the daemon parses what they build."""
    import argparse

    from aclprof.cli.common import add_filter_args, filter_from_args
    from aclprof.protocol.filterkeys import FILTER_KEYS

    p = argparse.ArgumentParser()
    add_filter_args(p)
    args = p.parse_args(["--model", "3", "--pid", "40", "--device", "1", "--type", "^Conv", "--name", "x",
                         "--min-duration", "2us", "--service", "svc", "--host", "h1"])
    f = filter_from_args(args)
    assert f == {"model": 3, "pid": 40, "device": 1, "type": "^Conv", "name": "x", "min_duration_ns": 2000,
                 "service": "svc", "host": "h1"}
    assert set(f) == set(FILTER_KEYS)
    parsed = Filter.parse(f)
    assert (parsed.model, parsed.pid, parsed.device, parsed.min_duration_ns, parsed.service, parsed.host) == (
        3, 40, 1, 2000, "svc", "h1")
    assert parsed.type_re.search("Conv2D") and parsed.name_re.search("x")
    assert filter_from_args(p.parse_args(["--min-duration", "0us"])) == {}  # 0: no bound, as before


@pytest.mark.parametrize("obj,message", [
    ({"model": True}, "filter model must be an integer"),
    ({"host": 1}, "filter host must be a string"),
    ({"type": 1}, "filter type must be a regex string"),
    ({"pid": "1", "type": 1}, "filter pid must be an integer"),  # the first bad key, in table order
    ({"colour": 1, "model": 2}, "unknown filter keys: colour"),
])
def test_a_malformed_filter_is_refused_by_name(obj, message):
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        Filter.parse(obj)
