"""The body of a record PUT to a node: the erasure writer's batches of fragments, each sent as
one HTTP chunk in one writelines without being joined first (docs/design.md, "Write path").
Used by `nodeclient.NodeClient.put` through aiohttp's client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterable
from typing import Any

import aiohttp
from aiohttp import http_writer

# Archive PUTs are chunked (the metadata blob's length is known only at the end), and aiohttp
# writes each chunk as (size line, data, CRLF) with transport.writelines() -- unless it deems
# writelines unsafe, then it joins the three into one new bytes: a copy of every byte the
# gateway sends to a node, 1.25 GiB per GiB uploaded. It deems it unsafe on every Python
# before 3.12.9 because of a bug in the writelines asyncio's selector transport gained in
# 3.12.0. Before 3.12 there is no such method: asyncio's transports inherit one that joins,
# as aiohttp would, and uvloop's (the gateway's loop) is a writev. So the copy is only needed
# on 3.12.0-3.12.8 (and 3.13.0-3.13.1), where aiohttp's own flag stays as it is.
if sys.version_info < (3, 12):
    http_writer.SKIP_WRITELINES = False

_ResetError = getattr(aiohttp, "ClientConnectionResetError", ConnectionResetError)


class FragmentsPayload(aiohttp.payload.Payload):
    """A chunked request body from an async iterator of `bytes` or lists of buffers.

    aiohttp writes each item of an async iterable as its own HTTP chunk, so the writer had to
    join each batch of fragments into one bytes first: a copy of every byte sent to a node
    (1.25 GiB per GiB uploaded, into fresh memory). Here a list goes out as one chunk in one
    `writelines` (one writev on uvloop; separate writes would be a syscall each). The request
    head, which aiohttp holds back until the first body write, goes in the same writelines as
    the first list (one wake-up of the node for both, as when aiohttp sent a joined batch);
    an aiohttp that keeps its head elsewhere sends it with the first piece instead. Where
    writelines would join anyway (`SKIP_WRITELINES`), lists are joined here."""

    def __init__(self, value: AsyncIterable[bytes | list[bytes]]) -> None:
        super().__init__(value, content_type="application/octet-stream")

    async def write(self, writer: Any) -> None:
        first = True
        async for item in self._value:
            if type(item) is not list:
                await writer.write(item)
                first = first and not item
                continue
            pieces = [p for p in item if len(p)]  # a 0-size chunk would end the body
            if not pieces:
                continue
            if http_writer.SKIP_WRITELINES:
                await writer.write(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            elif first:
                head = _take_head(writer)
                if head is not None:
                    _write_chunk(writer, pieces, head)
                else:
                    await writer.write(pieces[0], drain=False)  # with the request head
                    if len(pieces) > 1:
                        _write_chunk(writer, pieces[1:])
                await writer.drain()
            else:
                _write_chunk(writer, pieces)
                await writer.drain()
            first = False

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a streamed archive body cannot be decoded")


def _take_head(writer: Any) -> bytes | None:
    """The request head aiohttp (3.12 on) holds back until the first body write, taken over
    as its own `_send_headers_with_payload` does; None where there is none to take."""
    head = getattr(writer, "_headers_buf", None)
    if not head or getattr(writer, "_headers_written", True):
        return None
    writer._headers_written = True
    writer._headers_buf = None
    return head


def _write_chunk(writer: Any, pieces: list[bytes], head: bytes | None = None) -> None:
    """One HTTP chunk of `pieces` (after the request `head`, if given) in one writelines, with
    the check aiohttp's own write makes that the connection is still there."""
    transport = writer.transport
    if transport is None or transport.is_closing():
        raise _ResetError("Cannot write to closing transport")
    size = sum(map(len, pieces))
    frame = [f"{size:x}\r\n".encode("ascii"), *pieces, b"\r\n"]
    transport.writelines([head, *frame] if head is not None else frame)
