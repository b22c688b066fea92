"""Split a streamed PUT body into its payload and the metadata blob that trails it.

The body is exactly `length` payload bytes followed by the metadata blob (the rest of the body,
at most `max_meta` bytes). `PutBody.payload()` yields the payload in `CHUNK`-sized bytes (the
last one shorter) gathered from the socket (memory stays bounded by one chunk); when it reads the payload's last bytes it
reads the metadata blob too and checks the signed SHA-256 of the whole body *before* yielding
the last chunk, so the zone log never commits a body that is short, too long or tampered with.
`PutBody.meta` is then the callable the zone log evaluates after the body.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Protocol

from zonestore.node.errors import NodeError
from zonestore.nodeauth import UNSIGNED
from zonestore.record import MAX_CHUNK

CHUNK = MAX_CHUNK  # the zone log's record chunk: it takes chunks this size without copying


class ClientGone(NodeError):
    """The client disconnected (or its body ended early): nothing is committed."""


class BodyReader(Protocol):
    """Where a body comes from: aiohttp's StreamReader, or the lean PUT path's reader
    (zonestore/node/fastput.py). `read(n)` returns 1 to n bytes, b"" at the end of the body."""

    async def read(self, n: int) -> bytes: ...


class PutBody:
    def __init__(self, content: BodyReader, length: int, max_meta: int,
                 body_hash: str = UNSIGNED) -> None:
        self.content = content
        self.length = length
        self.max_meta = max_meta
        self._hasher = None if body_hash == UNSIGNED else hashlib.sha256()
        self._expected = body_hash
        self._meta: bytes | None = None
        self.error: NodeError | None = None
        self.received = 0

    async def payload(self) -> AsyncIterator[bytes]:
        try:
            remaining = self.length
            if remaining == 0:
                await self._read_meta()
            while remaining > 0:
                # Gather whole chunks (the zone log's record chunk size) and join them once:
                # the zone log then checksums and buffers the joined bytes as they are, with
                # no copy of its own and one pass per chunk instead of one per socket read.
                want = min(remaining, CHUNK)
                pieces = []
                while want > 0:
                    piece = await self._read(want)
                    if not piece:
                        raise ClientGone(400, "incomplete_body",
                                         f"body ended after {self.length - remaining} of "
                                         f"{self.length} payload bytes (X-ZG-Length)")
                    pieces.append(piece)
                    want -= len(piece)
                    remaining -= len(piece)
                chunk = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                del pieces
                if self._hasher is not None:
                    self._hasher.update(chunk)
                if remaining == 0:
                    await self._read_meta()
                yield chunk
        except NodeError as exc:
            self.error = exc
            raise

    def meta(self) -> bytes:
        if self._meta is None:  # the zone log asked before consuming the payload: a bug
            raise RuntimeError("metadata blob requested before the payload was consumed")
        return self._meta

    async def _read(self, n: int) -> bytes:
        try:
            data = await self.content.read(n)
        except (ConnectionError, OSError, EOFError) as exc:
            raise ClientGone(400, "client_gone", f"client went away mid-body: {exc}") from None
        except Exception as exc:  # aiohttp's payload errors (bad chunking, early EOF)
            raise ClientGone(400, "bad_body", f"request body unreadable: {exc}") from None
        self.received += len(data)
        return data

    async def _read_meta(self) -> None:
        buf = bytearray()
        while True:
            chunk = await self._read(self.max_meta + 1 - len(buf))
            if not chunk:
                break
            buf += chunk
            if len(buf) > self.max_meta:
                raise NodeError(413, "meta_too_large",
                                f"metadata blob after the payload exceeds {self.max_meta} bytes")
        if self._hasher is not None:
            self._hasher.update(buf)
            if self._hasher.hexdigest() != self._expected:
                raise NodeError(403, "body_mismatch",
                                "body does not match its signed SHA-256 (X-ZG-Content-SHA256)")
        self._meta = bytes(buf)


async def read_signed_doc(reader: BodyReader, limit: int, signed: str | None, what: str) -> bytes:
    """A small whole body (a JSON document) of at most `limit` bytes, read to its end (`read`
    may return fewer bytes than asked), checked against its signed SHA-256 `signed`:
    NodeError 413 when longer, 403 when the signature is not for this body."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        piece = await reader.read(limit + 1 - size)
        if not piece:
            break
        parts.append(piece)
        size += len(piece)
    if size > limit:
        raise NodeError(413, "too_large", f"a {what} document is at most {limit} bytes")
    body = b"".join(parts)
    if signed != hashlib.sha256(body).hexdigest():
        raise NodeError(403, "body_mismatch", f"a {what} must be signed with its body")
    return body
