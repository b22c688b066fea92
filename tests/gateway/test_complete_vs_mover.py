"""CompleteMultipartUpload racing the data mover's commit of one of the upload's parts, on
both metadata backends: whatever the order, the object records the layout whose fragments
exist (the one the mover committed, when its commit won), and no layout of a part the object
uses is queued for deletion (the sweeper purges a queued part's archives wherever they are).

The orders that broke: Complete read the upload's parts, the mover committed a new layout
for one of them, Complete wrote the object with the part's old layout (the mover then deleted
the old copy) and queued the new one as unused; on PostgreSQL the same inside Complete's own
transaction (its parts read and its write, with the mover's commit in between)."""

from __future__ import annotations

import asyncio
import time

import pytest

from erasure.codec import Scheme
from erasure.layout import PartLayout
from gateway.metadata import BucketRecord, ObjectRecord, PartRecord, UploadRecord
from gateway.store.moves import StorePartIndex
from tests.support import storebackends
from tests.support.gwcluster import until

stores = storebackends.stores
pg_server = storebackends.pg_server
SCHEME = Scheme(4, 2, 1 << 20)


def lay(uid: str, first: int = 0) -> PartLayout:
    return PartLayout(uid, 10, SCHEME, {i: f"n{(i + first) % 8}" for i in range(6)}, [], 0)


async def upload(s, upload_id: str = "up1") -> list[PartRecord]:
    await s.create_bucket(BucketRecord("b", "alice", time.time()))
    await s.create_upload(UploadRecord(upload_id, "b", "big", "alice", time.time()))
    for n in (1, 2):
        await s.put_part(PartRecord(upload_id, n, 10, "e", time.time(),
                                    lay(f"{upload_id}x.p{n}").to_dict()))
    return await s.list_parts(upload_id)


def completed(parts: list[PartRecord], upload_id: str = "up1") -> ObjectRecord:
    """The object Complete builds from the parts it read (gateway/ops/multipart.py)."""
    return ObjectRecord("b", "big", 20, "e-2", time.time(), "alice", upload_id,
                        parts=[{"number": p.number, "size": p.size, "etag": p.etag,
                                "layout": p.layout} for p in parts])


async def part_ref(s, number: int) -> tuple[str, PartLayout]:
    items, _ = await StorePartIndex(s).page("", 100)
    return next((r, p) for r, p in items if p.part_uid == f"up1x.p{number}")


async def queued(s) -> list[str]:
    return sorted(e.layout.get("part_uid", "") for e in await s.claim_orphans(1000))


async def recorded(s, number: int) -> PartLayout:
    rec = await s.get_object("b", "big")
    return PartLayout.from_dict(rec.parts[number - 1]["layout"])


async def test_a_move_committed_after_complete_read_the_parts_is_what_the_object_records(
        stores) -> None:
    s = await stores.open()
    parts = await upload(s)
    ref, old = await part_ref(s, 2)
    moved = lay("up1x.p2", first=3)
    assert await StorePartIndex(s).commit(ref, old, moved)  # between Complete's read and write
    assert await s.put_object(completed(parts), upload_id="up1") is None
    assert await recorded(s, 2) == moved
    assert await recorded(s, 1) == lay("up1x.p1")
    assert await queued(s) == []  # neither the moved part nor the other one freed
    # the object's refs now: the mover's next pass finds the part there
    items, _ = await StorePartIndex(s).page("", 100)
    assert {p.part_uid: p for _, p in items}["up1x.p2"] == moved


async def test_a_move_of_a_completed_part_fails_and_names_the_object_record(stores) -> None:
    s = await stores.open()
    parts = await upload(s)
    ref, old = await part_ref(s, 1)
    assert await s.put_object(completed(parts), upload_id="up1") is None
    # the mover planned on the upload's row: its commit there fails, the object keeps the
    # old layout (the mover then deletes only its new copies)
    assert not await StorePartIndex(s).commit(ref, old, lay("up1x.p1", first=1))
    assert await StorePartIndex(s).get(ref) is None
    assert await recorded(s, 1) == old


@pytest.mark.parametrize("stores", ["postgres"], indirect=True)
async def test_postgres_a_move_commit_inside_completes_transaction_waits_for_it(
        stores) -> None:
    """Complete is held inside its transaction after it read the upload's parts (a test
    connection locks the pending mark Complete releases in its write); the mover's commit of
    a part runs meanwhile. Either the commit waits and then fails (the part is the object's
    now), or it won and the object records what it committed."""
    import asyncpg

    target = stores.new_target()
    s, mover_side = await stores.open(target), await stores.open(target)
    parts = await upload(s)
    ref, old = await part_ref(s, 2)
    [mark] = await s.queue_orphans([{"part_uid": "manifest.p0", "pending": True}], 3600.0)
    password = stores.server.password_file.read_text().strip()
    holder = await asyncpg.connect(target, password=password)
    watcher = await asyncpg.connect(target, password=password)

    async def waiting() -> int:
        return await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
            "wait_event_type = 'Lock'")

    moved = lay("up1x.p2", first=3)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM orphans WHERE id=$1 FOR UPDATE", mark)
        complete = asyncio.create_task(s.put_object(completed(parts), upload_id="up1",
                                                    release=[mark]))

        async def complete_blocked() -> bool:
            return await waiting() >= 1

        await until(complete_blocked, "Complete never reached its write", pause=0.02)
        commit = asyncio.create_task(StorePartIndex(mover_side).commit(ref, old, moved))

        async def commit_settled() -> bool:
            return commit.done() or await waiting() >= 2

        await until(commit_settled, "the mover's commit neither ended nor waited", pause=0.02)
        await tx.commit()
        assert await complete is None
        won = await commit
    finally:
        await holder.close()
        await watcher.close()
    assert await recorded(s, 2) == (moved if won else old)
    assert not won  # it waited for Complete, then found the part gone from the upload
    assert await queued(s) == []
