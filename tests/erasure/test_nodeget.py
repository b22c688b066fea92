"""Record GETs over erasure/nodeget.py's lean connections, against a real node process: one
kept-alive connection serves request after request (error answers included), a range larger
than the read window arrives whole in takes of any size, a pooled connection the node closed
(restart) is replaced without the caller noticing, and a peer that accepts but never answers is
a NodeUnavailable after the node timeout, not a hang."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator

import pytest

from erasure import nodeget
from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, NodeUnavailable, RecordMissing, make_session
from tests.support.nodeproc import NodeCluster
from tests.support.peerclient import peer_client

pytestmark = pytest.mark.timeout(120)
SECRET = "nodeget-secret"
MiB = 1 << 20


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, secret=SECRET) as c:
        yield c


async def body(data: bytes):
    yield data


def client(node: NodeCluster, session, timeout: float = 10.0) -> NodeClient:
    return NodeClient(NodeSpec(node.ids[0], node.urls[0], "d", ()), SECRET, session, timeout)


async def stored(node: NodeCluster, session, record_id: str, payload: bytes) -> NodeClient:
    """A client of the node, with `payload` stored as `record_id`."""
    c = client(node, session)
    await c.put(record_id, body(payload), length=len(payload), stream="s", meta=b"{}")
    return c


def test_one_connection_serves_every_get_error_answers_included(node: NodeCluster) -> None:
    payload = os.urandom(300_000)

    async def run() -> None:
        async with make_session() as session:
            c = await stored(node, session, "nodeget.reuse", payload)
            assert await c.get_bytes("nodeget.reuse") == payload
            assert c._gets is not None
            [conn] = c._gets._idle
            for i in range(20):
                a = i * 7001
                assert await c.get_bytes("nodeget.reuse", a, a + 5000) == payload[a:a + 5000]
                with pytest.raises(RecordMissing):
                    await c.get_bytes("nodeget.nope")
                assert c._gets._idle == [conn]  # the same connection, kept alive
            c.close_idle()
            assert c._gets._idle == [] and conn.closed

    asyncio.run(run())


def test_a_range_larger_than_the_read_window_arrives_whole(node: NodeCluster) -> None:
    size = 2 * nodeget.WINDOW + 12345
    payload = random.Random(3).randbytes(size)

    async def run() -> None:
        async with make_session() as session:
            c = await stored(node, session, "nodeget.big", payload)
            assert await c.get_bytes("nodeget.big") == payload  # one take of it all
            rng = random.Random(4)
            async with c.get("nodeget.big", 100, size - 100) as r:
                got, left = [], r.expected
                while left:
                    n = min(left, rng.choice([1, 80, 131152, nodeget.WINDOW + 1]))
                    got.append(b"".join(await r.take(n)))
                    left -= n
                    await asyncio.sleep(0)  # let the window fill and pause the reads
            assert b"".join(got) == payload[100:size - 100]

    asyncio.run(run())


def test_a_pooled_connection_the_node_closed_is_replaced(node: NodeCluster) -> None:
    payload = os.urandom(50_000)

    async def put_and_read() -> None:
        async with make_session() as session:
            c = await stored(node, session, "nodeget.again", payload)
            assert await c.get_bytes("nodeget.again") == payload
            node.restart(0)  # same port: the pooled connection is now dead
            assert await c.get_bytes("nodeget.again", 10, 20) == payload[10:20]
            assert c.up

    asyncio.run(put_and_read())


def test_a_peer_that_never_answers_is_unavailable_after_the_timeout() -> None:
    async def run() -> None:
        held: list[asyncio.StreamWriter] = []

        async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            held.append(w)  # reads nothing, answers nothing

        async with peer_client(accept, SECRET, node_timeout=0.5) as c:
            try:
                with pytest.raises(NodeUnavailable):
                    await asyncio.wait_for(c.get_bytes("nodeget.any"), 30)
                assert not c.up
            finally:
                for w in held:
                    w.close()

    asyncio.run(run())


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nX-ZG-Length: 5\r\n\r\nhello",  # no Content-Length on a 200
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 5\r\n\r\nhello",  # a bad status line
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
])
def test_an_answer_that_is_not_proper_http_is_unavailable_not_data(answer: bytes) -> None:
    async def run() -> None:
        async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readuntil(b"\r\n\r\n")
            w.write(answer)
            await w.drain()
            w.close()

        async with peer_client(accept, SECRET, node_timeout=5) as c:
            with pytest.raises(NodeUnavailable):
                await c.get_bytes("nodeget.any")

    asyncio.run(run())
