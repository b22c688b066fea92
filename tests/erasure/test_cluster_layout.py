"""The versioned cluster layout over real node processes (issue 25): a cluster adopts a new
version without a restart (a new node gets new fragments, a draining node none, a gone node
is never asked), parts keep their own scheme after a change of k+m (read, repaired and judged
by it), the healer and repair survive a node leaving the layout or the cluster file (the
`KeyError: 'node05'`), and nodes learn their drives' states (a draining drive takes no new
records) and say when a drive is new in a used slot until the layout registers it."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.clusterlayout import Change, apply_changes
from erasure.config import ClusterConfig
from erasure.layoutstore import FileLayoutStore, load_or_bootstrap
from erasure.repair import find_damage, heal, repair
from tests.support.erasurekit import put, read, where
from tests.support.nodeproc import NodeCluster, create_emulated_drive

SECRET = "layout-test-secret"


def config(nc: NodeCluster, ids: list[int], state: Path, k: int = 4, m: int = 2
           ) -> ClusterConfig:
    return ClusterConfig.from_dict({
        "secret": SECRET,
        "erasure": {"k": k, "m": m, "segment_size": 64 * 1024, "state_dir": str(state),
                    "node_timeout": 20},
        "nodes": [{"id": nc.ids[i], "url": nc.urls[i],
                   "drives": [str(d) for d in nc.drive_paths(i)]} for i in ids],
    }, source="test")


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("layout7")
    with NodeCluster(root, 7, drives_per_node=1, secret=SECRET) as nc:
        yield nc


async def apply(store: FileLayoutStore, cluster: ErasureCluster, *changes: Change) -> None:
    cur = await store.current()
    assert cur is not None
    assert await store.publish(apply_changes(cur, list(changes)), cur.version)
    assert await cluster.refresh_layout()


def count(parts) -> Counter[str]:
    return Counter(n for p in parts for nodes in p.fragments.values() for n in nodes)


async def test_add_drain_remove_a_node_by_layout(seven: NodeCluster, tmp_path: Path) -> None:
    cfg = config(seven, list(range(6)), tmp_path / "state")
    store = FileLayoutStore(tmp_path / "state")
    rng = random.Random(5)
    blobs = {f"a{i:03d}": rng.randbytes(rng.randrange(1, 200_000)) for i in range(30)}
    async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                              auto_repair=False) as c:
        assert c.layout.version == 1 and sorted(c.clients) == seven.ids[:6]
        layouts = {uid: await put(c, uid, b) for uid, b in blobs.items()}
        assert "node06" not in count(await c.scan("a"))
        # add node06: the running cluster adopts v2, node06 gets a client and new fragments
        await apply(store, c, Change("node add", {"id": "node06", "url": seven.urls[6],
                                                  "drives": [str(seven.drive_paths(6)[0])]}))
        assert c.layout.version == 2 and "node06" in c.clients and c.is_up("node06")
        more = {f"b{i:03d}": rng.randbytes(50_000) for i in range(40)}
        for uid, b in more.items():
            layouts[uid] = await put(c, uid, b)
        blobs.update(more)
        assert count(await c.scan("b"))["node06"] > 0
        # drain node00: still read, no new fragment goes there
        await apply(store, c, Change("node drain", {"id": "node00"}))
        assert "node00" in c.clients and "node00" not in c.placement.domain_of
        drained = {f"c{i:03d}": rng.randbytes(50_000) for i in range(40)}
        for uid, b in drained.items():
            layouts[uid] = await put(c, uid, b)
        blobs.update(drained)
        got = count(await c.scan("c"))
        assert got["node00"] == 0 and sum(got.values()) == 40 * 6
        for uid, b in blobs.items():
            assert await read(c, layouts[uid]) == b
        # remove node00 (gone): never asked again; reads decode around it, and healing a part
        # whose layout names it rebuilds that fragment elsewhere
        on00 = [uid for uid, lay in layouts.items() if "node00" in lay.placement.values()]
        assert on00
        await apply(store, c, Change("node remove", {"id": "node00"}))
        assert "node00" not in c.clients
        for uid in on00[:5]:
            assert await read(c, layouts[uid]) == blobs[uid]
            lay = layouts[uid]
            written = await heal(c, lay, [])
            assert set(written) == {i for i, n in lay.placement.items() if n == "node00"}
            assert "node00" not in written.values()
            frags = await where(c, uid)
            assert sorted(frags) == list(range(6))  # full width again, on known nodes
            assert len({n for ns in frags.values() for n in ns}) == 6
    # node00 still holds v3 (draining: no new records) in memory, as a removed node does
    # until it restarts; the next tests start from a fresh layout
    seven.restart(0)


async def test_healer_and_repair_survive_a_node_leaving_the_cluster_file(
        seven: NodeCluster, tmp_path: Path) -> None:
    """The issue's `KeyError: 'node05'`: a part queued for repair names a node that is no
    longer in the cluster (here: left the cluster file, no layout store)."""
    rng = random.Random(7)
    all_nodes = config(seven, list(range(7)), tmp_path / "state")
    blobs = {f"k{i:03d}": rng.randbytes(80_000) for i in range(25)}
    async with ErasureCluster(all_nodes, auto_repair=False) as c:
        layouts = {uid: await put(c, uid, b) for uid, b in blobs.items()}
    victims = [uid for uid, lay in layouts.items() if "node05" in lay.placement.values()]
    assert victims
    without = config(seven, [0, 1, 2, 3, 4, 6], tmp_path / "state")
    async with ErasureCluster(without, auto_repair=False) as c:
        # a read queues what it could not find (node05 is unknown now)
        for uid in victims:
            assert await read(c, layouts[uid]) == blobs[uid]
        for uid in victims[:3]:
            await c.repair_queue.add(layouts[uid], [], "read")
        report = await repair(c, "k", include_unreachable=True)
        assert not report.failed and not report.unrecoverable, report
        for uid in victims[:3]:
            frags = await where(c, uid)
            assert sorted(frags) == list(range(6))
        # the healer's path: a record naming node05
        uid = victims[3]
        written = await heal(c, layouts[uid], [])
        assert written and "node05" not in written.values()


async def test_old_parts_keep_their_scheme_after_a_switch(seven: NodeCluster,
                                                         tmp_path: Path) -> None:
    """After 4+2 -> 2+1, old 4+2 parts are neither damaged nor misplaced for repair and are
    read as 4+2; new parts are 2+1 (every read pass flagged old parts before)."""
    cfg = config(seven, list(range(7)), tmp_path / "state")
    store = FileLayoutStore(tmp_path / "state")
    rng = random.Random(9)
    async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                              auto_repair=False) as c:
        old = {f"s{i:03d}": rng.randbytes(70_000) for i in range(20)}
        layouts = {uid: await put(c, uid, b) for uid, b in old.items()}
        await apply(store, c, Change("erasure", {"k": 2, "m": 1}))
        assert (c.scheme.k, c.scheme.m) == (2, 1)
        new = await put(c, "s999", b"x" * 10_000)
        assert new.scheme.n == 3
        damaged, report = await find_damage(c, "s")
        assert damaged == [] and report.misplaced == [] and report.healthy == 21
        for uid, b in old.items():
            assert layouts[uid].scheme.n == 6
            assert await read(c, layouts[uid]) == b
        assert c.stats["fragment_errors"] == 0
        # a node weighted 4 takes a bigger share of new fragments (7 nodes, 3 per part);
        # one weighted 0 takes none
        await apply(store, c, Change("node weight", {"id": "node03", "weight": 4}),
                    Change("node weight", {"id": "node05", "weight": 0}))
        for i in range(60):
            await put(c, f"w{i:03d}", b"w" * 5_000)
        got = count(await c.scan("w"))
        assert got["node05"] == 0 and sum(got.values()) == 180
        others = [got[n] for n in c.clients if n not in ("node03", "node05")]
        assert got["node03"] > 1.5 * max(others), got


def _get(nc: NodeCluster, i: int, path: str) -> dict:
    req = urllib.request.Request(nc.urls[i] + path, headers=nc.headers(i, "GET", path))
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req,
                                                                          timeout=10) as r:
        return json.loads(r.read())


async def _until(cond, what: str, tries: int = 200) -> None:
    for _ in range(tries):
        if await asyncio.to_thread(cond):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_a_draining_drive_takes_no_new_records(tmp_path: Path) -> None:
    with NodeCluster(tmp_path / "nodes", 3, drives_per_node=2, secret=SECRET) as nc:
        cfg = config(nc, [0, 1, 2], tmp_path / "state", k=2, m=1)
        store = FileLayoutStore(tmp_path / "state")
        async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                                  auto_repair=False) as c:
            d0 = str(nc.drive_paths(0)[0])
            await apply(store, c, Change("drive drain", {"node": "node00", "path": d0}))
            await _until(lambda: _get(nc, 0, "/health/ready")["layout_version"] == 2,
                         "node00 told layout v2")
            before = [d["records"] for d in _get(nc, 0, "/v1/stats")["drives"]]
            for i in range(30):
                await put(c, f"d{i:03d}", b"y" * 20_000)
            stats = _get(nc, 0, "/v1/stats")["drives"]
            after = [d["records"] for d in stats]
            assert stats[0]["layout_state"] == "draining"
            assert after[0] == before[0] and after[1] == before[1] + 30


async def test_a_new_drive_in_a_used_slot_is_reported_until_registered(tmp_path: Path
                                                                       ) -> None:
    with NodeCluster(tmp_path / "nodes", 3, drives_per_node=2, secret=SECRET) as nc:
        cfg = config(nc, [0, 1, 2], tmp_path / "state", k=2, m=1)
        assert _get(nc, 1, "/health/ready")["new_drives"] == []
        ident = _get(nc, 1, "/v1/stats")["drives"][1]["identity"]
        # the drive at node01's second slot dies and a new empty one takes its place
        nc.terminate(1)
        d1 = nc.drive_paths(1)[1]
        shutil.rmtree(d1)
        create_emulated_drive(d1, nc.geometry)
        nc.restart(1, degraded=True)
        ready = _get(nc, 1, "/health/ready")
        assert ready["status"] == "degraded" and ready["new_drives"] == [1]
        drive = _get(nc, 1, "/v1/stats")["drives"][1]
        assert drive["replaced"] and drive["identity"] != ident
        # registered by the layout (`zonegate layout drive replace`): healthy again
        store = FileLayoutStore(tmp_path / "state")
        async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                                  auto_repair=False) as c:
            await apply(store, c, Change("drive replace", {"node": "node01", "path": str(d1)}))
            await _until(lambda: _get(nc, 1, "/health/ready")["status"] == "ready",
                         "node01 healthy after the registration")
        # and it stays registered across a restart
        nc.restart(1)
        assert _get(nc, 1, "/health/ready")["new_drives"] == []


async def test_bootstrap_publishes_the_cluster_file_once(seven: NodeCluster,
                                                         tmp_path: Path) -> None:
    store = FileLayoutStore(tmp_path / "state")
    first = await load_or_bootstrap(store, config(seven, list(range(6)), tmp_path / "state"))
    # a later start with another cluster file keeps the store's layout
    async with ErasureCluster(config(seven, list(range(7)), tmp_path / "state"),
                              layout_store=store, layout_poll=0, auto_repair=False) as c:
        assert c.layout == first and sorted(c.clients) == seven.ids[:6]


async def test_writes_in_flight_while_the_layout_changes(seven: NodeCluster,
                                                         tmp_path: Path) -> None:
    """Adopting versions while parts are written and read: every write succeeds at full
    width and reads back exact."""
    cfg = config(seven, list(range(6)), tmp_path / "state")
    store = FileLayoutStore(tmp_path / "state")
    rng = random.Random(13)
    blobs = {f"f{i:03d}": rng.randbytes(rng.randrange(1, 300_000)) for i in range(48)}
    async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                              auto_repair=False) as c:
        async def writer(uids: list[str]) -> dict:
            out = {}
            for uid in uids:
                out[uid] = await put(c, uid, blobs[uid])
                assert await read(c, out[uid]) == blobs[uid]
            return out

        async def changer() -> None:
            await asyncio.sleep(0.05)
            await apply(store, c, Change("node add", {"id": "node06", "url": seven.urls[6]}))
            await asyncio.sleep(0.05)
            await apply(store, c, Change("node drain", {"id": "node02"}))
            await asyncio.sleep(0.05)
            await apply(store, c, Change("erasure", {"k": 3, "m": 2}))

        uids = sorted(blobs)
        *done, _ = await asyncio.gather(*(writer(uids[i::4]) for i in range(4)), changer())
        layouts = {u: lay for d in done for u, lay in d.items()}
        assert c.layout.version == 4
        for uid, lay in layouts.items():
            assert lay.missing == [] and len(set(lay.placement.values())) == lay.scheme.n
            assert await read(c, lay) == blobs[uid]
        assert {lay.scheme.n for lay in layouts.values()} <= {6, 5}


async def test_a_swapped_single_drive_is_caught_by_the_recorded_identity(
        seven: NodeCluster, tmp_path: Path) -> None:
    """node03 has one drive: it cannot tell a new one by itself, the cluster can (the
    identity recorded for the slot and generation in the layout store)."""
    cfg = config(seven, list(range(7)), tmp_path / "state")
    store = FileLayoutStore(tmp_path / "state")
    drive = seven.drive_paths(3)[0]
    async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                              auto_repair=False) as c:
        assert c.layout_report()["problems"] == []
        seven.terminate(3)
        shutil.rmtree(drive)
        create_emulated_drive(drive, seven.geometry)
        seven.restart(3)  # "ready": nothing on the node remembers the slot
        await c.check_health()
        rep = c.layout_report()
        assert rep["drives_new"] == [f"node03:{drive}"], rep
        await apply(store, c, Change("drive replace", {"node": "node03", "path": str(drive)}))
        await c.check_health()
        rep = c.layout_report()
        assert rep["drives_new"] == [] and rep["drives_replaced"] == [f"node03:{drive}"]
    # another cluster object (another gateway) on the same store agrees
    async with ErasureCluster(cfg, layout_store=store, layout_poll=0,
                              auto_repair=False) as c2:
        assert c2.layout_report()["drives_new"] == []
