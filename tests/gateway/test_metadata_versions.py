"""Object versions and delete markers in both store backends: what stays current, what is
queued for deletion, listing order and paging, and the migration of existing objects."""

from __future__ import annotations

import sqlite3

from gateway.metadata import BucketRecord, ObjectRecord
from gateway.metadata.store import DeleteItem, VersionRecord
from gateway.metadata.versionids import new_version_id
from tests.support import storebackends

pg_server = storebackends.pg_server
stores = storebackends.stores


def rec(key: str, w: str, vid: str = "null", bucket: str = "b") -> ObjectRecord:
    return ObjectRecord(bucket, key, 1, "e" + w, 1.0, "alice", w, version_id=vid,
                        parts=[{"number": 1, "size": 1, "etag": "e",
                                "layout": {"part_uid": w + ".p1"}}])


def marker(key: str, vid: str, layout: bool = True) -> VersionRecord:
    return VersionRecord("b", key, 0, "", 2.0, "alice", "m" + vid, version_id=vid,
                         manifest={"part_uid": f"dm:{vid}"} if layout else None)


async def queued(s) -> list[str]:
    return sorted(e.layout["part_uid"] for e in await s.claim_orphans(1000))


async def versions(s, prefix: str = "") -> list[tuple[str, str, bool, bool]]:
    """(key, version id, is_latest, delete_marker) of every version in bucket b."""
    page = await s.list_versions("b", prefix, "", "", "", 1000)
    return [(v.key, v.version_id, v.is_latest, v.delete_marker) for v in page.items]


