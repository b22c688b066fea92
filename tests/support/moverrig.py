"""A cluster of real node processes, a metadata store recording one object per part, and
data movers over them: what the mover's engine and fault tests share."""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from erasure.audit import audit
from erasure.cluster import ErasureCluster
from erasure.clusterlayout import Change, apply_changes
from erasure.config import ClusterConfig
from erasure.layout import PartLayout
from erasure.mover import Mover
from gateway.metadata import BucketRecord, ObjectRecord, open_store
from gateway.store.layoutstore import StoreLayouts
from gateway.store.moves import StoreMoveLeases, StorePartIndex
from tests.support.erasurekit import put, read
from tests.support.nodeproc import NodeCluster
from zonestore.emulated import Geometry

SECRET = "mover-test-secret"
SIZE = 40_000  # equal parts: fill is counted in fragments


def config(nc: NodeCluster, ids: list[int], state: Path) -> ClusterConfig:
    return ClusterConfig.from_dict({
        "secret": SECRET,
        "erasure": {"k": 4, "m": 2, "segment_size": 64 * 1024, "state_dir": str(state),
                    "node_timeout": 10},
        "nodes": [{"id": nc.ids[i], "url": nc.urls[i],
                   "drives": [str(d) for d in nc.drive_paths(i)]} for i in ids],
    }, source="test")


class Rig:
    """A cluster, a metadata store recording one object per part, and a mover."""

    def __init__(self, cluster: ErasureCluster, store, layouts: StoreLayouts) -> None:
        self.c, self.store, self.layouts = cluster, store, layouts
        self.blobs: dict[str, bytes] = {}
        self.nc: NodeCluster | None = None

    def mover(self, owner: str = "gw-1") -> Mover:
        return Mover(self.c, StorePartIndex(self.store), StoreMoveLeases(self.store),
                     owner=owner, layout=lambda: self.c.layout)

    async def write(self, n: int, seed: int) -> None:
        rng = random.Random(seed)
        await self.store.create_bucket(BucketRecord("b", "alice", 1.0))
        for i in range(n):
            uid = f"w{seed}x{i:03d}.p1"
            data = rng.randbytes(SIZE)
            lay = await put(self.c, uid, data)
            self.blobs[uid] = data
            await self.store.put_object(ObjectRecord(
                "b", f"k{seed}-{i:03d}", SIZE, hashlib.md5(data).hexdigest(), time.time(),
                "alice", uid[:-3], parts=[{"number": 1, "size": SIZE, "etag": "e",
                                           "layout": lay.to_dict()}]))

    async def apply(self, *changes: Change) -> None:
        cur = await self.layouts.current()
        assert cur is not None
        assert await self.layouts.publish(apply_changes(cur, list(changes)), cur.version)
        assert await self.c.refresh_layout()

    async def recorded(self) -> dict[str, PartLayout]:
        out, cursor = {}, ""
        while True:
            items, nxt = await StorePartIndex(self.store).page(cursor, 100)
            out.update({p.part_uid: p for _, p in items})
            if nxt is None:
                return out
            cursor = nxt

    async def check(self) -> Counter[str]:
        """Byte-exact reads by the records, fragments exactly where recorded, k+m on distinct
        nodes and domains; audit clean. Returns fragments per node."""
        recs = await self.recorded()
        assert sorted(recs) == sorted(self.blobs)
        scanned = {p.part_uid: p for p in await self.c.scan("w")}
        per_node: Counter[str] = Counter()
        for uid, lay in recs.items():
            assert await read(self.c, lay) == self.blobs[uid], uid
            found = scanned[uid].fragments
            assert {i: [n] for i, n in lay.placement.items()} == found, uid  # no extra copy
            assert len(set(lay.placement.values())) == 6 and lay.missing == []
            domains = {self.c.layout.node(n).domain for n in lay.placement.values()}
            assert len(domains) == 6
            per_node.update(lay.placement.values())
        report = await audit(self.c, self.owners)
        assert report.clean, report.summary()
        return per_node

    async def owners(self) -> dict[str, str]:
        return await self.store.part_owners()


@contextlib.asynccontextmanager
async def rig_on(tmp_path: Path, nodes: int = 8, in_config: int = 7,
                 geometry: Geometry | None = None, target: str | None = None,
                 password_file: str | None = None) -> AsyncIterator[Rig]:
    """`nodes` node processes (2 drives each), the first `in_config` in the cluster file;
    the metadata store on `target` (a PostgreSQL URL) or a SQLite file."""
    with NodeCluster(tmp_path / "nodes", nodes, drives_per_node=2, secret=SECRET,
                     geometry=geometry) as nc:
        store = open_store(target or str(tmp_path / "meta.sqlite"),
                           password_file=password_file)
        await store.start()
        layouts = StoreLayouts(store)
        cfg = config(nc, list(range(in_config)), tmp_path / "state")
        try:
            async with ErasureCluster(cfg, layout_store=layouts, layout_poll=0,
                                      auto_repair=False) as c:
                r = Rig(c, store, layouts)
                r.nc = nc
                yield r
        finally:
            await store.close()
