"""The gateway's HTTP protocol for uvicorn: httptools, with a shutdown that does not sit out
idle TLS clients, and a bigger request-body buffer that copies less.

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

import fcntl
import struct
import termios

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

POLL_S = 0.05  # delivery is acknowledged within a round trip; this only bounds the extra wait
# uvicorn stops reading a connection once 64 KiB of its body wait for the app, so a fast upload
# went through a pause/resume (and an event-loop turn) per 64 KiB while the gateway hashed and
# encoded the last piece. Letting 1 MiB (one erasure segment) wait instead: a single curl PUT of
# 1 GiB through 12 nodes 313-334 -> 341-392 MB/s, interleaved A/B. Memory: this much per upload.
BODY_BUFFER = 1024 * 1024


class BodyChunks:
    """The request-body bytes waiting for the app, kept as the chunks httptools made.

    uvicorn keeps them in a bytearray (`cycle.body += body`, realloc as it grows) and hands
    the app `bytes(cycle.body)`: two copies of every uploaded byte, and more when the bytearray
    moves. This stands in for that bytearray in the two ways uvicorn uses it: `+=` keeps a
    reference (httptools makes a new bytes object per callback), `len()`, and `bytes()` gives
    the one chunk as is, or a single join of several."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def __iadd__(self, chunk: bytes) -> BodyChunks:
        self.chunks.append(chunk)
        self.size += len(chunk)
        return self

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)


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


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; the body buffer and the shutdown of TLS connections differ."""

    def on_body(self, body: bytes) -> None:
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