async def test_enabled_versioning_keeps_old_versions_and_their_data(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    assert await s.put_object(rec("k", "w1")) is None
    assert await s.put_object(rec("k", "w2", "V2"), versioning="enabled") is None
    assert await s.put_object(rec("k", "w3", "V3"), versioning="enabled") is None
    assert await queued(s) == []
    cur = await s.get_object("b", "k")
    assert (cur.version, cur.version_id) == ("w3", "V3")
    old = await s.get_object("b", "k", "null")
    assert isinstance(old, VersionRecord) and old.version == "w1" and not old.is_latest
    assert (await s.get_object("b", "k", "V3")).is_latest
    assert await s.get_object("b", "k", "nope") is None
    assert await versions(s) == [("k", "V3", True, False), ("k", "V2", False, False),
                                 ("k", "null", False, False)]
    # a conditional put is checked against the current version
    assert (await s.put_object(rec("k", "w4", "V4"), if_version="w1",
                               versioning="enabled")).version == "w3"
    assert (await s.put_object(rec("k", "w4", "V4"), if_absent=True,
                               versioning="enabled")).version == "w3"
    # suspended: the null version is replaced (queued), the others stay
    assert await s.put_object(rec("k", "w5"), versioning="suspended") is None
    assert await queued(s) == ["w1.p1"]
    assert await versions(s) == [("k", "null", True, False), ("k", "V3", False, False),
                                 ("k", "V2", False, False)]
    # off on a versioned key behaves as suspended (the null version only)
    assert await s.put_object(rec("k", "w6", "ignored")) is None
    assert await queued(s) == ["w5.p1"]
    assert (await s.get_object("b", "k")).version_id == "null"


async def test_delete_markers_hide_the_object_until_removed(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    await s.put_object(rec("k", "w1", "V1"), versioning="enabled")
    m = await s.put_delete_marker(marker("k", "M1"), "enabled")
    assert (m.delete_marker, m.is_latest, m.version_id, m.size) == (True, True, "M1", 0)
    assert await s.get_object("b", "k") is None
    assert (await s.head_version("b", "k")).delete_marker
    assert (await s.list_objects("b", "", "", "", 10)).items == []
    assert (await s.get_object("b", "k", "V1")).version == "w1"
    assert await queued(s) == []
    # a second marker goes on top; deleting the newest still leaves a marker newest
    await s.put_delete_marker(marker("k", "M2", layout=False), "enabled")
    assert (await s.delete_version("b", "k", "M2")).delete_marker
    assert await s.get_object("b", "k") is None
    # removing the last marker brings V1 back; the marker's archive part is freed
    assert (await s.delete_version("b", "k", "M1")).version_id == "M1"
    assert (await s.get_object("b", "k")).version_id == "V1"
    assert [o.key for o in (await s.list_objects("b", "", "", "", 10)).items] == ["k"]
    assert await queued(s) == ["dm:M1"]
    # suspended: a null marker replaces the null version (queued)
    await s.put_object(rec("k", "w2"), versioning="suspended")
    await s.put_delete_marker(marker("k", "ignored"), "suspended")
    assert await versions(s) == [("k", "null", True, True), ("k", "V1", False, False)]
    assert await queued(s) == ["w2.p1"]
    # the bucket is not empty while versions or markers remain
    await s.delete_version("b", "k", "V1")
    assert await queued(s) == ["w1.p1"]
    try:
        await s.delete_bucket("b")
        raise AssertionError("deleted a bucket holding a delete marker")
    except Exception as e:
        assert type(e).__name__ == "BucketNotEmptyError"
    await s.delete_version("b", "k", "null")
    assert await s.delete_bucket("b")


async def test_deleting_the_current_version_promotes_the_next_newest(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    for i in range(3):
        await s.put_object(rec("k", f"w{i}", f"V{i}"), versioning="enabled")
    assert (await s.delete_version("b", "k", "V1")).is_latest is False
    assert (await s.get_object("b", "k")).version_id == "V2"
    assert (await s.delete_version("b", "k", "V2")).is_latest
    assert (await s.get_object("b", "k")).version_id == "V0"
    assert await s.delete_version("b", "k", "V2") is None
    assert (await s.delete_object("b", "k")).version_id == "V0"
    assert await s.head_version("b", "k") is None
    assert await queued(s) == ["w0.p1", "w1.p1", "w2.p1"]


async def test_delete_many_mixes_versions_markers_and_plain_deletes(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    await s.put_object(rec("a", "wa", "Va"), versioning="enabled")
    await s.put_object(rec("b", "wb", "Vb"), versioning="enabled")
    await s.put_object(rec("c", "wc"), versioning="enabled")  # still needs its own id
    got = await s.delete_many("b", [DeleteItem("a", "Va"), DeleteItem("b", marker=marker("x", "Mb")),
                                    DeleteItem("nokey", "V0"), DeleteItem("c")], "enabled")
    assert [g and g.version_id for g in got] == ["Va", "Mb", None, "null"]
    assert got[1].key == "b"  # the item's key, not the marker's
    assert await versions(s) == [("b", "Mb", True, True), ("b", "Vb", False, False)]
    assert await queued(s) == ["wa.p1", "wc.p1"]


async def test_version_listing_pages_resume_inside_a_key(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    want = []
    for key in ["a", "d/1", "d/2", "z", "é"]:  # binary order
        ids = [new_version_id() for _ in range(3)]
        for i, vid in enumerate(ids):
            await s.put_object(rec(key, f"{key}{i}", vid), versioning="enabled")
        want += [(key, vid, i == 2) for i, vid in reversed(list(enumerate(ids)))]
    for limit in (1, 2, 4, 1000):
        seen, km, vm = [], "", ""
        while True:
            page = await s.list_versions("b", "", "", km, vm, limit)
            assert len(page.items) <= limit
            seen += [(v.key, v.version_id, v.is_latest) for v in page.items]
            if not page.truncated:
                break
            km, vm = page.next_marker, page.next_version_marker
        assert seen == want, limit
    page = await s.list_versions("b", "", "/", "", "", 4)
    assert [v.key for v in page.items] == ["a"] * 3 and page.prefixes == ["d/"]
    assert (page.truncated, page.next_marker, page.next_version_marker) == (True, "d/", None)
    page = await s.list_versions("b", "", "/", "d/", "", 10)
    assert [v.key for v in page.items] == ["z"] * 3 + ["é"] * 3 and not page.truncated


async def test_tags_and_acls_are_per_version(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    await s.put_object(rec("k", "w1", "V1"), versioning="enabled")
    await s.put_object(rec("k", "w2", "V2"), versioning="enabled")
    assert await s.put_object_tags("b", "k", "V1", {"old": "1"})
    assert await s.put_object_tags("b", "k", None, {"new": "2"})
    assert (await s.get_object("b", "k", "V1")).tags == {"old": "1"}
    assert (await s.get_object("b", "k")).tags == {"new": "2"}
    assert (await s.get_object("b", "k", "V2")).tags == {"new": "2"}
    await s.put_delete_marker(marker("k", "M"), "enabled")
    assert not await s.put_object_acl("b", "k", None, [])   # no current object
    assert not await s.put_object_acl("b", "k", "M", [])    # a marker has none
    assert await s.put_object_acl("b", "k", "V2", [{"p": "READ"}])
    await s.delete_version("b", "k", "M")
    assert (await s.get_object("b", "k")).acl == [{"p": "READ"}]


async def test_tag_and_acl_changes_commit_only_over_the_other_field_they_carry(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    await s.put_object(rec("k", "w1", "V1"), versioning="enabled")
    assert not await s.put_object_tags("b", "k", "V1", {"t": "1"}, if_acl=[{"p": "READ"}])
    assert await s.put_object_tags("b", "k", "V1", {"t": "1"}, if_acl=None)
    assert not await s.put_object_acl("b", "k", "V1", [{"p": "READ"}], if_tags={})
    assert await s.put_object_acl("b", "k", None, [{"p": "READ"}], if_tags={"t": "1"})
    assert await s.put_object_tags("b", "k", "V1", {"t": "2"}, if_acl=[{"p": "READ"}])
    got = await s.get_object("b", "k", "V1")
    assert (got.tags, got.acl) == ({"t": "2"}, [{"p": "READ"}])


async def test_a_batch_of_markers_shares_one_part_freed_once(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    lay = {"part_uid": "dmb:batch1"}
    ms = [VersionRecord("b", f"k{i}", 0, "", 2.0, "alice", f"m{i}", version_id=f"M{i}",
                        manifest=lay) for i in range(3)]
    (mark,) = await s.queue_orphans([{"part_uid": "dmb:batch1", "pending": True}])
    got = await s.delete_many("b", [DeleteItem(m.key, marker=m) for m in ms], "enabled",
                              release=[mark])
    assert [g.version_id for g in got] == ["M0", "M1", "M2"]
    assert await queued(s) == []                                  # the mark went with it
    members = [(m.key, m.version_id) for m in ms]
    assert await s.live_markers("b", "dmb:batch1", members) == members
    assert await s.live_markers("b", "dmb:other", members) == []
    await s.delete_many("b", [DeleteItem("k0", "M0"), DeleteItem("k1", "M1")])
    assert await queued(s) == ["dmb:batch1"]                      # once for both
    assert await s.live_markers("b", "dmb:batch1", members) == [("k2", "M2")]
    # The sweeper's rewrite: only while every moved marker still has the old part.
    new = {"part_uid": "dmb:batch2"}
    assert not await s.move_markers("b", "dmb:batch1", [("k1", "M1", new), ("k2", "M2", new)])
    (mark,) = await s.queue_orphans([{"part_uid": "dmb:batch2", "pending": True}])
    assert await s.move_markers("b", "dmb:batch1", [("k2", "M2", new)], release=[mark])
    assert await queued(s) == []
    assert await s.live_markers("b", "dmb:batch1", members) == []
    assert (await s.get_object("b", "k2", "M2")).manifest == new
    await s.delete_version("b", "k2", "M2")
    assert await queued(s) == ["dmb:batch2"]
    assert await s.live_markers("b", "dmb:batch2", members) == []


async def test_part_owners_counts_every_version_and_marker(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    await s.put_object(rec("k", "w1", "V1"), versioning="enabled")
    await s.put_delete_marker(marker("k", "M1"), "enabled")
    owners = await s.part_owners()
    assert owners["w1.p1"] == owners["dm:M1"] == "live"


def before_versions(migrations: list[str]) -> int:
    """The schema version just before the versions table came."""
    return next(i for i, m in enumerate(migrations) if "CREATE TABLE versions" in m)


async def test_migration_makes_existing_objects_null_versions(stores) -> None:
    """A store an older gateway left (the migrations before the versions table, an object in
    it) is upgraded at open: the object becomes its key's null version."""
    from gateway.metadata import postgres, sqlite
    target = stores.new_target()
    row = ("b", b"k", 1, "e", 1.0, "alice", "w1", "{}", "{}", "{}",
           '[{"number": 1, "size": 1, "etag": "e", "layout": {"part_uid": "w1.p1"}}]')
    cols = "bucket, key, size, etag, last_modified, owner, version, headers, user_meta, " \
           "checksum, parts"
    if stores.backend == "sqlite":
        v = before_versions(sqlite.MIGRATIONS)
        c = sqlite3.connect(target)
        c.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        c.execute("INSERT INTO schema_version VALUES (?)", (v,))
        for m in sqlite.MIGRATIONS[:v]:
            c.executescript(m)
        c.execute("INSERT INTO buckets (name, owner, created, region) VALUES "
                  "('b', 'alice', 1.0, 'us-east-1')")
        c.execute(f"INSERT INTO objects ({cols}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
        c.commit()
        c.close()
    else:
        import asyncpg
        v = before_versions(postgres.MIGRATIONS)
        c = await asyncpg.connect(target, password=stores.server.password_file.read_text()
                                  .strip())
        await c.execute("CREATE TABLE zonegate_schema (version INTEGER PRIMARY KEY, "
                        "applied DOUBLE PRECISION NOT NULL)")
        for n, m in enumerate(postgres.MIGRATIONS[:v]):
            await c.execute(m)
            await c.execute("INSERT INTO zonegate_schema VALUES ($1, 0)", n + 1)
        await c.execute("INSERT INTO buckets (name, owner, created, region) VALUES "
                        "('b', 'alice', 1.0, 'us-east-1')")
        await c.execute(f"INSERT INTO objects ({cols}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,"
                        "$10,$11)", *row)
        await c.close()
    s = await stores.open(target)
    assert (await s.get_object("b", "k")).version_id == "null"
    assert (await s.get_object("b", "k", "null")).version == "w1"
    assert (await s.head_version("b", "k")).is_latest
    await s.put_object(rec("k", "w2", "V2"), versioning="enabled")
    assert [v.version_id for v in (await s.list_versions("b", "", "", "", "", 9)).items] \
        == ["V2", "null"]
    assert await queued(s) == []
    assert (await s.part_owners())["w1.p1"] == "live"


async def test_concurrent_writes_to_one_key_keep_every_version(stores) -> None:
    """Many puts, markers and deletes of one key at once (PostgreSQL: on several pooled
    connections): every enabled put is kept, versions stay ordered, the current object is the
    newest non-marker, and each replaced null version is queued exactly once."""
    import asyncio
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    ids = [f"V{i:03d}" for i in range(24)]
    await asyncio.gather(*(s.put_object(rec("k", f"w{i}", vid), versioning="enabled")
                           for i, vid in enumerate(ids)),
                         *(s.put_object(rec("k", f"n{i}"), versioning="suspended")
                           for i in range(8)),
                         *(s.put_delete_marker(marker("k", f"M{i}", layout=False), "enabled")
                           for i in range(4)))
    got = await versions(s)
    assert sorted(v[1] for v in got if v[1].startswith("V")) == ids
    assert len([v for v in got if v[1] == "null"]) == 1
    assert [v[2] for v in got] == [True] + [False] * (len(got) - 1)
    cur = await s.get_object("b", "k")
    newest_object = next(v for v in got if not v[3])
    assert (cur is None) == got[0][3] and (cur is None or cur.version_id == newest_object[1])
    assert len(await queued(s)) == 7  # 8 null versions written, 7 replaced
    # concurrent lifecycle claims: each bucket to one worker
    for b in ("l1", "l2", "l3", "l4"):
        await s.create_bucket(BucketRecord(b, "alice", 1.0))
        await s.put_bucket_config(b, "lifecycle", "{}")
    claims = await asyncio.gather(*(s.lifecycle_claim(f"w{i}", 5, 600.0, limit=2)
                                    for i in range(4)))
    names = [c.bucket for cl in claims for c in cl]
    assert sorted(names) == ["l1", "l2", "l3", "l4"]


async def test_racing_first_writes_of_a_key_one_if_absent_wins(stores) -> None:
    """Conditional first writes of fresh keys race (nothing to lock yet on PostgreSQL): one
    wins per key, whatever the versioning, and nothing it wrote is queued."""
    import asyncio
    where = stores.new_target()
    many = [await stores.open(where) for _ in range(3)]  # several pools / connections
    target = many[0]
    await target.create_bucket(BucketRecord("b", "alice", 1.0))
    for n in range(12):
        key = f"fresh{n}"
        results = await asyncio.gather(*(
            s.put_object(rec(key, f"w{n}-{i}", f"V{n}-{i}"), if_absent=True,
                         versioning=("off", "enabled", "suspended")[i % 3])
            for i, s in enumerate(many * 4)))
        assert sum(r is None for r in results) == 1, key
        assert len(await versions(target, key)) == 1
    assert await queued(target) == []


async def test_overwrites_racing_tag_changes_keep_one_current_version(stores) -> None:
    """Unversioned overwrites of one key (PostgreSQL: the null version's row rewritten in
    place) racing tag changes and from several stores: one null version, the current object
    is it, each replaced version's data queued exactly once; a store counts the puts whose
    commit freed something (the gateway wakes its sweeper for those only)."""
    import asyncio
    where = stores.new_target()
    many = [await stores.open(where) for _ in range(3)]
    s = many[0]
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    before = s.freeing_puts
    await s.put_object(rec("k", "w0"))
    assert s.freeing_puts == before  # a new key frees nothing
    await asyncio.gather(*(m.put_object(rec("k", f"w{i}")) for i, m in
                           zip(range(1, 13), many * 4, strict=True)),
                         *(m.put_object_tags("b", "k", None, {"t": str(i)})
                           for i, m in enumerate(many * 2)))
    got = await versions(s)
    assert [v[1] for v in got] == ["null"]
    cur = await s.get_object("b", "k")
    head = await s.head_version("b", "k")
    assert cur is not None and head is not None and cur.version == head.version
    assert await queued(s) == sorted(f"w{i}.p1" for i in range(13) if f"w{i}" != cur.version)
    assert sum(m.freeing_puts for m in many) - before == 12
