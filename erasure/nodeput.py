"""Streamed record PUTs to one node over the lean keep-alive connections of erasure/nodeget.py,
without aiohttp's client: the transport under `nodeclient.NodeClient.put` (docs/design.md,
"Write path").

Why: every part becomes one ~1 MiB PUT to each of its n nodes (1,280 per GiB of 8 MiB parts
in 8+2), and aiohttp's client spent ~170 us of CPU on each (its request and response objects,
timers, the payload writer task and the parser feeding a stream reader); this costs ~100 us
(bench/README.md, "CPU per byte through the CRT client").

What it sends: the request head together with the body's first chunk, then each item of the
body (bytes, or a list of buffers: the erasure writer's fragments) as one HTTP chunk in one
writelines without joining it, then the last chunk; a chunk under HOLD_BELOW bytes goes out
with the next one (or the end). After each chunk it waits while the socket's buffer is above
its high-water mark (`stall` seconds at most without progress: TimeoutError). The node may
answer before the body is complete (a refusal): sending stops, its answer is returned, and the
connection is not reused. An error raised by the body (the writer gave the request up, or a
body of the wrong length) aborts the connection, so the node commits nothing, and is raised as
it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

from erasure.nodeget import Answer, GetPool

# A chunk smaller than this (the metadata blob, a small part's fragments) waits to go out with
# what follows it: each write wakes the node, and its cost is per write, not per byte.
HOLD_BELOW = 64 * 1024


async def put(pool: GetPool, head: bytes, body: AsyncIterable[bytes | list[bytes]],
              stall: float) -> tuple[Answer, bytes]:
    """Send a PUT with a chunked `body` (its `head` must say `Transfer-Encoding: chunked`) on
    a connection of `pool`; the node's answer and its (small) body."""
    conn = await pool.acquire(stall)
    items = aiter(body)
    try:
        conn.begin(head)
        async for item in items:
            pieces = [item] if type(item) is not list else item
            size = sum(map(len, pieces))
            if not size:  # a 0-size chunk would end the body
                continue
            if conn.answered:
                await _close(items)  # the rest of the body is not wanted
                break
            conn.write_chunk(pieces, size, hold=size < HOLD_BELOW)
            await conn.drain(stall)
        else:
            if not conn.answered:
                conn.write_end()
        answer = await conn.answer(stall)
        raw = await conn.read_rest(stall)
    except BaseException:
        conn.close()
        raise
    finally:
        pool.release(conn)
    return answer, raw


async def _close(items: object) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()
