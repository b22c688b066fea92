"""The record id rule shared by every layer that names records in a zone log."""

from __future__ import annotations

import re

MAX_ID_LEN = 200
_ID_RE = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9._:-]{0,199}")


def validate_record_id(record_id: object) -> str:
    """Return `record_id` if it is 1-200 chars of `[A-Za-z0-9._:-]` not starting with `.` or
    `-`; raise ValueError naming the problem otherwise."""
    if not isinstance(record_id, str):
        raise ValueError(f"record id must be a str, not {type(record_id).__name__}")
    if not record_id:
        raise ValueError("record id is empty")
    if len(record_id) > MAX_ID_LEN:
        raise ValueError(f"record id is {len(record_id)} chars long (max {MAX_ID_LEN})")
    if _ID_RE.fullmatch(record_id) is None:
        raise ValueError(
            f"invalid record id {record_id!r}: use 1-{MAX_ID_LEN} chars of [A-Za-z0-9._:-], "
            "not starting with '.' or '-'"
        )
    return record_id
