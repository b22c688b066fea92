"""The node client's streamed PUT (erasure/nodeput.py over nodeget's lean connections), against
a real node: body items that are lists of buffers (the erasure writer's batches of fragments)
go out as one HTTP chunk each, in one writelines with nothing joined (a small one with what
follows it), the request head with the first of them; the node stores exactly their
concatenation and the metadata blob after them;
one keep-alive connection serves PUT after PUT; a node that refuses a request before its body
is in is heard at once, and that connection is not used again."""

from __future__ import annotations

import os
import time

import pytest

from erasure import nodeget, nodeput
from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, NodeError, make_session
from tests.support.nodeproc import NodeCluster

MiB = 1 << 20


async def test_list_items_are_stored_as_their_concatenation(tmp_path, monkeypatch) -> None:
    writes: list[tuple[bool, int]] = []  # (the request head went with it, buffers written)
    write = nodeget.GetProtocol._write

    def recording(self):
        writes.append((bytes(self._held[0][:4]) == b"PUT ", len(self._held)))
        return write(self)

    monkeypatch.setattr(nodeget.GetProtocol, "_write", recording)
    frag = [os.urandom(131_152) for _ in range(9)]
    shapes: dict[str, list[bytes | list[bytes]]] = {
        # a first batch of several pieces (the request head goes with the first of them)
        "several": [frag[0:8], [frag[8]]],
        "single": [[frag[0]], frag[1], [frag[2], frag[3]]],
        "bytes-first": [frag[0], frag[1:4], b"", frag[4:9]],
        "tiny": [[b"a", b"", b"bc"], [b"d"]],  # all in one write with the head and the end
        "small-then-large": [[b"ab"], frag[0:2], [b"c"], frag[2]],
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

                writes.clear()
                await client.put(name, body(), length=len(want), stream="s",
                                 meta=lambda name=name: name.encode())
                assert await client.get_bytes(name) == want, name
                assert (await client.head(name)).meta == name.encode()
                # one write per non-empty item of HOLD_BELOW bytes or more, with the smaller
                # ones before it (a size line, the pieces, CRLF each), the request head in the
                # first; the metadata and the end last; none joined on the way
                expected, held = [], 1
                for item in [*items, [name.encode()]]:
                    pieces = item if isinstance(item, list) else [item]
                    if not sum(map(len, pieces)):
                        continue
                    held += 2 + len(pieces)
                    if sum(map(len, pieces)) >= nodeput.HOLD_BELOW:
                        expected.append(held)
                        held = 0
                expected.append(held + 1)
                assert [w[1] for w in writes] == expected, (name, writes)
                assert [w[0] for w in writes] == [True] + [False] * (len(writes) - 1), name
            # every PUT went over the one connection kept alive
            assert len(client._puts._idle) == 1 and client._puts._busy == 0
        finally:
            client.close_idle()
            await session.close()


async def test_a_refusal_before_the_body_is_heard_at_once_and_its_connection_dropped(
        tmp_path) -> None:
    """A PUT signed with another secret is refused (403) as soon as its head is in: the client
    stops sending a body of 256 MiB it would otherwise stream, raises the node's error, and
    does not pool that connection (the node drops the rest of the body and closes it)."""
    with NodeCluster(tmp_path, 1, drives_per_node=1) as c:
        spec = NodeSpec(c.ids[0], c.urls[0], "d0", tuple(str(d) for d in c.drive_paths(0)))
        session = make_session()
        good = NodeClient(spec, c.secret, session)
        bad = NodeClient(spec, "another secret of the right length!", session)
        chunk = os.urandom(MiB)
        sent = 0

        async def body():
            nonlocal sent
            for _ in range(256):
                sent += MiB
                yield [chunk]

        try:
            started = time.monotonic()
            with pytest.raises(NodeError) as e:
                await bad.put("refused", body(), length=256 * MiB, stream="s", meta=b"{}")
            assert e.value.status == 403
            assert sent < 64 * MiB, f"{sent} bytes sent after the refusal"
            assert time.monotonic() - started < 10
            assert not bad._puts._idle and bad._puts._busy == 0
            # the node is fine, and so is a good client
            await good.put("accepted", body(), length=256 * MiB, stream="s", meta=b"{}")
            assert (await good.head("accepted")).length == 256 * MiB
        finally:
            for cl in (good, bad):
                cl.close_idle()
            await session.close()
