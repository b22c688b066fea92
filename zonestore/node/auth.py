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
from collections.abc import Callable

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
    try:
        return verify_request(secret, request.method, request.rel_url.raw_path,
                              list(request.rel_url.query.items()), request.headers,
                              window=window)
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


def make_auth_check(secret: bytes, *, window: float = DEFAULT_WINDOW,
                    open_metrics: str = "loopback") -> Callable[[web.Request], None]:
    """The node's request check (see the module docstring): returns if the request may go on
    (with the signed body hash in `request[BODY_HASH]` when it was verified), raises NodeError
    403 otherwise. Synchronous, so that the node's one middleware runs it without a frame."""
    if open_metrics not in OPEN_METRICS_CHOICES:
        raise ValueError(f"open_metrics must be one of {OPEN_METRICS_CHOICES}, not {open_metrics!r}")
    replays = ReplayCache(window)

    def check(request: web.Request) -> None:
        path = request.rel_url.raw_path
        if path in OPEN_PATHS:
            return
        signed = AUTH_HEADER in request.headers
        if not signed and path in SCRAPE_PATHS and (
            open_metrics == "any" or (open_metrics == "loopback" and request.remote in LOOPBACK)
        ):
            return
        body_hash = check_signature(request, secret, window)
        if request.method in WRITE_METHODS:
            signature = request.headers[AUTH_HEADER].partition(" ")[2]
            if not replays.first_time(signature):
                raise NodeError(403, "forbidden", "replayed request: this write was already "
                                "received (sign each write anew, with a random nonce parameter)")
        request[BODY_HASH] = body_hash

    return check


def make_auth_middleware(secret: bytes, *, window: float = DEFAULT_WINDOW,
                         open_metrics: str = "loopback"):
    """`make_auth_check` as a middleware of its own (the node folds it into one middleware)."""
    check = make_auth_check(secret, window=window, open_metrics=open_metrics)

    @web.middleware
    async def auth_middleware(request: web.Request, handler) -> web.StreamResponse:
        check(request)
        return await handler(request)

    return auth_middleware
