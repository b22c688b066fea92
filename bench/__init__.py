"""Benchmarks (`make bench`, `python -m bench [NAME ...]`): each `bench/NAME_bench.py` has a
`main(argv)`; results are reported as ratios to baselines measured in the same run."""
