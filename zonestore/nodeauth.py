"""HMAC-SHA256 request signing between the gateway (or tools) and node daemons.

The string to sign is method, path, canonical query, timestamp and the body's SHA-256 (or
UNSIGNED-PAYLOAD for streamed bodies), one per line, keyed with the cluster secret. A request
is accepted only inside a time window around its timestamp, which bounds replays.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from urllib.parse import quote

AUTH_HEADER = "Authorization"
DATE_HEADER = "X-ZG-Date"
BODY_HEADER = "X-ZG-Content-SHA256"
SCHEME = "ZG-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
DEFAULT_WINDOW = 300.0  # seconds either side of the node's clock
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class AuthError(Exception):
    """The request is unsigned, wrongly signed, or outside the time window."""


def canonical_query(query: Mapping[str, str] | list[tuple[str, str]]) -> str:
    items = list(query.items()) if isinstance(query, Mapping) else list(query)
    return "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(items)
    )


def _signature(secret: bytes, method: str, path: str, query: str, ts: str, body: str) -> str:
    msg = "\n".join((method.upper(), path, query, ts, body)).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def sign_headers(
    secret: str | bytes,
    method: str,
    path: str,
    query: Mapping[str, str] | list[tuple[str, str]] | None = None,
    body: bytes | None = None,
    *,
    now: float | None = None,
) -> dict[str, str]:
    """Headers that authenticate one request. `body=None` leaves a streamed body unsigned."""
    key = secret.encode() if isinstance(secret, str) else secret
    ts = str(int(now if now is not None else time.time()))
    body_hash = UNSIGNED if body is None else hashlib.sha256(body).hexdigest()
    sig = _signature(key, method, path, canonical_query(query or {}), ts, body_hash)
    return {DATE_HEADER: ts, BODY_HEADER: body_hash, AUTH_HEADER: f"{SCHEME} {sig}"}


def verify_request(
    secret: str | bytes,
    method: str,
    path: str,
    query: Mapping[str, str] | list[tuple[str, str]],
    headers: Mapping[str, str],
    *,
    window: float = DEFAULT_WINDOW,
    now: float | None = None,
) -> str:
    """Check a request's signature and time window; returns the signed body hash (hex or
    UNSIGNED-PAYLOAD) that the caller must check the body against. Raises AuthError."""
    key = secret.encode() if isinstance(secret, str) else secret
    auth = headers.get(AUTH_HEADER, "")
    ts = headers.get(DATE_HEADER, "")
    body_hash = headers.get(BODY_HEADER, "")
    if not auth or not ts or not body_hash:
        raise AuthError("request is not signed")
    scheme, _, sig = auth.partition(" ")
    if scheme != SCHEME or not sig:
        raise AuthError("unknown authorization scheme")
    try:
        t = int(ts)
    except ValueError:
        raise AuthError("bad timestamp") from None
    current = now if now is not None else time.time()
    if abs(current - t) > window:
        raise AuthError("request timestamp outside the allowed window (replayed or clock skew)")
    if body_hash != UNSIGNED and (len(body_hash) != 64 or not all(
        c in "0123456789abcdef" for c in body_hash
    )):
        raise AuthError("bad body hash")
    expected = _signature(key, method, path, canonical_query(query), ts, body_hash)
    if not hmac.compare_digest(expected, sig):
        raise AuthError("signature does not match")
    return body_hash
