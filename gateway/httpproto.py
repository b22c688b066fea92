"""The gateway's HTTP protocol for uvicorn: httptools, with a shutdown that does not sit out
idle TLS clients, and a bigger request-body buffer.

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
        # uvicorn's own on_body, with BODY_BUFFER for its HIGH_WATER_LIMIT.
        if (self.parser.should_upgrade() and self._should_upgrade()) or self.cycle.response_complete:
            return
        self.cycle.body += body
        if len(self.cycle.body) > BODY_BUFFER:
            self.flow.pause_reading()
        self.cycle.message_event.set()

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
