"""Bucket configuration documents, ACLs, users, object tags and lifecycle leases, on both
store backends."""

from __future__ import annotations

import pytest

from gateway.metadata import BucketRecord, ObjectRecord
from gateway.metadata.store import UserRecord
from tests.support import storebackends

pg_server = storebackends.pg_server
stores = storebackends.stores

GRANTS = [{"grantee": {"type": "CanonicalUser", "id": "bob"}, "permission": "READ"}]


async def test_configs_are_kept_per_kind_and_go_with_the_bucket(stores) -> None:
    s = await stores.open()
    assert not await s.put_bucket_config("b", "cors", "{}")  # no such bucket
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    assert await s.put_bucket_config("b", "cors", '{"rules": [1]}')
    assert await s.put_bucket_config("b", "versioning", '"Enabled"')
    assert await s.put_bucket_config("b", "cors", '{"rules": [2]}')
    assert await s.get_bucket_config("b", "cors") == '{"rules": [2]}'
    assert await s.bucket_configs("b") == {"cors": '{"rules": [2]}', "versioning": '"Enabled"'}
    assert await s.put_bucket_config("b", "cors", None)
    assert await s.get_bucket_config("b", "cors") is None
    with pytest.raises(ValueError):
        await s.put_bucket_config("b", "acl", "[]")
    assert await s.delete_bucket("b")
    await s.create_bucket(BucketRecord("b", "alice", 2.0))
    assert await s.bucket_configs("b") == {}


async def test_a_requests_first_read_is_the_bucket_its_configs_and_the_object(stores) -> None:
    """bucket_and_configs and read_for_get (one statement on PostgreSQL) answer what
    get_bucket, bucket_configs and get_object answer, absent bucket and key included."""
    s = await stores.open()
    assert await s.bucket_and_configs("b") == (None, {})
    assert await s.read_for_get("b", "k") == (None, {}, None)
    await s.create_bucket(BucketRecord("b", "alice", 1.0, acl=GRANTS))
    assert await s.bucket_and_configs("b") == (await s.get_bucket("b"), {})
    assert await s.read_for_get("b", "k") == (await s.get_bucket("b"), {}, None)
    await s.put_bucket_config("b", "versioning", '{"Status": "Enabled"}')
    await s.put_bucket_config("b", "cors", '{"rules": [1]}')
    key = "k/é\x00\U0001F600"
    await s.put_object(ObjectRecord("b", key, 3, "e", 1.0, "alice", "w1", tags={"a": "1"},
                                    parts=[{"number": 1, "size": 3, "etag": "e",
                                            "layout": {"part_uid": "u1"}}]))
    b, configs, obj = await s.read_for_get("b", key)
    assert b == await s.get_bucket("b") and b.acl == GRANTS
    assert configs == await s.bucket_configs("b") == {"cors": '{"rules": [1]}',
                                                      "versioning": '{"Status": "Enabled"}'}
    assert obj == await s.get_object("b", key) and obj.key == key and obj.tags == {"a": "1"}
    assert await s.bucket_and_configs("b") == (b, configs)
    assert (await s.read_for_get("b", "other"))[2] is None


async def test_acls_and_tags_are_stored_with_bucket_and_object(stores) -> None:
    s = await stores.open()
    assert not await s.put_bucket_acl("b", GRANTS)
    await s.create_bucket(BucketRecord("b", "alice", 1.0, acl=[]))
    assert (await s.get_bucket("b")).acl == []
    assert await s.put_bucket_acl("b", GRANTS)
    assert (await s.list_buckets())[0].acl == GRANTS
    await s.put_object(ObjectRecord("b", "k", 1, "e", 1.0, "alice", "w1", tags={"a": "1"},
                                    acl=GRANTS))
    got = await s.get_object("b", "k")
    assert (got.tags, got.acl, got.version_id) == ({"a": "1"}, GRANTS, "null")
    assert await s.put_object_tags("b", "k", None, {"é": "€"})
    assert await s.put_object_acl("b", "k", "null", None)
    assert not await s.put_object_tags("b", "k", "no-such-version", {})
    assert not await s.put_object_acl("b", "nokey", None, [])
    got = await s.get_object("b", "k")
    assert (got.tags, got.acl) == ({"é": "€"}, None)


