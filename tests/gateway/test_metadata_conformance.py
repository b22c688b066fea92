"""One contract, two stores: the same random sequence of bucket / object / upload / part /
orphan operations gives the same answers on SQLite and on PostgreSQL (a real server), listings
(prefix, delimiter, markers, max-keys) in S3's binary key order with non-ASCII and control
characters in the keys included."""

from __future__ import annotations

import asyncio
import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gateway.metadata import BucketRecord, ObjectRecord, PartRecord, UploadRecord, open_store
from gateway.metadata.postgres import PostgresStore
from gateway.metadata.sqlite import SqliteStore
from gateway.metadata.store import CONFIG_KINDS, DeleteItem, UserRecord, VersionRecord
from tests.support import storebackends

pg_server = storebackends.pg_server

# Few characters, so that keys share prefixes and collide: ASCII, a delimiter, control
# characters, two-, three- and four-byte UTF-8 (binary order differs from code point order
# only across these, and from a locale's collation everywhere).
ALPHABET = ["a", "b", "/", "-", "\x01", "\t", "\x7f", "é", "\u00ff", "\u20ac", "\uffff",
            "\U0001f600"]
keys = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=5)
prefixes = st.text(alphabet=st.sampled_from(ALPHABET[:4] + ["é"]), max_size=2)
delimiters = st.sampled_from(["", "/", "é", "a"])
buckets = st.sampled_from(["b1", "b2", "b3"])
owners = st.sampled_from(["alice", "bob"])
times = st.sampled_from([1.0, 2.5, 1e9, 1.7e9 + 0.123456])
acls = st.none() | st.sampled_from([
    [], [{"grantee": {"type": "CanonicalUser", "id": "bob"}, "permission": "READ"}],
    [{"grantee": {"type": "Group", "uri": "AllUsers"}, "permission": "READ"},
     {"grantee": {"type": "CanonicalUser", "id": "alice"}, "permission": "FULL_CONTROL"}]])
tag_sets = st.dictionaries(st.sampled_from(["a", "b", "é", "k/1"]), st.sampled_from(["", "x", "€"]),
                           max_size=3)
kinds = st.sampled_from([*CONFIG_KINDS, "bogus"])
docs = st.none() | st.sampled_from(['{"status": "Enabled"}', '{"rules": []}', "{}"])
access_keys = st.sampled_from(["AK1", "AK2", "AKé"])
workers = st.sampled_from(["w1", "w2"])
days = st.integers(0, 3)
leases = st.sampled_from([0.0, 10_000.0])
versionings = st.sampled_from(["off", "enabled", "suspended"])
part_uids = st.sampled_from(["p1.p1", "p2.p1", "bucket:b1:1", "p\u00e9.p2"])


class Env:
    """What every example shares: one event loop, one PostgreSQL store (emptied per example)."""

    loop: asyncio.AbstractEventLoop
    pg: PostgresStore
    tmp: Path


def outcome(coro: Any, loop: asyncio.AbstractEventLoop) -> tuple[str, Any]:
    try:
        return "ok", loop.run_until_complete(coro)
    except Exception as e:  # the type of a refusal is part of the contract
        return "raised", type(e).__name__


def plain(v: Any) -> Any:
    """Answers as comparable data (records as dicts, pages as tuples)."""
    if hasattr(v, "__dataclass_fields__"):
        return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__}
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v


