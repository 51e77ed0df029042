"""Tests that kill mutmut's survivors in detector (tests/bench/mutation.py): real behaviour, pinned."""
