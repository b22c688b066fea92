"""The S3 app: `create_app(config)` builds a starlette app that routes every S3 request.

Path-style (`/bucket/key`) and virtual-host-style (`bucket.<domain>/key`) addressing; dispatch
on method plus query subresources; every error becomes S3's XML body with a request id, and
an unexpected exception becomes a bare InternalError (logged here, never sent to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.access.proxies import TrustedProxies, from_request
from gateway.console.routes import enabled as console_enabled
from gateway.console.routes import install as install_console
from gateway.lifecycle.worker import LifecycleWorker
from gateway.metadata import MetadataStore, StoreUnavailableError, store_from_config
from gateway.ops import cors
from gateway.ops.access import action_for, hide_missing
from gateway.ops.common import S3Request, new_request_id
from gateway.s3 import amzheaders, auth
from gateway.s3.addressing import Target, parse_query, request_target
from gateway.s3.errors import S3Error, error_xml
from gateway.s3.md5lanes import lanes_isa
from gateway.server.health import install as install_operations
from gateway.server.routes import route
from gateway.server.users import UserDirectory
from gateway.store.ssekeys import SseSettings
from gateway.store.storage import Storage
from zonestore.logsetup import REQUEST_ID

log = logging.getLogger("zonegate.gateway")


class _AnyPath(Convertor[str]):
    regex = "(?s:.*)"  # "." matching line breaks too

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("s3path", _AnyPath())

SWEEP_INTERVAL = 60.0
STORE_RETRY = 2.0
ABANDONED_UPLOAD_AGE = 7 * 24 * 3600.0
# Replaced or deleted data may stay on the nodes this long after the commit, for reads that
# started before. Off by default: until its fragments are gone, a deleted object would come
# back if the metadata store had to be rebuilt from the nodes.
FREE_DELAY = 0.0


class Gateway:
    """Process-wide state: config, users, metadata store, storage, background sweeper."""

    def __init__(self, config: Any, store: MetadataStore | None = None,
                 storage: Storage | None = None) -> None:
        self.config = config
        gw: dict[str, Any] = dict(getattr(config, "gateway", None) or {})
        self.region = str(gw.get("region") or "us-east-1")
        self.domains = [str(d).lower() for d in (gw.get("domains") or ["localhost"])]
        self.users = {u.access_key: u for u in getattr(config, "users", ())}
        # whose X-Forwarded-For / -Proto count, for aws:SourceIp and log lines
        self.proxies = TrustedProxies.from_gateway(gw)
        self.upload_ttl = float(gw.get("abandoned_upload_seconds", ABANDONED_UPLOAD_AGE))
        free_delay = float(gw.get("free_delay_seconds", FREE_DELAY))
        self.store = store or store_from_config(gw, free_delay=free_delay)
        self.directory = UserDirectory(self.users.values(), self.store)
        self.storage = storage or Storage.from_config(config, self.store)
        # SSE-S3 master keys and SSE-C over HTTP (gateway/store/ssekeys.py); a bad key file
        # stops the start-up here, with one line naming it
        source = str(getattr(config, "source", ""))
        self.sse = SseSettings.from_gateway(gw, os.path.dirname(source) if
                                            os.path.isfile(source) else None)
        self._sweeper: asyncio.Task | None = None
        self._kick = asyncio.Event()
        # lifecycle_day_seconds shortens the lifecycle day for tests (rgw_lc_debug_interval)
        self.lifecycle = LifecycleWorker.from_gateway(self, gw)
        self.lifecycle_day = self.lifecycle.day
        # the data mover (rebalance, drain, drive replacement): gateway/store/movework.py
        self.mover: Any = None
        cluster = getattr(self.storage, "cluster", None)
        if getattr(cluster, "layout", None) is not None:
            from gateway.server.metrics import s3_requests_in_flight
            from gateway.store.movework import MoverService
            # the mover slows to [erasure] move_rate_busy while S3 requests are in flight
            self.mover = MoverService.from_gateway(config, cluster, self.store,
                                                   busy=lambda: s3_requests_in_flight() > 0)

    def kick_sweeper(self) -> None:
        """Wake the sweeper: a commit just queued fragments to delete."""
        self._kick.set()

    async def start(self) -> None:
        if lanes_isa() == "none":
            log.warning("gateway/s3/_md5lanes is not built (no C compiler at install): ETag "
                        "MD5s use hashlib, up to 4x the CPU with several uploads at once")
        await self.store.start()
        await self._import_state_dir()
        self.storage.wake = self.kick_sweeper  # a node's return finishes deletions at once
        await self.storage.start()
        self._sweeper = asyncio.create_task(self._sweep_loop())
        self.lifecycle.start()
        if self.mover is not None:
            self.mover.start()

    async def close(self) -> None:
        await self.lifecycle.stop()
        if self.mover is not None:
            await self.mover.stop()
        if self._sweeper:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper
        await self.storage.close()
        await self.store.close()

    async def _import_state_dir(self) -> None:
        """Repair and deletion records an older gateway kept under `erasure.state_dir` go
        into the shared store before the healer starts (an upgrade forgets none)."""
        from gateway.store.erasurequeues import StoreRepairQueue, import_state_dir
        erasure = getattr(self.config, "erasure", None)
        queue = getattr(getattr(self.storage, "cluster", None), "repair_queue", None)
        if erasure is None or not isinstance(queue, StoreRepairQueue):
            return
        try:
            await import_state_dir(self.store, erasure.state_dir)
        except Exception as e:  # the files stay where they are: the next start tries again
            log.error("repair queue files under %s not moved into the metadata store: %s",
                      erasure.state_dir, e)

    async def sweep_once(self) -> int:
        """Abort abandoned uploads, then delete queued orphan fragments. Returns parts freed."""
        for upload_id in await self.store.stale_uploads(time.time() - self.upload_ttl):
            await self.store.abort_upload(upload_id)
        return await self.storage.sweep_orphans(self.store)

    async def _sweep_loop(self) -> None:
        # The first pass runs at start: fragments queued before a crash go soon after restart.
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except StoreUnavailableError as e:
                log.warning("orphan sweep postponed: %s", e)
            except Exception:
                log.exception("orphan sweep failed; will retry")
            # Sleep until the next queued deletion is due (or a commit wakes us).
            try:
                due = await self.store.next_due()
            except StoreUnavailableError:
                # The database is away: look again soon, not a whole interval after it is back
                # (the marks that fell due meanwhile would wait for nothing).
                due = time.time() + STORE_RETRY
            # An upload goes stale on its own, and a write's pending mark falls due, with no
            # commit to wake us: never sleep longer than the upload age or the pending grace
            # (it matters only when they are configured below a minute).
            cap = min(SWEEP_INTERVAL, max(0.05, self.upload_ttl),
                      max(0.05, self.storage.pending_grace))
            wait = cap if due is None else min(cap, max(0.05, due - time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait)
            self._kick.clear()


async def authenticate(req: S3Request, target: Target) -> None:
    """Verify the signature (SigV4/V2, header or query) of the resource `target` names (the
    one the request will be served from), with the config's users and the store's (loaded
    on first use, see gateway/server/users.py). An unsigned request goes on as anonymous (req.user
    ""): the bucket's policy or ACL decides. The body is verified later, as it streams."""
    request = req.request
    query = auth.parse_query(request.scope.get("query_string", b""))
    directory = req.gw.directory
    asked: list[str] = []

    def lookup(access_key: str) -> tuple[str, str] | None:
        asked.append(access_key)
        return directory.lookup(access_key)

    def verify() -> auth.AuthResult:
        return auth.authenticate(request.method, target.raw_path, query, request.headers,
                                 lookup, resource_prefix=target.resource_prefix,
                                 allow_anonymous=True)
    try:
        res = verify()
    except S3Error as e:
        # A key the config does not have may be a store user's: load it, verify again.
        if e.code != "InvalidAccessKeyId" or not asked or not directory.needs_load(asked[-1]):
            raise
        await directory.load(asked[-1])
        res = verify()
    req.user = res.user or ""
    req.auth = res


