"""``aclprof top``: the command, its table (view, cells, keys, header, baseline) and the
live terminal loop.
"""
