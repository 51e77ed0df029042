"""Tests that kill mutmut's survivors in exportfmt (tests/bench/mutation.py): real behaviour, pinned."""
