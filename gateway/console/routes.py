"""The console's HTTP surface under /console, and the middleware that keeps it off S3's way.

    GET  /console/                      the page (static HTML, JS, CSS under /console/static/)
    POST /console/api/login             form: access_key, secret_key -> session cookie
    POST /console/api/logout            needs the X-CSRF-Token of the session
    GET  /console/api/session           who is logged in, and the CSRF token (401 if nobody)
    GET  /console/api/overview          health, quorum, nodes, drives, capacity, repair, requests
    GET  /console/api/zones             the zone map of every drive
    GET  /console/api/layout            the cluster layout, staged changes, the data mover's run
    GET  /console/api/buckets           the user's buckets
    GET  /console/api/objects?bucket=&prefix=&delimiter=&after=
    GET  /console/api/object?bucket=&key=
    GET  /console/api/presign?bucket=&key=    a presigned download URL (5 minutes)

Like the operator endpoints (gateway/server/health.py), these are answered only for *unsigned*
requests: a signed request to /console/... is S3 (a bucket named "console"), and S3 refuses
every unsigned request, so the two never meet. The cookie's Path is /console, so it never
rides along on S3 requests either.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from pathlib import Path
from typing import Any

from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, Router

from gateway.access.proxies import from_request
from gateway.console import browser
from gateway.console.data import ConsoleData
from gateway.console.session import (
    COOKIE,
    Session,
    SessionSigner,
    cookie_header,
    same_origin,
)
from gateway.s3.errors import S3Error
from gateway.server.health import is_signed
from gateway.server.metrics import ASGIApp, Receive, Scope, Send

log = logging.getLogger("zonegate.console")

STATIC = Path(__file__).parent / "static"
PREFIX = "/console"
MAX_LOGIN_BODY = 4096
FAILED_LOGIN_DELAY = 0.5  # slows guessing; the event loop is not blocked by it
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
S3_ERROR_STATUS = {"NoSuchBucket": 404, "NoSuchKey": 404, "AccessDenied": 403,
                   "InvalidBucketName": 400}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": code, "message": message}, status)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """The router's answer to any other path (or method) under /console."""
    await _error(404, "NotFound", "no such console page")(scope, receive, send)


def _client(request: Request, gw: Any) -> tuple[str, str]:
    """(address, scheme) of the client, behind the gateway's trusted proxies too."""
    return from_request(gw.proxies, request)


def _secure(request: Request, gw: Any) -> bool:
    return _client(request, gw)[1] == "https"