class Base(RuleBasedStateMachine):
    """Both stores side by side; every answer compared."""

    env: Env
    KEYS: st.SearchStrategy[str] = keys
    BUCKETS: st.SearchStrategy[str] = buckets
    PREFIXES: st.SearchStrategy[str] = prefixes
    counter = itertools.count()

    @initialize()
    def setup(self) -> None:
        env = self.env
        env.loop.run_until_complete(env.pg._p().execute(
            "TRUNCATE buckets, objects, uploads, parts, orphans, bucket_configs, users, "
            "lifecycle_runs, versions, repairs, deletions RESTART IDENTITY"))
        self.sqlite = SqliteStore(env.tmp / f"m{next(self.counter)}.sqlite")
        self.versions: list[str] = ["v-none"]
        self.version_ids: list[str] = ["null", "vid-none"]
        # (bucket, key, version id) of every version written, markers included
        self.written: list[tuple[str, str, str]] = [("b1", "a", "vid-none")]
        self.uploads: list[str] = ["u-none"]
        # orphan id on SQLite -> id on PostgreSQL (ids need not agree, only what they name)
        self.claimed: dict[int, int] = {}
        # a bucket to start with: most steps then reach past the bucket checks
        self.same(lambda s: s.create_bucket(BucketRecord("b1", "alice", 1.0)))

    def teardown(self) -> None:
        if hasattr(self, "sqlite"):
            assert queued(self.sqlite, self.env.loop) == queued(self.env.pg, self.env.loop)
            self.same(lambda s: s.part_owners())  # every version's and marker's parts
            self.env.loop.run_until_complete(self.sqlite.close())

    def both(self, call: Any) -> tuple[Any, Any]:
        a = outcome(call(self.sqlite), self.env.loop)
        b = outcome(call(self.env.pg), self.env.loop)
        return a, b

    def same(self, call: Any) -> Any:
        a, b = self.both(call)
        assert plain(a) == plain(b)
        return a[1]

    def new_version(self) -> str:
        v = f"v{next(self.counter)}"
        self.versions.append(v)
        return v

