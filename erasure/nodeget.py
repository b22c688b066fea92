"""Streamed GETs of record ranges from one node over plain HTTP/1.1 connections, without
aiohttp's client: the transport under `nodeclient.RecordReader` (docs/design.md, "Read path").

Why: every 8 MiB a client reads becomes one ~1 MiB ranged GET to each of k=8 nodes, so the
gateway makes ~1000 node GETs per GiB read, and aiohttp's client spent ~0.55 ms of CPU on each
(building the request, its timers and tracing, the parser feeding a StreamReader chunk by chunk,
small socket reads). Here a request is one write of a prepared head, and the answer's body is
received straight into buffers of up to BODY_CHUNK bytes (a BufferedProtocol: the socket reads
into the memory whose views the reader hands to the decoder, no copy in between, and few large
reads): ~0.3 ms per such GET (bench/README.md, "CPU per byte through the CRT client").

What it speaks: GETs, and the streamed PUTs of erasure/nodeput.py (a chunked body sent on the
same kind of connection, `begin`/`write_chunk`/`drain`/`write_end`); the answer must be
HTTP/1.x with a Content-Length (the node sends one on every answer; an answer without one is
read to the connection's end, and only an error may be framed so). Connections are kept alive
in a per-node pool while idle for at most KEEPALIVE_TIMEOUT (below the node's), at most LIMIT
in use at once (more wait for one: our own queue, not the node's fault, so not timed); a pooled
connection the node closed meanwhile is replaced once, before anything of the answer came.
Memory stays bounded per stream: reading pauses while WINDOW bytes received wait for the
reader, so a stream holds at most WINDOW + BODY_CHUNK (3 MiB; aiohttp's client paused at ~128
KiB plus its 256 KiB read buffer). A smaller window costs a pause and resume of the socket per
fragment GET (a node's answer to a part-aligned 8 MiB GET is 1,049,216 bytes), and smaller
receive buffers more, smaller reads: 256 KiB buffers cost ~0.1 ms more CPU per such GET than 1
MiB ones.

Timeouts (`stall`, the node timeout): connecting, every wait for a PUT body's writes to drain,
and every wait for more of the answer, each at most that long (no progress for that long:
TimeoutError); the caller turns them into NodeUnavailable.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import sys
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from multidict import CIMultiDict

# aiohttp.web closes idle keep-alive connections after 75 s, uvicorn after 5 s: stay below both,
# or a reused connection fails with "Cannot write to closing transport". The node session
# (nodeclient.make_session) uses the same two settings.
KEEPALIVE_TIMEOUT = 4.0
LIMIT = 64               # connections in use per node at once
BODY_CHUNK = 1024 * 1024  # most body bytes received into one buffer
WINDOW = 2 * BODY_CHUNK   # received and not yet taken: reading pauses above this
HEAD_READ = 16 * 1024     # read size while a head is incomplete
MAX_HEAD = 64 * 1024      # an answer's head larger than this is a protocol error
MAX_ERROR_BODY = 1024 * 1024  # an error answer's body larger than this is cut short

_IDLE, _HEAD, _BODY, _DONE = range(4)

# asyncio's selector transport gained a writelines in 3.12.0 that could send buffers out of
# order until 3.12.9 / 3.13.2 (aiohttp joins them there too); uvloop's, the gateway's, is a
# writev. Before 3.12 the inherited writelines joins anyway.
JOIN_WRITES = (3, 12) <= sys.version_info[:3] < (3, 12, 9) or \
    (3, 13) <= sys.version_info[:3] < (3, 13, 2)


class Lost(ConnectionError):
    """The connection ended (or broke) before the answer was complete."""


class ProtocolError(ConnectionError):
    """The node's answer is not HTTP/1.x as expected (a bad head, no framing for a body)."""


class Answer:
    """An answer's status line and headers (case-insensitive names)."""

    __slots__ = ("status", "reason", "headers", "length")

    def __init__(self, status: int, reason: str, headers: CIMultiDict[str],
                 length: int | None) -> None:
        self.status, self.reason, self.headers, self.length = status, reason, headers, length


