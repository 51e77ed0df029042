"""The flight recorder: the recorder service, its capture directory store, the writer child
process and its driver, the size accounting, and its Prometheus series.
"""
