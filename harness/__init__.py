"""The real-process harness that the tests (tests/) and the benchmarks (bench/) share: private
redis-servers, git repositories built with a pinned environment, pushes as GitHub records them,
and a carry deployment of real processes (web, workers, runners) around them. Neither tests/
nor bench/ is imported from here, and bench/ imports nothing of tests/ (tests/unit/test_boundaries.py)."""
