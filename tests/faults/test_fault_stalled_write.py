"""A write to a frozen node (SIGSTOP) on real node processes, at the erasure layer: the
fragment stream that stops taking bytes is given up after `write_stall` (handed off while its
first bytes can be replayed, else left to repair), the part is written without waiting for
the node timeout, and when the node runs again the abandoned request is cut as it asks for
more of its body: no partial (nor whole) archive of that fragment is left on the node, and
the node is not counted down for it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from tests.support.erasurekit import cluster_config, put, read, where
from tests.support.gwcluster import until
from tests.support.nodeproc import NodeCluster

pytestmark = [pytest.mark.timeout(300)]
SECRET = "stalled-write-test-secret"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("stall"), 8, drives_per_node=1, secret=SECRET,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        yield nc


@pytest.fixture
def config(nodes: NodeCluster, tmp_path: Path) -> ClusterConfig:
    cfg = cluster_config(nodes, tmp_path, SECRET).to_dict()
    cfg["erasure"]["node_timeout"] = 60.0  # far beyond the write: only the stall limit acts
    return ClusterConfig.from_dict(cfg, source="test")


async def test_a_stalled_fragment_write_is_cut_and_leaves_nothing(nodes, config) -> None:
    # 8 MiB fragments: more than the loopback socket buffers take from a frozen node
    uid, data = "stall001.p1", os.urandom(32 * MiB)
    async with ErasureCluster(config, health_interval=0, auto_repair=False) as c:
        frozen = c.placement.primary(uid)[0]
        pid = nodes.pid(nodes.ids.index(frozen))
        os.kill(pid, signal.SIGSTOP)
        try:
            layout = await asyncio.wait_for(put(c, uid, data), 40)  # < the node timeout
            assert c.stats["stalled_writes"] == 1
            assert 0 in layout.missing or layout.placement[0] != frozen
            assert await read(c, layout) == data
        finally:
            os.kill(pid, signal.SIGCONT)

        async def ended() -> bool:
            return c.stats["stalled_writes_ended"] == 1
        await until(ended, "the abandoned request ended")
        held = await where(c, uid)
        assert frozen not in held.get(0, []), held
        assert all(len(n) == 1 for n in held.values()), held  # one copy of each fragment
        assert c.clients[frozen].up  # cut by us, not a node failure
        assert await read(c, layout) == data
        await c.delete_part(layout)
