"""The `*` / `?` wildcards of policy strings (actions, resources, StringLike)."""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=4096)
def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    parts = []
    for ch in pattern:
        if ch == "*":
            parts.append(".*")
        elif ch == "?":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def match(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """True when `text` matches `pattern` whole: `*` any run (empty too), `?` one character."""
    if "*" not in pattern and "?" not in pattern:
        return pattern.lower() == text.lower() if ignore_case else pattern == text
    return _compile(pattern, ignore_case).fullmatch(text) is not None
