"""Record ids: the one rule every layer uses to accept or refuse a record id.

A record id is 1-200 characters of `[A-Za-z0-9._:-]`, not starting with `.` or `-`
(docs/design.md). The rule leaves no room for path tricks (`/`, `..`, NUL, percent-escapes)
and keeps ids safe as URL path segments, file names and index keys.
"""

from __future__ import annotations

import re

MAX_ID_LENGTH = 200
_ID_RE = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9._:-]{0,199}")


def is_valid_record_id(record_id: object) -> bool:
    return isinstance(record_id, str) and _ID_RE.fullmatch(record_id) is not None


def validate_record_id(record_id: object) -> str:
    """Return `record_id` unchanged if it follows the id rule; otherwise raise ValueError."""
    if not is_valid_record_id(record_id):
        shown = repr(record_id)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise ValueError(
            f"invalid record id {shown}: use 1-{MAX_ID_LENGTH} characters of A-Z a-z 0-9 . _ : -, "
            "not starting with '.' or '-'"
        )
    return record_id  # type: ignore[return-value]
