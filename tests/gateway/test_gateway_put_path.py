"""The upload path copies less and still delivers every byte in order: uvicorn with the
gateway's protocol hands the app exactly the bytes sent (whether one chunk or many waited for
it), and archive PUTs to a real node, written with writelines instead of a join, store
exactly the fragments sent."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import Iterator

import pytest
import uvicorn

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, make_session
from gateway.server.httpbody import BodyChunks, SegmentPool
from tests.support.nodeproc import NodeCluster

pytestmark = pytest.mark.timeout(120)
SECRET = "put-path-secret"


def test_body_chunks_stand_in_for_uvicorns_bytearray() -> None:
    b = BodyChunks()
    assert len(b) == 0 and bytes(b) == b""
    one = b"a" * 1000
    b += one
    assert bytes(b) is one  # a single chunk is handed on as is: no copy
    b += b"bc"
    b += b"d"
    assert len(b) == 1003 and bytes(b) == one + b"bcd"


def test_segment_pool_reuses_a_buffer_only_once_nothing_refers_to_it() -> None:
    pool = SegmentPool(keep=2)
    first = pool.get()
    view = memoryview(first)[:10].toreadonly()  # what the app holds of a segment
    del first
    second = pool.get()
    assert second is not view.obj  # still held through the view: not handed out again
    del second
    again = pool.get()
    assert again is pool.bufs[1]  # nothing referred to it any more: reused
    third = pool.get()  # the first is held through the view, the second is out: a fresh one
    assert all(third is not b for b in pool.bufs) and len(pool.bufs) == 2  # past `keep`
    del view
    assert pool.get() is pool.bufs[0]


async def _serve_and_upload(payload: bytes, app_delay: float) -> tuple[str, int, set[str]]:
    seen: dict[str, object] = {}

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        h, n, types = hashlib.sha256(), 0, set()
        more = True
        while more:
            msg = await receive()
            body = msg.get("body", b"")
            types.add(type(body).__name__)
            h.update(body)
            n += len(body)
            more = msg.get("more_body", False)
            if app_delay:
                await asyncio.sleep(app_delay)  # a slow app: several chunks wait per receive
        seen.update(digest=h.hexdigest(), n=n, types=types)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="gateway.server.httpproto:GatewayHttpProtocol", loop="uvloop",
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"PUT /x HTTP/1.1\r\nHost: t\r\nContent-Length: {len(payload)}\r\n\r\n"
                     .encode())
        step = 100_003  # odd sizes: chunk borders fall anywhere
        for i in range(0, len(payload), step):
            writer.write(payload[i:i + step])
            await writer.drain()
        status = await reader.readline()
        assert b"200" in status, status
        writer.close()
    finally:
        server.should_exit = True
        await task
        sock.close()
    return str(seen["digest"]), int(seen["n"]), set(seen["types"])  # type: ignore[arg-type]


@pytest.mark.parametrize("app_delay", [0.0, 0.002])
def test_uvicorn_hands_the_app_every_body_byte_in_order(app_delay: float) -> None:
    payload = os.urandom(6 * 1024 * 1024 + 12345)
    digest, n, types = asyncio.run(_serve_and_upload(payload, app_delay))
    assert n == len(payload)
    assert digest == hashlib.sha256(payload).hexdigest()
    assert types == {"bytes"}  # ASGI says bytes


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, secret=SECRET) as c:
        yield c


def test_archive_puts_use_writelines_and_store_exact_bytes(node: NodeCluster) -> None:
    frags = [os.urandom(128 * 1024 + 80) for _ in range(8)]
    tail = os.urandom(999)

    async def body():
        yield b"".join(frags[:3])
        yield frags[3]
        yield b"".join(frags[4:])
        yield tail

    async def run() -> bytes:
        async with make_session() as session:
            c = NodeClient(NodeSpec(node.ids[0], node.urls[0], "d", ()), SECRET, session)
            total = sum(map(len, frags)) + len(tail)
            await c.put("putpath.r0", body(), length=total, stream="s", meta=b'{"m": 1}')
            got = await c.get_bytes("putpath.r0")
            await c.delete("putpath.r0")
            return got

    assert asyncio.run(run()) == b"".join(frags) + tail
