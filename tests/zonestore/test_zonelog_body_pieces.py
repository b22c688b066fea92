"""A streamed put stores exactly its bytes whatever the shape of the pieces it arrives in:
chunk-sized, short, spanning chunks, immutable or a buffer the caller reuses after each yield
(the zone log keeps immutable pieces without copying them, and must copy the others)."""

from __future__ import annotations

import pytest

from tests.support.zonelog_helpers import KiB, MiB, make_drive, open_log, payload, read_all
from zonestore.record import crc32c

CHUNK = 64 * KiB  # open_log's chunk size


def _cuts(data: bytes, sizes: list[int]) -> list[bytes]:
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        out.append(data[pos:pos + n])
        pos += n
        i += 1
    return out


async def _as_bytes(pieces: list[bytes]):
    for p in pieces:
        yield p


async def _reused_buffer(pieces: list[bytes]):
    buf = bytearray(max(len(p) for p in pieces))
    for p in pieces:
        view = memoryview(buf)[:len(p)]
        view[:] = p
        yield view
        buf[:] = b"\xee" * len(buf)  # the caller scribbles over its buffer once resumed


SHAPES = {
    "chunks": [CHUNK],
    "chunks_then_short": [CHUNK, CHUNK, 1000],
    "short_then_long": [1000, 3 * CHUNK + 5],
    "odd": [7000, CHUNK + 1, 12345, 2 * CHUNK - 3],
    "one_short": [50 * KiB],
}


@pytest.mark.parametrize("reuse", [False, True], ids=["bytes", "reused_buffer"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("size", [40 * KiB, CHUNK, 5 * CHUNK + 777, 2 * MiB + 3])
async def test_streamed_pieces_read_back_exactly(tmp_path, shape, reuse, size):
    log = await open_log(make_drive(tmp_path))
    data = payload(size, size)
    pieces = _cuts(data, SHAPES[shape])
    body = _reused_buffer(pieces) if reuse else _as_bytes(pieces)
    info = await log.put("r", body, stream="s", meta=lambda: b"m", length=len(data))
    assert (info.length, info.crc32c, info.meta) == (len(data), crc32c(data), b"m")
    assert await read_all(log, "r") == data
    at = min(CHUNK - 10, len(data) - 1)  # across the first chunk boundary where there is one
    assert await read_all(log, "r", at, 100) == data[at:at + 100]
    await log.close()
