"""A node client of a fake peer: a loopback server whose `accept(reader, writer)` answers as
the test wants (mute, malformed, fuzzed), for the node client's error paths."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, make_session

Accept = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def peer_client(accept: Accept, secret: str, *, node_timeout: float = 5.0
                      ) -> AsyncIterator[NodeClient]:
    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with make_session() as session:
            c = NodeClient(NodeSpec("peer", f"http://127.0.0.1:{port}", "d", ()), secret,
                           session, node_timeout)
            try:
                yield c
            finally:
                c.close_idle()
    finally:
        server.close()
        await server.wait_closed()
