"""One lean PUT's body between its connection (zonestore/node/fastput.py: `feed`) and
`PutBody` (`read`)."""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

from zonestore.node.body import CHUNK

HIGH_WATER = 2 * CHUNK  # body bytes buffered before the socket is paused


class Reader(Protocol):
    """What a body asks of its connection: its loop, and to stop or go on reading."""

    loop: asyncio.AbstractEventLoop

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class LeanBody:
    """One request's body between the protocol (`feed`) and `PutBody` (`read`). `read(n)`
    waits until n bytes (or the end) are buffered, so that the handler wakes once per record
    chunk rather than once per socket read."""

    __slots__ = ("_exc", "_pieces", "_proto", "_waiter", "_want", "complete", "size")

    def __init__(self, proto: Reader) -> None:
        self._proto = proto
        self._pieces: collections.deque[bytes | memoryview] = collections.deque()
        self.size = 0
        self.complete = False  # the whole body has arrived
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._want = 0

    def feed(self, piece: bytes | memoryview) -> None:
        self._pieces.append(piece)
        self.size += len(piece)
        if self._waiter is not None and self.size >= self._want:
            self._wake()
        if self.size >= HIGH_WATER:
            self._proto.pause()

    def feed_eof(self) -> None:
        self.complete = True
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, n: int) -> bytes:
        while self._exc is None and not self.complete and self.size < min(n, HIGH_WATER):
            self._want = min(n, HIGH_WATER)
            self._proto.resume()
            self._waiter = self._proto.loop.create_future()
            await self._waiter
        if not self.size:  # what arrived before a failure is still read first, as on aiohttp
            if self._exc is not None:
                raise self._exc
            return b""
        pieces = self._pieces
        out: list[bytes | memoryview] = []
        need = n
        while need and pieces:
            p = pieces[0]
            if len(p) <= need:
                out.append(pieces.popleft())
                need -= len(p)
            else:
                view = p if type(p) is memoryview else memoryview(p)
                out.append(view[:need])
                pieces[0] = view[need:]
                need = 0
        # One join per record chunk: the zone log takes the bytes as they are.
        got = out[0] if len(out) == 1 and type(out[0]) is bytes else b"".join(out)
        self.size -= len(got)
        if self.size < HIGH_WATER:
            self._proto.resume()
        return got
