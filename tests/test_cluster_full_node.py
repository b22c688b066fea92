"""A node that runs out of space (507) costs one fragment of the write that finds out, and gets
no new archives for a while: later writes hand its fragments off to other nodes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.nodeclient import NodeError
from tests.nodeproc import NodeCluster
from zonestore.emulated import Geometry

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20


async def one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_full_node_is_skipped_by_later_writes(tmp_path: Path) -> None:
    small = Geometry(nr_zones=16, zone_size=MiB, zone_capacity=MiB, max_open_zones=4,
                     max_active_zones=5)
    with NodeCluster(tmp_path, 4, drives_per_node=1, geometry=small,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        cfg = ClusterConfig.from_dict({
            "secret": nc.secret,
            "erasure": {"k": 2, "m": 1, "segment_size": 65536, "write_quorum": 2,
                        "state_dir": str(tmp_path / "st")},
            "nodes": [{"id": i, "url": u} for i, u in zip(nc.ids, nc.urls, strict=True)]})
        async with ErasureCluster(cfg, health_interval=0, auto_repair=False) as cluster:
            uid = "full0001.p1"
            victim = cluster.placement.primary(uid)[0]
            client = cluster.clients[victim]
            for n in range(64):  # fill the victim with other records until it says 507
                try:
                    await client.put(f"junk{n:03d}", one(os.urandom(256 * 1024)),
                                     length=256 * 1024, stream=f"junk{n}", meta=b"")
                except NodeError as e:
                    assert e.status == 507, e
                    break
            else:
                pytest.fail("the node never filled up")
            client.full_until = 0.0  # forget: the write itself must find out
            payload = os.urandom(200_000)
            layout = await cluster.write_part(uid, one(payload), length=len(payload),
                                              stream="t", meta=lambda r: {})
            assert layout.missing == [0] and layout.placement[0] == victim
            assert not client.writable and client.up  # full, not down: reads still go there
            uid2 = next(u for u in (f"full{n:04d}.p1" for n in range(2, 100))
                        if victim in cluster.placement.primary(u))
            layout2 = await cluster.write_part(uid2, one(payload), length=len(payload),
                                               stream="t", meta=lambda r: {})
            assert layout2.missing == [] and victim not in layout2.placement.values()
            for lay in (layout, layout2):
                assert b"".join([b async for b in cluster.read_part(lay)]) == payload
