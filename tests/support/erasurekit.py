"""Shared pieces of the tests that drive an ErasureCluster over real node processes
(tests/support/nodeproc.py): the cluster config of a NodeCluster, and put / read / where of a part."""

from __future__ import annotations

from pathlib import Path

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from tests.support.nodeproc import NodeCluster


def cluster_config(nodes: NodeCluster, tmp_path: Path, secret: str) -> ClusterConfig:
    """A 4+2 config over every node of `nodes`, restarting any a test left stopped."""
    for i, node in enumerate(nodes.nodes):
        if not node.running:
            nodes.restart(i)
    return ClusterConfig.from_dict({
        "secret": secret,
        "erasure": {"k": 4, "m": 2, "state_dir": str(tmp_path / "state"), "node_timeout": 20},
        "nodes": [{"id": nid, "url": url} for nid, url in zip(nodes.ids, nodes.urls, strict=True)],
    }, source="test")


async def one(data: bytes):
    yield data


async def put(c: ErasureCluster, uid: str, data: bytes):
    return await c.write_part(uid, one(data), length=len(data), stream="t",
                              meta=lambda r: {"k": uid})


async def read(c: ErasureCluster, layout) -> bytes:
    return b"".join([b async for b in c.read_part(layout)])


async def where(c: ErasureCluster, uid: str) -> dict[int, list[str]]:
    """Fragment index -> nodes holding it, of the part `uid` (from a scan of every node)."""
    found = [p for p in await c.scan(uid + ".") if p.part_uid == uid]
    return found[0].fragments if found else {}