async def test_users_are_added_once_listed_and_removed(stores) -> None:
    s = await stores.open()
    u = UserRecord("AK2", "secret", "cid2", "Bob", 5.0)
    assert await s.add_user(u)
    assert not await s.add_user(UserRecord("AK2", "other", "x", "x", 6.0))
    assert await s.add_user(UserRecord("AK1", "s", "cid1", "Al", 5.0))
    assert await s.get_user("AK2") == u
    assert [x.access_key for x in await s.list_users()] == ["AK1", "AK2"]
    assert await s.remove_user("AK2")
    assert not await s.remove_user("AK2")
    assert await s.get_user("AK2") is None


@pytest.mark.parametrize("key", [
    "AK\udcff",        # a header byte 0xff, as the auth code reads it (surrogate escape)
    "\udcc3(",         # a cut two-byte sequence
    "AK\x00X",         # a NUL (%00 in a query): PostgreSQL's text cannot hold it
    "AK\udced\udca0\udc80",  # an encoded surrogate (not UTF-8)
])
async def test_a_key_no_user_can_have_is_unknown_not_an_error(stores, key) -> None:
    """Issue 24 D3: get_user raised UnicodeEncodeError (a 500 for the request) on SQLite."""
    s = await stores.open()
    assert await s.add_user(UserRecord("AK", "secret", "cid", "Al", 5.0))
    assert await s.get_user(key) is None
    assert await s.get_user("AK") is not None


async def test_a_lifecycle_day_is_worked_by_one_worker_resumed_and_run_once(stores) -> None:
    s = await stores.open()
    for b in ("b1", "b2", "b3"):
        await s.create_bucket(BucketRecord(b, "alice", 1.0))
    await s.put_bucket_config("b1", "lifecycle", '{"rules": []}')
    await s.put_bucket_config("b2", "lifecycle", '{"rules": []}')
    claims = await s.lifecycle_claim("w1", 10, lease=600.0)
    assert [(c.bucket, c.day, c.marker) for c in claims] == [("b1", 10, ""), ("b2", 10, "")]
    assert await s.lifecycle_claim("w2", 10, lease=600.0) == []   # leased to w1
    assert await s.lifecycle_progress("b1", "w1", 10, "key/5", 600.0)
    assert not await s.lifecycle_progress("b1", "w2", 10, "key/9", 600.0)
    assert await s.lifecycle_done("b2", "w1", 10)
    # w1 dies; its lease runs out (here: renewed with 0 s) and w2 resumes b1 where w1 was
    assert await s.lifecycle_progress("b1", "w1", 10, "key/6", 0.0)
    claims = await s.lifecycle_claim("w2", 10, lease=600.0)
    assert [(c.bucket, c.marker) for c in claims] == [("b1", "key/6")]
    assert not await s.lifecycle_progress("b1", "w1", 10, "key/7", 600.0)  # lost its lease
    assert await s.lifecycle_done("b1", "w2", 10)
    assert await s.lifecycle_claim("w1", 10, lease=600.0) == []   # day 10 is done
    claims = await s.lifecycle_claim("w1", 11, lease=600.0)
    assert [(c.bucket, c.marker) for c in claims] == [("b1", ""), ("b2", "")]
    # no lifecycle document, no run
    await s.put_bucket_config("b2", "lifecycle", None)
    assert await s.lifecycle_done("b1", "w1", 11)
    assert await s.lifecycle_claim("w2", 12, lease=600.0) != []
    assert [c.bucket for c in await s.lifecycle_claim("w1", 13, lease=600.0)] == []
