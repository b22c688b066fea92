"""Both metadata stores (SQLite, PostgreSQL): migrations, S3 listing order and rollups, orphan
queue."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from gateway.metadata import (
    BucketRecord,
    ObjectRecord,
    PartRecord,
    UploadRecord,
    postgres,
    sqlite,
)
from gateway.metadata.keys import prefix_end
from gateway.metadata.store import BucketNotEmptyError, UploadChangedError
from tests.support import storebackends

# the fixtures (both backends)
pg_server, stores = storebackends.pg_server, storebackends.stores


def obj(key: str, version: str = "v1", layout_uid: str | None = None) -> ObjectRecord:
    uid = layout_uid or f"{version}.p1"
    return ObjectRecord(bucket="bkt", key=key, size=3, etag="e", last_modified=1.0, owner="alice",
                        version=version, parts=[{"number": 1, "size": 3, "etag": "e",
                                                 "layout": {"part_uid": uid}}])


def migrations(stores) -> list[str]:
    return (sqlite if stores.backend == "sqlite" else postgres).MIGRATIONS


@pytest.fixture
async def store(stores):
    s = await stores.open()
    await s.create_bucket(BucketRecord("bkt", "alice", 1.0))
    return s


async def test_schema_is_versioned_and_reopens(stores):
    target = stores.new_target()
    s = await stores.open(target)
    assert await s.schema_version() == len(migrations(stores)) >= 1
    await s.create_bucket(BucketRecord("bkt", "alice", 1.0))
    await s.close()
    s2 = await stores.open(target)
    assert (await s2.get_bucket("bkt")).owner == "alice"
    assert await s2.schema_version() == len(migrations(stores))
    if stores.backend == "sqlite":
        assert sqlite3.connect(target).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_newer_schema_is_refused(stores):
    target = stores.new_target()
    await (await stores.open(target)).close()
    if stores.backend == "sqlite":
        c = sqlite3.connect(target)
        c.execute("UPDATE schema_version SET version=99")
        c.commit()
        c.close()
    else:
        stores.server.psql("INSERT INTO zonegate_schema VALUES (99, 0)", db=target.rsplit("/", 1)[1])
    with pytest.raises(ValueError, match="newer"):
        await stores.open(target)


async def test_two_stores_migrating_at_once_agree(stores):
    """Gateways starting together on one empty store: one creates the schema, none fails."""
    target = stores.new_target()
    opened = await asyncio.gather(*(stores.open(target) for _ in range(4)))
    assert [await s.schema_version() for s in opened] == [len(migrations(stores))] * 4
    assert await opened[0].create_bucket(BucketRecord("b", "alice", 1.0)) is None
    assert (await opened[3].get_bucket("b")).owner == "alice"


async def test_bucket_create_is_idempotent_and_delete_needs_empty(store):
    assert (await store.create_bucket(BucketRecord("bkt", "bob", 2.0))).owner == "alice"
    await store.put_object(obj("k"))
    with pytest.raises(BucketNotEmptyError):
        await store.delete_bucket("bkt")
    await store.delete_object("bkt", "k")
    await store.create_upload(UploadRecord("u1", "bkt", "k2", "alice", 1.0))
    await store.put_part(PartRecord("u1", 1, 10, "e1", 1.0, {"part_uid": "x.p1"}))
    await store.claim_orphans()  # the deleted object's layout
    assert await store.delete_bucket("bkt")
    assert await store.get_bucket("bkt") is None and await store.get_upload("u1") is None
    assert [e.layout["part_uid"] for e in await store.claim_orphans()] == ["x.p1"]


async def test_listing_is_utf8_binary_order(store):
    keys = ["a", "Z", "é", "\U0001f600", "ab", "a/b", "\u00ff", "\uffff"]
    for k in keys:
        await store.put_object(obj(k))
    page = await store.list_objects("bkt", "", "", "", 1000)
    assert [o.key for o in page.items] == sorted(keys, key=lambda k: k.encode())


async def test_delimiter_rollup_counts_toward_limit_and_resumes(store):
    for k in ["a/1", "a/2", "b", "c/x/1", "c/y", "d"]:
        await store.put_object(obj(k))
    p1 = await store.list_objects("bkt", "", "/", "", 2)
    assert p1.prefixes == ["a/"] and [o.key for o in p1.items] == ["b"]
    assert p1.truncated and p1.next_marker == "b"
    p2 = await store.list_objects("bkt", "", "/", p1.next_marker, 2)
    assert p2.prefixes == ["c/"] and [o.key for o in p2.items] == ["d"]
    # A marker that is itself a rolled-up prefix skips everything under it.
    p3 = await store.list_objects("bkt", "", "/", "c/", 10)
    assert p3.prefixes == [] and [o.key for o in p3.items] == ["d"]
    p4 = await store.list_objects("bkt", "c/", "/", "", 10)
    assert p4.prefixes == ["c/x/"] and [o.key for o in p4.items] == ["c/y"]
    assert not p4.truncated


def test_prefix_end():
    assert prefix_end(b"a/") == b"a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None


async def test_overwrite_and_delete_queue_old_layouts(store):
    await store.put_object(obj("k", "v1"))
    assert await store.orphan_count() == 0
    await store.put_object(obj("k", "v2"))
    claimed = await store.claim_orphans()
    assert [e.layout["part_uid"] for e in claimed] == ["v1.p1"]
    # Leased: a second sweeper does not get the same entries.
    assert await store.claim_orphans() == []
    await store.done_orphans([e.id for e in claimed])
    await store.delete_object("bkt", "k")
    assert [e.layout["part_uid"] for e in await store.claim_orphans()] == ["v2.p1"]


async def test_conditional_put(store):
    assert await store.put_object(obj("k", "v1"), if_absent=True) is None
    assert (await store.put_object(obj("k", "v2"), if_absent=True)).version == "v1"
    assert await store.put_object(obj("k", "v3"), if_version="nope") is not None
    assert await store.put_object(obj("k", "v3"), if_version="v1") is None
    assert (await store.get_object("bkt", "k")).version == "v3"


async def test_upload_parts_replace_abort_and_complete(store):
    up = UploadRecord("u1", "bkt", "k", "alice", 1.0)
    await store.create_upload(up)
    await store.put_part(PartRecord("u1", 1, 10, "e1", 1.0, {"part_uid": "x.p1"}))
    await store.put_part(PartRecord("u1", 1, 10, "e2", 1.0, {"part_uid": "y.p1"}))
    await store.put_part(PartRecord("u1", 2, 10, "e3", 1.0, {"part_uid": "z.p2"}))
    assert [p.etag for p in await store.list_parts("u1")] == ["e2", "e3"]
    assert [e.layout["part_uid"] for e in await store.claim_orphans()] == ["x.p1"]
    # A completion naming a replaced part changes nothing.
    with pytest.raises(UploadChangedError):
        await store.put_object(obj("k", "u1", layout_uid="x.p1"), upload_id="u1")
    assert await store.get_object("bkt", "k") is None and await store.get_upload("u1") is not None
    # Complete with part 1 only: part 2 is freed with the upload.
    rec = obj("k", "u1", layout_uid="y.p1")
    assert await store.put_object(rec, upload_id="u1") is None
    assert await store.get_upload("u1") is None
    assert [e.layout["part_uid"] for e in await store.claim_orphans()] == ["z.p2"]
    assert not await store.put_part(PartRecord("u1", 3, 1, "e", 1.0, {"part_uid": "w.p3"}))


async def test_list_uploads_orders_and_paginates(store):
    for i, key in enumerate(["b", "a", "a", "c/1", "c/2"]):
        await store.create_upload(UploadRecord(f"u{i}", "bkt", key, "alice", float(10 - i)))
    page = await store.list_uploads("bkt", "", "/", "", "", 3)
    assert [(u.key, u.upload_id) for u in page.items] == [("a", "u1"), ("a", "u2"), ("b", "u0")]
    assert page.truncated
    page2 = await store.list_uploads("bkt", "", "/", "b", "", 3)
    assert page2.prefixes == ["c/"] and not page2.truncated
    page3 = await store.list_uploads("bkt", "", "", "a", "u1", 10)
    assert [u.upload_id for u in page3.items] == ["u2", "u0", "u3", "u4"]
    assert await store.abort_upload("u0")
    assert not await store.abort_upload("u0")


# ---- concurrent commits from several stores on one database (several gateways / workers) ---

async def _several(stores, n: int = 4):
    target = stores.new_target()
    opened = [await stores.open(target) for _ in range(n)]
    await opened[0].create_bucket(BucketRecord("bkt", "alice", 1.0))
    return opened


async def test_racing_conditional_puts_exactly_one_wins(stores):
    many = await _several(stores)
    results = await asyncio.gather(*(s.put_object(obj("k", f"v{i}"), if_absent=True)
                                     for i, s in enumerate(many * 3)))
    assert sum(r is None for r in results) == 1
    winner = (await many[0].get_object("bkt", "k")).version
    assert all(r.version == winner for r in results if r is not None)
    # If-Match on the winner's version: again exactly one, and only its old data is queued
    results = await asyncio.gather(*(s.put_object(obj("k", f"w{i}"), if_version=winner)
                                     for i, s in enumerate(many * 3)))
    assert sum(r is None for r in results) == 1
    assert [e.layout["part_uid"] for e in await many[1].claim_orphans()] == [f"{winner}.p1"]


async def test_racing_part_uploads_leak_nothing(stores):
    many = await _several(stores)
    await many[0].create_upload(UploadRecord("u1", "bkt", "k", "alice", 1.0))
    ok = await asyncio.gather(*(s.put_part(PartRecord("u1", 1, 10, f"e{i}", 1.0,
                                                      {"part_uid": f"x{i}.p1"}))
                                for i, s in enumerate(many * 3)))
    assert all(ok)
    kept = [p.layout["part_uid"] for p in await many[0].list_parts("u1")]
    freed = [e.layout["part_uid"] for e in await many[0].claim_orphans(100)]
    assert len(kept) == 1 and len(freed) == 11
    assert sorted(kept + freed) == sorted(f"x{i}.p1" for i in range(12))


async def test_racing_sweepers_never_claim_the_same_entry(stores):
    many = await _several(stores)
    ids = await many[0].queue_orphans([{"part_uid": f"o{i}"} for i in range(60)])
    claimed: list[int] = []

    async def sweep(s):
        while batch := await s.claim_orphans(limit=7):
            claimed.extend(e.id for e in batch)
            await asyncio.sleep(0)
    await asyncio.gather(*(sweep(s) for s in many))
    assert sorted(claimed) == sorted(ids)  # each entry exactly once


def _multipart(version: str, nparts: int = 64) -> ObjectRecord:
    parts = [{"number": n, "size": 8 << 20, "etag": f"{version}-{n}",
              "layout": {"part_uid": f"{version}.p{n}",
                         "placement": {str(i): f"node{i:02d}" for i in range(10)}}}
             for n in range(1, nparts + 1)]
    return ObjectRecord(bucket="bkt", key="big", size=(8 << 20) * nparts, etag=f"{version}-x",
                        last_modified=1.0, owner="alice", version=version, parts=parts)


async def test_big_part_lists_are_parsed_once_and_never_stale(stores):
    me, other = await _several(stores, 2)
    await me.put_object(_multipart("v1"))
    a, b = await me.get_object("bkt", "big"), await me.get_object("bkt", "big")
    assert a.parts is b.parts and a.parts == _multipart("v1").parts
    await other.put_object(_multipart("v2"))  # replaced through another gateway
    c = await me.get_object("bkt", "big")
    assert c.version == "v2" and c.parts == _multipart("v2").parts
    await other.delete_object("bkt", "big")
    assert await me.get_object("bkt", "big") is None


async def test_entries_waiting_for_nodes_are_woken_when_one_returns(store) -> None:
    """Issue 24 D6: a node's return makes the entries naming down nodes due, leased or not;
    pending write marks and other entries keep their time."""
    await store.queue_orphans([{"part_uid": "a.p1", "purge_nodes": ["n3"]},
                               {"part_uid": "b.p1", "purge_nodes": ["n3", "n4"]}], delay=60)
    await store.queue_orphans([{"part_uid": "c.p1", "pending": True},
                               {"part_uid": "d.p1"}], delay=60)
    assert await store.claim_orphans() == []
    await store.queue_orphans([{"part_uid": "e.p1", "purge_nodes": ["n3"]}])
    assert [e.layout["part_uid"] for e in await store.claim_orphans()] == ["e.p1"]  # leased
    assert await store.wake_orphans() == 3
    woken = sorted(e.layout["part_uid"] for e in await store.claim_orphans())
    assert woken == ["a.p1", "b.p1", "e.p1"]
    assert await store.wake_orphans() == 3  # claimed again (leased): woken again
    assert await store.orphan_count() == 5
