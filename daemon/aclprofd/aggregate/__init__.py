"""The per-operator aggregates: the aggregator, its key registry, histograms and quantiles,
sliding windows, groupings, and the aggregates file.
"""
