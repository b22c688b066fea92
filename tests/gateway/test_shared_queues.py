"""The work the gateways share through the metadata store, on both backends, with two store
instances on one target standing for two gateways: repair claims never overlap and a lease
that ran out gives the record to the next claimer; an abandoned upload aborted by two
sweepers at once frees its parts once; deletion records begun by one are seen by the other;
an older gateway's queue files are moved into the store (and only once)."""

from __future__ import annotations

import asyncio
import json
import time

from erasure.codec import Scheme
from erasure.layout import PartLayout
from gateway.metadata import BucketRecord, PartRecord, UploadRecord
from gateway.store.erasurequeues import StoreDeletions, StoreRepairQueue, import_state_dir
from tests.support import storebackends

stores = storebackends.stores
pg_server = storebackends.pg_server


def layout(uid: str) -> dict:
    return PartLayout(uid, 10, Scheme(4, 2, 1 << 20), {i: f"n{i}" for i in range(6)},
                      [], 0).to_dict()


async def test_two_gateways_claiming_at_once_never_get_the_same_repair(stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    uids = [f"part{i:02d}.p1" for i in range(30)]
    for uid in uids:
        await one.repair_add(layout(uid), [1], "write: f01")
    got: list[str] = []
    for _ in range(10):
        a, b = await asyncio.gather(one.repair_claim(2, 600.0), two.repair_claim(2, 600.0))
        got += [e.part_uid for e in a + b]
    assert sorted(got) == uids  # each claimed by exactly one of them
    assert await one.repair_claim(5, 600.0) == [] and await two.repair_claim(5, 600.0) == []


async def test_a_lease_that_ran_out_gives_the_record_to_the_next_claimer(stores) -> None:
    target = stores.new_target()
    dead, alive = await stores.open(target), await stores.open(target)
    await dead.repair_add(layout("p.p1"), [0, 3], "read: f00")
    [held] = await dead.repair_claim(1, 600.0)
    assert await alive.repair_claim(1, 600.0) == []  # leased by a gateway still alive
    await alive.repair_add(layout("q.p1"), [2], "write")
    [short] = await alive.repair_claim(1, 0.0)  # a lease that has already run out
    assert short.part_uid == "q.p1"
    [again] = await dead.repair_claim(1, 600.0)  # the next claimer takes it
    assert (again.part_uid, again.indexes) == ("q.p1", [2])
    # the holder's resolve drops what it rebuilt; a fragment noted meanwhile stays, due
    await alive.repair_add(layout("p.p1"), [4], "read: f04")
    await dead.repair_resolve(held.part_uid, [0, 3])
    [rest] = await alive.repair_claim(1, 600.0)
    assert (rest.part_uid, rest.indexes) == ("p.p1", [4])
    assert await alive.repair_count() == 2


async def test_an_abandoned_upload_aborted_by_two_sweepers_frees_its_parts_once(stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    await one.create_bucket(BucketRecord("b", "alice", 1.0))
    await one.create_upload(UploadRecord("u1", "b", "k", "alice", 1.0))
    for n in (1, 2, 3):
        assert await one.put_part(PartRecord("u1", n, 1, "e", 1.0, {"part_uid": f"x.p{n}"}))
    assert await one.stale_uploads(time.time()) == await two.stale_uploads(time.time()) == ["u1"]
    results = await asyncio.gather(one.abort_upload("u1"), two.abort_upload("u1"))
    assert sorted(results) == [False, True]
    queued = await one.claim_orphans(10, 600.0)
    assert sorted(e.layout["part_uid"] for e in queued) == ["x.p1", "x.p2", "x.p3"]


async def test_a_deletion_begun_by_one_gateway_is_known_to_the_other(stores) -> None:
    target = stores.new_target()
    one, two = StoreDeletions(await stores.open(target)), StoreDeletions(await stores.open(target))
    await one.begin("d.p1")
    assert await two.known("d.p1") and await two.pending("d.p1")
    assert await two.unfinished() == ["d.p1"]
    await two.end("d.p1")
    assert await one.known("d.p1") and not await one.pending("d.p1")
    assert await one.all() == {"d.p1": True} and await one.unfinished() == []
    await one.forget("d.p1")  # written again under its old uid (a bucket marker)
    assert not await two.known("d.p1")


async def test_queue_files_of_an_older_gateway_are_moved_into_the_store_once(stores,
                                                                            tmp_path) -> None:
    store = await stores.open()
    state = tmp_path / "erasure"
    (state / "repair").mkdir(parents=True)
    (state / "deleting").mkdir()
    # the old formats, as a gateway before the shared queue wrote them
    (state / "repair" / "a.p1.json").write_text(json.dumps(
        {"layout": layout("a.p1"), "indexes": [2, 5], "reason": "write: f02", "since": 5.0}))
    (state / "repair" / ".b.p1.json.77.tmp").write_text("{")  # a write cut by a crash
    (state / "deleting" / "c.p1").write_text(json.dumps({"since": time.time(), "done": False}))
    (state / "deleting" / "d.p1").write_text(json.dumps({"since": time.time(), "done": True}))
    (state / "deleting" / "e.p1").write_text(json.dumps({"since": 1.0, "done": True}))  # old
    assert await import_state_dir(store, state) == (1, 3)
    [rec] = await StoreRepairQueue(store).records()
    assert (rec.layout.part_uid, rec.indexes, rec.reason) == ("a.p1", [2, 5], "write: f02")
    assert await store.deletions() == {"c.p1": False, "d.p1": True}
    assert not (state / "repair").exists() and not (state / "deleting").exists()
    assert await import_state_dir(store, state) == (0, 0)
    assert await store.repair_count() == 1


async def test_two_sweepers_claim_disjoint_orphans_and_a_dead_ones_lease_runs_out(
        stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    await one.queue_orphans([{"part_uid": f"o{i:02d}.p1"} for i in range(20)])
    got: list[str] = []
    for _ in range(5):
        a, b = await asyncio.gather(one.claim_orphans(2, 600.0), two.claim_orphans(2, 600.0))
        got += [e.layout["part_uid"] for e in a + b]
    assert sorted(got) == [f"o{i:02d}.p1" for i in range(20)]
    assert await two.claim_orphans(5, 600.0) == []
    await one.queue_orphans([{"part_uid": "late.p1"}])
    [e] = await one.claim_orphans(1, 0.0)  # claimed by a sweeper that dies: lease runs out
    [again] = await two.claim_orphans(1, 600.0)
    assert again.id == e.id


async def test_a_part_lease_has_one_holder_across_gateways(stores) -> None:
    """Issue 24 D5: moving a part home and healing it are done by one gateway at a time."""
    from erasure.leases import part_lease
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    takes = await asyncio.gather(*(s.lease_take("part/p1", f"gw{n}", 60)
                                   for n, s in enumerate([one, two] * 4)))
    assert sorted(set(takes)) == [False, True] and takes.count(True) >= 1
    holder = "gw0" if takes[0] else "gw1"
    other = "gw1" if holder == "gw0" else "gw0"
    assert await one.lease_take("part/p1", holder, 60)  # the holder extends it
    assert not await two.lease_take("part/p1", other, 60)
    await two.lease_release("part/p1", other)  # not its lease: nothing happens
    assert not await one.lease_take("part/p1", other, 60)
    await one.lease_release("part/p1", holder)
    assert await two.lease_take("part/p1", other, 0.2)
    await asyncio.sleep(0.3)  # a dead holder's lease runs out
    assert await one.lease_take("part/p1", holder, 60)
    async with part_lease(two, other, "p2") as mine:
        assert mine
        async with part_lease(one, holder, "p2") as theirs:
            assert not theirs
    async with part_lease(one, holder, "p2") as mine:  # given back at the end of the block
        assert mine
