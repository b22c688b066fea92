"""The gateway's HTTP protocol for uvicorn: httptools, with a shutdown that does not sit out
idle TLS clients, a body path that copies less, and the connection limits of
gateway/server/httplimits.py.

Bodies. A body of one Content-Length is taken from the socket's reads past httptools (which
would copy every read into a new bytes object) and handed to the app in 1 MiB pieces aligned
on its start (GatewayCycle), each made with one join. The upload handlers ask for more
(`scope["extensions"]["zonegate.segments"]`): the rest of the body is read from the socket
straight into pooled 1 MiB buffers (the protocol is a buffered one) and handed out as
read-only memoryviews that nobody writes while they are held (SegmentPool). Per GiB written
through the CRT client this took the gateway from ~4.9 to ~4.5 CPU-s (paired runs, noisy).

Limits. httptools gathers a header's value across reads by concatenation before it calls
`on_header`, so a 64 MiB head cost seconds of a worker and hundreds of MB. Here the bytes fed
to the parser while a head is incomplete are counted in `data_received`, and a head longer
than the limits (plus one read) is refused there; the exact limits (header bytes, header
count, request line) are checked in the parser callbacks, which stop the parser by raising.
Refusals are S3 XML errors written by the protocol itself, followed by a lingering close (the
write side is shut, what the client still sends is read and dropped for LINGER_S), so that a
client still sending its body reads the answer instead of a connection reset. A refusal that
arrives while the app is on the request (a stalled body) first cuts the app off: its
`receive()` then ends with `http.disconnect` (the upload is aborted, nothing is stored) and its
answer is dropped.

At SIGTERM uvicorn closes every idle keep-alive connection and waits until each one is gone.
Over plain TCP that is immediate. Over TLS, close() flushes, sends close_notify and then waits
for the client's own close_notify, for up to asyncio's SSL shutdown timeout of 30 s, and pooled
clients (boto3/urllib3, the aws cli) never send it, because nobody reads an idle pooled socket.
So every worker waited the full 30 s and `zonegate dev` SIGKILLed the gateway.

Here a closing TLS connection is aborted once the client's kernel has acknowledged every byte
we sent, close_notify included (the socket's send queue, SIOCOUTQ, is empty): all that is then
missing is the client's courtesy reply, and nothing of ours can be lost. Requests in flight are
not touched: they finish, then close the same way, or meet `timeout_graceful_shutdown`.
"""

from __future__ import annotations

import asyncio
import fcntl
import re
import secrets
import struct
import termios
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from gateway.s3.errors import S3Error, error_xml
from gateway.server.httpbody import BODY_SEGMENT, POOL, BodyChunks, GatewayCycle
from gateway.server.httplimits import MAX_BODY_BYTES, HttpLimits

POLL_S = 0.05  # delivery is acknowledged within a round trip; this only bounds the extra wait
# uvicorn stops reading a connection once 64 KiB of its body wait for the app, so a fast upload
# went through a pause/resume (and an event-loop turn) per 64 KiB while the gateway hashed and
# encoded the last piece. Letting 1 MiB (one erasure segment) wait instead: a single curl PUT of
# 1 GiB through 12 nodes 313-334 -> 341-392 MB/s, interleaved A/B. Memory: this much per upload.
BODY_BUFFER = 1024 * 1024
# Reads not into a body segment (heads, bodies the app did not ask segments for) go into one
# buffer per process and are copied out at once, as uvloop itself does with its own buffer.
SCRATCH = 256 * 1024
_SCRATCH_VIEW = memoryview(bytearray(SCRATCH))
# After a refusal, what the client still sends is read and dropped for this long, or up to
# this many bytes, so that its kernel does not get a reset before the client read the answer.
LINGER_S = 2.0
LINGER_BYTES = 4 * 1024 * 1024
# Bytes of a head beyond the url and header limits: method, version, line ends, white space.
HEAD_SLACK = 1024
DIGITS = re.compile(rb"[0-9]{1,20}")
LENGTH_HEADERS = (b"content-length", b"x-amz-decoded-content-length")


def unacked_bytes(transport: object) -> int | None:
    """Bytes of this connection's socket the peer has not acknowledged yet (None: unknown)."""
    sock = transport.get_extra_info("socket")  # type: ignore[attr-defined]
    if sock is None:
        return None
    try:
        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    except OSError:
        return None
    return int(struct.unpack("i", out)[0])


class _Refused(Exception):
    """Raised in a parser callback to stop the parser; data_received answers the refusal."""


