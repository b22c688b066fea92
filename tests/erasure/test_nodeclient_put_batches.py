"""The node client's streamed PUT takes body items that are lists of buffers (the erasure
writer's batches of fragments, sent as one HTTP chunk each without being joined): a real node
stores exactly their concatenation, whatever mix of lists and plain bytes the body yields,
and the metadata blob after them. The request head goes out in the same writelines as the first
batch (taken from aiohttp, which holds it back until the first body write): if an aiohttp
upgrade stops that, the fallback still stores the same bytes, and this test says so."""

from __future__ import annotations

import os

from erasure import nodeput
from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, make_session
from tests.support.nodeproc import NodeCluster


async def test_list_items_are_stored_as_their_concatenation(tmp_path, monkeypatch) -> None:
    heads: list[bool] = []
    take = nodeput._take_head

    def recording(writer):
        head = take(writer)
        heads.append(head is not None)
        return head

    monkeypatch.setattr(nodeput, "_take_head", recording)
    frag = [os.urandom(131_152) for _ in range(9)]
    shapes: dict[str, list[bytes | list[bytes]]] = {
        # a first batch of several pieces (the request head goes with the first of them)
        "several": [frag[0:8], [frag[8]]],
        "single": [[frag[0]], frag[1], [frag[2], frag[3]]],
        "bytes-first": [frag[0], frag[1:4], b"", frag[4:9]],
        "tiny": [[b"a", b"", b"bc"], [b"d"]],
        # empty pieces: an empty chunk on the wire would end the body early
        "empty-pieces": [[b"x", b""], [b"", b"yz"], [], [b""], b"w"],
    }
    with NodeCluster(tmp_path, 1, drives_per_node=1) as c:
        spec = NodeSpec(c.ids[0], c.urls[0], "d0", tuple(str(d) for d in c.drive_paths(0)))
        session = make_session()
        client = NodeClient(spec, c.secret, session)
        try:
            for name, items in shapes.items():
                want = b"".join(b"".join(i) if isinstance(i, list) else i for i in items)

                async def body(items=items):
                    for item in items:
                        yield item

                await client.put(name, body(), length=len(want), stream="s",
                                 meta=lambda name=name: name.encode())
                assert await client.get_bytes(name) == want, name
                assert (await client.head(name)).meta == name.encode()
        finally:
            await session.close()
    # once per body whose first item is a list (all but "bytes-first"): the head went with it
    assert heads == [True] * 4, heads
