"""The node's lean path for its hot request: `PUT /v1/records/<id>`, served without aiohttp.

Why: every part the gateway stores becomes one ~1 MiB PUT to each of ten nodes, arriving paced
(~20 MB/s per node), and on aiohttp each such PUT costs its C parser handing every socket read
to a StreamReader that wakes the handler (10-17 wake-ups per body), a Request with its
properties, routing, a middleware and a Response object. Here the listening socket gets this
module's protocol: it reads the request head itself and, for the one request shape it knows,
gathers the body and wakes the handler only when a whole record chunk (`record.MAX_CHUNK`) or
the end of the body is buffered (2-3 wake-ups per PUT), then writes the JSON answer as one
buffer. The work that matters is shared with the aiohttp path, not copied: the auth check and
its one replay cache (`auth.AuthCheck`), `handlers.put_params` and `handlers.store_put`
(`PutBody`, `_check_room`, the zone log's durable put), the JSON errors (`errors.refusal`), the
request metrics (`NodeMetrics.count`, labels "PUT"/"record_put"/status) and the draining and
in-flight accounting of `NodeState`.

What takes this path: a request whose head is exactly `PUT /v1/records/<valid id>[?k=v&...]
HTTP/1.1` (unreserved characters only, so the raw path and query are what aiohttp would
decode), at most 64 headers of at most 8190 bytes each, printable ASCII (no second
Content-Length, Transfer-Encoding or Connection),
framed by a decimal Content-Length or by `Transfer-Encoding: chunked` (the gateway's node
client streams its bodies chunked), with no `Expect` or `Upgrade` and a `Connection` of
keep-alive or close. Every other request is aiohttp's, so it is answered (and bad input
refused) exactly as before this path existed:
- a well-formed HTTP/1.1 request framed by Content-Length (or bodiless: GET, HEAD, DELETE,
  health checks, 100-continue PUTs) is lent to an aiohttp RequestHandler on this connection
  (`Delegate`), which keeps it while requests are not lean PUTs (or it is idle: aiohttp's
  keep-alive timeout applies) and lets go, as if the connection were lost but without closing
  it, when the next lean PUT comes. The gateway's node client pools its connections for every
  kind of request (health checks every few seconds, deletes of overwritten parts), so without
  this each connection would soon be aiohttp's;
- anything else (HTTP/1.0, chunked non-PUTs, odd or oversized heads) hands the connection to
  aiohttp for good, with the bytes seen so far, before anything of that request is consumed.

Bounded memory: the body is buffered up to 2 record chunks (as aiohttp's stream reader with the
node's 1 MiB read buffer), then the socket is paused until the handler takes a chunk; bytes of a
next (pipelined) request wait in a buffer of at most 64 KiB. A chunked body whose framing
breaks after the head is refused 400 bad_body and the connection closed (aiohttp answered a
plain-text 400 when the bad framing came in the same read as the head, and left the request
hanging when it came later).

Not done: reading the body into record-chunk buffers (a BufferedProtocol) would save the
join of each chunk, but the zone log's writer copies any buffer that is not immutable bytes,
so the copy would only move.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from zonestore.logsetup import take_request_id
from zonestore.node.errors import error_body, refusal
from zonestore.node.handlers import put_params, store_put
from zonestore.node.leanbody import HIGH_WATER, LeanBody
from zonestore.node.leanhead import (
    CHUNK_SIZE_RE,
    MAX_HEADERS,
    MAX_LINE,
    TOKEN_RE,
    VALUE_RE,
    LeanRequest,
    bodiless_other,
    parse_head,
)
from zonestore.node.state import NodeState
from zonestore.nodeauth import UNSIGNED

log = logging.getLogger("zonestore.node")

MAX_HEAD = 64 * 1024  # a head not complete within this goes to aiohttp (which may refuse it)
MAX_PENDING = 64 * 1024  # bytes of a next request buffered while a PUT is being answered
KEEPALIVE_TIMEOUT = 75.0  # aiohttp's: an idle keep-alive connection is closed after this
# After an answer given before the body was read (a 507, a refusal), the rest of the body is
# read and dropped (then no longer read) for a while before the connection closes (a
# "lingering close"): closed with unread bytes, the kernel resets it, and a client still
# sending never reads the answer.
LINGER_BYTES = 8 * 1024 * 1024
LINGER_SECONDS = 2.0
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_CLOSE = "Connection: close\r\n"

# Connection modes.
_HEAD, _BODY, _WAIT, _AIO, _GONE, _LINGER = range(6)
# Chunked-body states.
_C_SIZE, _C_DATA, _C_CRLF, _C_TRAILER = range(4)


class BodyFramingError(ValueError):
    """The chunked framing of a body broke after its head was accepted."""


class Delegate:
    """The transport an aiohttp RequestHandler gets when the lean path lends it requests: the
    connection's own. The node's middleware calls `answered()` once it has written a lent
    request's whole answer, so that the lean path may read the next request."""

    def __init__(self, lean: LeanProtocol, transport: asyncio.Transport) -> None:
        self._lean = lean
        self._transport = transport
        self.answered_all = True
        # What aiohttp calls per answer, bound here rather than looked up by __getattr__.
        self.write = transport.write
        self.writelines = transport.writelines
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def answered(self) -> None:
        self.answered_all = True
        if self._lean._buf:  # a next request came early: read it once aiohttp is done
            self._lean.loop.call_soon(self._lean._aio_next)