def too_large(what: str, limit: int) -> S3Error:
    return S3Error("RequestHeaderSectionTooLarge",
                   f"Your request {what} exceeds the maximum allowed size.",
                   MaxSizeAllowed=limit)


class GatewayHttpProtocol(asyncio.BufferedProtocol):
    """The gateway's protocol for uvicorn (`http=...:GatewayHttpProtocol`): a buffered
    protocol, so that a body can be read from the socket straight into its segments (uvloop
    reads into the buffer given, instead of into its own and then a new bytes object). uvloop
    treats a protocol as buffered only if it is no asyncio.Protocol, and uvicorn's is one: so
    this one holds the HTTP protocol (GatewayHttpCore) and passes every event on to it."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.http = GatewayHttpCore(config, server_state, app_state, _loop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.http.connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.http.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.http.eof_received()

    def pause_writing(self) -> None:
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self.http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.http.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.http.buffer_updated(nbytes)

    def data_received(self, data: bytes) -> None:  # a transport that is not buffered
        self.http.data_received(data)


class GatewayHttpCore(HttpToolsProtocol):
    """uvicorn's httptools protocol; the body buffer, the shutdown of TLS connections and the
    limits of gateway/server/httplimits.py differ."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # `zonegate serve` puts the limits on uvicorn's Config (pickled into each worker).
        self.limits: HttpLimits = getattr(config, "zonegate_limits", None) or HttpLimits()
        lim = self.limits
        self._head_raw_limit = lim.max_url_bytes + lim.max_header_bytes + HEAD_SLACK
        self._in_head = True   # the next bytes belong to a request head
        self._in_body = False  # between the end of a head and the end of its body
        self._head_raw = 0     # bytes fed to the parser since the head began (at least)
        self._header_bytes = 0
        self._header_count = 0
        self._last_rx = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._refusal: S3Error | None = None
        self._lingering = False
        # Body bytes of the current request the parser has not been given: a body of known
        # length is taken from the reads here instead (see data_received). 0: none.
        self._body_left = 0
        self._seg: bytearray | None = None  # the segment a body is read into, if asked for
        self._seg_view: memoryview | None = None
        self._seg_fill = 0
        self._into_seg = False  # the last get_buffer gave the segment
        self.url = b""  # uvicorn sets it at the first request; the timers look at it earlier

    # -- timers
    def _arm(self, delay: float, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if not self._in_head or self._lingering or self.transport.is_closing():
            return
        if self._head_raw or self.url or self.headers:
            self._refuse(S3Error("RequestTimeout"))
        else:  # nothing sent at all: just hang up, as the keep-alive timeout does
            self.transport.close()

    def _body_check(self) -> None:
        self._timer = None
        if not self._in_body or self._lingering or self.transport.is_closing():
            return
        now = self.loop.time()
        cycle = self.cycle
        if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
            self._last_rx = now  # the gateway holds the body back, not the client
        idle = now - self._last_rx
        timeout = self.limits.body_timeout_seconds
        if idle >= timeout:
            self._refuse(S3Error("RequestTimeout"), current=True)
        else:
            self._arm(timeout - idle, self._body_check)

    # -- refusals
    def _stop(self, err: S3Error) -> _Refused:
        self._refusal = err
        return _Refused(err.code)

    def _refuse(self, err: S3Error, *, current: bool = False) -> None:
        """Answer `err` on this connection and close it (see the module docstring). `current`:
        the refusal is about the request the app has (else about a head not yet passed on)."""
        self._disarm()
        self._in_head = self._in_body = False
        self._body_left = 0
        self._drop_segment()
        t = self.transport
        cycle = self.cycle
        if cycle is not None and (current or not cycle.response_complete):
            if cycle.response_started:  # too late for another answer
                t.close()
                return
            cycle.disconnected = True  # the app's receive() ends, its answer is dropped
            cycle.message_event.set()
        if t.is_closing():
            return
        rid = secrets.token_hex(8).upper()
        method = self.parser.get_method() if self.url and self.parser is not None else None
        body = b"" if method == b"HEAD" else error_xml(err, rid)
        head = [STATUS_LINE[err.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/xml\r\n"
                    b"content-length: %d\r\nx-amz-request-id: %s\r\nconnection: close\r\n\r\n"
                    % (len(body), rid.encode()))
        head.append(body)
        t.write(b"".join(head))
        self._lingering = True
        self._head_raw = 0  # now: bytes dropped
        self.flow.resume_reading()  # keep reading, and dropping, what the client still sends
        if t.can_write_eof():
            t.write_eof()
            self._arm(LINGER_S, t.close)
        else:
            t.close()

    # -- protocol and parser callbacks
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(S3Error("SlowDown"))
            return
        self._arm(self.limits.header_timeout_seconds, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._drop_segment()
        if self._send_timer is not None:
            self._send_timer.cancel()
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:
        """The client ended its side of the connection. Inside a request body, the body is
        shorter than its Content-Length: answer IncompleteBody (the app's request ends, its
        answer is dropped, nothing is stored), as S3 does, on the half still open."""
        if self._in_body and not self._lingering and not self.transport.is_closing():
            self._refuse(S3Error("IncompleteBody"), current=True)
            return True  # keep the transport: _refuse writes the answer, then closes
        return None

    def pause_writing(self) -> None:
        # The client reads slower than we send; one that reads nothing for the send timeout
        # is cut off, so that its download does not hold the worker's node connections.
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.send_timeout_seconds,
                                                    self._send_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        if self.flow.write_paused and not self.transport.is_closing():
            self.logger.info("closing a connection whose client read nothing for %gs",
                             self.limits.send_timeout_seconds)
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._head_raw += len(data)
            if self._head_raw > LINGER_BYTES:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        self._last_rx = self.loop.time()
        if self._body_left:
            data = self._body_received(data)
            if not data:
                return
        if self._in_head:
            self._head_raw += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            err, self._refusal = self._refusal, None
            if err is None:
                self.logger.warning("Invalid HTTP request received.")
                err = S3Error("InvalidRequest", "Invalid HTTP request received.")
            self._refuse(err)
            return
        if self._in_head and self._head_raw > self._head_raw_limit:
            # Still no end of the head: refuse before httptools gathers any more of it.
            if len(self.url) > self.limits.max_url_bytes or not self.headers:
                self._refuse(too_large("line", self.limits.max_url_bytes))
            else:
                self._refuse(too_large("header section", self.limits.max_header_bytes))

    # -- reads: into a body segment or the scratch buffer
    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._seg_view
        if view is not None and self._body_left and not self._lingering:
            fill = self._seg_fill
            self._into_seg = True
            # never past this body: the next request's bytes go through the parser
            return view[fill:fill + min(BODY_SEGMENT - fill, self._body_left)]
        self._into_seg = False
        return _SCRATCH_VIEW

    def buffer_updated(self, nbytes: int) -> None:
        if not self._into_seg:
            self.data_received(bytes(_SCRATCH_VIEW[:nbytes]))
            return
        self._into_seg = False
        self._unset_keepalive_if_required()
        self._last_rx = self.loop.time()
        self._seg_fill += nbytes
        self._body_left -= nbytes
        if self._seg_fill == BODY_SEGMENT or not self._body_left:
            self._hand_segment()
        if not self._body_left:
            self._end_taken_body()

    def _new_segment(self) -> None:
        self._seg = POOL.get()
        self._seg_view = memoryview(self._seg)
        self._seg_fill = 0

    def _drop_segment(self) -> None:
        self._seg = self._seg_view = None
        self._seg_fill = 0

    def _hand_segment(self) -> None:
        view, fill = self._seg_view, self._seg_fill
        self._drop_segment()
        if view is not None and fill:
            self._deliver(view[:fill].toreadonly())
        if self._body_left:
            self._new_segment()

    def segments_wanted(self, cycle: RequestResponseCycle) -> bool:
        """The app asks for the rest of this request's body as read-only views of whole
        segments (see SegmentPool), read straight into them from the socket; True if so
        (a body of known length, still arriving; ask before the first receive(), so that
        the segments are aligned on the body's start). What already waits is copied in."""
        pending = cycle.body
        if (cycle is not self.cycle or not self._body_left or self._seg_view is not None
                or self._lingering or cycle.response_complete):
            return False
        cycle.body = BodyChunks(views=True)
        self._new_segment()
        for c in getattr(pending, "chunks", (pending,)):
            self._fill(memoryview(c))
        return True

    def _fill(self, src: memoryview) -> None:
        """Copy body bytes into segments, handing each one on once full."""
        pos, n = 0, len(src)
        while pos < n and self._seg_view is not None:
            k = min(BODY_SEGMENT - self._seg_fill, n - pos)
            self._seg_view[self._seg_fill:self._seg_fill + k] = src[pos:pos + k]
            self._seg_fill += k
            pos += k
            if self._seg_fill == BODY_SEGMENT:
                self._hand_segment()

    def _copy_into_segments(self, data: bytes) -> bytes:
        take = min(len(data), self._body_left)
        self._body_left -= take  # first: a segment filled now is the last one if none left
        self._fill(memoryview(data)[:take])
        if not self._body_left:
            self._hand_segment()
            self._end_taken_body()
        return data[take:]

    def _end_taken_body(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.on_message_complete()

    def _body_received(self, data: bytes) -> bytes:
        """Body bytes of a request with a Content-Length, taken as they were read: httptools
        would copy each read into a new bytes object for on_body. When the body is complete,
        the request ends here and a new parser takes the bytes after it (a pipelined request):
        the old one still waits for the body it was not given. Returns those bytes."""
        if self._seg_view is not None:  # segments were asked for: a transport not buffered
            return self._copy_into_segments(data)
        n = len(data)
        left = self._body_left
        if n <= left:
            self._body_left = left - n
            self._deliver(data)
            rest = b""
        else:
            view = memoryview(data)
            self._body_left = 0
            self._deliver(view[:left])
            rest = data[left:]
        if not self._body_left:
            self._end_taken_body()
        return rest

    def _take_body(self) -> None:
        """After the head: a body of one valid Content-Length, no Transfer-Encoding and no
        upgrade is taken from the reads by data_received (its first bytes, read with the head,
        the parser delivers)."""
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                m = DIGITS.fullmatch(value.strip())
                if length is not None or m is None:
                    return
                length = int(m.group())
            elif name == b"transfer-encoding" or name == b"upgrade":
                return
        if length and not self.parser.should_upgrade():
            self._body_left = length

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._header_bytes = self._header_count = 0
        if self._timer is None:  # the timer armed at connect keeps running
            self._arm(self.limits.header_timeout_seconds, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_url_bytes:
            raise self._stop(too_large("line", self.limits.max_url_bytes))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4  # ": " and the line end
        lim = self.limits
        if self._header_count > lim.max_header_count or self._header_bytes > lim.max_header_bytes:
            raise self._stop(too_large("header section", lim.max_header_bytes))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        for name, value in self.headers:
            if name in LENGTH_HEADERS:
                m = DIGITS.fullmatch(value.strip())
                if m is not None and int(m.group()) > MAX_BODY_BYTES:
                    # Refused before a byte of the body is awaited; the app would say the same.
                    raise self._stop(S3Error("EntityTooLarge", ProposedSize=int(m.group()),
                                             MaxSizeAllowed=MAX_BODY_BYTES))
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and type(cycle) is RequestResponseCycle:
            cycle.__class__ = GatewayCycle  # a subclass without an __init__ of its own
        self._take_body()
        if self._body_left and cycle is not None:
            self.scope.setdefault("extensions", {})["zonegate.segments"] = (
                lambda: self.segments_wanted(cycle))
        self._in_body = True
        self._last_rx = self.loop.time()
        self._arm(self.limits.body_timeout_seconds, self._body_check)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_left = 0
        self._drop_segment()
        self._in_body = False
        self._disarm()
        self._in_head = True
        self._head_raw = 0

    def on_body(self, body: bytes) -> None:
        if self._body_left:  # the parser's share of a body that data_received takes
            self._body_left -= len(body)
        self._deliver(body)

    def _deliver(self, body: bytes | memoryview) -> None:
        # uvicorn's own on_body, with BODY_BUFFER for its HIGH_WATER_LIMIT, and BodyChunks for
        # the bytearray its cycle starts with and gets again after each receive().
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        pending = cycle.body
        if type(pending) is not BodyChunks:
            if pending:  # never, as uvicorn is today: keep bytes already there, in order
                body = bytes(pending) + body
            pending = cycle.body = BodyChunks()
        pending += body
        if pending.size > BODY_BUFFER:
            self.flow.pause_reading()
        cycle.message_event.set()

    def shutdown(self) -> None:
        super().shutdown()  # closes an idle connection, or marks an in-flight one to close
        if self.scheme == "https":
            self._abort_once_delivered()

    def _abort_once_delivered(self) -> None:
        if self not in self.connections:  # connection_lost has run: nothing left to do
            return
        t = self.transport
        if t.is_closing() and t.get_write_buffer_size() == 0 and unacked_bytes(t) == 0:
            t.abort()
            return
        self.loop.call_later(POLL_S, self._abort_once_delivered)
