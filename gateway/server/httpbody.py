"""Request bodies between the gateway's HTTP protocol (gateway/server/httpproto.py) and the
app: the chunks waiting for the app (BodyChunks), the request cycle that hands them out in
segments (GatewayCycle), and the pool of segment buffers a body can be read into
(SegmentPool)."""

from __future__ import annotations

import sys
import threading
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

# The app is handed the body in pieces of this size, aligned on the body's start (the last one
# shorter): the erasure segment size, so that the upload path (gateway/store/storage.py
# `coalesce`, erasure/codec.py `segments`) passes them on as they are instead of joining
# pieces again, and each piece is built with one join of what the socket delivered.
BODY_SEGMENT = 1024 * 1024
POOL_KEEP = 48  # segment buffers a worker keeps for reuse (48 MiB at most)


class SegmentPool:
    """Reusable BODY_SEGMENT bytearrays for request bodies received straight into segments.

    A buffer is handed on as a read-only memoryview and is reused only once nothing refers to
    it any more (its reference count says so): whoever still holds a view of it (the hashing
    thread, the encoder, a queue) keeps it from being written. So a read-only view from here
    never changes while it is held. Reusing warm buffers instead of fresh ones per segment
    spares the page faults of a growing heap."""

    def __init__(self, keep: int = POOL_KEEP) -> None:
        self.keep = keep
        self.bufs: list[bytearray] = []
        self._lock = threading.Lock()  # one loop per worker; tests may run several in threads

    def get(self) -> bytearray:
        with self._lock:
            for b in self.bufs:
                if sys.getrefcount(b) <= _UNREFERENCED:
                    return b
            b = bytearray(BODY_SEGMENT)
            if len(self.bufs) < self.keep:
                self.bufs.append(b)
            return b


def _unreferenced() -> int:
    """The count getrefcount gives, in get()'s loop, for a buffer only the pool refers to (the
    list, the loop variable, the argument: 3 on CPython 3.11), measured the same way."""
    bufs = [bytearray(1)]
    for b in bufs:
        return sys.getrefcount(b)
    raise AssertionError


_UNREFERENCED = _unreferenced()


POOL = SegmentPool()


class BodyChunks:
    """The request-body bytes waiting for the app, kept as the chunks httptools made.

    uvicorn keeps them in a bytearray (`cycle.body += body`, realloc as it grows) and hands
    the app `bytes(cycle.body)`: two copies of every uploaded byte, and more when the bytearray
    moves. This stands in for that bytearray in the two ways uvicorn uses it: `+=` keeps a
    reference (httptools makes a new bytes object per callback), `len()`, and `bytes()` gives
    the one chunk as is, or a single join of several."""

    __slots__ = ("chunks", "size", "views")

    def __init__(self, views: bool = False) -> None:
        self.chunks: list[bytes | memoryview] = []
        self.size = 0
        self.views = views  # segments may be handed out as the read-only views they are

    def __iadd__(self, chunk: bytes | memoryview) -> BodyChunks:
        self.chunks.append(chunk)
        self.size += len(chunk)
        return self

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        chunks = self.chunks
        if len(chunks) == 1:
            return bytes(chunks[0])
        return b"".join(chunks)

    def take(self, n: int) -> bytes:
        """The first `n` bytes (n <= size) as one bytes object, removed from the chunks; one
        join, or none where the first chunk is exactly those bytes."""
        chunks = self.chunks
        first = chunks[0]
        if len(first) == n and (type(first) is bytes or self.views):
            del chunks[0]
            self.size -= n
            return first
        parts: list[bytes | memoryview] = []
        need = n
        i = 0
        while need:
            c = chunks[i]
            if len(c) <= need:
                parts.append(c)
                need -= len(c)
                i += 1
            else:  # split: the rest stays as a view of the same bytes (no copy)
                view = memoryview(c)
                parts.append(view[:need])
                chunks[i] = view[need:]
                need = 0
        del chunks[:i]
        self.size -= n
        return b"".join(parts)


class GatewayCycle(RequestResponseCycle):
    """uvicorn's request cycle, handing the body out in BODY_SEGMENT pieces (see there)
    instead of all that waited at each receive(): uvicorn's `bytes(self.body)` joined the
    waiting chunks, then the upload path joined them again into segments. A body the app
    asked segments for (`scope["extensions"]["zonegate.segments"]`) comes as read-only
    memoryviews of pooled buffers (SegmentPool), not bytes."""

    _end_told = False  # the body's end was handed out (set on the instance when it is)

    async def receive(self) -> Any:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        # Wait for news (a body piece, its end, a disconnect) unless a whole segment, or the
        # rest of an ended body, is waiting; once the end was handed out a call waits for the
        # disconnect, as uvicorn's does (Starlette listens for it while it streams a response).
        while not (self.disconnected or self.response_complete):
            if len(self.body) >= BODY_SEGMENT or not (self.more_body or self._end_told):
                break
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        pending = self.body
        if type(pending) is BodyChunks and pending.size >= BODY_SEGMENT:
            body = pending.take(BODY_SEGMENT)
            more = self.more_body or pending.size > 0
        else:
            chunks = pending.chunks if type(pending) is BodyChunks else ()
            if len(chunks) == 1 and pending.views:
                body = chunks[0]  # a segment's view, as the app asked (see segments_wanted)
            else:
                body = bytes(pending)
            more = self.more_body
            self.body = BodyChunks(getattr(pending, "views", False))
        if not more:
            self._end_told = True
        return {"type": "http.request", "body": body, "more_body": more}