class LeanServer:
    """The node's protocol factory (`loop.create_server(LeanServer(...), sock=...)`)."""

    def __init__(self, state: NodeState, handler_factory: Callable[[], asyncio.Protocol]) -> None:
        self.state = state
        self.handler_factory = handler_factory  # aiohttp's web.Server: a RequestHandler each
        self.loop = asyncio.get_running_loop()
        self.connections: set[LeanProtocol] = set()
        self.served = 0  # requests answered on the lean path
        self.delegated = 0  # requests lent to aiohttp on a lean connection
        self.lent_handlers = 0  # aiohttp RequestHandlers made for them
        self.handed_off = 0  # connections given to aiohttp for good

    def __call__(self) -> LeanProtocol:
        return LeanProtocol(self)

    def close(self) -> None:
        """Close every connection still on the lean path (at shutdown, once in-flight requests
        are answered)."""
        for proto in list(self.connections):
            proto.close()


class LeanProtocol(asyncio.Protocol):
    """One connection while it serves lean PUTs (see the module docstring)."""

    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self._remote: str | None = None
        self._mode = _HEAD
        self._buf = bytearray()  # an incomplete head, or bytes after the current request
        self._req: LeanRequest | None = None
        self._body: LeanBody | None = None
        self._chunked = False
        self._remaining = 0  # body bytes still to come (Content-Length) or in this chunk
        self._cstate = _C_SIZE
        self._line = bytearray()  # an incomplete chunk-size or trailer line
        self._trailers = 0
        self._paused = False
        self._idle: asyncio.TimerHandle | None = None
        self._linger_left = 0  # bytes still dropped before a lingering close (_LINGER)
        self._task: asyncio.Task | None = None
        self._aio: Any = None  # aiohttp's RequestHandler answering a request delegated to it
        self._aio_left = 0  # bytes of that request not yet passed to it
        self._delegate_tr: Delegate | None = None

    # -- transport events ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:  # as aiohttp does: answers go out at once, dead peers time out
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self._remote = peer[0] if isinstance(peer, tuple) and peer else None
        self.server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.server.connections.discard(self)
        self._cancel_idle()
        self._mode = _GONE
        self.transport = None
        if self._aio is not None:
            self._aio.connection_lost(exc)
            self._aio = None
        body = self._body
        if body is not None and not body.complete:
            body.set_exception(exc or ConnectionResetError("Connection lost"))

    def data_received(self, data: bytes) -> None:
        mode = self._mode
        if mode == _BODY:
            self._feed_body(data, 0)
        elif mode == _HEAD:
            self._cancel_idle()
            if self._buf:
                self._buf += data
                data = bytes(self._buf)
                self._buf = bytearray()
            self._on_head_bytes(data)
        elif mode == _AIO:
            if self._aio_left:
                self._feed_aio(data, 0)
            elif not self._buf and self._delegate_tr.answered_all:
                self._on_head_bytes(data)  # the next request, as it usually comes
            else:
                self._buf += data
                if len(self._buf) > MAX_PENDING:
                    self.pause()
                self._aio_next()
        elif mode == _WAIT:
            self._buf += data
            if len(self._buf) > MAX_PENDING:
                self.pause()
        elif mode == _LINGER:
            self._linger_left -= len(data)
            if self._linger_left <= 0:
                self.pause()  # closing with bytes unread would reset the answer away

    def eof_received(self) -> bool | None:
        # None lets the transport close; a body cut short then fails with "Connection lost" in
        # connection_lost, as on aiohttp.
        return self._aio.eof_received() if self._aio is not None else None

    def pause_writing(self) -> None:
        if self._aio is not None:  # a GET aiohttp streams must wait for the socket
            self._aio.pause_writing()

    def resume_writing(self) -> None:
        if self._aio is not None:
            self._aio.resume_writing()

    # -- flow control ----------------------------------------------------------------------

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and len(self._buf) <= MAX_PENDING \
                and (self._body is None or self._body.size < HIGH_WATER):
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm_idle(self) -> None:
        self._cancel_idle()
        self._idle = self.loop.call_later(KEEPALIVE_TIMEOUT, self._idle_timeout)

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_timeout(self) -> None:
        self._idle = None
        if self._mode == _HEAD:
            self.close()

    # -- request head ----------------------------------------------------------------------

    def _on_head_bytes(self, data: bytes) -> None:
        """`data` starts a request: serve it here, or give the connection to aiohttp."""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > MAX_HEAD:
                if self._aio is not None:
                    self._detach_aio()
                self._hand_off(data)
            elif self._aio is not None:
                self._buf += data  # aiohttp's keep-alive timeout applies meanwhile
            else:
                self._buf += data
                self._arm_idle()
            return
        if self._aio is not None and end == len(data) - 4 and bodiless_other(data):
            self._delegate(data, len(data))  # the GET after a GET: aiohttp's as it stands
            return
        req = parse_head(data[:end])
        if type(req) is int:
            self._delegate(data, end + 4 + req)
            return
        if self._aio is not None:
            self._detach_aio()
        if req is None:
            self._hand_off(data)
            return
        self._req = req
        self._body = req.body = LeanBody(self)
        self._chunked = req.declared is None
        self._remaining = req.declared or 0
        self._cstate = _C_SIZE
        self._trailers = 0
        self._mode = _BODY
        self._task = self.loop.create_task(self._serve(req))  # a reference keeps it alive
        if not self._chunked and self._remaining == 0:
            self._body_done(data, end + 4)
        else:
            self._feed_body(data, end + 4)

    def _hand_off(self, data: bytes) -> None:
        """Give the connection to aiohttp for good, `data` being what it has not seen."""
        self._mode = _GONE
        self.server.connections.discard(self)
        self.server.handed_off += 1
        self._cancel_idle()
        transport = self.transport
        if transport is None:
            return
        handler = self.server.handler_factory()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self.transport = None
        if data:
            handler.data_received(data)

    def _delegate(self, data: bytes, size: int) -> None:
        """Let aiohttp answer the request of `size` bytes at the start of `data` on this
        connection. Its RequestHandler stays while requests are not lean PUTs (and while the
        connection is idle: its keep-alive timeout applies); the next lean PUT detaches it."""
        self.server.delegated += 1
        if self._aio is None:
            self._mode = _AIO
            self._delegate_tr = Delegate(self, self.transport)
            self._aio = self.server.handler_factory()
            self._aio.connection_made(self._delegate_tr)
            self.server.lent_handlers += 1
        self._delegate_tr.answered_all = False
        self._aio_left = size
        self._feed_aio(data, 0)

    def _feed_aio(self, data: bytes, pos: int) -> None:
        n = len(data) - pos
        if n <= self._aio_left:
            self._aio_left -= n
            if n:
                self._aio.data_received(data if pos == 0 else data[pos:])
            return
        end = pos + self._aio_left
        if self._aio_left:
            self._aio.data_received(data[pos:end])
            self._aio_left = 0
        self._buf += memoryview(data)[end:]  # the next request waits for the answer
        if len(self._buf) > MAX_PENDING:
            self.pause()
        self._aio_next()

    def _aio_next(self) -> None:
        """Once aiohttp has answered the lent request, read the next one, if any."""
        if self._mode == _AIO and not self._aio_left and self._delegate_tr.answered_all \
                and self._buf and self.transport is not None:
            data, self._buf = bytes(self._buf), bytearray()
            if self._paused:
                self._paused = False
                self.transport.resume_reading()
            self._on_head_bytes(data)

    def _detach_aio(self) -> None:
        """The lent requests are answered and a lean one comes: aiohttp lets go (as if the
        connection were lost, except that it is not closed)."""
        aio, self._aio = self._aio, None
        aio.transport = None  # so that its connection_lost leaves the socket open
        aio.connection_lost(None)  # ends its request loop, unregisters it from aiohttp's server
        self._mode = _HEAD

    # -- request body ----------------------------------------------------------------------

    def _feed_body(self, data: bytes, pos: int) -> None:
        body = self._body
        n = len(data)
        if not self._chunked:
            left = n - pos
            if left <= self._remaining:
                self._remaining -= left
                if left:
                    body.feed(data if pos == 0 else memoryview(data)[pos:])
                if self._remaining == 0:
                    self._body_done(data, n)
            else:
                end = pos + self._remaining
                if self._remaining:
                    body.feed(memoryview(data)[pos:end])
                self._remaining = 0
                self._body_done(data, end)
            return
        while pos < n:
            if self._cstate == _C_DATA:
                take = min(self._remaining, n - pos)
                body.feed(data if take == n else memoryview(data)[pos:pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._cstate = _C_CRLF
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                self._line += data[pos:]
                if len(self._line) > MAX_LINE:
                    self._body_error("chunk line too long")
                return
            line = bytes(self._line) + data[pos:nl + 1] if self._line else data[pos:nl + 1]
            self._line = bytearray()
            pos = nl + 1
            if len(line) > MAX_LINE or not line.endswith(b"\r\n"):
                self._body_error("chunk line not ended by CRLF")
                return
            line = line[:-2]
            if self._cstate == _C_SIZE:
                m = CHUNK_SIZE_RE.fullmatch(line)
                if m is None:
                    self._body_error(f"invalid chunk size {line[:40]!r}")
                    return
                size = int(m.group(1), 16)
                self._cstate = _C_DATA if size else _C_TRAILER
                self._remaining = size
            elif self._cstate == _C_CRLF:
                if line:
                    self._body_error("chunk data not followed by CRLF")
                    return
                self._cstate = _C_SIZE
            else:  # trailer fields, then the blank line that ends the body
                if not line:
                    self._body_done(data, pos)
                    return
                self._trailers += 1
                name, sep, value = line.partition(b":")
                if not sep or self._trailers > MAX_HEADERS or TOKEN_RE.fullmatch(name) is None \
                        or VALUE_RE.fullmatch(value) is None:
                    self._body_error("invalid trailer")
                    return

    def _body_done(self, data: bytes, pos: int) -> None:
        self._mode = _WAIT
        self._body.feed_eof()
        if pos < len(data):
            self._buf += memoryview(data)[pos:]
            if len(self._buf) > MAX_PENDING:
                self.pause()

    def _body_error(self, why: str) -> None:
        self._mode = _GONE  # nothing more is read from this connection: it closes after
        self._body.set_exception(BodyFramingError(f"bad chunked body: {why}"))

    # -- the request -----------------------------------------------------------------------

    async def _serve(self, req: LeanRequest) -> None:
        state = self.server.state
        start = time.perf_counter()
        take_request_id(req.headers)
        status = 500
        close = not req.keep_alive
        try:
            if state.draining:
                status, text, headers = 503, error_body("shutting_down",
                                                        "the node is shutting down"), {}
                close = True
            else:
                state.inflight += 1
                try:
                    try:
                        body_hash = state.auth.check("PUT", req.raw_path, req.query,
                                                     req.headers, self._remote)
                        rid, length, stream = put_params(req.raw_id, req.headers, req.declared,
                                                         state)
                        answer = await store_put(state, rid, length, stream, req.body,
                                                 body_hash or UNSIGNED)
                        status, text, headers = 201, json.dumps(answer), {}
                    except Exception as exc:  # noqa: BLE001 - every failure becomes a response
                        err = refusal(exc, "PUT", req.raw_path)
                        status, text, headers = err.status, error_body(err.code, err.message,
                                                                      err.extra), \
                            err.headers
                finally:
                    state.inflight -= 1
            if not req.body.complete or req.body.size:
                close = True  # the rest of an unwanted body is not read
            self._respond(status, text, headers, close)
            if close and self._mode == _BODY:
                self._linger()
        except Exception:  # noqa: BLE001 - a bug here must not leave the connection hanging
            log.exception("internal error answering PUT %s", req.raw_path)
            close = True
            self.close()
        finally:
            state.metrics.count("PUT", "record_put", status, start)
            self.server.served += 1
            self._req = self._body = self._task = None
        if not close:
            self._next()

    def _respond(self, status: int, text: str, headers: dict[str, str], close: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = text.encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())  # aiohttp's order
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n{extra}"
                f"Content-Type: application/json; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nDate: {rfc822_formatted_time()}\r\n"
                f"Server: {SERVER_SOFTWARE}\r\n{_CLOSE if close else ''}\r\n")
        transport.write(head.encode("latin-1") + body)
        if close and self._mode != _BODY:
            self._mode = _GONE
            transport.close()

    def _linger(self) -> None:
        """Answered while the body still comes: drop what arrives (LINGER_BYTES at most, then
        stop reading), and close after LINGER_SECONDS. A close with bytes unread sends a reset,
        and a client still writing then loses the answer before it reads it: the pause stalls
        its writes instead, so it waits, and reads the answer."""
        self._mode = _LINGER
        self._linger_left = LINGER_BYTES
        self._body = None
        self._cancel_idle()
        self._idle = self.loop.call_later(LINGER_SECONDS, self.close)
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _next(self) -> None:
        """The PUT is answered and the connection stays: read the next request."""
        if self.transport is None or self._mode != _WAIT:
            return
        self._mode = _HEAD
        data, self._buf = bytes(self._buf), bytearray()
        self.resume()
        if data:
            self._on_head_bytes(data)
        else:
            self._arm_idle()