class VersionRules(Base):
    """Versions, delete markers, tags and ACLs."""

    def new_version_id(self, bucket: str, key: str, versioning: str) -> str:
        vid = f"vid{next(self.counter):05d}" if versioning == "enabled" else "null"
        self.version_ids.append(vid)
        self.written.append((bucket, key, vid))
        return vid

    def some_version(self, data: st.DataObject) -> tuple[str, str, str]:
        return data.draw(st.sampled_from(self.written))

    def maybe_write(self, data: st.DataObject) -> str | None:
        """An `if_version` condition: none, or some write's `version` (current or not)."""
        return data.draw(st.none() | st.sampled_from(self.versions)) if self.versions else None

    @rule(data=st.data(), n=st.integers(1, 5), tags=tag_sets, acl=acls)
    def put_several_versions(self, data: st.DataObject, n: int, tags: dict[str, str],
                             acl: Any) -> None:
        """A few versions of one key in a row (the other rules reach a key again rarely)."""
        bucket, key = data.draw(self.BUCKETS), data.draw(self.KEYS)
        for _ in range(n):
            versioning = data.draw(st.sampled_from(["enabled", "enabled", "off", "suspended"]))
            v = self.new_version()
            rec = ObjectRecord(bucket, key, 1, f"etag-{v}", 2.5, "bob", v,
                               parts=[{"number": 1, "size": 1, "etag": "e",
                                       "layout": {"part_uid": f"{v}.p1"}}], tags=tags, acl=acl,
                               version_id=self.new_version_id(bucket, key, versioning))
            self.same(lambda s, r=rec, vs=versioning: s.put_object(r, versioning=vs))

    @rule(data=st.data())
    def get_version(self, data: st.DataObject) -> None:
        bucket, key, vid = self.some_version(data)
        self.same(lambda s: s.get_object(bucket, key, vid))
        self.same(lambda s: s.head_version(bucket, key))

    @rule(data=st.data())
    def delete_version(self, data: st.DataObject) -> None:
        bucket, key, vid = self.some_version(data)
        self.same(lambda s: s.delete_version(bucket, key, vid))
        self.same_current(bucket, key)

    def same_current(self, bucket: str, key: str) -> None:
        self.same(lambda s: s.get_object(bucket, key))
        self.same(lambda s: s.head_version(bucket, key))

    def marker(self, bucket: str, key: str, versioning: str, when: float,
               with_layout: bool) -> VersionRecord:
        vid = self.new_version_id(bucket, key, versioning)
        w = self.new_version()
        return VersionRecord(bucket, key, 7, "ignored", when, "bob", w, version_id=vid,
                             manifest={"part_uid": f"dm:{w}"} if with_layout else None)

    @rule(data=st.data(), versioning=versionings, when=times, with_layout=st.booleans())
    def put_delete_marker(self, data: st.DataObject, versioning: str, when: float,
                          with_layout: bool) -> None:
        bucket, key, _ = self.some_version(data)
        m = self.marker(bucket, key, versioning, when, with_layout)
        cond = self.maybe_write(data)
        self.same(lambda s: s.put_delete_marker(m, versioning, if_version=cond))
        self.same_current(bucket, key)

    @rule(versioning=versionings, data=st.data())
    def delete_many(self, versioning: str, data: st.DataObject) -> None:
        bucket = data.draw(self.BUCKETS)
        items = []
        for _ in range(data.draw(st.integers(0, 4))):
            kind = data.draw(st.sampled_from(["current", "version", "marker"]))
            _, key, vid = self.some_version(data)
            if kind == "current":
                items.append(DeleteItem(key, if_version=self.maybe_write(data)))
            elif kind == "version":
                items.append(DeleteItem(key, vid))
            else:
                m = self.marker(bucket, key, versioning, 1.0, True)
                items.append(DeleteItem(key, marker=m, if_version=self.maybe_write(data)))
        self.same(lambda s: s.delete_many(bucket, items, versioning))
        for it in items:
            self.same_current(bucket, it.key)

    @rule(delimiter=delimiters, data=st.data(), limit=st.integers(0, 5))
    def list_versions(self, delimiter: str, data: st.DataObject, limit: int) -> None:
        bucket, prefix = data.draw(self.BUCKETS), data.draw(self.PREFIXES)
        key_marker = data.draw(st.just("") | keys | st.sampled_from([w[1] for w in self.written]))
        vid_marker = data.draw(st.just("") | st.sampled_from(self.version_ids))
        page = self.same(lambda s: s.list_versions(bucket, prefix, delimiter, key_marker,
                                                   vid_marker, limit))
        got = [v.key for v in page.items]
        assert got == sorted(got, key=lambda k: k.encode())

    @rule(delimiter=delimiters, limit=st.integers(1, 3), data=st.data())
    def list_all_version_pages(self, delimiter: str, limit: int, data: st.DataObject) -> None:
        """Following the key and version id markers visits what one big page holds, in
        order; each key's first version is its latest; the current objects are the keys
        whose latest version is no marker."""
        bucket, prefix = data.draw(self.BUCKETS), data.draw(self.PREFIXES)
        whole = self.same(lambda s: s.list_versions(bucket, prefix, delimiter, "", "", 1000))
        seen: list[Any] = []
        km = vm = ""
        for _ in range(200):
            page = self.same(lambda s, a=km, b=vm: s.list_versions(bucket, prefix, delimiter,
                                                                    a, b, limit))
            seen += [(v.key, v.version_id, v.is_latest) for v in page.items] + page.prefixes
            if not page.truncated:
                break
            km, vm = page.next_marker, page.next_version_marker or ""
        items = [(v.key, v.version_id, v.is_latest) for v in whole.items]
        assert sorted(seen, key=str) == sorted(items + whole.prefixes, key=str)
        firsts = [i for i, v in enumerate(whole.items)
                  if i == 0 or whole.items[i - 1].key != v.key]
        assert [i for i, v in enumerate(whole.items) if v.is_latest] == firsts
        objs = self.same(lambda s: s.list_objects(bucket, prefix, delimiter, "", 1000))
        assert [o.key for o in objs.items] == [v.key for v in whole.items
                                               if v.is_latest and not v.delete_marker]

    @rule(data=st.data())
    def put_versions_again(self, data: st.DataObject) -> None:
        """(the same as put_several_versions: puts as often as the deletes)"""
        self.put_several_versions(data, data.draw(st.integers(1, 5)), data.draw(tag_sets),
                                  data.draw(acls))

    @rule(data=st.data())
    def delete_current(self, data: st.DataObject) -> None:
        bucket, key = data.draw(self.BUCKETS), data.draw(self.KEYS)
        if data.draw(st.booleans()):
            # Expire only the write judged: often the current one, or any other.
            cur = self.same(lambda s: s.get_object(bucket, key))
            cond = cur.version if cur is not None and data.draw(st.booleans()) \
                else self.maybe_write(data)
            self.same(lambda s: s.delete_object(bucket, key, if_version=cond))
        else:
            self.same(lambda s: s.delete_object(bucket, key))
        self.same(lambda s: s.get_object(bucket, key))

    @rule(tags=tag_sets, data=st.data())
    def put_object_tags(self, tags: dict[str, str], data: st.DataObject) -> None:
        bucket, key = data.draw(self.BUCKETS), data.draw(self.KEYS)
        vid = data.draw(st.none() | st.sampled_from(self.version_ids))
        self.same(lambda s: s.put_object_tags(bucket, key, vid, tags))
        self.same(lambda s: s.get_object(bucket, key, vid))

    @rule(acl=acls, data=st.data())
    def put_object_acl(self, acl: Any, data: st.DataObject) -> None:
        bucket, key = data.draw(self.BUCKETS), data.draw(self.KEYS)
        vid = data.draw(st.none() | st.sampled_from(self.version_ids))
        self.same(lambda s: s.put_object_acl(bucket, key, vid, acl))

    @rule(tags=tag_sets, acl=acls, data=st.data(), field=st.sampled_from(["tags", "acl"]))
    def record_change(self, tags: dict[str, str], acl: Any, data: st.DataObject,
                      field: str) -> None:
        """A tag/ACL change with its archive: the version owns the new one, the one it had
        is queued, the pending mark released only when the change is made."""
        bucket, key, vid = self.some_version(data)
        cond = self.maybe_write(data)
        uid = f"tg:{next(self.counter)}"
        lay = {"part_uid": uid}
        marks = self.both(lambda s: s.queue_orphans([{"part_uid": uid, "pending": True}],
                                                    delay=10_000.0))
        rel = {id(self.sqlite): marks[0][1], id(self.env.pg): marks[1][1]}
        if field == "tags":
            self.same(lambda s: s.put_object_tags(bucket, key, vid, tags, meta_part=lay,
                                                  if_version=cond, release=rel[id(s)]))
        else:
            self.same(lambda s: s.put_object_acl(bucket, key, vid, acl, meta_part=lay,
                                                 if_version=cond, release=rel[id(s)]))
        self.same(lambda s: s.get_object(bucket, key, vid))
        self.same(lambda s: s.part_owners())


