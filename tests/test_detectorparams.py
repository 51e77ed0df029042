"""The detector's parameter rules (``aclprof.protocol.detectorparams``) are one rule for the
daemon's ``detector_*`` settings and ``aclprof diff``'s options: the same values pass and
fail on both sides, refused in the same words."""

from __future__ import annotations

import argparse

import pytest
from aclprofd import config

from aclprof.cli import diff

# (daemon setting, diff option, value, accepted)
CASES = [
    ("detector_min_effect", "--min-effect", "0.05", True),
    ("detector_min_effect", "--min-effect", "9.5", True),
    ("detector_min_effect", "--min-effect", "0", False),
    ("detector_min_effect", "--min-effect", "10.5", False),  # the daemon took up to 10 only
    ("detector_min_effect", "--min-effect", "nan", False),
    ("detector_z", "--z", "0.5", True),
    ("detector_z", "--z", "10", True),
    ("detector_z", "--z", "0.4", False),
    ("detector_z", "--z", "inf", False),
    ("detector_min_count", "--min-count", "1", True),
    ("detector_min_count", "--min-count", "5000000", True),  # diff stopped at 4,194,304
    ("detector_min_count", "--min-count", "0", False),
    ("detector_min_count", "--min-count", "1.5", False),
]


def _diff_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    diff.add_parser(p.add_subparsers(), argparse.HelpFormatter)
    return p


def _diff_error(option: str, value: str) -> str | None:
    """What ``aclprof diff``'s option type says of ``value`` (None: accepted)."""
    action = next(a for a in _diff_parser()._subparsers._group_actions[0].choices["diff"]._actions
                  if option in a.option_strings)
    try:
        action.type(value)
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return None


def _daemon_error(key: str, value: str) -> str | None:
    try:
        config.load({"socket": "/tmp/x.sock", key: value}, environ={})
    except config.ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("key,option,value,ok", CASES, ids=[f"{c[1]}={c[2]}" for c in CASES])
def test_daemon_and_diff_agree(key, option, value, ok):
    cli, daemon = _diff_error(option, value), _daemon_error(key, value)
    if ok:
        assert cli is None and daemon is None
    else:
        assert cli is not None and daemon is not None
        assert daemon.endswith(f": {cli}"), (daemon, cli)  # the daemon names where it was set
        assert cli.startswith(f"{value!r} is not ")


def test_numbers_not_strings_follow_the_same_rule():
    """Values that come as numbers (TOML): a whole float is a count, a bool is no number."""
    assert config.load({"socket": "/tmp/x.sock", "detector_min_count": 300.0}, environ={}).detector_min_count == 300
    for key, value in (("detector_min_count", 2.5), ("detector_z", True), ("detector_min_effect", 0)):
        with pytest.raises(config.ConfigError, match=f": {value!r} is not "):
            config.load({"socket": "/tmp/x.sock", key: value}, environ={})
