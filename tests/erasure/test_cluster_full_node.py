"""A node out of space is *full*, not down: it takes no new fragments while it has no room,
learnt from its 507 and from the health check's `/v1/stats` poll; the fragment whose node says
507 is handed off to another node (the write keeps its full width), and the node is back in
placement once it has room again."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.nodeclient import NodeClient, NodeError
from tests.support.nodeproc import NodeCluster
from zonestore.emulated import Geometry

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20
JUNK = 256 * 1024


async def one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def fill(client: NodeClient) -> list[str]:
    """Junk records on the node until it answers 507; their ids."""
    ids = []
    for n in range(200):
        try:
            await client.put(f"junk{n:03d}", one(os.urandom(JUNK)), length=JUNK,
                             stream="junk", meta=b"")
        except NodeError as e:
            assert e.status == 507, e
            return ids
        ids.append(f"junk{n:03d}")
    pytest.fail("the node never filled up")


async def test_full_node_hands_off_and_returns(tmp_path: Path) -> None:
    small = Geometry(nr_zones=16, zone_size=MiB, zone_capacity=MiB, max_open_zones=4,
                     max_active_zones=5)
    with NodeCluster(tmp_path, 4, drives_per_node=1, geometry=small,
                     extra_args=["--reclaim-interval", "0.2"]) as nc:
        cfg = ClusterConfig.from_dict({
            "secret": nc.secret,
            "erasure": {"k": 2, "m": 1, "segment_size": 65536, "write_quorum": 2,
                        "state_dir": str(tmp_path / "st")},
            "nodes": [{"id": i, "url": u} for i, u in zip(nc.ids, nc.urls, strict=True)]})
        seen: list[list[str]] = []
        async with ErasureCluster(cfg, health_interval=0, auto_repair=False) as cluster:
            cluster.full_observers.append(seen.append)
            uid = "full0001.p1"
            victim = cluster.placement.primary(uid)[0]
            client = cluster.clients[victim]
            junk = await fill(client)
            assert client.full and client.up and not client.writable
            assert seen[-1] == [victim]

            # The write itself finds out (507), and hands the fragment off: full width. Its
            # archives (1.5 MiB) span two send batches, both replayed to the handoff node.
            client.full = False
            payload = os.urandom(3 * MiB)
            layout = await cluster.write_part(uid, one(payload), length=len(payload),
                                              stream="t", meta=lambda r: {})
            assert layout.missing == [] and victim not in layout.placement.values()
            assert cluster.stats["full_handoffs"] == 1 and not cluster.stats["degraded_writes"]
            assert client.full and client.up and cluster.full_nodes() == [victim]

            # The health check's poll keeps it full (it still has no room) ...
            await cluster.check_health()
            assert cluster.full_nodes() == [victim] and cluster.is_up(victim)
            uid2 = next(u for u in (f"full{n:04d}.p1" for n in range(2, 100))
                        if victim in cluster.placement.primary(u))
            assert victim not in cluster.targets(uid2)
            layout2 = await cluster.write_part(uid2, one(payload), length=len(payload),
                                               stream="t", meta=lambda r: {})
            assert layout2.missing == [] and victim not in layout2.placement.values()

            # ... and clears it once the node has room again (its junk deleted and reclaimed).
            for rid in junk:
                await client.delete(rid)
            for _ in range(100):
                await cluster.check_health()
                if not client.full:
                    break
                await asyncio.sleep(0.2)
            assert cluster.full_nodes() == [] and seen[-1] == []
            # (it has more room than the others now: placement may weight it in)
            assert victim in cluster.targets(uid2)
            uid3 = uid2.replace(".p1", ".p2")
            layout3 = await cluster.write_part(uid3, one(payload), length=len(payload),
                                               stream="t", meta=lambda r: {})
            assert layout3.missing == []
            for lay in (layout, layout2, layout3):
                assert b"".join([b async for b in cluster.read_part(lay)]) == payload
            assert cluster.stats["degraded_writes"] == 0



async def test_nodes_with_less_room_get_fewer_new_fragments(tmp_path: Path) -> None:
    """Once the nodes' writable room drifts apart (one node holds other data), new parts are
    placed weighted by room: the tight node takes fewer fragments than every other, and the
    room known for a node shrinks by what is sent there until the next poll."""
    geo = Geometry(nr_zones=24, zone_size=MiB, zone_capacity=MiB, max_open_zones=6,
                   max_active_zones=8)
    with NodeCluster(tmp_path, 4, drives_per_node=1, geometry=geo) as nc:
        cfg = ClusterConfig.from_dict({
            "secret": nc.secret,
            "erasure": {"k": 2, "m": 1, "segment_size": 65536, "write_quorum": 2,
                        "state_dir": str(tmp_path / "st")},
            "nodes": [{"id": i, "url": u} for i, u in zip(nc.ids, nc.urls, strict=True)]})
        async with ErasureCluster(cfg, health_interval=0, auto_repair=False) as cluster:
            tight = nc.ids[0]
            for n in range(40):  # 10 MiB of other data on one node
                await cluster.clients[tight].put(f"junk{n:03d}", one(os.urandom(JUNK)),
                                                 length=JUNK, stream="junk", meta=b"")
            await cluster.check_health()
            rooms = {nid: c.room_bytes for nid, c in cluster.clients.items()}
            assert all(isinstance(r, int) for r in rooms.values()), rooms
            assert rooms[tight] < 0.9 * max(rooms.values()), rooms
            assert cluster.room_weights(set()) is not None

            counts: Counter[str] = Counter()
            data = os.urandom(64 * 1024)
            for i in range(48):
                lay = await cluster.write_part(f"room{i:04d}.p1", one(data), length=len(data),
                                               stream="r", meta=lambda r: {})
                assert lay.missing == []
                counts.update(lay.placement.values())
            others = [counts[n] for n in nc.ids if n != tight]
            assert counts[tight] < min(others), counts
            sent = cluster.codec.archive_length(len(data)) * counts[nc.ids[1]]
            assert cluster.clients[nc.ids[1]].room_bytes == rooms[nc.ids[1]] - sent
