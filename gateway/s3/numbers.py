"""The one parser for numbers that come from clients (headers, query parameters, XML).

`int()` is the wrong tool for them: it takes "+5", " 5", "1_000", Unicode digits ("²" passes
`str.isdigit()`, "١٢" passes `int()`) and raises ValueError past 4,300 digits, which used to
surface as 500s. `parse_uint` takes exactly `[0-9]+` (leading zeros allowed) and a bound;
callers turn its ValueError into the S3 error their field calls for.
"""

from __future__ import annotations

import re

from gateway.s3.errors import S3Error

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
_DIGITS = re.compile(r"[0-9]+")


def parse_uint(text: str, *, hi: int = INT64_MAX, saturate: bool = False) -> int:
    """The value of `text`, which must be ASCII digits only (no sign, space or underscore).
    Above `hi`: `hi` with `saturate` (e.g. a range end past any object), else ValueError.
    Never converts more digits than `hi` has, however long the input."""
    if not isinstance(text, str) or not _DIGITS.fullmatch(text):
        raise ValueError(f"not a non-negative decimal integer: {str(text)[:40]!r}")
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(hi)) or int(digits) > hi:
        if saturate:
            return hi
        raise ValueError(f"number above {hi}: {text[:40]!r}")
    return int(digits)


def uint_arg(text: str, name: str, *, lo: int = 0, hi: int = INT32_MAX) -> int:
    """A numeric query parameter or header in lo..hi, or S3's InvalidArgument naming it."""
    try:
        v = parse_uint(text, hi=hi)
    except ValueError:
        v = None
    if v is None or v < lo:
        raise S3Error("InvalidArgument", f"Provided {name} not an integer or within integer "
                      f"range ({lo} to {hi})", ArgumentName=name, ArgumentValue=shown(text))
    return v


def shown(text: str, limit: int = 256) -> str:
    """A client's value as an error may echo it: control characters escaped (XML 1.0 cannot
    carry them), cut at `limit`."""
    return text[:limit].encode("unicode_escape").decode("ascii")
