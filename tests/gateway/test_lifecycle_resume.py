"""The lifecycle worker resumes a day's run from the marker a dead worker saved (durable in
the metadata store, both backends), pages through the bucket, and runs a day only once."""

from __future__ import annotations

import time

from gateway.lifecycle import config, worker
from gateway.metadata import BucketRecord, ObjectRecord
from tests.support import storebackends

pg_server = storebackends.pg_server
stores = storebackends.stores


class _Gateway:
    """What the worker needs of a gateway for an unversioned bucket: the store, and the
    sweeper's wake-up (counted)."""

    def __init__(self, store) -> None:
        self.store = store
        self.kicks = 0

    def kick_sweeper(self) -> None:
        self.kicks += 1


async def _keys(s, bucket):
    return [o.key for o in (await s.list_objects(bucket, "", "", "", 1000)).items]


async def test_a_run_resumes_from_the_saved_marker_and_runs_once(stores, monkeypatch):
    monkeypatch.setattr(worker, "PAGE", 7)  # several pages, a progress save after each
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    old = time.time() - 10 * 86400
    for i in range(30):
        await s.put_object(ObjectRecord("b", f"k{i:03d}", 1, "e", old, "alice", f"v{i}"))
    await s.put_object(ObjectRecord("b", "new", 1, "e", time.time(), "alice", "vn"))
    doc = config.parse_lifecycle(
        b"<LifecycleConfiguration><Rule><ID>r</ID><Filter/><Status>Enabled</Status>"
        b"<Expiration><Days>3</Days></Expiration></Rule></LifecycleConfiguration>")
    await s.put_bucket_config("b", "lifecycle", config.dump(doc))
    w1 = worker.LifecycleWorker(_Gateway(s))
    day = w1.today()
    # w1 claimed the day, got as far as k014, and died; its lease runs out
    (claim,) = await s.lifecycle_claim(w1.id, day, 600.0)
    assert await s.lifecycle_progress("b", w1.id, day, "o:k014", 0.0)
    gw2 = _Gateway(s)
    w2 = worker.LifecycleWorker(gw2)
    assert await w2.run_once() == 1
    assert await _keys(s, "b") == [f"k{i:03d}" for i in range(15)] + ["new"]
    assert w2.stats.expired == 15 and w2.stats.rules_hit == {"r": 15} and gw2.kicks == 15
    assert await s.orphan_count() == 0  # these records had no layouts to free
    # the day is done: neither worker runs it again
    assert await w2.run_once() == 0 and await w1.run_once() == 0
    # the next day starts from the first key
    (claim,) = await s.lifecycle_claim(w2.id, day + 1, 600.0)
    assert claim.marker == ""
    await w2.work_bucket("b", day + 1, claim.marker)
    assert await _keys(s, "b") == ["new"]


class _PutLandsBeforeTheDelete:
    """A store where a client's PUT of `key` commits just after the worker's re-read of it and
    before its delete: the race the expiry's `if_version` condition closes."""

    def __init__(self, store, key: str, fresh: ObjectRecord) -> None:
        self._store, self._key, self._fresh = store, key, fresh

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def delete_object(self, bucket, key, **kw):
        if key == self._key and self._fresh is not None:
            await self._store.put_object(self._fresh)
            self._fresh = None
        return await self._store.delete_object(bucket, key, **kw)


async def test_expiry_spares_a_put_that_lands_after_the_worker_judged(stores):
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    old = time.time() - 10 * 86400
    for k in ("a", "b", "c"):
        await s.put_object(ObjectRecord("b", k, 1, "e", old, "alice", f"old-{k}"))
    doc = config.parse_lifecycle(
        b"<LifecycleConfiguration><Rule><ID>r</ID><Filter/><Status>Enabled</Status>"
        b"<Expiration><Days>3</Days></Expiration></Rule></LifecycleConfiguration>")
    await s.put_bucket_config("b", "lifecycle", config.dump(doc))
    fresh = ObjectRecord("b", "b", 5, "e2", time.time(), "alice", "new-b")
    w = worker.LifecycleWorker(_Gateway(_PutLandsBeforeTheDelete(s, "b", fresh)))
    assert await w.run_once() == 1
    # a and c expired; b's new write, committed after the worker judged the old one, is kept
    assert await _keys(s, "b") == ["b"]
    got = await s.get_object("b", "b")
    assert got.version == "new-b" and got.size == 5
    assert w.stats.expired == 2
