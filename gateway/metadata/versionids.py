"""S3 version ids for versioned buckets: 32 hex digits, the µs timestamp then random bits,
so ids made later sort later (the store orders versions by its own sequence all the same)."""

from __future__ import annotations

import secrets
import time

NULL = "null"


def new_version_id() -> str:
    """A fresh version id: 14 hex digits of µs since the epoch, 18 random."""
    return f"{time.time_ns() // 1000:014x}{secrets.token_hex(9)}"
