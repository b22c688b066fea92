"""Every fragment on a node has an owner (issue 12, defects 12-14), on real node processes.

- repair never rebuilds a fragment that is only on a handoff node that is down (no copy the
  layout does not know);
- a fragment the healer rebuilt on a handoff node is deleted with its part, and a delete that
  cannot reach a node fails (to be retried) instead of leaving it;
- a rebuild that was running when its part was deleted removes what it wrote;
- a failed write keeps its pending mark, so the sweeper finds what the abort could not delete.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.audit import audit
from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.errors import ErasureError
from erasure.repair import PartDeleted, heal, repair
from gateway.metadata import SqliteStore
from gateway.s3.errors import S3Error
from gateway.store.storage import FAILED_WRITE_DELAY, Storage
from tests.support.erasurekit import cluster_config, put, where
from tests.support.nodeproc import NodeCluster

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = [pytest.mark.timeout(300)]
SECRET = "ownership-test-secret"
MiB = 1 << 20


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("own"), 8, drives_per_node=1, secret=SECRET,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        yield nc


@pytest.fixture
def config(nodes: NodeCluster, tmp_path: Path) -> ClusterConfig:
    return cluster_config(nodes, tmp_path, SECRET)


def idx(nodes: NodeCluster, nid: str) -> int:
    return nodes.ids.index(nid)


async def test_repair_leaves_a_fragment_on_a_down_handoff_alone(nodes, config) -> None:
    uid, data = "hand0001.p1", os.urandom(300_000)
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        primary = c.placement.primary(uid)
        nodes.kill(idx(nodes, primary[3]))
        await c.check_health()
        layout = await put(c, uid, data)  # f03 goes to a handoff: a complete write
        handoff = layout.placement[3]
        assert layout.missing == [] and handoff not in primary
        assert (await c.repair_queue.records()) == []
        nodes.restart(idx(nodes, primary[3]))
        nodes.kill(idx(nodes, handoff))
        await c.check_health()
        report = await repair(c, uid)
        # f03 is not lost, only unreachable: rebuilding it on its primary would make a copy
        # that the layout (placement[3] = handoff) does not know
        assert report.fixed == [] and report.failed == [] and not report.lost
        assert [(u, i) for u, i, _ in report.deferred] == [(uid, 3)]
        assert 3 not in await where(c, uid)
        with pytest.raises(ErasureError, match="not deleted yet"):
            await c.delete_part(layout)  # a node that may hold a copy is down: retried later
        nodes.restart(idx(nodes, handoff))
        await c.check_health()
        assert await c.delete_part(layout) == 1  # the others went on the first try
        assert await where(c, uid) == {}
        assert not await c.deletions.pending(uid)


async def test_healed_fragment_is_deleted_with_its_part(nodes, config) -> None:
    uid, data = "heal0002.p1", os.urandom(200_000)
    async with ErasureCluster(config, health_interval=0) as c:
        primary = c.placement.primary(uid)
        nodes.kill(idx(nodes, primary[1]))  # down, but the cluster does not know yet
        layout = await put(c, uid, data)
        assert layout.missing == [1]
        for _ in range(400):  # the healer rebuilds f01 on a node the layout does not name
            if c.stats["healed_parts"] or c.stats["heal_failures"]:
                break
            await asyncio.sleep(0.05)
        assert c.stats["healed_parts"] == 1, c.stats
        [spare] = (await where(c, uid))[1]
        assert spare not in layout.placement.values()
        nodes.kill(idx(nodes, spare))
        nodes.restart(idx(nodes, primary[1]))
        await c.check_health()
        with pytest.raises(ErasureError):  # not a best-effort delete that forgets the copy
            await c.delete_part(layout)
        assert (await where(c, uid)) == {}  # gone from every node that answered
        nodes.restart(idx(nodes, spare))
        await c.check_health()
        assert await c.deletions.pending(uid)
        report = await repair(c, uid)  # repair finishes deletions it finds unfinished
        assert report.purged == [uid] and not report.lost
        assert not await c.deletions.pending(uid) and await c.deletions.known(uid)
        assert await where(c, uid) == {} and c.unreachable == []


async def test_rebuild_running_during_a_delete_removes_what_it_wrote(nodes, config) -> None:
    uid, data = "race0003.p1", os.urandom(500_000)
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        layout = await put(c, uid, data)
        target = layout.placement[2]
        await c.clients[target].delete(layout.archive_id(2))  # f02 lost on its node
        pid = nodes.pid(idx(nodes, target))
        os.kill(pid, signal.SIGSTOP)  # the rebuild's write to it hangs
        try:
            task = asyncio.create_task(heal(c, layout, [2]))
            await asyncio.sleep(1.0)
            assert not task.done()
            await c.deletions.begin(uid)  # a delete starts now (its listing ran before the write)
        finally:
            os.kill(pid, signal.SIGCONT)
        with pytest.raises(PartDeleted):
            await task
        assert 2 not in await where(c, uid)  # written, then removed by the rebuild itself
        await c.purge(uid)
        assert await where(c, uid) == {}
        with pytest.raises(PartDeleted):  # and a later rebuild does not even start
            await heal(c, layout, [2])


async def test_failed_write_keeps_its_pending_mark_for_the_sweeper(nodes, config,
                                                                   tmp_path) -> None:
    store = SqliteStore(tmp_path / "meta.sqlite")
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        storage = Storage(c)

        async def breaks():
            yield os.urandom(3 * MiB)
            raise S3Error("IncompleteBody")

        before = time.time()
        with pytest.raises(S3Error):
            await storage.write(store, "fail0004.p1", breaks(), length=4 * MiB, stream="t",
                                meta=lambda r: {})
        rows = store._conn().execute("SELECT layout, due FROM orphans").fetchall()
        assert len(rows) == 1 and '"fail0004.p1"' in rows[0][0] and '"pending": true' in rows[0][0]
        assert before < rows[0][1] <= time.time() + FAILED_WRITE_DELAY
        # the sweeper, once it is due, looks for the part on every node
        store._conn().execute("UPDATE orphans SET due = 0")
        assert await storage.sweep_orphans(store) == 1
        assert await store.orphan_count() == 0
        assert await where(c, "fail0004.p1") == {}
        rep = await audit(c, store.part_owners)
        assert rep.unowned == {} and rep.unreachable == []
    await store.close()


async def test_node_return_drains_the_repair_queue_and_finishes_deletions(nodes, config,
                                                                          tmp_path) -> None:
    # six of the eight nodes: with one down, a 4+2 part has no handoff node left
    six = ClusterConfig.from_dict({
        "secret": SECRET,
        "erasure": {"k": 4, "m": 2, "state_dir": str(tmp_path / "six"), "node_timeout": 20},
        "nodes": [{"id": nid, "url": url} for nid, url in
                  list(zip(nodes.ids, nodes.urls, strict=True))[:6]]}, source="test")
    uid, data = "back0005.p1", os.urandom(250_000)
    async with ErasureCluster(six, health_interval=0.2) as c:
        c.heal_attempts = 0  # the healer gives up at once: only the node's return helps
        victim = c.placement.primary(uid)[0]
        nodes.kill(idx(nodes, victim))
        await c.check_health()
        layout = await put(c, uid, data)
        assert layout.missing == [0]
        for _ in range(100):
            if c.stats["heal_failures"]:
                break
            await asyncio.sleep(0.05)
        assert c.stats["heal_failures"] == 1 and c.stats["healed_parts"] == 0
        assert [r.indexes for r in (await c.repair_queue.records())] == [[0]]
        nodes.restart(idx(nodes, victim))  # the health loop sees it back and drains the queue
        for _ in range(200):
            if c.stats["healed_parts"]:
                break
            await asyncio.sleep(0.05)
        assert c.stats["healed_parts"] == 1, c.stats
        assert (await c.repair_queue.records()) == []
        assert (await where(c, uid))[0] == [victim]
        nodes.kill(idx(nodes, victim))
        await c.check_health()
        with pytest.raises(ErasureError):
            await c.delete_part(layout)
        nodes.restart(idx(nodes, victim))  # and the unfinished deletion is finished
        for _ in range(200):
            if not await c.deletions.pending(uid):
                break
            await asyncio.sleep(0.05)
        assert not await c.deletions.pending(uid)
        assert await where(c, uid) == {}


async def test_zonegate_repair_tells_queued_for_deletion_from_lost(nodes, config,
                                                                  tmp_path) -> None:
    from erasure.config import write_config

    meta = tmp_path / "meta.sqlite"
    path = tmp_path / "cluster.toml"
    write_config(path, {
        "secret": SECRET, "gateway": {"metadata": str(meta)},
        "erasure": {"k": 4, "m": 2, "state_dir": str(tmp_path / "state")},  # as `config`
        "nodes": [{"id": nid, "url": url} for nid, url in zip(nodes.ids, nodes.urls,
                                                              strict=True)]})
    await SqliteStore(meta).close()  # an empty gateway store: nothing owns the part but the delete
    uid, data = "cli00006.p1", os.urandom(150_000)
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        layout = await put(c, uid, data)
        dead = layout.placement[0]
        nodes.kill(idx(nodes, dead))  # the cluster does not know yet
        with pytest.raises(ErasureError):
            await c.delete_part(layout)
        assert await c.deletions.pending(uid)
    nodes.restart(idx(nodes, dead))  # one fragment of the part is left on it: 1 < k
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "zonegate"), "repair", "--config", str(path),
        "--audit", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"})
    out = (await proc.communicate())[0].decode()
    assert proc.returncode == 0, out
    assert f"queued for deletion: {uid}" in out and "unrecoverable" not in out.replace(
        "0 unrecoverable", "")
    assert "1 deletions finished" in out and "0 parts unowned" in out, out
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        assert await where(c, uid) == {}


async def test_purge_parts_frees_many_parts_and_keeps_what_a_down_node_holds(nodes,
                                                                             config) -> None:
    uids = [f"many{n:04d}.p1" for n in range(12)]
    async with ErasureCluster(config, auto_repair=False, health_interval=0) as c:
        for n, uid in enumerate(uids):
            await put(c, uid, os.urandom(50_000 + n))
        held = {uid: await where(c, uid) for uid in uids}
        down = nodes.ids[2]
        nodes.kill(2)
        await c.check_health()
        # "" cannot name a record: nothing to delete, and it does not spoil the batch
        done = await c.purge_parts({**dict.fromkeys(uids), "": None})
        assert done[""] == (0, [])
        for uid in uids:  # a node that cannot be asked may hold a copy no layout names
            on_down = sum(ns.count(down) for ns in held[uid].values())
            assert done[uid] == (sum(map(len, held[uid].values())) - on_down, [down])
            assert await c.deletions.pending(uid)
            assert await where(c, uid) == {}  # on every node that answered
        nodes.restart(2)
        await c.check_health()
        waiting = [uid for uid in uids if any(down in ns for ns in held[uid].values())]
        assert waiting  # 12 parts of 6 archives on 8 nodes: some had one on the dead node
        for uid in waiting:  # the returned node's copies are still there
            assert await where(c, uid)
        again = await c.purge_parts(dict.fromkeys(uids, [down]))
        assert all(left == [] for _, left in again.values())
        for uid in uids:
            assert await where(c, uid) == {} and not await c.deletions.pending(uid)