def _base_headers(request_id: str) -> dict[str, str]:
    return {"x-amz-request-id": request_id, "x-amz-id-2": request_id, "Server": "ZoneGate"}


def error_response(err: S3Error, request_id: str, method: str, resource: str) -> Response:
    headers = {**err.headers, **_base_headers(request_id)}
    if method == "HEAD" or err.status == 304:
        # HEAD errors and 304 carry no body.
        return Response(b"", status_code=err.status, headers=headers)
    body = error_xml(err, request_id, resource=resource)
    return Response(body, status_code=err.status, headers=headers, media_type="application/xml")


async def _drain(request: Request, limit: int = 1 << 20) -> bool:
    """After an early error, read a small unread body so the connection stays usable.
    Returns True when body bytes may remain (then the connection must be closed: the client
    may still send them, or, after `Expect: 100-continue`, may never send them)."""
    cl = request.headers.get("content-length")
    chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
    if not chunked and (cl is None or cl == "0"):
        return False
    if getattr(request, "_stream_consumed", False):
        return False
    if request.headers.get("expect", "").lower() == "100-continue":
        return True  # uvicorn sent no 100 Continue: the client has not sent the body
    if cl is not None and not chunked and (not cl.isdigit() or int(cl) > limit):
        # Too much to read first (the client may even be waiting for the answer before it
        # sends it): answer now and close the connection.
        return True
    n = 0
    try:
        async for chunk in request.stream():
            n += len(chunk)
            if n > limit:
                return True
    except Exception:
        return True
    return False


