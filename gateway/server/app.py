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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.access.proxies import TrustedProxies, from_request
from gateway.lifecycle.worker import LifecycleWorker
from gateway.metadata import MetadataStore, StoreUnavailableError, store_from_config
from gateway.ops import (
    acl_ops,
    buckets,
    copy,
    cors,
    lifecycle,
    listing,
    multipart,
    objects,
    policy_ops,
    service,
    tagging,
    versioning,
)
from gateway.ops.access import action_for, hide_missing
from gateway.ops.common import S3Request, new_request_id
from gateway.s3 import auth
from gateway.s3.errors import S3Error, error_xml
from gateway.server.users import UserDirectory
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

Handler = Callable[[S3Request], Awaitable[Response]]

# Query parameters that name an S3 subresource; any we do not handle is NotImplemented.
SUBRESOURCES = {
    "accelerate", "acl", "analytics", "attributes", "cors", "delete", "encryption",
    "intelligent-tiering", "inventory", "legal-hold", "lifecycle", "location", "logging",
    "metadata", "metrics", "notification", "object-lock", "ownershipControls", "policy",
    "policyStatus", "publicAccessBlock", "replication", "requestPayment", "restore",
    "retention", "select", "tagging", "torrent", "uploadId", "uploads", "versioning",
    "versions", "website", "renameObject", "session",
}
SWEEP_INTERVAL = 60.0
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
        self._sweeper: asyncio.Task | None = None
        self._kick = asyncio.Event()
        # lifecycle_day_seconds shortens the lifecycle day for tests (rgw_lc_debug_interval)
        self.lifecycle = LifecycleWorker.from_gateway(self, gw)
        self.lifecycle_day = self.lifecycle.day
        # the data mover (rebalance, drain, drive replacement): gateway/store/movework.py
        self.mover: Any = None
        cluster = getattr(self.storage, "cluster", None)
        if getattr(cluster, "layout", None) is not None:
            from gateway.store.movework import MoverService
            self.mover = MoverService.from_gateway(config, cluster, self.store)

    def kick_sweeper(self) -> None:
        """Wake the sweeper: a commit just queued fragments to delete."""
        self._kick.set()

    async def start(self) -> None:
        await self.store.start()
        await self._import_state_dir()
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
                due = None
            # An upload goes stale on its own, with no commit to wake us: never sleep longer
            # than the upload age (it matters only when that is configured below a minute).
            cap = min(SWEEP_INTERVAL, max(0.05, self.upload_ttl))
            wait = cap if due is None else min(cap, max(0.05, due - time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait)
            self._kick.clear()


def _split_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class Target:
    """What a request addresses, from one parse of (Host, raw path): the resource that is
    verified (SigV2 signs "/bucket/key" whichever way the bucket was named) is then always
    the resource served."""

    bucket: str
    key: str
    virtual: bool      # the bucket came from the Host header (bucket.<domain>)
    raw_path: bytes    # the path as received, still percent-encoded, no query

    @property
    def resource_prefix(self) -> str:
        """What SigV2's canonical resource puts before the raw path."""
        return "/" + self.bucket if self.virtual else ""


def request_target(gw: Gateway, request: Request) -> Target:
    """The request's Target. Virtual-host style when Host is `<bucket>.<one of
    gw.domains>` (the port ignored); otherwise path style, the bucket being the path's first
    segment up to its first `/`. A path that does not start with `/` or is not UTF-8 once
    decoded is InvalidURI."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    raw = raw.split(b"?", 1)[0]
    if not raw.startswith(b"/"):
        raise S3Error("InvalidURI")
    try:
        path = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI") from None
    host = _split_host(request.headers.get("host", ""))
    for dom in gw.domains:
        if host.endswith("." + dom) and len(host) > len(dom) + 1:
            return Target(host[: -len(dom) - 1], path[1:], True, raw)
    bucket, _, key = path[1:].partition("/")
    return Target(bucket, key, False, raw)


def parse_target(gw: Gateway, request: Request) -> tuple[str, str]:
    """(bucket, key) of `request_target`."""
    t = request_target(gw, request)
    return t.bucket, t.key


def parse_query_pairs(qs: bytes) -> list[tuple[str, str]]:
    try:
        return parse_qsl(qs.decode("latin-1"), keep_blank_values=True, encoding="utf-8",
                         errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise S3Error("InvalidURI") from None


def parse_query(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in parse_query_pairs(request.scope.get("query_string", b"")):
        out.setdefault(k, v)
    return out


# Tagging and lifecycle (gateway/ops/tagging.py, gateway/ops/lifecycle.py).
BUCKET_CONFIG_ROUTES: dict[tuple[str, frozenset], Handler] = {
    ("PUT", frozenset({"tagging"})): tagging.put_bucket_tagging,
    ("GET", frozenset({"tagging"})): tagging.get_bucket_tagging,
    ("DELETE", frozenset({"tagging"})): tagging.delete_bucket_tagging,
    ("PUT", frozenset({"lifecycle"})): lifecycle.put_bucket_lifecycle,
    ("GET", frozenset({"lifecycle"})): lifecycle.get_bucket_lifecycle,
    ("DELETE", frozenset({"lifecycle"})): lifecycle.delete_bucket_lifecycle,
}
OBJECT_CONFIG_ROUTES: dict[tuple[str, frozenset], Handler] = {
    ("PUT", frozenset({"tagging"})): tagging.put_object_tagging,
    ("GET", frozenset({"tagging"})): tagging.get_object_tagging,
    ("DELETE", frozenset({"tagging"})): tagging.delete_object_tagging,
}


def route(req: S3Request) -> Handler:
    """Pick the operation for method + subresources."""
    m, q = req.method, req.query
    subs = {k for k in q if k in SUBRESOURCES}
    if m == "OPTIONS":
        return cors.preflight  # a CORS preflight, whatever the subresources
    if not req.bucket:
        if m in ("GET", "HEAD"):
            return service.list_buckets
        raise S3Error("MethodNotAllowed", ResourceType="SERVICE", Method=m)
    if not req.key:
        table: dict[tuple[str, frozenset], Handler] = {
            ("PUT", frozenset()): buckets.create_bucket,
            ("HEAD", frozenset()): buckets.head_bucket,
            ("DELETE", frozenset()): buckets.delete_bucket,
            ("GET", frozenset({"location"})): buckets.get_location,
            ("GET", frozenset({"versioning"})): versioning.get_versioning,
            ("PUT", frozenset({"versioning"})): versioning.put_versioning,
            ("GET", frozenset({"uploads"})): multipart.list_uploads,
            ("GET", frozenset({"versions"})): listing.list_versions,
            ("POST", frozenset({"delete"})): versioning.delete_objects,
            **BUCKET_CONFIG_ROUTES,
            # CORS (gateway/ops/cors.py)
            ("PUT", frozenset({"cors"})): cors.put_bucket_cors,
            ("GET", frozenset({"cors"})): cors.get_bucket_cors,
            ("DELETE", frozenset({"cors"})): cors.delete_bucket_cors,
            # access control (acl15)
            ("GET", frozenset({"acl"})): acl_ops.get_bucket_acl,
            ("PUT", frozenset({"acl"})): acl_ops.put_bucket_acl,
            ("GET", frozenset({"policy"})): policy_ops.get_policy,
            ("PUT", frozenset({"policy"})): policy_ops.put_policy,
            ("DELETE", frozenset({"policy"})): policy_ops.delete_policy,
            ("GET", frozenset({"policyStatus"})): policy_ops.get_policy_status,
            ("GET", frozenset({"ownershipControls"})): policy_ops.get_ownership,
            ("PUT", frozenset({"ownershipControls"})): policy_ops.put_ownership,
            ("DELETE", frozenset({"ownershipControls"})): policy_ops.delete_ownership,
            ("GET", frozenset({"publicAccessBlock"})): policy_ops.get_pab,
            ("PUT", frozenset({"publicAccessBlock"})): policy_ops.put_pab,
            ("DELETE", frozenset({"publicAccessBlock"})): policy_ops.delete_pab,
        }
        if m == "GET" and not subs:
            return listing.list_objects_v2 if q.get("list-type") == "2" else listing.list_objects
        h = table.get((m, frozenset(subs)))
        if h is None:
            if not subs and m in ("POST",):
                raise S3Error("MethodNotAllowed", ResourceType="BUCKET", Method=m)
            raise S3Error("NotImplemented")
        return h
    copying = "x-amz-copy-source" in req.headers
    if m == "PUT" and subs == {"uploadId"} and "partNumber" in q:
        return multipart.upload_part_copy if copying else multipart.upload_part
    table = {
        ("GET", frozenset()): objects.get_object,
        ("HEAD", frozenset()): objects.head_object,
        ("DELETE", frozenset()): versioning.delete_object,
        ("POST", frozenset({"uploads"})): multipart.create_upload,
        ("POST", frozenset({"uploadId"})): multipart.complete_upload,
        ("GET", frozenset({"uploadId"})): multipart.list_parts,
        ("DELETE", frozenset({"uploadId"})): multipart.abort_upload,
        **OBJECT_CONFIG_ROUTES,
        # access control (acl15)
        ("GET", frozenset({"acl"})): acl_ops.get_object_acl,
        ("PUT", frozenset({"acl"})): acl_ops.put_object_acl,
    }
    if m == "PUT" and not subs:
        return copy.copy_object if copying else objects.put_object
    h = table.get((m, frozenset(subs)))
    if h is None:
        if not subs and m not in ("GET", "HEAD", "PUT", "DELETE"):
            raise S3Error("MethodNotAllowed", ResourceType="OBJECT", Method=m)
        raise S3Error("NotImplemented")
    return h


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
            target = request_target(gw, request)
            bucket, key = target.bucket, target.key
            resource = "/" + bucket + ("/" + key if key else "") if bucket else "/"
            req = S3Request(request, gw, rid, bucket, key, parse_query(request))
            if request.method != "OPTIONS":  # a CORS preflight is never signed
                await authenticate(req, target)
            handler = route(req)
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
    from gateway.server.health import install as install_operations
    install_operations(app)  # /health/*, /metrics, request and node-call metrics
    from gateway import console
    if console.enabled(getattr(config, "gateway", None)):
        console.install(app)  # /console (unsigned requests only), see gateway/console
    return app