class Console:
    """The console of one gateway (per worker)."""

    def __init__(self, gateway: Any) -> None:
        self.gw = gateway
        self.signer = SessionSigner(str(getattr(gateway.config, "secret", "") or ""))
        self.data = ConsoleData(gateway)
        routes = [
            Route("/console", self.to_index, methods=["GET", "HEAD"]),
            Route("/console/", self.index, methods=["GET", "HEAD"]),
            Route("/console/static/{name}", self.static, methods=["GET", "HEAD"]),
            Route("/console/api/login", self.login, methods=["POST"]),
            Route("/console/api/logout", self.logout, methods=["POST"]),
            Route("/console/api/session", self.session, methods=["GET"]),
            Route("/console/api/overview", self.authed(self.overview), methods=["GET"]),
            Route("/console/api/zones", self.authed(self.zones), methods=["GET"]),
            Route("/console/api/layout", self.authed(self.layout), methods=["GET"]),
            Route("/console/api/buckets", self.authed(self.buckets), methods=["GET"]),
            Route("/console/api/objects", self.authed(self.objects), methods=["GET"]),
            Route("/console/api/object", self.authed(self.object), methods=["GET"]),
            Route("/console/api/presign", self.authed(self.presign), methods=["GET"]),
        ]
        # ExceptionMiddleware: starlette's routes raise HTTPException (405) inside an app
        router = ExceptionMiddleware(Router(routes=routes, default=_not_found))
        self.app: ASGIApp = GZipMiddleware(router, minimum_size=1024)

    # -- sessions ----------------------------------------------------------------------------

    def current(self, request: Request) -> Session | None:
        return self.signer.verify(request.cookies.get(COOKIE), self.gw.users)

    def authed(self, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            s = self.current(request)
            if s is None:
                return _error(401, "Unauthorized", "log in first")
            try:
                return await handler(request, s)
            except S3Error as e:
                return _error(S3_ERROR_STATUS.get(e.code, e.status), e.code, e.message)
        return endpoint

    async def login(self, request: Request) -> Response:
        wants_json = "application/json" in request.headers.get("accept", "")
        if not same_origin(request.headers):
            return _error(403, "CrossOrigin", "login must come from the console's own page")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_LOGIN_BODY:
                return _error(413, "TooLarge", "login form too large")
        from urllib.parse import parse_qs
        try:
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            form = {}
        access_key = (form.get("access_key") or [""])[0].strip()
        secret_key = (form.get("secret_key") or [""])[0]
        user = self.gw.users.get(access_key)
        ok = user is not None and hmac.compare_digest(user.secret_key.encode(),
                                                      secret_key.encode())
        if not ok:
            # The access key is an identifier, not a secret; the secret is never logged.
            log.warning("console login refused for access key %r from %s", access_key[:64],
                        _client(request, self.gw)[0])
            await asyncio.sleep(FAILED_LOGIN_DELAY)
            if wants_json:
                return _error(401, "InvalidCredentials", "access key or secret key is wrong")
            return RedirectResponse("/console/?login=failed", 303, headers=SECURITY_HEADERS)
        value, s = self.signer.issue(access_key, user.secret_key)
        cookie = cookie_header(value, secure=_secure(request, self.gw),
                               max_age=int(self.signer.lifetime))
        log.info("console login of user %s from %s", user.name, _client(request, self.gw)[0])
        if wants_json:
            return _json({"user": user.name, "access_key": access_key, "csrf": s.csrf,
                          "expires": s.expires}, headers={"Set-Cookie": cookie})
        return RedirectResponse("/console/", 303, headers={**SECURITY_HEADERS,
                                                           "Set-Cookie": cookie})

    async def logout(self, request: Request) -> Response:
        s = self.current(request)
        if not same_origin(request.headers):
            return _error(403, "CrossOrigin", "logout must come from the console's own page")
        if s is None:
            return _error(401, "Unauthorized", "not logged in")
        token = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(token.encode(), s.csrf.encode()):
            return _error(403, "BadCsrfToken", "missing or wrong X-CSRF-Token")
        return _json({"ok": True}, headers={
            "Set-Cookie": cookie_header("", secure=_secure(request, self.gw), max_age=0)})

    async def session(self, request: Request) -> Response:
        s = self.current(request)
        if s is None:
            return _error(401, "Unauthorized", "not logged in")
        user = self.gw.users[s.access_key]
        return _json({"user": user.name, "access_key": s.access_key, "csrf": s.csrf,
                      "expires": s.expires})

    # -- pages -------------------------------------------------------------------------------

    async def to_index(self, request: Request) -> Response:
        return RedirectResponse("/console/", 308)

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS,
                            media_type="text/html; charset=utf-8")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        path = STATIC / name
        if "/" in name or name.startswith(".") or name == "index.html" or not path.is_file():
            return await self.not_found(request)
        return FileResponse(path, headers=SECURITY_HEADERS)

    async def not_found(self, request: Request) -> Response:
        return _error(404, "NotFound", "no such console page")

    # -- API ---------------------------------------------------------------------------------

    async def overview(self, request: Request, s: Session) -> Response:
        return _json(await self.data.overview())

    async def zones(self, request: Request, s: Session) -> Response:
        return _json(await self.data.zone_map())

    async def layout(self, request: Request, s: Session) -> Response:
        # cluster admin data, like the overview: for a logged-in user, and only the cluster
        # file's users (the operators) can log in (`current` checks the config's users)
        return _json(await self.data.shape())

    def _user(self, s: Session) -> Any:
        return self.gw.users[s.access_key]

    async def buckets(self, request: Request, s: Session) -> Response:
        return _json(await browser.list_buckets(self.gw, self._user(s).name))

    async def objects(self, request: Request, s: Session) -> Response:
        q = request.query_params
        return _json(await browser.list_objects(self.gw, self._user(s).name, q.get("bucket", ""),
                                          q.get("prefix", ""), q.get("delimiter", ""),
                                          q.get("after", "")))

    async def object(self, request: Request, s: Session) -> Response:
        q = request.query_params
        return _json(await browser.object_details(self.gw, self._user(s).name, q.get("bucket", ""),
                                            q.get("key", "")))

    async def presign(self, request: Request, s: Session) -> Response:
        q = request.query_params
        user = self._user(s)
        bucket, key = q.get("bucket", ""), q.get("key", "")
        await browser.object_details(self.gw, user.name, bucket, key)  # exists and is theirs
        host = request.headers.get("host") or "localhost"
        url = browser.presign_get(scheme=_client(request, self.gw)[1], host=host, bucket=bucket,
                                  key=key, access_key=s.access_key,
                                  secret_key=user.secret_key, region=self.gw.region)
        return _json({"url": url, "expires_in": browser.PRESIGN_SECONDS})


class ConsoleEndpoints:
    """ASGI middleware: unsigned requests under /console go to the console, all others on."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if (path == PREFIX or path.startswith(PREFIX + "/")) and not is_signed(scope):
                await self.console.app(scope, receive, send)
                return
        await self.app(scope, receive, send)


def enabled(gateway_section: Any) -> bool:
    """`[gateway] console` (default true)."""
    value = dict(gateway_section or {}).get("console", True)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "off", "0")
    return bool(value)


def install(app: Any) -> None:
    """Serve the console from the gateway's starlette app (call in create_app, after the
    operator endpoints: the console is outermost, so its requests count as no S3 request)."""
    app.add_middleware(ConsoleEndpoints, console=Console(app.state.gateway))
