"""Shared pieces of request authentication: the result type, header access, clock checks.

`AuthResult` is what every verifier returns: who signed, how, and what the body must then be
checked against (`content_sha256`, and for streaming uploads the seed signature and signing
key the chunk-signature chain starts from).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import mktime_tz, parsedate_tz

from gateway.s3.errors import S3Error

MAX_SKEW_SECONDS = 15 * 60
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_MODES = frozenset({STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER})
_HEX = frozenset("0123456789abcdef")

Headers = Mapping[str, str]
Query = Iterable[tuple[str, str]]


@dataclass(frozen=True)
class AuthResult:
    """Outcome of authenticating one request.

    method: "v4-header", "v4-query", "v2-header", "v2-query" or "anonymous".
    content_sha256: the payload mode: a lowercase hex SHA-256 the body must match,
        UNSIGNED-PAYLOAD, or one of the STREAMING-* modes (aws-chunked body).
    signature: the request's signature (for STREAMING-AWS4-* it seeds the chunk chain).
    signing_key / scope / amz_date / region: SigV4 material for chunk and trailer signatures.
    """

    user: str | None
    access_key: str | None
    method: str
    content_sha256: str = UNSIGNED_PAYLOAD
    signature: str | None = None
    signing_key: bytes | None = field(default=None, repr=False)
    scope: str | None = None
    amz_date: str | None = None
    region: str | None = None

    @property
    def anonymous(self) -> bool:
        return self.user is None

    @property
    def streaming(self) -> bool:
        """True when the body is aws-chunked (one of the STREAMING-* modes)."""
        return self.content_sha256 in STREAMING_MODES

    @property
    def payload_sha256(self) -> str | None:
        """The hex SHA-256 the whole body must have, or None when the payload is unsigned
        or streamed in signed chunks."""
        v = self.content_sha256
        return v if len(v) == 64 and set(v) <= _HEX else None


def signed_readings(h: dict[str, list[str]]) -> list[dict[str, list[str]]]:
    """The header readings a signature may have been computed over: the bytes received
    (`wire_text`, what AWS and curl sign), and, when a value is not ASCII, also each value's
    latin-1 text as UTF-8 (what botocore signs for a str header it then sends as latin-1).
    Both are readings of the same received bytes, so accepting either lets no one sign a
    request they did not sign."""
    legacy: dict[str, list[str]] = {}
    differs = False
    for name, values in h.items():
        out = []
        for v in values:
            try:
                old = signed_bytes(v).decode("latin-1")
            except UnicodeError:
                old = v
            differs |= old != v
            out.append(old)
        legacy[name] = out
    return [h, legacy] if differs else [h]


def lower_headers(headers: Headers) -> dict[str, list[str]]:
    """Header name (lowercased) -> all its values, in order. Accepts a plain dict or a
    multi-valued mapping whose items() yields repeated names (starlette's Headers)."""
    out: dict[str, list[str]] = {}
    for name, value in headers.items():
        out.setdefault(name.lower(), []).append(wire_text(value))
    return out


def wire_text(value: str) -> str:
    """A header value as the client's text. ASGI servers hand header bytes over decoded as
    latin-1; clients sign (and mean) UTF-8, e.g. non-ASCII x-amz-meta-* values. So the bytes
    are decoded as UTF-8, any invalid byte kept as a surrogate escape: `signed_bytes` then
    gives back exactly the bytes received."""
    if value.isascii():
        return value
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value  # not wire bytes (a caller's own text)
    return raw.decode("utf-8", "surrogateescape")


def signed_bytes(text: str) -> bytes:
    """The bytes a string to sign stands for (see `wire_text`)."""
    return text.encode("utf-8", "surrogateescape")


def shown_text(text: str) -> str:
    """A string to sign or canonical request made printable for an error body."""
    return signed_bytes(text).decode("utf-8", "replace")


def first(h: dict[str, list[str]], name: str) -> str | None:
    values = h.get(name)
    return values[0] if values else None


def parse_amz_date(value: str) -> float:
    """'20130524T000000Z' -> epoch seconds; ValueError if malformed."""
    if len(value) != 16 or value[8] != "T" or value[15] != "Z" or not value.isascii():
        raise ValueError(value)  # (strptime would take other scripts' digits)
    t = time.strptime(value, "%Y%m%dT%H%M%SZ")
    return float(calendar.timegm(t))


def parse_http_date(value: str) -> float:
    """An RFC 1123 / RFC 2822 date -> epoch seconds; ValueError if malformed."""
    parsed = parsedate_tz(value)
    if parsed is None:
        raise ValueError(value)
    return float(mktime_tz(parsed))


def format_amz_date(ts: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ts))


def iso_time(ts: float) -> str:
    """ts as `YYYY-MM-DDTHH:MM:SSZ`, for error bodies; a client's date past what gmtime
    takes (year 99999999) is shown as the number, not raised as an OverflowError."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f}"


def check_skew(request_time: float, now: float) -> None:
    """RequestTimeTooSkewed when the request's clock is more than 15 minutes off ours."""
    if abs(now - request_time) > MAX_SKEW_SECONDS:
        raise S3Error(
            "RequestTimeTooSkewed",
            RequestTime=iso_time(request_time),
            ServerTime=iso_time(now),
            MaxAllowedSkewMilliseconds=MAX_SKEW_SECONDS * 1000,
        )


def check_content_sha256(value: str) -> str:
    """Validate an x-amz-content-sha256 value; returns it (hex lowercased)."""
    if value in STREAMING_MODES or value == UNSIGNED_PAYLOAD:
        return value
    low = value.lower()
    if len(low) == 64 and set(low) <= _HEX:
        return low
    raise S3Error(
        "InvalidArgument",
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a "
        "valid sha256 value.",
        ArgumentName="x-amz-content-sha256",
        ArgumentValue=value,
    )
