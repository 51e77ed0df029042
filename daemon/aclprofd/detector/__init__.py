"""The live regression detector: the engine, its histograms and dispersion estimate, the
service that runs it inside the daemon, and its Prometheus series.
"""
