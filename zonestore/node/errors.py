"""JSON errors of the node API and the mapping from store exceptions to HTTP statuses.

Every refusal is `{"error": code, "message": text}` with a 4xx/5xx status; bad input never
reaches a 500 (a 500 means a bug in the node and is logged with its traceback).
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from zonestore.errors import CorruptRecord, InvalidRange, NoSpace, RecordNotFound

log = logging.getLogger("zonestore.node")


class NodeError(Exception):
    """A request the node refuses, with its HTTP status and a short machine-readable code."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None,
                 extra: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.extra = extra  # more fields of the JSON answer (507: writable_bytes)


def error_body(code: str, message: str, extra: dict[str, object] | None = None) -> str:
    return json.dumps({"error": code, "message": message, **(extra or {})})


def json_error(status: int, code: str, message: str,
               headers: dict[str, str] | None = None,
               extra: dict[str, object] | None = None) -> web.Response:
    return web.Response(
        status=status,
        text=error_body(code, message, extra),
        content_type="application/json",
        headers=headers,
    )


def error_for(exc: BaseException) -> NodeError | None:
    """The NodeError a store exception stands for, or None if it is not a known refusal."""
    if isinstance(exc, NodeError):
        return exc
    if isinstance(exc, RecordNotFound):
        return NodeError(404, "not_found", "no such record")
    if isinstance(exc, CorruptRecord):
        return NodeError(409, "corrupt", f"record is corrupt on disk: {exc}")
    if isinstance(exc, NoSpace):
        return NodeError(507, "no_space", str(exc) or "no space left on this node's drives",
                         extra={"writable_bytes": getattr(exc, "writable_bytes", 0)})
    if isinstance(exc, InvalidRange):
        return NodeError(416, "invalid_range", str(exc) or "range outside the record")
    if isinstance(exc, web.HTTPException):
        code = exc.reason.lower().replace(" ", "_") if exc.reason else "http_error"
        return NodeError(exc.status, code, exc.text or exc.reason or "")
    return None


def error_response(request: web.Request, exc: Exception) -> web.Response:
    """The JSON answer to a request that raised `exc` (an HTTPException of 400 or more, a
    store error, or a bug, which is logged with its traceback and answered 500)."""
    return _respond(request, refusal(exc, request.method, request.path))


def refusal(exc: BaseException, method: str, path: str) -> NodeError:
    """The NodeError to answer a request (`method` `path`, for the log) that raised `exc`:
    known refusals as they are, a vanished client as 400 client_gone, anything else a bug,
    logged with its traceback (call from an except block) and answered 500."""
    err = error_for(exc)
    if err is None and isinstance(exc, ConnectionError):
        log.debug("client went away during %s %s: %s", method, path, exc)
        err = NodeError(400, "client_gone", "client went away")
    if err is None:
        log.exception("internal error on %s %s", method, path)
        err = NodeError(500, "internal", f"internal error: {type(exc).__name__}")
    return err


def _respond(request: web.Request, err: NodeError) -> web.Response:
    resp = json_error(err.status, err.code, err.message, err.headers, err.extra)
    if request.body_exists and not request.content.at_eof():
        resp.force_close()
    return resp
