"""The keys of the ``filter`` object of control requests (daemon/PROTOCOL.md) and the JSON
type each value must have: the daemon parses filters by this table
(``aclprofd.filters.Filter.parse``) and the CLI builds them from its options by it
(``aclprof.cli.common.filter_from_args``), so a new key is one line here plus its use.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["FILTER_KEYS", "FilterValue"]

#: what a key's value must be: an integer (not a bool), a string, or a regex string
#: (``aclprof.protocol.filterregex``)
FilterValue = Literal["int", "str", "regex"]

#: key -> the kind of its value, in the order the daemon checks them (the first bad key is
#: the one a malformed request's ERROR names)
FILTER_KEYS: dict[str, FilterValue] = {
    "model": "int", "pid": "int", "device": "int", "min_duration_ns": "int",
    "host": "str", "service": "str",
    "type": "regex", "name": "regex",
}
