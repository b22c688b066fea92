"""A node that goes away and comes back (issue 12), on real node processes:

- a fragment written to a handoff node while its home was down is moved home once the home is
  back (by the cluster itself, and by `repair` for parts it has no record of), and reads find
  it there: they work with the handoff node gone;
- deletions proceed while a node is down: the sweeper frees the archives on the nodes that are
  up and keeps an orphan entry naming only the node left, finished when it returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.audit import audit
from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.repair import repair
from gateway.metadata import SqliteStore
from gateway.store.storage import Storage
from tests.support.erasurekit import cluster_config, put, read, where
from tests.support.gwcluster import until
from tests.support.nodeproc import NodeCluster

pytestmark = [pytest.mark.timeout(300)]
SECRET = "node-return-test-secret"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("ret"), 8, drives_per_node=1, secret=SECRET,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        yield nc


@pytest.fixture
def config(nodes: NodeCluster, tmp_path: Path) -> ClusterConfig:
    return cluster_config(nodes, tmp_path, SECRET)


async def test_handoff_fragment_moves_home_when_its_node_returns(nodes, config) -> None:
    uid, data = "home0001.p1", os.urandom(700_000)
    async with ErasureCluster(config, health_interval=0.2) as c:
        home = c.placement.primary(uid)
        nodes.kill(nodes.ids.index(home[2]))
        await c.check_health()
        layout = await put(c, uid, data)
        handoff = layout.placement[2]
        assert handoff not in home and layout.missing == []
        assert c.handoffs.parts() == [uid]
        nodes.restart(nodes.ids.index(home[2]))  # the health loop sees it and moves f02 home

        async def moved() -> bool:
            return (await where(c, uid)).get(2) == [home[2]] and not c.handoffs.parts()
        await until(moved, "f02 back on its home node, the handoff copy gone", seconds=20)
        assert c.stats["fragments_moved_home"] == 1
        assert await where(c, uid) == {i: [n] for i, n in enumerate(home)}
        # the stored layout still names the handoff node; reads no longer need it
        nodes.kill(nodes.ids.index(handoff))
        await c.check_health()
        degraded = c.stats["degraded_reads"]
        assert await read(c, layout) == data
        assert c.stats["degraded_reads"] == degraded  # f02 read at home, not rebuilt
        assert await c.repair_queue.records() == []
        nodes.restart(nodes.ids.index(handoff))
        await c.check_health()
        assert await c.delete_part(layout) == 6
        assert await where(c, uid) == {}


async def test_repair_moves_home_the_handoffs_it_finds(nodes, config, tmp_path) -> None:
    uid, data = "home0002.p1", os.urandom(300_000)
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        home = c.placement.primary(uid)
        nodes.kill(nodes.ids.index(home[0]))
        nodes.kill(nodes.ids.index(home[5]))
        await c.check_health()
        layout = await put(c, uid, data)
        assert {layout.placement[0], layout.placement[5]}.isdisjoint(home)
        c.handoffs.done(uid)  # as if another gateway wrote it: only a scan finds it
        nodes.restart(nodes.ids.index(home[0]))
        await c.check_health()
        report = await repair(c, uid)  # one home still down: f00 moves, f05 waits
        assert report.moved == 1 and not report.lost
        nodes.restart(nodes.ids.index(home[5]))
        await c.check_health()
        report = await repair(c, uid)
        assert report.moved == 1 and report.fixed == [] and not report.lost
        assert await where(c, uid) == {i: [n] for i, n in enumerate(home)}
        assert await read(c, layout) == data
        assert (await repair(c, uid)).moved == 0
        await c.delete_part(layout)


async def test_deletions_proceed_on_the_nodes_that_are_up(nodes, config, tmp_path) -> None:
    store = SqliteStore(tmp_path / "meta.sqlite")
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        storage = Storage(c)
        layouts = [await put(c, f"gone{i:04d}.p1", os.urandom(100_000 + i)) for i in range(6)]
        down = layouts[0].placement[1]
        nodes.kill(nodes.ids.index(down))
        await c.check_health()
        await store.queue_orphans([lay.to_dict() for lay in layouts])  # as deletes commit them
        assert await storage.sweep_orphans(store) == 6
        for lay in layouts:  # freed everywhere but on the node that is down
            assert await where(c, lay.part_uid) == {}
        rows = store._conn().execute("SELECT layout FROM orphans").fetchall()
        # any part may have a copy on the node that is down (a handoff, a rebuild): each
        # keeps an entry naming only that node
        held = [lay.part_uid for lay in layouts]
        assert sorted(json.loads(r[0])["part_uid"] for r in rows) == sorted(held)
        assert all(json.loads(r[0])["purge_nodes"] == [down] for r in rows)
        owners = await store.part_owners()
        assert {u: owners.get(u) for u in held} == dict.fromkeys(held, "queued for deletion")
        store._conn().execute("UPDATE orphans SET due = 0")
        assert await storage.sweep_orphans(store) == 0  # still down: no node asked, kept
        assert await store.orphan_count() == len(held)
        nodes.restart(nodes.ids.index(down))
        await c.check_health()
        store._conn().execute("UPDATE orphans SET due = 0")
        assert await storage.sweep_orphans(store) == len(held)
        assert await store.orphan_count() == 0
        for lay in layouts:
            assert await where(c, lay.part_uid) == {}
            assert not await c.deletions.pending(lay.part_uid)
        rep = await audit(c, store.part_owners)
        assert rep.unowned == {} and rep.unreachable == []
    await store.close()
