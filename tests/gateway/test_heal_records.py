"""Heals, repairs and rehomes commit where they put a fragment into the object records
(erasure/records.py over the gateway's metadata store, gateway/store/moves.py), over real node
processes: a fragment rebuilt on another node than its record names (its node lost it, then
went down) is recorded there, so reads by the record decode from the data fragments, not
degraded; when the node returns and the fragment is moved home, the record follows again.
Before, the records kept naming the lost copy: every later read of such a part needed parity
(and a layout change read the part as damaged)."""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path

from erasure.cluster import ErasureCluster
from erasure.layout import PartLayout
from erasure.repair import heal, repair
from gateway.metadata import BucketRecord, ObjectRecord, PartRecord, UploadRecord, open_store
from gateway.store.erasurequeues import shared_queues
from gateway.store.moves import StorePartIndex
from tests.support.erasurekit import one, read
from tests.support.gwcluster import until
from tests.support.moverrig import SECRET, config
from tests.support.nodeproc import NodeCluster

SIZE = 40_000
K = 4


async def write(c: ErasureCluster, store, n: int) -> dict[str, bytes]:
    """`n` objects of one part each and one upload's part, recorded as the gateway does
    (the archives' meta naming bucket, key and upload); their bytes by part uid."""
    rng = random.Random(7)
    await store.create_bucket(BucketRecord("b", "alice", time.time()))
    blobs: dict[str, bytes] = {}
    for i in range(n):
        version, key, data = f"v{i:02d}", f"k{i:02d}", rng.randbytes(SIZE)
        lay = await c.write_part(f"{version}.p1", one(data), length=SIZE, stream="b",
                                 meta=lambda _, k=key, v=version: {
                                     "bucket": "b", "key": k, "version": v})
        await store.put_object(ObjectRecord(
            "b", key, SIZE, hashlib.md5(data).hexdigest(), time.time(), "alice", version,
            parts=[{"number": 1, "size": SIZE, "etag": "e", "layout": lay.to_dict()}]))
        blobs[lay.part_uid] = data
    await store.create_upload(UploadRecord("up1", "b", "big", "alice", time.time()))
    data = rng.randbytes(SIZE)
    lay = await c.write_part("upx.p1", one(data), length=SIZE, stream="b", meta=lambda _: {
        "kind": "part", "bucket": "b", "key": "big", "upload": "up1", "part": 1})
    await store.put_part(PartRecord("up1", 1, SIZE, "e", time.time(), lay.to_dict()))
    blobs[lay.part_uid] = data
    return blobs


async def recorded(store) -> dict[str, PartLayout]:
    out, cursor = {}, ""
    while True:
        items, nxt = await StorePartIndex(store).page(cursor, 100)
        out.update({p.part_uid: p for _, p in items})
        if nxt is None:
            return out
        cursor = nxt


async def read_all(c: ErasureCluster, store, blobs: dict[str, bytes]) -> int:
    """Read every part by its record, byte-exact; returns how many reads went degraded."""
    before = c.stats["degraded_reads"]
    recs = await recorded(store)
    assert sorted(recs) == sorted(blobs)
    for uid, lay in recs.items():
        assert await read(c, lay) == blobs[uid], uid
    return c.stats["degraded_reads"] - before


def victim_of(recs: dict[str, PartLayout]) -> str:
    """The node holding the most data fragments (the upload's part's among them)."""
    held = Counter(n for lay in recs.values() for i, n in lay.placement.items() if i < K)
    up = {n for i, n in recs["upx.p1"].placement.items() if i < K}
    return max(up, key=lambda n: held[n])


@asynccontextmanager
async def nodes_and_store(tmp_path: Path, n: int):
    """`n` real nodes, a SQLite metadata store, and the cluster config naming every node."""
    with NodeCluster(tmp_path / "nodes", n, drives_per_node=1, secret=SECRET) as nc:
        store = open_store(str(tmp_path / "meta.sqlite"))
        await store.start()
        try:
            yield nc, store, config(nc, list(range(n)), tmp_path / "state")
        finally:
            await store.close()


