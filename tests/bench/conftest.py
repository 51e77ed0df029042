# The benchmarks in this folder are scripts (python tests/bench/bench_x.py), not tests:
# pytest must never collect or import them.
collect_ignore_glob = ["*.py"]