class SameAnswers(VersionRules):
    """Every method."""

    # -- buckets ------------------------------------------------------------------------
    @rule(name=buckets, owner=owners, created=times)
    def create_bucket(self, name: str, owner: str, created: float) -> None:
        self.same(lambda s: s.create_bucket(BucketRecord(name, owner, created)))

    @rule(name=buckets)
    def delete_bucket(self, name: str) -> None:
        self.same(lambda s: s.delete_bucket(name))

    @rule(owner=st.none() | owners)
    def list_buckets(self, owner: str | None) -> None:
        self.same(lambda s: s.list_buckets(owner))

    @rule(name=buckets)
    def get_bucket(self, name: str) -> None:
        self.same(lambda s: s.get_bucket(name))

    # -- objects ------------------------------------------------------------------------
    @rule(bucket=buckets, key=keys, size=st.integers(0, 1 << 40), when=times,
          mode=st.sampled_from(["plain", "absent", "version"]), versioning=versionings,
          data=st.data())
    def put_object(self, bucket: str, key: str, size: int, when: float, mode: str,
                   versioning: str, data: st.DataObject) -> None:
        if data.draw(st.booleans()) and self.written:  # often a key that has versions
            bucket, key, _ = self.some_version(data)
        v = self.new_version()
        rec = ObjectRecord(bucket, key, size, f"etag-{v}", when, "alice", v,
                           headers={"Content-Type": "text/plain"}, user_meta={"m": key},
                           checksum={"algorithm": "CRC32", "value": "AAAAAA==",
                                     "type": "FULL_OBJECT"},
                           parts=[{"number": 1, "size": size, "etag": "e",
                                   "layout": {"part_uid": f"{v}.p1", "placement": {"0": "n1"}}}],
                           tags=data.draw(tag_sets), acl=data.draw(acls),
                           version_id=self.new_version_id(bucket, key, versioning))
        kw: dict[str, Any] = {}
        if mode == "absent":
            kw["if_absent"] = True
        elif mode == "version":
            kw["if_version"] = data.draw(st.sampled_from(self.versions))
        self.same(lambda s: s.put_object(rec, versioning=versioning, **kw))

    @rule(bucket=buckets, key=keys)
    def get_object(self, bucket: str, key: str) -> None:
        self.same(lambda s: s.get_object(bucket, key))

    @rule(bucket=buckets, key=keys)
    def delete_object(self, bucket: str, key: str) -> None:
        self.same(lambda s: s.delete_object(bucket, key))

    @rule(bucket=buckets, batch=st.lists(keys, max_size=4))
    def delete_objects(self, bucket: str, batch: list[str]) -> None:
        self.same(lambda s: s.delete_objects(bucket, batch))

    @rule(bucket=buckets, prefix=prefixes, delimiter=delimiters, after=st.just("") | keys,
          limit=st.integers(0, 6))
    def list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                     limit: int) -> None:
        page = self.same(lambda s: s.list_objects(bucket, prefix, delimiter, after, limit))
        got = [o.key for o in page.items]
        assert got == sorted(got, key=lambda k: k.encode())

    @rule(bucket=buckets, prefix=prefixes, delimiter=delimiters)
    def list_all_pages(self, bucket: str, prefix: str, delimiter: str) -> None:
        """Following next_marker with max-keys 2 visits what one big page holds, in order."""
        whole = self.same(lambda s: s.list_objects(bucket, prefix, delimiter, "", 1000))
        seen: list[str] = []
        after = ""
        for _ in range(100):
            page = self.same(lambda s, a=after: s.list_objects(bucket, prefix, delimiter, a, 2))
            seen += sorted([o.key for o in page.items] + page.prefixes, key=lambda k: k.encode())
            if not page.truncated:
                break
            after = page.next_marker
        want = sorted([o.key for o in whole.items] + whole.prefixes, key=lambda k: k.encode())
        assert seen == want

    # -- bucket ACLs and configuration documents -----------------------------------------
    @rule(bucket=buckets, acl=acls)
    def put_bucket_acl(self, bucket: str, acl: Any) -> None:
        self.same(lambda s: s.put_bucket_acl(bucket, acl))

    @rule(bucket=buckets, kind=kinds, doc=docs)
    def put_bucket_config(self, bucket: str, kind: str, doc: str | None) -> None:
        self.same(lambda s: s.put_bucket_config(bucket, kind, doc))

    @rule(bucket=buckets, kind=kinds)
    def get_bucket_config(self, bucket: str, kind: str) -> None:
        self.same(lambda s: s.get_bucket_config(bucket, kind))

    @rule(bucket=buckets)
    def bucket_configs(self, bucket: str) -> None:
        self.same(lambda s: s.bucket_configs(bucket))

    # -- users ---------------------------------------------------------------------------
    @rule(ak=access_keys, secret=st.sampled_from(["s1", "s2"]), when=times)
    def add_user(self, ak: str, secret: str, when: float) -> None:
        self.same(lambda s: s.add_user(UserRecord(ak, secret, f"cid-{ak}", f"User {ak}", when)))

    @rule(ak=access_keys)
    def get_user(self, ak: str) -> None:
        self.same(lambda s: s.get_user(ak))

    @rule()
    def list_users(self) -> None:
        self.same(lambda s: s.list_users())

    @rule(ak=access_keys)
    def remove_user(self, ak: str) -> None:
        self.same(lambda s: s.remove_user(ak))

    # -- lifecycle runs ------------------------------------------------------------------
    @rule(worker=workers, day=days, lease=leases, limit=st.integers(1, 3))
    def lifecycle_claim(self, worker: str, day: int, lease: float, limit: int) -> None:
        self.same(lambda s: s.lifecycle_claim(worker, day, lease, limit))

    @rule(bucket=buckets, worker=workers, day=days, marker=st.just("") | keys, lease=leases)
    def lifecycle_progress(self, bucket: str, worker: str, day: int, marker: str,
                           lease: float) -> None:
        self.same(lambda s: s.lifecycle_progress(bucket, worker, day, marker, lease))

    @rule(bucket=buckets, worker=workers, day=days)
    def lifecycle_done(self, bucket: str, worker: str, day: int) -> None:
        self.same(lambda s: s.lifecycle_done(bucket, worker, day))

    # -- uploads ------------------------------------------------------------------------
    @rule(bucket=buckets, key=keys, when=times)
    def create_upload(self, bucket: str, key: str, when: float) -> None:
        uid = f"u{next(self.counter):04d}"
        self.uploads.append(uid)
        self.same(lambda s: s.create_upload(UploadRecord(uid, bucket, key, "alice", when,
                                                         {"Content-Type": "x"}, {"a": "1"},
                                                         "CRC32", "COMPOSITE")))

    @rule(data=st.data(), number=st.integers(1, 3), size=st.integers(0, 100))
    def put_part(self, data: st.DataObject, number: int, size: int) -> None:
        uid = data.draw(st.sampled_from(self.uploads))
        v = self.new_version()
        part = PartRecord(uid, number, size, f"e{v}", 1.0, {"part_uid": f"{v}.p{number}"},
                          {"algorithm": "CRC32", "value": "x"})
        self.same(lambda s: s.put_part(part))

    @rule(data=st.data(), after=st.integers(0, 3), limit=st.integers(1, 4))
    def list_parts(self, data: st.DataObject, after: int, limit: int) -> None:
        uid = data.draw(st.sampled_from(self.uploads))
        self.same(lambda s: s.list_parts(uid, after, limit))

    @rule(data=st.data())
    def abort_upload(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(self.uploads))
        self.same(lambda s: s.abort_upload(uid))

    @rule(data=st.data(), stale=st.booleans(), absent=st.booleans())
    def complete_upload(self, data: st.DataObject, stale: bool, absent: bool) -> None:
        uid = data.draw(st.sampled_from(self.uploads))
        up = self.env.loop.run_until_complete(self.sqlite.get_upload(uid))
        parts = self.env.loop.run_until_complete(self.sqlite.list_parts(uid))
        if up is None:
            bucket, key = "b1", "gone"
        else:
            bucket, key = up.bucket, up.key
        chosen = [p for p in parts if data.draw(st.booleans())]
        listed = [{"number": p.number, "size": p.size, "etag": p.etag, "layout": p.layout}
                  for p in chosen]
        if stale:  # a part replaced meanwhile
            listed.append({"number": 9, "size": 1, "etag": "x",
                           "layout": {"part_uid": "replaced.p9"}})
        rec = ObjectRecord(bucket, key, sum(p.size for p in chosen), "m-2", 3.0, "alice", uid,
                           parts=listed, manifest={"part_uid": f"{uid}.p0"})
        self.same(lambda s: s.put_object(rec, upload_id=uid, if_absent=absent))

    @rule(bucket=buckets, prefix=prefixes, delimiter=delimiters, data=st.data(),
          limit=st.integers(1, 5))
    def list_uploads(self, bucket: str, prefix: str, delimiter: str, data: st.DataObject,
                     limit: int) -> None:
        key_marker = data.draw(st.just("") | keys)
        uid_marker = data.draw(st.just("") | st.sampled_from(self.uploads))
        self.same(lambda s: s.list_uploads(bucket, prefix, delimiter, key_marker, uid_marker,
                                           limit))

    @rule(older=times)
    def stale_uploads(self, older: float) -> None:
        a, b = self.both(lambda s: s.stale_uploads(older))
        assert (a[0], sorted(a[1])) == (b[0], sorted(b[1]))

    # -- orphans ------------------------------------------------------------------------
    @rule(n=st.integers(0, 3), later=st.booleans())
    def queue_orphans(self, n: int, later: bool) -> None:
        lays = [{"part_uid": f"q{next(self.counter)}", "pending": True} for _ in range(n)]
        a, b = self.both(lambda s: s.queue_orphans(lays, delay=10_000.0 if later else 0.0))
        assert a[0] == b[0] == "ok" and len(a[1]) == len(b[1]) == n

    @rule(limit=st.integers(1, 4), lease=st.sampled_from([0.0, 10_000.0]))
    def claim_orphans(self, limit: int, lease: float) -> None:
        a, b = self.both(lambda s: s.claim_orphans(limit, lease))
        assert a[0] == b[0] == "ok"
        assert [e.layout for e in a[1]] == [e.layout for e in b[1]]
        self.claimed.update({x.id: y.id for x, y in zip(a[1], b[1], strict=True)})

    @rule(data=st.data())
    def done_orphans(self, data: st.DataObject) -> None:
        if not self.claimed:
            return
        ids = data.draw(st.lists(st.sampled_from(sorted(self.claimed)), max_size=3, unique=True))
        self.env.loop.run_until_complete(self.sqlite.done_orphans(ids))
        self.env.loop.run_until_complete(self.env.pg.done_orphans([self.claimed[i]
                                                                   for i in ids]))
        for i in ids:
            del self.claimed[i]

    @invariant()
    def same_orphans(self) -> None:
        if not hasattr(self, "sqlite"):
            return
        a, b = self.both(lambda s: s.orphan_count())
        assert a == b
        a, b = self.both(lambda s: s.next_due())
        assert (a[1] is None) == (b[1] is None)

    # -- repair queue and deletion records ------------------------------------------------
    @rule(uid=part_uids, indexes=st.lists(st.integers(0, 5), max_size=3),
          reason=st.sampled_from(["write: f01", "read: f02", "scrub"]))
    def repair_add(self, uid: str, indexes: list[int], reason: str) -> None:
        layout = {"part_uid": uid, "placement": {"0": "n1"}, "n": len(indexes)}
        self.same(lambda s: s.repair_add(layout, indexes, reason))

    @rule(uid=part_uids)
    def repair_get(self, uid: str) -> None:
        a, b = self.both(lambda s: s.repair_get(uid))
        assert untimed(a) == untimed(b)

    @rule()
    def repair_list(self) -> None:
        a, b = self.both(lambda s: s.repair_list())
        assert untimed(a) == untimed(b)

    @rule(limit=st.integers(1, 3), lease=st.sampled_from([0.0, 10_000.0]))
    def repair_claim(self, limit: int, lease: float) -> None:
        a, b = self.both(lambda s: s.repair_claim(limit, lease))
        assert untimed(a) == untimed(b)

    @rule(uid=part_uids, indexes=st.lists(st.integers(0, 5), max_size=3))
    def repair_resolve(self, uid: str, indexes: list[int]) -> None:
        self.same(lambda s: s.repair_resolve(uid, indexes))

    @rule(uid=part_uids, delay=st.sampled_from([0.0, 10_000.0]))
    def repair_retry(self, uid: str, delay: float) -> None:
        self.same(lambda s: s.repair_retry(uid, delay))

    @rule(uid=part_uids)
    def repair_done(self, uid: str) -> None:
        self.same(lambda s: s.repair_done(uid))

    @rule()
    def repair_wake(self) -> None:
        self.same(lambda s: s.repair_wake())

    @rule(uid=part_uids, op=st.sampled_from(["begin", "end", "forget"]))
    def deletion_change(self, uid: str, op: str) -> None:
        self.same(lambda s: getattr(s, f"deletion_{op}")(uid))

    @rule(uid=part_uids)
    def deletion_state(self, uid: str) -> None:
        self.same(lambda s: s.deletion_state(uid))

    @rule(all_done=st.booleans())
    def deletion_prune(self, all_done: bool) -> None:
        self.same(lambda s: s.deletion_prune(1e12 if all_done else 0.0))

    @invariant()
    def same_queues(self) -> None:
        if not hasattr(self, "sqlite"):
            return
        for call in (lambda s: s.repair_count(), lambda s: s.deletions(),
                     lambda s: s.deletions_unfinished()):
            a, b = self.both(call)
            assert a == b
        a, b = self.both(lambda s: s.repair_next_due())
        assert (a[1] is None) == (b[1] is None)


