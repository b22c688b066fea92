"""Request authentication for the node API (zonestore/nodeauth.py signatures).

Every request is verified with `verify_request` except:
- `/health/live`: always open, it says only that the process runs;
- `/health/ready` and `/metrics`: signed requests are verified as usual; unsigned ones are
  accepted according to `open_metrics`: "loopback" (default: from 127.0.0.1/::1 only, where a
  local Prometheus agent or the operator's curl runs), "any" (Prometheus scraping from another
  host; these endpoints reveal counters and sizes, never data or ids), or "signed" (never).

Replays: a request is accepted only within the signature's time window (nodeauth's
DEFAULT_WINDOW, 300 s either side of the node's clock). Within the window, a PUT or DELETE
signature is accepted only once, so a captured write cannot be re-sent (streamed PUTs are
UNSIGNED-PAYLOAD: a replay could carry another body). Identical legitimate writes within one
second would carry identical signatures, so writers add a random `nonce` query parameter
(it is covered by the signature; erasure/nodeclient.py does). The memory of seen signatures
is per process and bounded.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

from aiohttp import web

from zonestore.node.errors import NodeError
from zonestore.nodeauth import AUTH_HEADER, DEFAULT_WINDOW, AuthError, verify_request

BODY_HASH: web.RequestKey[str] = web.RequestKey("zg_body_hash", str)
OPEN_PATHS = frozenset({"/health/live"})
SCRAPE_PATHS = frozenset({"/health/ready", "/metrics"})
OPEN_METRICS_CHOICES = ("loopback", "any", "signed")
WRITE_METHODS = frozenset({"PUT", "DELETE", "POST", "PATCH"})
LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})


def check_signature(request: web.Request, secret: bytes, window: float = DEFAULT_WINDOW) -> str:
    """Verify the request's signature (no replay bookkeeping); returns the signed body hash.
    Raises NodeError 403."""
    return verify_parts(secret, request.method, request.rel_url.raw_path,
                        list(request.rel_url.query.items()), request.headers, window)


def verify_parts(secret: bytes, method: str, raw_path: str, query: list[tuple[str, str]],
                 headers: Mapping[str, str], window: float = DEFAULT_WINDOW) -> str:
    """`check_signature` on a request's parts (the raw path as sent, the decoded query items),
    for callers without an aiohttp Request."""
    try:
        return verify_request(secret, method, raw_path, query, headers, window=window)
    except AuthError as exc:
        raise NodeError(403, "forbidden", str(exc)) from None


class ReplayCache:
    """Signatures of writes seen within the window, oldest first, bounded in number."""

    def __init__(self, window: float, max_entries: int = 100_000) -> None:
        self.window = window
        self.max_entries = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first_time(self, signature: str, now: float | None = None) -> bool:
        """True (and remember it) if `signature` was not seen yet; False for a replay."""
        now = time.time() if now is None else now
        horizon = now - 2 * self.window  # a timestamp is valid for `window` either side
        while self._seen:
            oldest_at = next(iter(self._seen.values()))
            if oldest_at >= horizon and len(self._seen) < self.max_entries:
                break
            self._seen.popitem(last=False)
        if signature in self._seen:
            return False
        self._seen[signature] = now
        return True


class AuthCheck:
    """The node's request check (see the module docstring), with one replay cache for every
    way a request arrives: call it with an aiohttp Request (the middleware), or `check()` with
    the request's parts (zonestore/node/fastput.py). Synchronous, so that the node's one
    middleware runs it without a frame."""

    def __init__(self, secret: bytes, *, window: float = DEFAULT_WINDOW,
                 open_metrics: str = "loopback") -> None:
        if open_metrics not in OPEN_METRICS_CHOICES:
            raise ValueError(f"open_metrics must be one of {OPEN_METRICS_CHOICES}, "
                             f"not {open_metrics!r}")
        self.secret = secret
        self.window = window
        self.open_metrics = open_metrics
        self.replays = ReplayCache(window)

    def is_open(self, raw_path: str, headers: Mapping[str, str], remote: str | None) -> bool:
        """True if the request may go on unsigned."""
        if raw_path in OPEN_PATHS:
            return True
        return AUTH_HEADER not in headers and raw_path in SCRAPE_PATHS and self._open_to(remote)

    def _open_to(self, remote: str | None) -> bool:
        return self.open_metrics == "any" or (self.open_metrics == "loopback"
                                              and remote in LOOPBACK)

    def verify(self, method: str, raw_path: str, query: list[tuple[str, str]],
               headers: Mapping[str, str]) -> str:
        """Verify the signature and refuse a replayed write; returns the signed body hash.
        Raises NodeError 403."""
        body_hash = verify_parts(self.secret, method, raw_path, query, headers, self.window)
        if method in WRITE_METHODS:
            signature = headers[AUTH_HEADER].partition(" ")[2]
            if not self.replays.first_time(signature):
                raise NodeError(403, "forbidden", "replayed request: this write was already "
                                "received (sign each write anew, with a random nonce parameter)")
        return body_hash

    def check(self, method: str, raw_path: str, query: list[tuple[str, str]],
              headers: Mapping[str, str], remote: str | None) -> str | None:
        """The signed body hash, or None for an open request; raises NodeError 403."""
        if self.is_open(raw_path, headers, remote):
            return None
        return self.verify(method, raw_path, query, headers)

    def __call__(self, request: web.Request) -> None:
        """Check an aiohttp request; the signed body hash goes into `request[BODY_HASH]`."""
        path = request.rel_url.raw_path
        if path in OPEN_PATHS or (AUTH_HEADER not in request.headers and path in SCRAPE_PATHS
                                  and self._open_to(request.remote)):  # (a peername look-up)
            return
        request[BODY_HASH] = self.verify(request.method, path,
                                         list(request.rel_url.query.items()), request.headers)


def make_auth_check(secret: bytes, *, window: float = DEFAULT_WINDOW,
                    open_metrics: str = "loopback") -> AuthCheck:
    """The node's request check: returns if the request may go on (with the signed body hash
    in `request[BODY_HASH]` when it was verified), raises NodeError 403 otherwise."""
    return AuthCheck(secret, window=window, open_metrics=open_metrics)

