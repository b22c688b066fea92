"""Object Lock in both store backends: a version whose headers lock it is never removed by any
delete (its data never queued), GOVERNANCE gives way only to the bypass, expired retention
to anyone; put_object_lock changes only the lock entries and only over the lock it read; a tag
change commits only over the lock its archive carries."""

from __future__ import annotations

import time

from gateway.metadata import BucketRecord, ObjectRecord
from gateway.metadata.store import LOCKED, DeleteItem, VersionRecord
from gateway.s3.lockrules import HOLD, MODE, UNTIL, iso_ms
from tests.support import storebackends

pg_server = storebackends.pg_server
stores = storebackends.stores


def rec(key: str, w: str, vid: str, lock: dict[str, str] | None = None) -> ObjectRecord:
    return ObjectRecord("b", key, 1, "e" + w, 1.0, "alice", w, version_id=vid,
                        headers={"Content-Type": "text/plain", **(lock or {})},
                        parts=[{"number": 1, "size": 1, "etag": "e",
                                "layout": {"part_uid": w + ".p1"}}])


def until(seconds: float) -> str:
    return iso_ms(time.time() + seconds)


async def queued(s) -> list[str]:
    return sorted(e.layout["part_uid"] for e in await s.claim_orphans(1000))


async def test_locked_versions_survive_every_delete(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    locks = {"comp": {MODE: "COMPLIANCE", UNTIL: until(3600)},
             "gov": {MODE: "GOVERNANCE", UNTIL: until(3600)},
             "hold": {HOLD: "ON"},
             "expired": {MODE: "COMPLIANCE", UNTIL: until(-1)},
             "off": {HOLD: "OFF"}}
    for i, (k, lock) in enumerate(locks.items()):
        assert await s.put_object(rec(k, f"w{i}", f"V{i}", lock), versioning="enabled") is None
    for i, k in enumerate(("comp", "gov", "hold")):
        assert await s.delete_version("b", k, f"V{i}") is LOCKED
    got = await s.delete_many("b", [DeleteItem("comp", "V0", bypass_governance=True),
                                    DeleteItem("gov", "V1"), DeleteItem("hold", "V2",
                                                                        bypass_governance=True)])
    assert got == [LOCKED, LOCKED, LOCKED]
    assert await queued(s) == []
    for i, k in enumerate(("comp", "gov", "hold")):
        assert (await s.get_object("b", k, f"V{i}")).version == f"w{i}"
    gone = await s.delete_version("b", "gov", "V1", bypass_governance=True)
    assert isinstance(gone, VersionRecord) and gone.version == "w1"
    assert (await s.delete_version("b", "expired", "V3")).version == "w3"
    assert (await s.delete_version("b", "off", "V4")).version == "w4"
    assert await queued(s) == ["w1.p1", "w3.p1", "w4.p1"]
    # an unversioned-style delete of a locked current object is refused too
    assert await s.delete_object("b", "comp") is LOCKED


async def test_lock_changes_commit_only_over_the_lock_they_read(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    gov = {MODE: "GOVERNANCE", UNTIL: until(3600)}
    await s.put_object(rec("k", "w1", "V1", gov), versioning="enabled")
    # a stale read of the lock: nothing changes
    assert not await s.put_object_lock("b", "k", "V1", {HOLD: "ON"}, if_lock={})
    longer = {MODE: "COMPLIANCE", UNTIL: until(7200)}
    assert await s.put_object_lock("b", "k", "V1", {**longer, HOLD: "ON"}, if_lock=gov,
                                   meta_part={"part_uid": "tg:1"})
    cur = await s.get_object("b", "k", "V1")
    assert cur.headers == {"Content-Type": "text/plain", **longer, HOLD: "ON"}
    assert (await s.get_object("b", "k")).headers == cur.headers  # the current copy too
    # tags change only over the lock their archive carries
    assert not await s.put_object_tags("b", "k", "V1", {"a": "1"}, if_lock=gov)
    assert await s.put_object_tags("b", "k", "V1", {"a": "1"}, if_lock={**longer, HOLD: "ON"})
    assert await s.put_object_lock("b", "k", "V1", {}, meta_part={"part_uid": "tg:2"})
    assert (await s.get_object("b", "k", "V1")).headers == {"Content-Type": "text/plain"}
    assert await queued(s) == ["tg:1"]
    assert (await s.delete_version("b", "k", "V1")).version == "w1"
