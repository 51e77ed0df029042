"""Every option's value is checked in one place, aclprof.cli.argtypes (issue 17): NaN and
infinities, negative or zero durations and timeouts, ids outside their wire field, empty
strings and huge values exit 2 with the option and the value named, before anything
connects; ``--socket`` says what is at the path when it is not a listening daemon.

- property tests (hypothesis) of the value types;
- an audit of every option of every command: each is typed by argtypes (or by a named
  domain check, or choices) and refuses the empty string and hostile numbers;
- subprocess tests of the reported cases: ``status --timeout -1`` (was a traceback),
  ``status --socket /etc/passwd`` (was "a stale socket"), ``--model -3`` and ``--since nan``
  (were accepted).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import subprocess
import sys

import pytest
from helpers.procs import cli, env, short_tmpdir
from hypothesis import example, given
from hypothesis import strategies as st

from aclprof.cli import argtypes
from aclprof.cli.main import build_parser, main

pytestmark = pytest.mark.timeout(120)

REFUSED = argparse.ArgumentTypeError


def _value_text(x: float) -> str:
    return repr(x) if isinstance(x, float) else str(x)


# -- the value types (hypothesis) -----------------------------------------------------------

@given(st.one_of(st.floats(), st.integers(-10**30, 10**30), st.text(max_size=12)))
def test_seconds_are_finite_above_zero_and_at_most_a_day(x):
    text = x if isinstance(x, str) else _value_text(x)
    parse = argtypes.seconds()
    try:
        v = parse(text)
    except REFUSED as exc:
        assert repr(text) in str(exc)  # the value is named
        return
    assert math.isfinite(v) and 0 < v <= argtypes.MAX_SECONDS
    if not isinstance(x, str):
        assert v == pytest.approx(float(x))


@given(st.floats(min_value=1e-6, max_value=86_400.0))
def test_seconds_accept_every_positive_value_up_to_a_day(x):
    assert argtypes.seconds()(repr(x)) == x


@given(st.integers(0, 10**6), st.sampled_from(["ns", "us", "ms", "s", "m", "h"]))
def test_seconds_with_a_unit(n, unit):
    value = argtypes.parse_duration_ns(f"{n}{unit}") / 1e9
    ok = 0 < value <= argtypes.MAX_SECONDS
    try:
        assert argtypes.seconds()(f"{n}{unit}") == value and ok
    except REFUSED:
        assert not ok


@pytest.mark.parametrize("parse, low, high", [(argtypes.model_id, 0, 2**32 - 1), (argtypes.device_id, 0, 2**32 - 1),
                                             (argtypes.pid, 1, 2**31 - 1), (argtypes.row_limit, 0, 2**31 - 1)])
@given(n=st.one_of(st.integers(-2**70, 2**70), st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32])))
def test_ids_are_accepted_exactly_in_their_range(parse, low, high, n):
    try:
        assert parse(str(n)) == n and low <= n <= high
    except REFUSED as exc:
        assert not low <= n <= high and repr(str(n)) in str(exc)


@given(st.text(max_size=8))
def test_ids_refuse_what_is_not_a_whole_number(text):
    try:
        int(text.strip(), 10)
    except ValueError:
        with pytest.raises(REFUSED):
            argtypes.model_id(text)


@given(st.one_of(st.floats(), st.integers(-10**20, 10**20)))
def test_times_are_finite_and_between_1970_and_9999(x):
    text = _value_text(x)
    try:
        t = argtypes.point_in_time(text)
    except REFUSED as exc:
        v = float(x)
        assert not (math.isfinite(v) and 0 <= v <= argtypes.LATEST_TIME) or text.startswith("-")
        assert repr(text) in str(exc)
        return
    assert math.isfinite(t) and 0 <= t <= argtypes.LATEST_TIME


@given(st.text(max_size=300))
def test_names_are_not_empty_and_fit_the_daemons_limit(text):
    parse = argtypes.name("service name")
    ok = 0 < len(text.encode("utf-8", "surrogatepass")) <= 256
    try:
        assert parse(text) == text and ok
    except REFUSED:
        assert not ok


@given(st.integers(0, 2**70))
@example(2**53 + 1)  # the first whole nanosecond count a float cannot hold
def test_min_duration_holds_in_int64_nanoseconds(n):
    try:
        assert argtypes.min_duration(f"{n}ns") == n and n < 2**63
    except REFUSED:
        assert n >= 2**63


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_numbers_are_finite_and_in_range(x):
    parse = argtypes.number("a rate", 0.0, 100.0, inclusive=False)
    try:
        assert parse(repr(x)) == x and 0 < x <= 100
    except REFUSED:
        assert not (0 < x <= 100)


# -- every option of every command ----------------------------------------------------------

#: options whose values are checked by a domain check of their own module (exit 2 all the same)
DOMAIN = {("top", "--window"), ("fleet", "--window"), ("fleet", "--prometheus"), ("fleet", "--host-label"),
          ("trace", "--data-types"), ("status", "--loop")}
NUMERIC = {"seconds", "integer", "number", "min_duration", "point_in_time", "_loop_arg"}
HOSTILE = ["nan", "inf", "-inf", "1e400", "-1e400", "9" * 400]


def _options():
    """(command words, option string, action) for every option that takes a value."""
    out = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:  # argparse has no public walk
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])
            elif action.option_strings and action.nargs is None and action.const is None \
                    and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                out.append((words, action.option_strings[-1], action))

    walk(build_parser(), [])
    return out


OPTIONS = _options()


def test_the_audit_sees_every_command():
    commands = {tuple(w)[:1] for w, _, _ in OPTIONS}
    assert {("tail",), ("top",), ("status",), ("export",), ("diff",), ("baseline",), ("captures",), ("trace",),
            ("demo",), ("doctor",), ("reset",), ("fleet",), ()} <= commands
    assert len(OPTIONS) > 60


@pytest.mark.parametrize("words, option, action", OPTIONS, ids=[" ".join([*w, o]) for w, o, _ in OPTIONS])
def test_every_option_is_checked_in_one_layer_and_refuses_hostile_values(capsys, words, option, action):
    command = words[0] if words else ""
    t = action.type
    assert action.choices is not None or (command, option) in DOMAIN or \
        (t is not None and t.__module__ == "aclprof.cli.argtypes"), f"{option} of {command!r} is unchecked"
    values = [""]
    if getattr(t, "__name__", "") in NUMERIC:
        values += HOSTILE + (["-3"] if getattr(t, "__name__", "") != "point_in_time" else [])
    for value in values:
        assert main([*words, f"{option}={value}"]) == 2, (option, value)
        err = capsys.readouterr().err
        assert f"argument {option}" in err or f"/{option}" in err, err
        assert repr(value)[:20] in err or "invalid choice" in err, err  # the value is named
        assert "Traceback" not in err


# -- the reported cases, as a user runs them ------------------------------------------------

def test_status_timeout_minus_one_is_a_usage_error_not_a_traceback():
    p = cli("status", "--timeout", "-1", "--socket", "/nonexistent/aclprofd.sock")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "argument --timeout: '-1' is not a number of seconds above 0" in p.stderr


@pytest.mark.parametrize("argv, message", [
    (["tail", "--model", "-3"], "argument --model: '-3' is not a model id"),
    (["export", "--format", "jsonl", "--since", "nan"], "argument --since: 'nan' is not a time"),
    (["top", "--interval", "nan"], "argument --interval: 'nan'"),
    (["status", "--timeout", "-inf"], "argument --timeout: '-inf'"),  # was "expected one argument"
    (["tail", "--service", ""], "argument --service: '': an empty service name matches nothing"),
    (["export", "--format", "csv", "-o", ""], "argument -o/--output: ''"),
    (["status", "--socket", ""], "argument --socket: ''"),
    (["demo", "--services", "100000"], "argument --services: '100000'"),
])
def test_hostile_values_are_refused_by_name(argv, message):
    p = cli(*argv)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.fixture(scope="module")
def paths():
    root = short_tmpdir("aclp-")
    dead = os.path.join(root, "dead.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(dead)
    s.close()  # the file stays, nothing listens: what a killed daemon leaves
    yield {"root": root, "dead": dead}
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("what, message", [
    ("file", "/etc/passwd is a regular file, not the daemon's socket"),
    ("dir", "{root} is a directory, not the daemon's socket"),
    ("dead", "nothing listens on {dead} (a stale socket: the daemon is not running)"),
    ("missing", "no daemon socket at {root}/missing.sock (is aclprofd running?"),
    ("no_parent", "no daemon socket at {root}/nodir/d.sock: the directory {root}/nodir does not exist"),
    ("under_a_file", "cannot connect to /etc/passwd/d.sock: a part of the path before the last is not a directory"),
])
def test_socket_says_what_is_at_the_path(paths, what, message):
    path = {"file": "/etc/passwd", "dir": paths["root"], "dead": paths["dead"],
            "missing": f"{paths['root']}/missing.sock", "no_parent": f"{paths['root']}/nodir/d.sock",
            "under_a_file": "/etc/passwd/d.sock"}[what]
    p = cli("status", "--socket", path)
    assert p.returncode == 2 and message.format(**paths) in p.stderr, p.stderr
    assert what == "dead" or "stale" not in p.stderr


def _as_nobody(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "aclprof", *args], capture_output=True, text=True, env=env(), timeout=30)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_permission_denied_names_the_socket_or_the_directory(paths):
    listening = os.path.join(paths["root"], "live.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(listening)
    s.listen(1)
    private = os.path.join(paths["root"], "private")
    os.mkdir(private, 0o700)
    try:
        os.chmod(paths["root"], 0o755)
        os.chmod(listening, 0o660)
        os.chown(listening, 0, 12345)  # a group the user is not in
        p = _as_nobody("status", "--socket", listening)
        assert p.returncode == 2 and f"permission denied on {listening}" in p.stderr, p.stderr
        assert "'12345'" in p.stderr and "usermod -aG 12345 nobody" in p.stderr, p.stderr
        os.chown(listening, 0, 0)  # root's group: joining it is no advice
        p = _as_nobody("status", "--socket", listening)
        assert p.returncode == 2 and "--socket-group" in p.stderr and "usermod -aG root" not in p.stderr, p.stderr
        p = _as_nobody("status", "--socket", os.path.join(private, "d.sock"))
        assert p.returncode == 2 and "permission denied" in p.stderr and "director" in p.stderr, p.stderr
    finally:
        s.close()
