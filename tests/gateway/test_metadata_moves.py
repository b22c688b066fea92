"""The data mover's part index and leases in the metadata store (gateway/metadata/moves.py,
gateway/store/moves.py), on both backends, two store instances on one target standing for two
gateways: every recorded layout is paged exactly once, a compare-and-set of a layout is seen by
reads of the object (its current and its version rows alike) and loses to any concurrent
change, leases are exclusive until they run out and keep their journals."""

from __future__ import annotations

import asyncio
import time

from erasure.codec import Scheme
from erasure.layout import PartLayout
from gateway.metadata import BucketRecord, ObjectRecord, PartRecord, UploadRecord
from gateway.store.moves import StoreMoveLeases, StorePartIndex
from tests.support import storebackends

stores = storebackends.stores
pg_server = storebackends.pg_server
SCHEME = Scheme(4, 2, 1 << 20)


def lay(uid: str, first: int = 0) -> PartLayout:
    return PartLayout(uid, 10, SCHEME, {i: f"n{(i + first) % 8}" for i in range(6)}, [], 0)


def obj(bucket: str, key: str, version: str, nparts: int = 1, manifest: bool = False,
        vid: str = "null") -> ObjectRecord:
    return ObjectRecord(bucket, key, 10 * nparts, "e", time.time(), "alice", version,
                        parts=[{"number": i + 1, "size": 10, "etag": "e",
                                "layout": lay(f"{version}.p{i + 1}").to_dict()}
                               for i in range(nparts)],
                        manifest=lay(f"{version}.m").to_dict() if manifest else None,
                        version_id=vid)


async def fill(s) -> set[str]:
    """Objects (one multipart with a manifest, versions of one key), an upload's parts."""
    await s.create_bucket(BucketRecord("b1", "alice", time.time()))
    await s.create_bucket(BucketRecord("b2", "alice", time.time()))
    uids: set[str] = set()
    for i in range(7):
        await s.put_object(obj("b1", f"k{i:02d}é", f"w{i}"))
        uids.add(f"w{i}.p1")
    await s.put_object(obj("b2", "multi", "mp", nparts=3, manifest=True))
    uids |= {"mp.p1", "mp.p2", "mp.p3", "mp.m"}
    for j, vid in enumerate(["v1", "v2", "v3"]):
        await s.put_object(obj("b2", "versioned", f"ver{j}", vid=vid), versioning="enabled")
        uids.add(f"ver{j}.p1")
    await s.create_upload(UploadRecord("up1", "b1", "big", "alice", time.time()))
    for n in (1, 2):
        await s.put_part(PartRecord("up1", n, 10, "e", time.time(), lay(f"up1.{n}").to_dict()))
        uids.add(f"up1.{n}")
    return uids


async def walk(index: StorePartIndex, limit: int) -> list[tuple[str, PartLayout]]:
    out, cursor = [], ""
    while True:
        items, nxt = await index.page(cursor, limit)
        out += items
        if nxt is None:
            return out
        cursor = nxt


async def test_pages_list_every_recorded_part_once(stores) -> None:
    s = await stores.open()
    uids = await fill(s)
    for limit in (1, 2, 3, 1000):
        got = await walk(StorePartIndex(s), limit)
        assert sorted(p.part_uid for _, p in got) == sorted(uids), limit
        assert len({r for r, _ in got}) == len(got)


