"""PostgresStore's objects and their versions, delete markers, tags and ACLs (a mixin of
PostgresStore: it uses the store's `_tx`, `_read`, `_queue`, `_release` and parts cache).

Table `versions` holds every version (delete markers included), `objects` a copy of each
key's current version when that is not a marker; per key, versions are ordered by `seq`.
Every write to a key first locks the key's newest version row (`_lock_key`), so writes to one
key serialise; a key with no version yet has nothing to lock, and two first writes collide on
the (bucket, key, seq) unique index instead, the loser running again.

put_object, the hot path, takes that lock in the same statement as its reads (_PUT_READ), so
their snapshot may predate the lock when it had to wait: what changed meanwhile shows as a
newest seq that differs from the locked one, or as a version already holding the seq it
writes (the unique index turns the write down). Either way it runs again, then locking
first (`_lock_key`) as the other writes do."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import asyncpg

from gateway.metadata.keys import key_bytes
from gateway.metadata.pgrows import OBJ_COLS, Again, js, obj_row
from gateway.metadata.store import (
    ANY,
    LOCKED,
    DeleteItem,
    ListPage,
    NoSuchBucketError,
    ObjectRecord,
    VersionRecord,
    upload_layouts_into,
)
from gateway.metadata.versionwalk import (
    VersionWalk,
    as_version,
    check_versioning,
    expected,
    fields_are,
    marker_record,
    once_per_part,
    range_query,
)
from gateway.s3.lockrules import blocks_delete, with_lock

VER_COLS = OBJ_COLS + ", seq, delete_marker, meta_part"
_LIST_VER = ("bucket, key, size, etag, last_modified, owner, version, '{}', '{}', checksum, "
             "'[]', manifest, '{}', NULL, version_id, seq, delete_marker, meta_part")
_SET = ", ".join(f"{c}=EXCLUDED.{c}" for c in
                 ("size", "etag", "last_modified", "owner", "version", "headers", "user_meta",
                  "checksum", "parts", "manifest", "tags", "acl", "version_id"))


# put_object's reads: bucket share lock, the key's newest version locked and its seq, the
# newest seq in the statement's snapshot (they differ when the locked row went away while
# waiting), the replaced version's layouts (locked), the current object.
_PUT_READ = (
    "SELECT (SELECT 1 FROM buckets WHERE name=$1 FOR SHARE), "
    "(SELECT seq FROM versions WHERE bucket=$1 AND key=$2 ORDER BY seq DESC LIMIT 1 "
    "FOR UPDATE), "
    "(SELECT MAX(seq) FROM versions WHERE bucket=$1 AND key=$2), "
    "t.parts, t.manifest, t.meta_part, "
    + ", ".join(f"o.{c.strip()}" for c in OBJ_COLS.split(",")) +
    " FROM (SELECT 1) one "
    "LEFT JOIN LATERAL (SELECT parts, manifest, meta_part FROM versions WHERE bucket=$1 "
    "AND key=$2 AND version_id=$3 FOR UPDATE) t ON true "
    "LEFT JOIN objects o ON o.bucket=$1 AND o.key=$2")
# $1..$15 the object's columns, $16 seq, $17 meta_part, $18 marks to release, $19 layouts to
# queue (in order), $20 their due time. Returns 1 if the version was written.
_PUT_TAIL = (
    "cur AS (INSERT INTO objects (" + OBJ_COLS + ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,"
    "$11,$12,$13,$14,$15) ON CONFLICT (bucket, key) DO UPDATE SET " + _SET + " RETURNING 1), "
    "rel AS (DELETE FROM orphans WHERE id = ANY($18::BIGINT[]) RETURNING 1), "
    "q AS (INSERT INTO orphans (layout, due) SELECT l, $20 FROM unnest($19::TEXT[]) "
    "WITH ORDINALITY AS f(l, n) ORDER BY n RETURNING 1) "
    "SELECT count(*) FROM v")
_PUT_INSERT = (
    "WITH v AS (INSERT INTO versions (" + VER_COLS + ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,"
    "$10,$11,$12,$13,$14,$15,$16,false,$17) ON CONFLICT DO NOTHING RETURNING 1), " + _PUT_TAIL)
_PUT_UPDATE = (
    "WITH v AS (UPDATE versions SET seq=$16, delete_marker=false, meta_part=$17, "
    + ", ".join(f"{c}=${i}" for i, c in enumerate(
        ("size", "etag", "last_modified", "owner", "version", "headers", "user_meta",
         "checksum", "parts", "manifest", "tags", "acl"), start=3)) +
    " WHERE bucket=$1 AND key=$2 AND version_id=$15 RETURNING 1), " + _PUT_TAIL)


def _values(rec: ObjectRecord, version_id: str) -> tuple:
    return (rec.bucket, key_bytes(rec.key), rec.size, rec.etag, rec.last_modified, rec.owner,
            rec.version, json.dumps(rec.headers), json.dumps(rec.user_meta),
            json.dumps(rec.checksum), json.dumps(rec.parts),
            json.dumps(rec.manifest) if rec.manifest else None, json.dumps(rec.tags),
            js(rec.acl), version_id)


def _ver(r: Any, is_latest: bool) -> VersionRecord:
    return as_version(obj_row(r), is_latest, bool(r[16]))


def _unseen(latest: int | None, row: Any) -> None:
    """A version this transaction removes must be one it saw under its lock: with no version
    seen (nothing to lock), one committed since by another writer means run again."""
    if row is not None and (latest is None or row[15] > latest):
        raise Again


class PgVersions:
    # -- transaction steps --------------------------------------------------------------
    @staticmethod
    async def _lock_key(c: asyncpg.Connection, bucket: str, kb: bytes) -> int | None:
        """Lock the key's newest version; its seq (None: the key has no version). Waiting for
        the lock, another commit may have added a newer version (or removed this one): then
        the newest is locked in turn (statements under READ COMMITTED see those commits)."""
        seq = await c.fetchval("SELECT seq FROM versions WHERE bucket=$1 AND key=$2 "
                               "ORDER BY seq DESC LIMIT 1 FOR UPDATE", bucket, kb)
        for _ in range(1000):
            newest = await c.fetchval("SELECT MAX(seq) FROM versions WHERE bucket=$1 AND "
                                      "key=$2", bucket, kb)
            if newest == seq:
                return seq
            seq = await c.fetchval("SELECT seq FROM versions WHERE bucket=$1 AND key=$2 "
                                   "AND seq=$3 FOR UPDATE", bucket, kb, newest)
        raise Again

    @staticmethod
    async def _insert_version(c: asyncpg.Connection, rec: ObjectRecord, version_id: str,
                              marker: bool, latest: int | None) -> None:
        seq = (latest or 0) + 1
        got = await c.execute(
            f"INSERT INTO versions ({VER_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
            "$12,$13,$14,$15,$16,$17,$18) ON CONFLICT DO NOTHING",
            *_values(rec, version_id), seq, marker, js(rec.meta_part))
        if not got.endswith(" 1"):
            raise Again  # another first write of this key won
        if latest is None and seq != await c.fetchval(
                "SELECT MAX(seq) FROM versions WHERE bucket=$1 AND key=$2",
                rec.bucket, key_bytes(rec.key)):
            raise Again

    @staticmethod
    async def _take(c: asyncpg.Connection, bucket: str, kb: bytes, version_id: str) -> Any:
        return await c.fetchrow(f"DELETE FROM versions WHERE bucket=$1 AND key=$2 AND "
                                f"version_id=$3 RETURNING {VER_COLS}", bucket, kb, version_id)

    @staticmethod
    async def _locked(c: asyncpg.Connection, bucket: str, kb: bytes, version_id: str,
                      bypass: bool = False) -> bool:
        """Whether Object Lock keeps that version (its headers) from being removed now; its
        row stays locked, so no PutObjectRetention / LegalHold commits in between."""
        h = await c.fetchval("SELECT headers FROM versions WHERE bucket=$1 AND key=$2 AND "
                             "version_id=$3 AND NOT delete_marker FOR UPDATE", bucket, kb,
                             version_id)
        return h is not None and blocks_delete(json.loads(h), time.time(), bypass)

    @staticmethod
    async def _sync_current(c: asyncpg.Connection, bucket: str, kb: bytes) -> None:
        """objects := the key's newest version, unless that is a marker (or there is none)."""
        await c.execute("DELETE FROM objects WHERE bucket=$1 AND key=$2", bucket, kb)
        await c.execute(f"INSERT INTO objects ({OBJ_COLS}) SELECT {OBJ_COLS} FROM versions "
                        "WHERE bucket=$1 AND key=$2 AND NOT delete_marker AND seq=(SELECT "
                        "MAX(seq) FROM versions WHERE bucket=$1 AND key=$2)", bucket, kb)

    async def _del_current(self, c: asyncpg.Connection, bucket: str, key: str,
                           freed: list[dict], if_version: str | None = None
                           ) -> ObjectRecord | None:
        kb = key_bytes(key)
        if await self._lock_key(c, bucket, kb) is None:
            return None  # no version, so no current object
        row = await c.fetchrow(f"SELECT {OBJ_COLS} FROM objects WHERE bucket=$1 AND key=$2",
                               bucket, kb)
        if row is None:
            return None
        old = obj_row(row)
        if if_version is not None and old.version != if_version:
            return None
        if blocks_delete(old.headers, time.time()):
            return LOCKED
        mp = await c.fetchval("DELETE FROM versions WHERE bucket=$1 AND key=$2 AND "
                              "version_id=$3 RETURNING meta_part", bucket, kb, old.version_id)
        old.meta_part = json.loads(mp) if mp else None
        await self._sync_current(c, bucket, kb)
        freed += old.layouts()
        return old

    async def _del_version(self, c: asyncpg.Connection, bucket: str, key: str,
                           version_id: str, freed: list[dict],
                           bypass: bool = False) -> VersionRecord | None:
        kb = key_bytes(key)
        latest = await self._lock_key(c, bucket, kb)
        if await self._locked(c, bucket, kb, version_id, bypass):
            return LOCKED
        row = await self._take(c, bucket, kb, version_id)
        if row is None:
            return None
        _unseen(latest, row)
        if row[15] == latest:
            await self._sync_current(c, bucket, kb)
        v = _ver(row, row[15] == latest)
        freed += v.layouts()
        return v

    async def _add_marker(self, c: asyncpg.Connection, marker: VersionRecord,
                          versioning: str, freed: list[dict],
                          if_version: str | None = None) -> VersionRecord | None:
        if versioning not in ("enabled", "suspended"):
            raise ValueError(f"no delete markers while versioning is {versioning!r}")
        if not await c.fetchval("SELECT 1 FROM buckets WHERE name=$1 FOR SHARE", marker.bucket):
            raise NoSuchBucketError(marker.bucket)
        kb = key_bytes(marker.key)
        latest = await self._lock_key(c, marker.bucket, kb)
        if if_version is not None and if_version != await c.fetchval(
                "SELECT version FROM objects WHERE bucket=$1 AND key=$2", marker.bucket, kb):
            return None
        m = marker_record(marker, marker.version_id if versioning == "enabled" else "null")
        if await self._locked(c, marker.bucket, kb, m.version_id):
            return LOCKED  # a suspended bucket's marker would replace a locked null version
        replaced = await self._take(c, marker.bucket, kb, m.version_id)
        _unseen(latest, replaced)
        if replaced is not None:
            freed += obj_row(replaced).layouts()
        await self._insert_version(c, m, m.version_id, True, latest)
        await c.execute("DELETE FROM objects WHERE bucket=$1 AND key=$2", marker.bucket, kb)
        return m

    # -- writes -------------------------------------------------------------------------
    async def put_object(self, rec: ObjectRecord, *, if_version: str | None = None,
                         if_absent: bool = False, upload_id: str | None = None,
                         release: list[int] | None = None,
                         versioning: str = "off") -> ObjectRecord | None:
        check_versioning(versioning)
        kb = key_bytes(rec.key)
        vid = rec.version_id if versioning == "enabled" else "null"
        retry = False

        async def tx(c: asyncpg.Connection) -> ObjectRecord | None:
            nonlocal retry
            now = time.time()
            if retry:
                # A race lost on the first try: this time the locks are taken first, so the
                # read below runs after them (a fresh snapshot). Writers to one busy key then
                # queue on its newest version instead of running again and again.
                await c.execute("SELECT 1 FROM buckets WHERE name=$1 FOR SHARE", rec.bucket)
                await self._lock_key(c, rec.bucket, kb)
            retry = True
            # One statement for the locks and the reads (a PUT was ~10 round trips, each a
            # wait for the server's process on a busy machine). The bucket row share-locked
            # (DeleteBucket locks it FOR UPDATE: a bucket deleted meanwhile, by any gateway,
            # is seen here), the key's newest version locked (writes to one key serialise),
            # and the version this write replaces locked too, so its columns are the
            # committed ones even if a tag/ACL change raced it.
            r = await c.fetchrow(_PUT_READ, rec.bucket, kb, vid)
            bucket_ok, locked, newest = r[0], r[1], r[2]
            if locked != newest:
                # Waiting for the lock, the newest version went away (or none was locked
                # while one exists): the statement's snapshot is stale. Run again.
                raise Again
            old = obj_row(r[6:]) if r[6] is not None else None
            if newest is None and old is not None:
                raise Again  # the key's first version was committed since we looked
            if if_absent and old is not None:
                return old
            if if_version is not None and (old is None or old.version != if_version):
                return old or ObjectRecord(rec.bucket, rec.key, 0, "", 0, "", "")
            upload_layouts: list[dict] = []
            if upload_id is not None:
                # The upload's row lock keeps its parts from changing under this check and
                # copy (a part's upload and the mover's commit of a part take it too); the
                # object takes the layouts recorded now, a mover's commit since Complete
                # read them included.
                await c.execute("SELECT 1 FROM uploads WHERE upload_id=$1 FOR UPDATE", upload_id)
                upload_layouts = [json.loads(r[0]) for r in await c.fetch(
                    "SELECT layout FROM parts WHERE upload_id=$1 ORDER BY number", upload_id)]
                upload_layouts_into(rec, upload_id, upload_layouts)
            values = _values(rec, vid)
            keep = {json.dumps(lay, sort_keys=True) for lay in rec.layouts()}
            if not bucket_ok:
                raise NoSuchBucketError(rec.bucket)
            # off / suspended: the null version is replaced; enabled: a new version on top
            freed: list[dict] = []
            if r[3] is not None:
                taken = ObjectRecord(rec.bucket, rec.key, 0, "", 0, "", "",
                                     parts=json.loads(r[3]),
                                     manifest=json.loads(r[4]) if r[4] else None,
                                     meta_part=json.loads(r[5]) if r[5] else None)
                freed = [lay for lay in taken.layouts()
                         if json.dumps(lay, sort_keys=True) not in keep]
            if upload_id is not None:
                freed += [d for d in upload_layouts if json.dumps(d, sort_keys=True) not in keep]
            seq = (newest or 0) + 1
            # The writes in one statement: the version (a replaced version's row rewritten
            # in place, with its new seq on top), the current object, the pending marks
            # released and the freed layouts queued. A version committed since the read
            # holds this seq: the unique index on (bucket, key, seq) turns the write down
            # (nothing inserted, or a unique violation for the rewrite) and the
            # transaction runs again.
            try:
                wrote = await c.fetchval(
                    _PUT_UPDATE if r[3] is not None else _PUT_INSERT,
                    *values, seq, js(rec.meta_part), release or [],
                    [json.dumps(lay) for lay in freed], now + self.free_delay)
            except asyncpg.UniqueViolationError:
                raise Again from None
            if not wrote:
                raise Again  # another write of this key won
            if newest is None and seq != await c.fetchval(
                    "SELECT MAX(seq) FROM versions WHERE bucket=$1 AND key=$2",
                    rec.bucket, kb):
                # a first write: a version committed after our read, under a seq this
                # insert could not collide with, would sort below ours
                raise Again
            if upload_id is not None:
                await c.execute("DELETE FROM parts WHERE upload_id=$1", upload_id)
                await c.execute("DELETE FROM uploads WHERE upload_id=$1", upload_id)
            if freed:
                self.freeing_puts += 1
            return None
        return await self._tx(tx)

    async def delete_many(self, bucket: str, items: list[DeleteItem],
                          versioning: str = "off",
                          release: list[int] | None = None) -> list[ObjectRecord | None]:
        check_versioning(versioning)

        # One transaction for the whole batch (DeleteObjects of 1000 keys), freed layouts
        # queued together at the end, in order, as SQLite does.
        async def tx(c: asyncpg.Connection) -> list[ObjectRecord | None]:
            out: list[ObjectRecord | None] = []
            freed: list[dict] = []
            for it in items:
                if it.version_id is not None:
                    out.append(await self._del_version(c, bucket, it.key, it.version_id, freed,
                                                       it.bypass_governance))
                elif it.marker is not None:
                    m = dataclasses.replace(it.marker, bucket=bucket, key=it.key)
                    out.append(await self._add_marker(c, m, versioning, freed,
                                                      it.if_version))
                else:
                    out.append(await self._del_current(c, bucket, it.key, freed,
                                                       it.if_version))
            await self._release(c, release)
            await self._queue(c, once_per_part(freed), time.time() + self.free_delay)
            return out
        return await self._tx(tx)

    _MARKER_PARTS = ("SELECT v.key, v.version_id, v.manifest FROM versions v JOIN "
                     "unnest($2::BYTEA[], $3::TEXT[]) AS m(key, vid) ON v.key = m.key AND "
                     "v.version_id = m.vid WHERE v.bucket = $1 AND v.delete_marker")

    async def live_markers(self, bucket: str, part_uid: str,
                           members: list[tuple[str, str]]) -> list[tuple[str, str]]:
        rows = await self._read(lambda c: c.fetch(
            self._MARKER_PARTS, bucket, [key_bytes(k) for k, _ in members],
            [v for _, v in members]))
        live = {(bytes(r[0]), r[1]) for r in rows
                if r[2] and json.loads(r[2]).get("part_uid") == part_uid}
        return [(k, v) for k, v in members if (key_bytes(k), v) in live]

    async def move_markers(self, bucket: str, part_uid: str,
                           moves: list[tuple[str, str, dict[str, Any]]],
                           release: list[int] | None = None) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            rows = await c.fetch(self._MARKER_PARTS + " FOR UPDATE OF v", bucket,
                                 [key_bytes(k) for k, _, _ in moves],
                                 [v for _, v, _ in moves])
            here = {(bytes(r[0]), r[1]) for r in rows
                    if r[2] and json.loads(r[2]).get("part_uid") == part_uid}
            if any((key_bytes(k), v) not in here for k, v, _ in moves):
                return False
            await c.executemany("UPDATE versions SET manifest=$1 WHERE bucket=$2 AND key=$3 "
                                "AND version_id=$4", [(js(lay), bucket, key_bytes(k), v)
                                                      for k, v, lay in moves])
            await self._release(c, release)
            return True
        return await self._tx(tx)

    async def delete_object(self, bucket: str, key: str, *,
                            if_version: str | None = None) -> ObjectRecord | None:
        return (await self.delete_many(bucket, [DeleteItem(key, if_version=if_version)]))[0]

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[ObjectRecord | None]:
        return await self.delete_many(bucket, [DeleteItem(k) for k in keys])

    async def delete_version(self, bucket: str, key: str, version_id: str, *,
                             bypass_governance: bool = False) -> VersionRecord | None:
        return (await self.delete_many(bucket, [DeleteItem(  # type: ignore[return-value]
            key, version_id, bypass_governance=bypass_governance)]))[0]

    async def put_delete_marker(self, marker: VersionRecord, versioning: str, *,
                                if_version: str | None = None,
                                release: list[int] | None = None) -> VersionRecord | None:
        got = await self.delete_many(marker.bucket, [DeleteItem(
            marker.key, marker=marker, if_version=if_version)], versioning, release)
        return got[0]  # type: ignore[return-value]

    async def _set_field(self, bucket: str, key: str, version_id: str | None, col: str,
                         value: str | None, meta_part: dict | None = None,
                         if_version: str | None = None,
                         release: list[int] | None = None,
                         expect: dict[str, Any] | None = None) -> bool:
        kb = key_bytes(key)

        async def tx(c: asyncpg.Connection) -> bool:
            vid = version_id
            if vid is None:
                # Not locked here: a PUT locks the version row and then the object row, so
                # this locks in that order too (the other order deadlocked racing PUTs). The
                # UPDATE of objects below only touches it while it is still this version.
                vid = await c.fetchval("SELECT version_id FROM objects WHERE bucket=$1 AND "
                                       "key=$2", bucket, kb)
                if vid is None:
                    return False
            row = await c.fetchrow("SELECT version, meta_part, tags, acl, headers FROM "
                                   "versions WHERE bucket=$1 AND key=$2 AND version_id=$3 "
                                   "AND NOT delete_marker FOR UPDATE", bucket, kb, vid)
            if row is None or (if_version is not None and row[0] != if_version):
                return False
            if not fields_are(expect, row[2], row[3], row[4]):
                return False
            new = value
            if col == "headers":  # `value` is the new lock: merged into the headers
                new = json.dumps(with_lock(json.loads(row[4]), json.loads(value or "{}")))
            await c.execute(f"UPDATE versions SET {col}=$1 WHERE bucket=$2 AND key=$3 "
                            "AND version_id=$4", new, bucket, kb, vid)
            await c.execute(f"UPDATE objects SET {col}=$1 WHERE bucket=$2 AND key=$3 AND "
                            "version_id=$4", new, bucket, kb, vid)
            if meta_part is not None:
                await c.execute("UPDATE versions SET meta_part=$1 WHERE bucket=$2 AND key=$3 "
                                "AND version_id=$4", js(meta_part), bucket, kb, vid)
                if row[1]:
                    await self._queue(c, [json.loads(row[1])], time.time() + self.free_delay)
            await self._release(c, release)
            return True
        return await self._tx(tx)

    async def put_object_tags(self, bucket: str, key: str, version_id: str | None,
                              tags: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_acl: Any = ANY, if_lock: Any = ANY) -> bool:
        return await self._set_field(bucket, key, version_id, "tags", json.dumps(tags),
                                     meta_part, if_version, release,
                                     expected(if_acl=if_acl, if_lock=if_lock))

    async def put_object_acl(self, bucket: str, key: str, version_id: str | None,
                             acl: list[dict[str, Any]] | None, *,
                             meta_part: dict[str, Any] | None = None,
                             if_version: str | None = None,
                             release: list[int] | None = None,
                             if_tags: Any = ANY, if_lock: Any = ANY) -> bool:
        return await self._set_field(bucket, key, version_id, "acl", js(acl), meta_part,
                                     if_version, release,
                                     expected(if_tags=if_tags, if_lock=if_lock))

    async def put_object_lock(self, bucket: str, key: str, version_id: str | None,
                              lock: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_tags: Any = ANY, if_acl: Any = ANY,
                              if_lock: Any = ANY) -> bool:
        return await self._set_field(bucket, key, version_id, "headers", json.dumps(lock),
                                     meta_part, if_version, release,
                                     expected(if_tags=if_tags, if_acl=if_acl,
                                              if_lock=if_lock))

    # -- reads --------------------------------------------------------------------------
    async def get_object(self, bucket: str, key: str,
                         version_id: str | None = None) -> ObjectRecord | None:
        kb = key_bytes(key)
        if version_id is None:
            row = await self._read(lambda c: c.fetchrow(
                f"SELECT {OBJ_COLS} FROM objects WHERE bucket=$1 AND key=$2", bucket, kb))
            if row is None:
                return None
            # The parts list may be shared with other readers of this version: read-only.
            return obj_row(row, self._parts.parts(bucket, row[1], row[10]))
        # the version and its key's newest seq in one statement (one snapshot)
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {VER_COLS}, (SELECT MAX(seq) FROM versions v2 WHERE v2.bucket=$1 AND "
            "v2.key=$2) FROM versions WHERE bucket=$1 AND key=$2 AND version_id=$3",
            bucket, kb, version_id))
        return _ver(row, row[15] == row[18]) if row else None

    async def head_version(self, bucket: str, key: str) -> VersionRecord | None:
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {VER_COLS} FROM versions WHERE bucket=$1 AND key=$2 ORDER BY seq DESC "
            "LIMIT 1", bucket, key_bytes(key)))
        return _ver(row, True) if row else None

    async def list_versions(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                            version_id_marker: str, limit: int) -> ListPage:
        async def run(c: asyncpg.Connection) -> ListPage:
            marker_seq = None
            if key_marker and version_id_marker:
                marker_seq = await c.fetchval(
                    "SELECT seq FROM versions WHERE bucket=$1 AND key=$2 AND version_id=$3",
                    bucket, key_bytes(key_marker), version_id_marker)
            walk = VersionWalk(prefix, delimiter, key_marker, marker_seq, limit,
                               key_of=lambda r: r[1], seq_of=lambda r: r[15],
                               vid_of=lambda r: r[14], item_of=_ver)
            while (r := walk.next_range()) is not None:
                q, args = range_query(_LIST_VER, bucket, r, lambda i: f"${i}", walk.batch)
                walk.feed(await c.fetch(q, *args))
            return walk.page()
        return await self._read(run)
