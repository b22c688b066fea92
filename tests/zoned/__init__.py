"""Real Linux zoned block devices for the tests: the QEMU harness and in-guest helpers."""