def _parse_head(raw: bytes) -> Answer:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"bad status line {lines[0][:100]!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"bad header line {line[:100]!r}")
        headers.add(name, value.strip(" \t"))
    length: int | None = None
    cl = headers.getall("Content-Length", [])
    if len(set(cl)) > 1 or (cl and not cl[0].isdigit()):
        raise ProtocolError(f"bad Content-Length {cl!r}")
    if cl:
        length = int(cl[0])
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        raise ProtocolError("chunked answers are not expected from a node")
    return Answer(int(code), reason, headers, length)


class GetProtocol(asyncio.BufferedProtocol):
    """One connection: sends a request, receives its answer's head and then its body into
    buffers the reader takes views of (`take`)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False      # served an earlier request
        self.idle_since = 0.0
        self._state = _IDLE
        self._hbuf = bytearray(HEAD_READ)
        self._head = bytearray()
        self._answer: Answer | None = None
        self._until_close = False  # a body framed by the connection's end
        self._remaining = 0        # body bytes still to receive
        self._cur: bytearray | None = None
        self._fill = 0
        self._ready: collections.deque[memoryview] = collections.deque()
        self._buffered = 0         # received, not yet taken
        self._want = 0             # bytes the reader waits for
        self._paused = False
        self._keep = True          # reusable once the answer is complete
        self._sent = True          # the whole request went out (a PUT's body may not have)
        # what of a streamed PUT is not written yet: its head, small chunks (sent with the next)
        self._held: list[bytes | memoryview] = []
        self._wpaused = False      # the transport's buffer is above its high-water mark
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _BODY and self._until_close:
            self._finish()
        elif self._state in (_HEAD, _BODY) and self._error is None:
            self._error = Lost(f"connection lost mid-answer ({exc or 'closed by the node'})")
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close our side too: connection_lost follows

    def get_buffer(self, sizehint: int) -> memoryview | bytearray:
        if self._state != _BODY or self._until_close:
            return self._hbuf
        cur = self._cur
        if cur is None or self._fill == len(cur):
            # a new buffer, never reused: the views handed out keep the old ones alive
            cur = self._cur = bytearray(min(BODY_CHUNK, self._remaining))
            self._fill = 0
        return memoryview(cur)[self._fill:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._state == _BODY and not self._until_close:
            assert self._cur is not None
            start = self._fill
            self._fill += nbytes
            self._got(memoryview(self._cur)[start:self._fill])
            return
        data = memoryview(self._hbuf)[:nbytes]
        if self._state == _HEAD:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD:
                    self._fail(ProtocolError("answer head too large"))
                return
            try:
                self._answer = _parse_head(bytes(self._head[:end]))
            except ProtocolError as e:
                self._fail(e)
                return
            rest = bytes(self._head[end + 4:])
            self._head = bytearray()
            self._start_body()
            if rest:
                self._body_bytes(memoryview(rest))
            self._wake()
        elif self._state == _BODY:  # framed by the connection's end (errors only)
            self._body_bytes(memoryview(bytes(data)))
        else:  # bytes nobody asked for: this connection cannot be trusted again
            self._keep = False
            self._abort()

    def pause_writing(self) -> None:  # a GET's head is small; a PUT's body waits (drain)
        self._wpaused = True

    def resume_writing(self) -> None:
        self._wpaused = False
        self._wake()

    # -- the body ----------------------------------------------------------------------------

    def _start_body(self) -> None:
        a = self._answer
        assert a is not None
        if a.headers.get("Connection", "").lower() == "close":
            self._keep = False
        if a.length is None:
            if 200 <= a.status < 300:
                self._fail(ProtocolError("a node answer without Content-Length"))
                return
            self._until_close = True
            self._keep = False
            self._remaining = MAX_ERROR_BODY
            self._state = _BODY
            return
        self._remaining = a.length
        self._state = _BODY
        if a.length == 0:
            self._finish()

    def _body_bytes(self, view: memoryview) -> None:
        """Body bytes that did not arrive in a body buffer (with the head, or unframed)."""
        if len(view) > self._remaining:
            if not self._until_close:
                self._keep = False  # more than announced: not reusable
            view = view[:self._remaining]
        if view:
            self._got(view)

    def _got(self, view: memoryview) -> None:
        self._ready.append(view)
        self._buffered += len(view)
        self._remaining -= len(view)
        if self._remaining <= 0:
            self._finish()
        elif self._buffered >= WINDOW and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        if self._buffered >= self._want or self._state == _DONE or self._paused:
            self._wake()  # the reader wakes once for all it asked for, not for every read

    def _finish(self) -> None:
        self._state = _DONE
        self._cur = None

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._keep = False
        self._abort()
        self._wake()

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self, stall: float) -> None:
        """Until something happens on this connection (more bytes, its end, an error), at
        most `stall` seconds: TimeoutError then."""
        w = self._waiter = self.loop.create_future()
        timer = self.loop.call_later(stall, _time_out, w)
        try:
            await w
        finally:
            timer.cancel()
            self._waiter = None

    # -- the reader's side -------------------------------------------------------------------

    def send(self, head: bytes) -> None:
        self._start(head)
        assert self.transport is not None  # (never paused here: reads pause mid-body only)
        self.transport.write(head)

    def _start(self, head: bytes) -> None:
        self._state = _HEAD
        self._answer = None
        self._until_close = False
        self._ready.clear()  # what the last reader left untaken
        self._buffered = 0
        self._want = 0
        self._sent = True
        self._held = []

    # -- a streamed request body (erasure/nodeput.py) -----------------------------------------

    def begin(self, head: bytes) -> None:
        """Start a request whose chunked body follows: the head goes out with its first
        chunk (one wake-up of the node for both)."""
        self._start(head)
        self._sent = False
        self._held = [head]

    @property
    def answered(self) -> bool:
        """The node answered (or the connection ended or failed): sending more is pointless."""
        return self._answer is not None or self._error is not None or self.closed

    def write_chunk(self, pieces: list[bytes | memoryview], size: int, hold: bool = False
                    ) -> None:
        """One HTTP chunk of `pieces` (`size` bytes in all, > 0), in one writelines; with
        `hold`, kept to go out with the next chunk or the end (one wake-up of the node for a
        small chunk and what follows it)."""
        held = self._held
        held.append(f"{size:x}\r\n".encode("ascii"))
        held += pieces
        held.append(b"\r\n")
        if not hold:
            self._write()

    def write_end(self) -> None:
        self._held.append(b"0\r\n\r\n")
        self._write()
        self._sent = True

    def _write(self) -> None:
        frame, self._held = self._held, []
        assert self.transport is not None
        if JOIN_WRITES:
            self.transport.write(b"".join(frame))
        else:
            self.transport.writelines(frame)

    async def drain(self, stall: float) -> None:
        """Until the transport's buffer is below its low-water mark, or the node answered:
        TimeoutError after `stall` seconds without either."""
        while self._wpaused and not self.answered:
            await self._wait(stall)

    async def answer(self, stall: float) -> Answer:
        """The answer's status and headers, once they are in."""
        while True:
            if self._error is not None:  # a bad head included
                raise self._error
            if self._answer is not None:
                return self._answer
            if self.closed:
                raise Lost("connection closed before an answer")
            await self._wait(stall)

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    async def take(self, n: int, stall: float) -> list[memoryview]:
        """The next n bytes of the body as views of the buffers they were received into.
        Lost when the connection ends first, EOFError when the body ends first."""
        pieces: list[memoryview] = []
        need = n
        ready = self._ready
        while need:
            if not ready:
                if self._state == _DONE:
                    raise EOFError(f"body ended {need} bytes short of {n}")
                if self._error is not None:
                    raise self._error
                if self.closed:
                    raise Lost("connection closed mid-body")
                self._resume()  # what it took is the reader's now: make room for more
                self._want = need
                try:
                    await self._wait(stall)
                finally:
                    self._want = 0
                continue
            v = ready.popleft()
            if len(v) > need:
                pieces.append(v[:need])
                ready.appendleft(v[need:])
                taken = need
            else:
                pieces.append(v)
                taken = len(v)
            need -= taken
            self._buffered -= taken
        self._resume()
        return pieces

    def _resume(self) -> None:
        if self._paused and self._buffered < WINDOW // 2 and not self.closed:
            self._paused = False
            assert self.transport is not None
            self.transport.resume_reading()

    async def read_rest(self, stall: float) -> bytes:
        """The whole (small) body: error answers."""
        while self._state != _DONE:
            if self._error is not None:
                raise self._error
            if self.closed:
                break
            await self._wait(stall)
        data = b"".join(self._ready)
        self._ready.clear()
        self._buffered = 0
        return data

    @property
    def reusable(self) -> bool:
        return self._state == _DONE and self._keep and self._sent and not self.closed

    def close(self) -> None:
        self._abort()