async def test_a_fragment_healed_on_another_node_is_recorded_there_and_follows_it_home(
        tmp_path: Path) -> None:
    async with nodes_and_store(tmp_path, 7) as (nc, store, cfg):
        # gateway one serves reads; its healer stays off until the node is down
        async with ErasureCluster(cfg, health_interval=0, layout_poll=0, auto_repair=False,
                                  **shared_queues(store)) as c:
            blobs = await write(c, store, 8)
            assert await read_all(c, store, blobs) == 0
            recs = await recorded(store)
            victim = victim_of(recs)
            lost = {uid: [i for i, n in lay.placement.items() if n == victim and i < K]
                    for uid, lay in recs.items()}
            lost = {uid: ix for uid, ix in lost.items() if ix}
            assert "upx.p1" in lost and len(lost) >= 3, lost
            # the victim loses its copies of them (reads meet the gaps and queue heals),
            # then goes down: the heals must put them elsewhere
            for uid, ix in lost.items():
                for i in ix:
                    assert await c.clients[victim].delete(recs[uid].archive_id(i))
            assert await read_all(c, store, blobs) == len(lost)
            assert await c.repair_queue.size() == len(lost)
            nc.kill(nc.ids.index(victim))
            await c.check_health()
            assert not c.is_up(victim)
            # gateway two's healer heals them (on nodes other than the victim)
            async with ErasureCluster(cfg, health_interval=0.3, layout_poll=0,
                                      **shared_queues(store)) as healer:
                async def healed() -> bool:
                    return await healer.repair_queue.size() == 0
                await until(healed, "the healer did not heal the parts", seconds=60)
                # reads by the records: the data fragments, no parity needed
                assert await read_all(c, store, blobs) == 0
                now = await recorded(store)
                for uid, ix in lost.items():
                    for i in ix:
                        assert now[uid].placement[i] != victim, (uid, i)
                assert healer.stats["records_updated"] == len(lost)
                # the victim returns: the handoff copies go home, the records follow
                nc.restart(nc.ids.index(victim))

                async def home() -> bool:
                    return not healer.handoffs.parts()
                await until(home, "the handoff fragments did not move home", seconds=60)
                now = await recorded(store)
                scanned = {p.part_uid: p for p in await healer.scan()}
                for uid, lay in now.items():
                    assert scanned[uid].fragments == {
                        i: [n] for i, n in lay.placement.items()}, uid
                assert all(now[uid].placement[i] == victim
                           for uid, ix in lost.items() for i in ix)
                await c.check_health()
                assert await read_all(c, store, blobs) == 0


async def test_zonegate_repair_records_the_fragments_it_rebuilds_for_a_node_gone(
        tmp_path: Path) -> None:
    """`zonegate repair --include-unreachable` (the node will not return): every fragment
    the node held is rebuilt elsewhere and recorded there."""
    async with nodes_and_store(tmp_path, 7) as (nc, store, cfg):
        async with ErasureCluster(cfg, health_interval=0, layout_poll=0, auto_repair=False,
                                  **shared_queues(store)) as c:
            blobs = await write(c, store, 6)
            recs = await recorded(store)
            victim = victim_of(recs)
            held = {uid for uid, lay in recs.items() if victim in lay.placement.values()}
            nc.kill(nc.ids.index(victim))
            await c.check_health()
            report = await repair(c, include_unreachable=True)
            assert not report.lost and {u for u, _ in report.fixed} == held
            now = await recorded(store)
            assert all(victim not in lay.placement.values() for lay in now.values())
            scanned = {p.part_uid: p for p in await c.scan()}
            for uid, lay in now.items():
                assert scanned[uid].fragments == {i: [n] for i, n in lay.placement.items()}
            assert await read_all(c, store, blobs) == 0


class MoverMeanwhile(StorePartIndex):
    """The records, with a data mover's commit landing just before the heal's first one
    (the order in which the heal's compare-and-set fails): the mover copied fragment
    `index` to a node nothing of the part is on and committed it there."""

    def __init__(self, store, c: ErasureCluster, index: int) -> None:
        super().__init__(store)
        self.c, self.index, self.raced = c, index, False
        self.moved_to = ""

    async def commit(self, ref: str, old: PartLayout, new: PartLayout) -> bool:
        if not self.raced:
            self.raced = True
            from erasure.rehome import copy_one
            used = set(old.placement.values()) | set(new.placement.values())
            self.moved_to = next(n for n in self.c.clients if n not in used)
            src = new.placement[self.index]  # the heal's copy, for the heal's own index
            assert await copy_one(self.c, old.part_uid, self.index, src, self.moved_to)
            mover = PartLayout(old.part_uid, old.length, old.scheme,
                               {**old.placement, self.index: self.moved_to}, [], old.crc32c)
            assert await super().commit(ref, old, mover)
        return await super().commit(ref, old, new)


async def test_a_heal_merges_into_a_record_a_mover_changed_meanwhile(tmp_path: Path) -> None:
    """The heal's commit of fragment 0 (its node down) loses to a mover's commit: of another
    fragment (1: both changes are kept), or of the same one (0: the mover's copy is kept)."""
    async with nodes_and_store(tmp_path, 8) as (nc, store, cfg):
        async with ErasureCluster(cfg, health_interval=0, layout_poll=0, auto_repair=False,
                                  **shared_queues(store)) as c:
            blobs = await write(c, store, 8)  # 9 parts on 8 nodes: two share a node
            recs = await recorded(store)
            node, _ = Counter(lay.placement[0] for lay in recs.values()).most_common(1)[0]
            a, b = sorted(uid for uid, lay in recs.items() if lay.placement[0] == node)[:2]
            nc.kill(nc.ids.index(node))
            await c.check_health()
            for uid, index in ((a, 1), (b, 0)):
                lay = recs[uid]
                c.records = racing = MoverMeanwhile(store, c, index)
                written = await heal(c, lay, [0])
                assert racing.raced and set(written) == {0}
                now = (await recorded(store))[uid]
                if index == 1:
                    assert now.placement == {**lay.placement, 0: written[0],
                                             1: racing.moved_to}
                else:  # the mover's copy of fragment 0 stays recorded
                    assert now.placement == {**lay.placement, 0: racing.moved_to}
                assert await read(c, now) == blobs[uid]
