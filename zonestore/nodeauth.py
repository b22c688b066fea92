"""HMAC-SHA256 request signing between the gateway (or tools) and node daemons.

The string to sign is method, path, canonical query, timestamp, the body's SHA-256 (or
UNSIGNED-PAYLOAD for streamed bodies) and the id of the node the request is for, one per line,
keyed with the cluster secret. The node id travels in `X-ZG-Node`; a node accepts only
signatures made for itself (`verify_request(..., node=own id)`), so a request captured on its
way to one node cannot be replayed to another. A write must name its node (the node refuses
an unbound PUT/DELETE, zonestore/node/auth.py); a read may leave it out (an operator's or a
launcher's readiness probe that does not know the id), since replaying a read changes nothing.

A request is accepted only inside a time window around its timestamp, which bounds replays in
time; within the window the node remembers the write signatures it accepted, across restarts
(zonestore/node/auth.py), so each write is accepted once.
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
NODE_HEADER = "X-ZG-Node"
SCHEME = "ZG-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
DEFAULT_WINDOW = 300.0  # seconds either side of the node's clock
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_HEX = frozenset("0123456789abcdef")


class AuthError(Exception):
    """The request is unsigned, wrongly signed, for another node, or outside the window."""


def canonical_query(query: Mapping[str, str] | list[tuple[str, str]]) -> str:
    items = list(query.items()) if isinstance(query, Mapping) else list(query)
    return "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(items)
    )


def _signature(secret: bytes, method: str, path: str, query: str, ts: str, body: str,
               node: str) -> str:
    msg = "\n".join((method.upper(), path, query, ts, body, node)).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def sign_headers(
    secret: str | bytes,
    method: str,
    path: str,
    query: Mapping[str, str] | list[tuple[str, str]] | None = None,
    body: bytes | None = None,
    *,
    node: str | None = None,
    now: float | None = None,
) -> dict[str, str]:
    """Headers that authenticate one request to the node `node` (its id; None: a read for
    any node). `body=None` leaves a streamed body unsigned."""
    key = secret.encode() if isinstance(secret, str) else secret
    ts = str(int(now if now is not None else time.time()))
    body_hash = UNSIGNED if body is None else hashlib.sha256(body).hexdigest()
    sig = _signature(key, method, path, canonical_query(query or {}), ts, body_hash, node or "")
    out = {DATE_HEADER: ts, BODY_HEADER: body_hash, AUTH_HEADER: f"{SCHEME} {sig}"}
    if node:
        out[NODE_HEADER] = node
    return out


def signed_node(headers: Mapping[str, str]) -> str:
    """The node id a request's signature is bound to ("" when unbound)."""
    return headers.get(NODE_HEADER, "")


def verify_request(
    secret: str | bytes,
    method: str,
    path: str,
    query: Mapping[str, str] | list[tuple[str, str]],
    headers: Mapping[str, str],
    *,
    node: str | None = None,
    window: float = DEFAULT_WINDOW,
    now: float | None = None,
) -> str:
    """Check a request's signature and time window; returns the signed body hash (hex or
    UNSIGNED-PAYLOAD) that the caller must check the body against. With `node` (the
    verifier's own id), a signature bound to another node is refused. Raises AuthError."""
    key = secret.encode() if isinstance(secret, str) else secret
    auth = headers.get(AUTH_HEADER, "")
    ts = headers.get(DATE_HEADER, "")
    body_hash = headers.get(BODY_HEADER, "")
    bound = signed_node(headers)
    if not auth or not ts or not body_hash:
        raise AuthError("request is not signed")
    scheme, _, sig = auth.partition(" ")
    if scheme != SCHEME or not sig:
        raise AuthError("unknown authorization scheme")
    # ASCII digits only, and short: int() would take "١٢", "+5" or 5,000 digits.
    if not (0 < len(ts) <= 12 and ts.isascii() and ts.isdigit()):
        raise AuthError("bad timestamp")
    t = int(ts)
    current = now if now is not None else time.time()
    if abs(current - t) > window:
        raise AuthError("request timestamp outside the allowed window (replayed or clock skew)")
    if body_hash != UNSIGNED and (len(body_hash) != 64 or not set(body_hash) <= _HEX):
        raise AuthError("bad body hash")
    if node is not None and bound and bound != node:
        raise AuthError(f"request signed for node {bound[:64]!r}, not for this node")
    expected = _signature(key, method, path, canonical_query(query), ts, body_hash, bound)
    if not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "replace")):
        raise AuthError("signature does not match")
    return body_hash
