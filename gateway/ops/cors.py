"""CORS operations: Put/Get/DeleteBucketCors, the OPTIONS preflight, and the Access-Control-*
headers on answers to requests that carry an Origin (gateway/s3/corsrules.py has the rules).

The preflight needs no signature (browsers never sign one). Every request with an Origin reads
the bucket's configuration, so each worker keeps it for CACHE_SECONDS (`CorsCache`): a page of
a browser app fetching many objects costs one metadata read per bucket and interval, not one
per request; requests without an Origin never look. A change made through this worker is seen
at once here, by the other workers and gateways within CACHE_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import S3Request, read_small_body, require_bucket
from gateway.s3 import corsrules as cors
from gateway.s3.addressing import request_target
from gateway.s3.errors import S3Error

log = logging.getLogger("zonegate.cors")
CACHE_SECONDS = 1.5
CACHE_ENTRIES = 4096  # buckets remembered per worker (an Origin on random names stays bounded)
KIND = "cors"


@dataclass(frozen=True)
class BucketCors:
    exists: bool
    rules: tuple[cors.CorsRule, ...] | None  # None: no configuration


class CorsCache:
    """Per-worker memory of each bucket's CORS rules, kept `ttl` seconds; concurrent misses
    of one bucket share one store read."""

    def __init__(self, ttl: float = CACHE_SECONDS, max_entries: int = CACHE_ENTRIES) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, BucketCors]] = {}
        self._loading: dict[str, asyncio.Future[BucketCors]] = {}
        self.loads = 0  # store reads made (tests and the benchmark look at it)

    async def get(self, store: Any, bucket: str) -> BucketCors:
        hit = self._entries.get(bucket)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        fut = self._loading.get(bucket)
        if fut is None:
            fut = asyncio.ensure_future(self._load(store, bucket))
            self._loading[bucket] = fut
            fut.add_done_callback(lambda f, b=bucket: self._loaded(b, f))
        return await asyncio.shield(fut)

    def forget(self, bucket: str) -> None:
        """Drop what is known of `bucket` (its configuration just changed here)."""
        self._entries.pop(bucket, None)
        self._loading.pop(bucket, None)  # a read in flight may predate the change: not kept

    async def _load(self, store: Any, bucket: str) -> BucketCors:
        self.loads += 1
        doc = await store.get_bucket_config(bucket, KIND)
        if doc is not None:
            return BucketCors(True, tuple(cors.from_doc(doc)))
        return BucketCors(await store.get_bucket(bucket) is not None, None)

    def _loaded(self, bucket: str, fut: asyncio.Future[BucketCors]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            if self._loading.get(bucket) is fut:
                del self._loading[bucket]
            return
        if self._loading.get(bucket) is not fut:
            return  # forgotten meanwhile
        del self._loading[bucket]
        if len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))  # the oldest entry
        self._entries.pop(bucket, None)
        self._entries[bucket] = (time.monotonic() + self.ttl, fut.result())


def cache_of(gw: Any) -> CorsCache:
    cache = getattr(gw, "_cors_cache", None)
    if cache is None:
        cache = gw._cors_cache = CorsCache()
    return cache


async def _save(req: S3Request, doc: str | None) -> None:
    """Store the document and rewrite the bucket marker with it (so recover-metadata brings
    it back); this worker sees the change at once."""
    try:
        await save_bucket_config(req.gw, req.bucket, KIND, doc)  # NoSuchBucket if gone
    finally:
        cache_of(req.gw).forget(req.bucket)  # stored even when the marker rewrite failed


async def put_bucket_cors(req: S3Request) -> Response:
    await require_bucket(req)
    body = await read_small_body(req, cors.MAX_BODY)
    rules = cors.parse_configuration(body)
    await _save(req, cors.to_doc(rules))
    return Response(b"")


async def get_bucket_cors(req: S3Request) -> Response:
    await require_bucket(req)
    doc = await req.gw.store.get_bucket_config(req.bucket, KIND)
    if doc is None:
        raise S3Error("NoSuchCORSConfiguration", BucketName=req.bucket)
    return Response(cors.render_configuration(cors.from_doc(doc)),
                    media_type="application/xml")


async def delete_bucket_cors(req: S3Request) -> Response:
    await require_bucket(req)
    await _save(req, None)
    return Response(status_code=204)


async def preflight(req: S3Request) -> Response:
    """OPTIONS on a bucket or object: 200 with the matching rule's headers, else S3's error."""
    h = req.headers
    origin, method = h.get("origin"), h.get("access-control-request-method")
    rtype = "OBJECT" if req.key else "BUCKET"
    if not origin or method not in cors.METHODS:
        cors.preflight(None, origin, method, None, rtype)  # raises the 400 S3 answers
    if not req.bucket:
        raise S3Error("AccessForbidden", cors.NO_BUCKET, status=403, Method=method,
                      ResourceType=rtype)
    state = await cache_of(req.gw).get(req.gw.store, req.bucket)
    if not state.exists:
        raise S3Error("AccessForbidden", cors.NO_BUCKET, status=403, Method=method,
                      ResourceType=rtype)
    headers = cors.preflight(state.rules, origin, method,
                             h.get("access-control-request-headers"), rtype)
    return Response(b"", headers=dict(headers))


async def answer_headers(gw: Any, request: Request) -> list[tuple[str, str]]:
    """The Access-Control-* headers of the bucket's first rule matching an actual request's
    Origin and method (none when no rule does), which S3 adds to successes and errors alike."""
    origin = request.headers.get("origin")
    if not origin or request.method == "OPTIONS":
        return []
    try:
        bucket = request_target(gw.domains, request).bucket
        if not bucket:
            return []
        state = await cache_of(gw).get(gw.store, bucket)
    except S3Error as e:  # a bad path, or the store does not answer: the answer goes as is
        log.debug("CORS headers left out: %s", e)
        return []
    except Exception:
        log.exception("CORS headers left out")
        return []
    # S3 matches Access-Control-Request-Method when an actual request carries one.
    method = request.headers.get("access-control-request-method") or request.method
    return cors.response_headers(state.rules, origin, method)


class CorsHeaders:
    """ASGI middleware around the S3 endpoint: adds `answer_headers` to the start of every
    answer to a request with an Origin. Requests without one pass untouched."""

    def __init__(self, app: Any, gw: Any) -> None:
        self.app = app
        self.gw = gw

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not any(k == b"origin" for k, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = await answer_headers(self.gw, Request(scope))
                if extra:
                    message = {**message, "headers": [
                        *message.get("headers", ()),
                        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra)]}
            await send(message)

        await self.app(scope, receive, send_with_cors)
