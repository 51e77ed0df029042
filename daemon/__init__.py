"""The aclprof subscription daemon (``aclprofd``). Not implemented yet: see the daemon issue."""
