"""ZoneGate test suite (a package so that `python -m tests.zoned.harness` works)."""