async def test_a_swap_is_what_reads_see_and_loses_to_any_change(stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    await fill(one)
    index, other = StorePartIndex(one), StorePartIndex(two)
    refs = {p.part_uid: (r, p) for r, p in await walk(index, 100)}
    # a current object's part: the object read follows
    ref, old = refs["w3.p1"]
    new = lay("w3.p1", first=2)
    assert await index.commit(ref, old, new)
    assert not await other.commit(ref, old, lay("w3.p1", first=4))  # old is gone
    assert await other.get(ref) == new
    rec = await two.get_object("b1", "k03é")
    assert PartLayout.from_dict(rec.parts[0]["layout"]) == new
    # a multipart object's second part and its manifest
    for uid in ("mp.p2", "mp.m"):
        ref, old = refs[uid]
        assert await index.commit(ref, old, lay(uid, first=5))
    rec = await one.get_object("b2", "multi")
    assert [PartLayout.from_dict(p["layout"]).placement[0] for p in rec.parts] == \
        ["n0", "n5", "n0"]
    assert PartLayout.from_dict(rec.manifest).placement[0] == "n5"
    # a noncurrent version: its version row changes, the current object does not
    ref, old = refs["ver0.p1"]
    assert await index.commit(ref, old, lay("ver0.p1", first=1))
    v1 = await one.get_object("b2", "versioned", "v1")
    assert PartLayout.from_dict(v1.parts[0]["layout"]).placement[0] == "n1"
    cur = await one.get_object("b2", "versioned")
    assert cur.version == "ver2" and PartLayout.from_dict(cur.parts[0]["layout"]) == \
        lay("ver2.p1")
    # an upload's part
    ref, old = refs["up1.2"]
    assert await index.commit(ref, old, lay("up1.2", first=3))
    [_, p2] = await one.list_parts("up1")
    assert PartLayout.from_dict(p2.layout).placement[0] == "n3"
    # a record rewritten meanwhile (the key overwritten: its null version's row may now
    # hold the new part) refuses the swap
    ref, old = refs["w5.p1"]
    await two.put_object(obj("b1", "k05é", "w5b"))
    assert not await index.commit(ref, old, lay("w5.p1", first=1))
    now = await index.get(ref)
    assert now is None or now.part_uid == "w5b.p1"
    rec = await one.get_object("b1", "k05é")
    assert rec.version == "w5b" and PartLayout.from_dict(rec.parts[0]["layout"]) == \
        lay("w5b.p1")


async def test_two_swaps_at_once_one_wins(stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    await fill(one)
    refs = {p.part_uid: (r, p) for r, p in await walk(StorePartIndex(one), 100)}
    ref, old = refs["w1.p1"]
    wins = await asyncio.gather(StorePartIndex(one).commit(ref, old, lay("w1.p1", 1)),
                                StorePartIndex(two).commit(ref, old, lay("w1.p1", 2)))
    assert sorted(wins) == [False, True]


async def test_leases_are_exclusive_until_they_run_out_and_keep_their_journal(stores) -> None:
    target = stores.new_target()
    a, b = StoreMoveLeases(await stores.open(target)), StoreMoveLeases(await stores.open(target))
    got = await asyncio.gather(a.claim("run", "gw-a", 600.0), b.claim("run", "gw-b", 600.0))
    assert sorted(got) == [False, True]
    (win, wname), (lose, lname) = ((a, "gw-a"), (b, "gw-b")) if got[0] else \
        ((b, "gw-b"), (a, "gw-a"))
    assert await win.claim("run", wname, 600.0)  # its own: extended
    assert await win.save("run", wname, {"cursor": "x", "moves": 3})
    assert not await lose.save("run", lname, {"cursor": "y"})
    assert await lose.get("run") == {"cursor": "x", "moves": 3}
    # a part's journal: the lease runs out (a crashed mover), the other finds and takes it
    assert await a.claim("part:u1", "gw-a", 0.0, {"ref": "r", "src": [[1, "n1"]]})
    assert await a.claim("part:u2", "gw-a", 600.0, {"ref": "r2"})
    await asyncio.sleep(0.01)
    assert await b.leftovers("part:") == [("part:u1", {"ref": "r", "src": [[1, "n1"]]})]
    assert await b.claim("part:u1", "gw-b", 600.0)
    assert await b.get("part:u1") == {"ref": "r", "src": [[1, "n1"]]}  # claimed, kept
    assert not await a.claim("part:u1", "gw-a", 600.0)
    await b.release("part:u1", "gw-b", drop=True)
    assert await a.get("part:u1") is None
    # a released run lease keeps its progress for the next mover
    await win.release("run", wname)
    assert await lose.claim("run", lname, 600.0)
    assert (await lose.get("run"))["moves"] == 3


async def test_find_names_every_record_of_a_part_by_its_meta_or_anywhere(stores) -> None:
    """erasure.records.PartRecords.find: a part is looked for where its archives' meta says
    (its key's versions, its upload), anywhere when the meta names neither; what it finds
    is what a commit swaps."""
    s = await stores.open()
    await fill(s)
    index = StorePartIndex(s)
    for uid, meta in [("w2.p1", {"bucket": "b1", "key": "k02é", "version": "w2"}),
                      ("mp.m", {"kind": "manifest", "upload": "mp",
                                "object": {"bucket": "b2", "key": "multi"}}),
                      ("ver0.p1", {"bucket": "b2", "key": "versioned"}),
                      ("up1.2", {"kind": "part", "bucket": "b1", "key": "big",
                                 "upload": "up1", "part": 2}),
                      ("mp.p3", {}), ("up1.1", {"k": "not the gateway's"})]:
        [(ref, got)] = await index.find(uid, meta)
        assert got == await index.get(ref) and got.part_uid == uid, uid
    # elsewhere than the meta says, or a bucket marker: not found
    assert await index.find("w2.p1", {"bucket": "b1", "key": "k03é"}) == []
    assert await index.find("w2.p1", {"kind": "bucket", "bucket": {"name": "b1"}}) == []
    assert await index.find("w2", {}) == []  # a uid is matched whole, not as a prefix
    # the found ref commits, the current object follows
    [(ref, old)] = await index.find("w4.p1", {})
    assert await index.commit(ref, old, lay("w4.p1", first=2))
    rec = await s.get_object("b1", "k04é")
    assert PartLayout.from_dict(rec.parts[0]["layout"]) == lay("w4.p1", first=2)
