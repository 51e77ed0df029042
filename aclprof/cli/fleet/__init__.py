"""``aclprof fleet``: the command, what it computes (data), its Prometheus client (prom)
and its view.
"""
