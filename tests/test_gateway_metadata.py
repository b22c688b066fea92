"""The SQLite metadata store: migrations, S3 listing order and rollups, orphan queue."""

from __future__ import annotations

import sqlite3

import pytest

from gateway.metadata import (
    BucketRecord,
    ObjectRecord,
    PartRecord,
    SqliteStore,
    UploadRecord,
)
from gateway.metadata.sqlite import MIGRATIONS, prefix_end
from gateway.metadata.store import BucketNotEmptyError, UploadChangedError


def obj(key: str, version: str = "v1", layout_uid: str | None = None) -> ObjectRecord:
    uid = layout_uid or f"{version}.p1"
    return ObjectRecord(bucket="bkt", key=key, size=3, etag="e", last_modified=1.0, owner="alice",
                        version=version, parts=[{"number": 1, "size": 3, "etag": "e",
                                                 "layout": {"part_uid": uid}}])


@pytest.fixture
async def store(tmp_path):
    s = SqliteStore(tmp_path / "meta.sqlite")
    await s.create_bucket(BucketRecord("bkt", "alice", 1.0))
    yield s
    await s.close()


async def test_schema_is_versioned_and_reopens(tmp_path):
    p = tmp_path / "m.sqlite"
    s = SqliteStore(p)
    assert await s.schema_version() == len(MIGRATIONS)
    await s.create_bucket(BucketRecord("bkt", "alice", 1.0))
    await s.close()
    s2 = SqliteStore(p)
    assert (await s2.get_bucket("bkt")).owner == "alice"
    assert await s2.schema_version() == len(MIGRATIONS)
    await s2.close()
    assert sqlite3.connect(p).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "m.sqlite"
    await SqliteStore(p).close()
    c = sqlite3.connect(p)
    c.execute("UPDATE schema_version SET version=99")
    c.commit()
    c.close()
    with pytest.raises(ValueError, match="newer"):
        SqliteStore(p)


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