def _time_out(w: asyncio.Future[None]) -> None:
    if not w.done():
        w.set_exception(TimeoutError("no answer from the node within the node timeout"))


class GetPool:
    """Keep-alive connections to one node's HTTP endpoint (see the module docstring)."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.host = u.hostname or "127.0.0.1"
        self.tls = u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.hostport = u.netloc
        self._idle: list[GetProtocol] = []
        self._busy = 0
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None

    def head(self, path: str, headers: Mapping[str, str], method: str = "GET") -> bytes:
        """A request's head; ValueError for a header that would break the framing."""
        lines = [f"{method} {path} HTTP/1.1\r\nHost: {self.hostport}\r\n"]
        for k, v in headers.items():
            if "\r" in v or "\n" in v or "\r" in k or "\n" in k or ":" in k:
                raise ValueError(f"header {k!r} has a line break or bad name")
            lines.append(f"{k}: {v}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    async def request(self, head: bytes, stall: float) -> tuple[GetProtocol, Answer]:
        """Send a request on a pooled or new connection; its connection and answer head. A
        pooled connection that turns out closed before any answer is replaced, once."""
        await self._slot()
        try:
            for attempt in (0, 1):
                conn = self._pooled() if attempt == 0 else None
                if conn is None:
                    conn = await self._connect(stall)
                try:
                    conn.send(head)
                    return conn, await conn.answer(stall)
                except Lost:
                    conn.close()
                    if not conn.reused:
                        raise
                except BaseException:
                    conn.close()
                    raise
            raise AssertionError("unreachable")
        except BaseException:
            self._free_slot()
            raise

    async def acquire(self, stall: float) -> GetProtocol:
        """A pooled or new connection for a request that cannot be sent twice (a streamed
        PUT: its body is consumed as it goes); give it back with `release`."""
        await self._slot()
        try:
            return self._pooled() or await self._connect(stall)
        except BaseException:
            self._free_slot()
            raise

    def release(self, conn: GetProtocol) -> None:
        """The reader is done with the connection: keep it if its answer is complete."""
        if conn.reusable and conn.loop is asyncio.get_running_loop():
            conn.reused = True
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            if self._sweep is None:
                self._sweep = conn.loop.call_later(KEEPALIVE_TIMEOUT, self._expire)
        else:
            conn.close()
        self._free_slot()

    def close(self) -> None:
        """Close the idle connections (those in use close when their readers finish)."""
        for c in self._idle:
            c.close()
        self._idle.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    # -- plumbing ----------------------------------------------------------------------------

    async def _slot(self) -> None:
        if self._busy >= LIMIT or self._queue:
            fut = asyncio.get_running_loop().create_future()
            self._queue.append(fut)
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._free_slot()  # handed a slot as it was cancelled: pass it on
                else:
                    self._queue.remove(fut)
                raise
            return  # the slot of the one that woke us was handed over
        self._busy += 1

    def _free_slot(self) -> None:
        while self._queue:
            fut = self._queue.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to the waiter: _busy stays
                return
        self._busy -= 1

    def _pooled(self) -> GetProtocol | None:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        while self._idle:
            c = self._idle.pop()
            if not c.closed and c.loop is loop and now - c.idle_since < KEEPALIVE_TIMEOUT \
                    and c.transport is not None and not c.transport.is_closing():
                return c
            c.close()
        return None

    async def _connect(self, stall: float) -> GetProtocol:
        loop = asyncio.get_running_loop()
        ctx = None
        if self.tls:
            ctx = self._ssl = self._ssl or ssl.create_default_context()
        async with asyncio.timeout(stall):
            _, proto = await loop.create_connection(
                GetProtocol, self.host, self.port, ssl=ctx,
                server_hostname=self.host if ctx else None)
        return proto

    def _expire(self) -> None:
        self._sweep = None
        now = time.monotonic()
        keep = []
        for c in self._idle:
            if c.closed or now - c.idle_since >= KEEPALIVE_TIMEOUT:
                c.close()
            else:
                keep.append(c)
        self._idle = keep
        if keep:
            self._sweep = keep[0].loop.call_later(
                max(0.05, KEEPALIVE_TIMEOUT - (now - keep[0].idle_since)), self._expire)