def untimed(answer: tuple[str, Any]) -> Any:
    """An answer holding repair entries, without their `since` (each store's own clock)."""
    def strip(v: Any) -> Any:
        d = plain(v)
        d.pop("since", None)
        return d
    kind, v = answer
    if kind != "ok" or v is None:
        return answer
    return kind, [strip(x) for x in v] if isinstance(v, list) else strip(v)


def queued(store: Any, loop: asyncio.AbstractEventLoop) -> list[str]:
    """Every queued layout, leased or not (for the final comparison)."""
    if isinstance(store, SqliteStore):
        rows = store._conn().execute("SELECT layout FROM orphans ORDER BY id").fetchall()
    else:
        rows = loop.run_until_complete(store._p().fetch("SELECT layout FROM orphans ORDER BY id"))
    return sorted(json.dumps(json.loads(r[0]), sort_keys=True) for r in rows)


class SameVersions(VersionRules):
    """Only the version rules, on few keys (several versions each) of two buckets."""

    KEYS = st.sampled_from(["a", "a/b", "a/c", "b", "é", "\U0001f600"])
    BUCKETS = st.sampled_from(["b1", "b1", "b2"])
    PREFIXES = st.sampled_from(["", "", "a", "a/", "é"])

    @rule(name=st.sampled_from(["b1", "b2"]))
    def create_bucket(self, name: str) -> None:
        self.same(lambda s: s.create_bucket(BucketRecord(name, "alice", 1.0)))

    @rule(name=st.sampled_from(["b1", "b2"]))
    def delete_bucket(self, name: str) -> None:
        self.same(lambda s: s.delete_bucket(name))


