"""Request authentication for the node API (zonestore/nodeauth.py signatures).

Every request is verified with `verify_request` except:
- `/health/live`: always open, it says only that the process runs;
- `/health/ready` and `/metrics`: signed requests are verified as usual; unsigned ones are
  accepted according to `open_metrics`: "loopback" (default: from 127.0.0.1/::1 only, where a
  local Prometheus agent or the operator's curl runs), "any" (Prometheus scraping from another
  host; these endpoints reveal counters and sizes, never data or ids), or "signed" (never).

Replays: a request is accepted only within the signature's time window (nodeauth's
DEFAULT_WINDOW, 300 s either side of the node's clock); that window is the replay bound of the
contract. No per-request nonce cache is kept: identical legitimate requests within one second
(an idempotent DELETE retried, the same fragment re-sent after a failure) carry identical
signatures, and refusing them would break retries between gateway and nodes.
"""

from __future__ import annotations

from aiohttp import web

from zonestore.node.errors import NodeError
from zonestore.nodeauth import AUTH_HEADER, DEFAULT_WINDOW, AuthError, verify_request

BODY_HASH: web.RequestKey[str] = web.RequestKey("zg_body_hash", str)
OPEN_PATHS = frozenset({"/health/live"})
SCRAPE_PATHS = frozenset({"/health/ready", "/metrics"})
OPEN_METRICS_CHOICES = ("loopback", "any", "signed")
LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})


def make_auth_middleware(secret: bytes, *, window: float = DEFAULT_WINDOW,
                         open_metrics: str = "loopback"):
    if open_metrics not in OPEN_METRICS_CHOICES:
        raise ValueError(f"open_metrics must be one of {OPEN_METRICS_CHOICES}, not {open_metrics!r}")

    @web.middleware
    async def auth_middleware(request: web.Request, handler) -> web.StreamResponse:
        path = request.rel_url.raw_path
        if path in OPEN_PATHS:
            return await handler(request)
        signed = AUTH_HEADER in request.headers
        if not signed and path in SCRAPE_PATHS and (
            open_metrics == "any" or (open_metrics == "loopback" and request.remote in LOOPBACK)
        ):
            return await handler(request)
        try:
            body_hash = verify_request(
                secret, request.method, path, list(request.rel_url.query.items()),
                request.headers, window=window,
            )
        except AuthError as exc:
            raise NodeError(403, "forbidden", str(exc)) from None
        request[BODY_HASH] = body_hash
        return await handler(request)

    return auth_middleware