def create_app(config_path_or_config: Any) -> Starlette:
    """The S3 starlette app for a cluster config (a path to the TOML, or a ClusterConfig)."""
    config = config_path_or_config
    if isinstance(config, str | os.PathLike):
        from erasure.config import ClusterConfig
        config = ClusterConfig.load(Path(config))
    gw = Gateway(config)

    async def endpoint(request: Request) -> Response:
        rid = new_request_id()
        REQUEST_ID.set(rid)  # every log line while serving this request names it
        resource = "/"
        req: S3Request | None = None
        try:
            target = request_target(gw.domains, request)
            bucket, key = target.bucket, target.key
            resource = "/" + bucket + ("/" + key if key else "") if bucket else "/"
            bad_query: S3Error | None = None
            try:
                query = parse_query(request)
            except S3Error as e:
                query, bad_query = {}, e
            req = S3Request(request, gw, rid, bucket, key, query)
            if request.method != "OPTIONS":  # a CORS preflight is never signed
                # Before the query's own check: a query-signed request whose credentials
                # are not UTF-8 is InvalidAccessKeyId, as in the Authorization header.
                await authenticate(req, target)
            if bad_query is not None:
                raise bad_query
            handler = route(req)
            if request.method != "OPTIONS":
                amzheaders.check_request(request.method, request.headers)  # never pretend
            req.extra["action"] = action_for(req, handler)
            resp = await handler(req)
        except S3Error as e:
            if e.code == "NoSuchKey" and req is not None:
                try:
                    e = await hide_missing(req, e)
                except S3Error as e2:  # the store failed: say so rather than guess
                    e = e2
            resp = error_response(e, rid, request.method, resource)
            if await _drain(request):
                resp.headers["Connection"] = "close"
            return resp
        except ClientDisconnect:
            return error_response(S3Error("IncompleteBody"), rid, request.method, resource)
        except Exception:
            log.exception("internal error on %s %s from %s", request.method, resource,
                          from_request(gw.proxies, request)[0])
            return error_response(S3Error("InternalError"), rid, request.method, resource)
        resp.headers.update(_base_headers(rid))
        return resp

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.close()

    methods = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"]
    # Every path goes to the S3 endpoint: keys may hold line breaks, which starlette's
    # `{path:path}` does not match (a plain-text 404, or a 307 built from the unsigned Host
    # header for "a\n/"); so a convertor that matches anything, and no slash redirects.
    app = Starlette(routes=[Route("/{path:s3path}", endpoint, methods=methods)],
                    lifespan=lifespan)
    app.router.redirect_slashes = False
    app.state.gateway = gw
    app.add_middleware(cors.CorsHeaders, gw=gw)  # Access-Control-* on S3 answers
    install_operations(app)  # /health/*, /metrics, request and node-call metrics
    if console_enabled(getattr(config, "gateway", None)):
        install_console(app)  # /console (unsigned requests only), see gateway/console
    return app