def run_machine(pg_server: Any, machine_class: type[Base], examples: int, steps: int) -> None:
    env = Env()
    env.loop = asyncio.new_event_loop()
    tmp = tempfile.TemporaryDirectory(prefix="zonegate-conformance-")
    env.tmp = Path(tmp.name)
    store = open_store(pg_server.new_database(), password_file=str(pg_server.password_file))
    assert isinstance(store, PostgresStore)
    env.pg = store
    try:
        env.loop.run_until_complete(store.start())
        machine_class.env = env
        machine = machine_class.TestCase
        machine.settings = settings(max_examples=examples, stateful_step_count=steps,
                                    deadline=None, suppress_health_check=list(HealthCheck))
        machine().runTest()
    finally:
        env.loop.run_until_complete(store.close())
        env.loop.close()
        tmp.cleanup()


def test_sqlite_and_postgres_give_the_same_answers(pg_server) -> None:
    run_machine(pg_server, SameAnswers, 30, 30)


def test_sqlite_and_postgres_keep_the_same_versions(pg_server) -> None:
    run_machine(pg_server, SameVersions, 15, 30)


@pytest.mark.parametrize("key", ["\x00", "a\x00b"])
async def test_nul_in_a_key_is_kept_by_both(stores, key) -> None:  # noqa: F811
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", 1.0))
    rec = ObjectRecord("b", key, 1, "e", 1.0, "alice", "v1")
    assert await s.put_object(rec) is None
    assert (await s.get_object("b", key)).key == key
    assert [o.key for o in (await s.list_objects("b", "", "", "", 10)).items] == [key]


stores = storebackends.stores
