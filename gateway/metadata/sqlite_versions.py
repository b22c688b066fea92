"""SqliteStore's objects and their versions, delete markers, tags and ACLs (a mixin of
SqliteStore: it uses the store's transactions, `_tx`, its writer thread, `_w`, and its row
helpers `_obj`, `_get_obj`, `_queue`).

Table `versions` holds every version (delete markers included), `objects` a copy of each
key's current version when that is not a marker. Every write keeps the two in step in its
transaction; per key, versions are ordered by `seq` (the newest highest)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from typing import Any

from gateway.metadata.keys import key_bytes
from gateway.metadata.store import (
    ANY,
    LOCKED,
    DeleteItem,
    ListPage,
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

_k = key_bytes

OBJ_COLS = ("bucket, key, size, etag, last_modified, owner, version, headers, user_meta, "
            "checksum, parts, manifest, tags, acl, version_id")
VER_COLS = OBJ_COLS + ", seq, delete_marker, meta_part"
_LIST_VER = ("bucket, key, size, etag, last_modified, owner, version, '{}', '{}', checksum, "
             "'[]', manifest, '{}', NULL, version_id, seq, delete_marker, meta_part")
_NEXT_SEQ = "(SELECT COALESCE(MAX(seq), 0) + 1 FROM versions WHERE bucket=? AND key=?)"


def _values(rec: ObjectRecord, version_id: str) -> tuple:
    return (rec.bucket, _k(rec.key), rec.size, rec.etag, rec.last_modified, rec.owner,
            rec.version, json.dumps(rec.headers), json.dumps(rec.user_meta),
            json.dumps(rec.checksum), json.dumps(rec.parts),
            json.dumps(rec.manifest) if rec.manifest else None, json.dumps(rec.tags),
            None if rec.acl is None else json.dumps(rec.acl), version_id)


def _same(layouts: list[dict]) -> set[str]:
    return {json.dumps(lay, sort_keys=True) for lay in layouts}


class SqliteVersions:
    # -- transaction steps (on the writer's connection, inside its transaction) -------------
    def _insert_version(self, c: sqlite3.Connection, rec: ObjectRecord, version_id: str,
                        marker: bool) -> None:
        kb = _k(rec.key)
        c.execute(f"INSERT INTO versions ({VER_COLS}) VALUES "
                  f"(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,{_NEXT_SEQ},?,?)",
                  (*_values(rec, version_id), rec.bucket, kb, int(marker),
                   json.dumps(rec.meta_part) if rec.meta_part else None))

    @staticmethod
    def _latest_seq(c: sqlite3.Connection, bucket: str, kb: bytes) -> int | None:
        return c.execute("SELECT MAX(seq) FROM versions WHERE bucket=? AND key=?",
                         (bucket, kb)).fetchone()[0]

    @staticmethod
    def _take(c: sqlite3.Connection, bucket: str, kb: bytes, version_id: str) -> tuple | None:
        """Delete one version; its row, None if there was none."""
        rows = c.execute(f"DELETE FROM versions WHERE bucket=? AND key=? AND version_id=? "
                         f"RETURNING {VER_COLS}", (bucket, kb, version_id)).fetchall()
        return rows[0] if rows else None

    @staticmethod
    def _locked(c: sqlite3.Connection, bucket: str, kb: bytes, version_id: str,
                bypass: bool = False) -> bool:
        """Whether Object Lock keeps that version (its headers) from being removed now."""
        row = c.execute("SELECT headers FROM versions WHERE bucket=? AND key=? AND "
                        "version_id=? AND delete_marker=0", (bucket, kb, version_id)).fetchone()
        return row is not None and blocks_delete(json.loads(row[0]), time.time(), bypass)

    @staticmethod
    def _sync_current(c: sqlite3.Connection, bucket: str, kb: bytes) -> None:
        """objects := the key's newest version, unless that is a marker (or there is none)."""
        c.execute("DELETE FROM objects WHERE bucket=? AND key=?", (bucket, kb))
        c.execute(f"INSERT INTO objects ({OBJ_COLS}) SELECT {OBJ_COLS} FROM versions "
                  "WHERE bucket=? AND key=? AND delete_marker=0 AND seq=(SELECT MAX(seq) "
                  "FROM versions WHERE bucket=? AND key=?)", (bucket, kb, bucket, kb))

    def _del_current(self, c: sqlite3.Connection, bucket: str, key: str,
                     freed: list[dict], if_version: str | None = None) -> ObjectRecord | None:
        old = self._get_obj(c, bucket, key)
        if old is not None and if_version is not None and old.version != if_version:
            return None
        if old is not None and blocks_delete(old.headers, time.time()):
            return LOCKED
        if old is not None:
            kb = _k(key)
            for (mp,) in c.execute("DELETE FROM versions WHERE bucket=? AND key=? AND "
                                   "version_id=? RETURNING meta_part",
                                   (bucket, kb, old.version_id)).fetchall():
                old.meta_part = json.loads(mp) if mp else None
            self._sync_current(c, bucket, kb)
            freed += old.layouts()
        return old

    def _del_version(self, c: sqlite3.Connection, bucket: str, key: str, version_id: str,
                     freed: list[dict], bypass: bool = False) -> VersionRecord | None:
        kb = _k(key)
        if self._locked(c, bucket, kb, version_id, bypass):
            return LOCKED
        latest = self._latest_seq(c, bucket, kb)
        row = self._take(c, bucket, kb, version_id)
        if row is None:
            return None
        if row[15] == latest:
            self._sync_current(c, bucket, kb)
        v = as_version(self._obj(row), row[15] == latest, bool(row[16]))
        freed += v.layouts()
        return v

    def _add_marker(self, c: sqlite3.Connection, marker: VersionRecord, versioning: str,
                    freed: list[dict], if_version: str | None = None) -> VersionRecord | None:
        if versioning not in ("enabled", "suspended"):
            raise ValueError(f"no delete markers while versioning is {versioning!r}")
        self._require_bucket(c, marker.bucket)
        kb = _k(marker.key)
        if if_version is not None:
            cur = self._get_obj(c, marker.bucket, marker.key)
            if cur is None or cur.version != if_version:
                return None
        m = marker_record(marker, marker.version_id if versioning == "enabled" else "null")
        if self._locked(c, marker.bucket, kb, m.version_id):
            return LOCKED  # a suspended bucket's marker would replace a locked null version
        replaced = self._take(c, marker.bucket, kb, m.version_id)
        if replaced is not None:
            freed += self._obj(replaced).layouts()
        self._insert_version(c, m, m.version_id, True)
        c.execute("DELETE FROM objects WHERE bucket=? AND key=?", (marker.bucket, kb))
        return m

    # -- writes -------------------------------------------------------------------------
    def _put_object(self, rec: ObjectRecord, *, if_version: str | None = None,
                    if_absent: bool = False, upload_id: str | None = None,
                    release: list[int] | None = None,
                    versioning: str = "off") -> ObjectRecord | None:
        check_versioning(versioning)
        now = time.time()
        kb = _k(rec.key)
        with self._tx() as c:
            old = self._get_obj(c, rec.bucket, rec.key)
            if if_absent and old is not None:
                return old
            if if_version is not None and (old is None or old.version != if_version):
                return old or ObjectRecord(rec.bucket, rec.key, 0, "", 0, "", "")
            if upload_id is not None:
                # the layouts recorded now: a mover's commit since Complete read them counts
                upload_layouts_into(rec, upload_id, [json.loads(r[0]) for r in c.execute(
                    "SELECT layout FROM parts WHERE upload_id=?", (upload_id,))])
            self._require_bucket(c, rec.bucket)
            self._release(c, release)
            vid = rec.version_id if versioning == "enabled" else "null"
            # off / suspended: the null version is replaced; enabled: a new version on top
            replaced = self._take(c, rec.bucket, kb, vid)
            self._insert_version(c, rec, vid, False)
            c.execute(f"INSERT OR REPLACE INTO objects ({OBJ_COLS}) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", _values(rec, vid))
            keep = _same(rec.layouts())
            freed: list[dict] = []
            if replaced is not None:
                freed += [lay for lay in self._obj(replaced).layouts()
                          if json.dumps(lay, sort_keys=True) not in keep]
            if upload_id is not None:
                for (lay,) in c.execute("SELECT layout FROM parts WHERE upload_id=? ORDER BY number",
                                        (upload_id,)).fetchall():
                    d = json.loads(lay)
                    if json.dumps(d, sort_keys=True) not in keep:
                        freed.append(d)
                c.execute("DELETE FROM parts WHERE upload_id=?", (upload_id,))
                c.execute("DELETE FROM uploads WHERE upload_id=?", (upload_id,))
            self._queue(c, freed, now + self.free_delay)
            if freed:
                self.freeing_puts += 1
        return None

    def _delete_many(self, bucket: str, items: list[DeleteItem], versioning: str,
                     release: list[int] | None = None) -> list[ObjectRecord | None]:
        check_versioning(versioning)
        out: list[ObjectRecord | None] = []
        freed: list[dict] = []
        # One transaction (one fsync) for the whole batch: DeleteObjects of 1000 keys.
        with self._tx() as c:
            for it in items:
                if it.version_id is not None:
                    out.append(self._del_version(c, bucket, it.key, it.version_id, freed,
                                                 it.bypass_governance))
                elif it.marker is not None:
                    m = dataclasses.replace(it.marker, bucket=bucket, key=it.key)
                    out.append(self._add_marker(c, m, versioning, freed, it.if_version))
                else:
                    out.append(self._del_current(c, bucket, it.key, freed, it.if_version))
            self._release(c, release)
            self._queue(c, once_per_part(freed), time.time() + self.free_delay)
        return out

    def _live_markers(self, bucket: str, part_uid: str,
                      members: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(k, v) for k, v in members if self._marker_part(self._conn(), bucket, k, v)
                == part_uid]

    @staticmethod
    def _marker_part(c: sqlite3.Connection, bucket: str, key: str, vid: str) -> str | None:
        row = c.execute("SELECT manifest FROM versions WHERE bucket=? AND key=? AND "
                        "version_id=? AND delete_marker=1", (bucket, _k(key), vid)).fetchone()
        return json.loads(row[0]).get("part_uid") if row is not None and row[0] else None

    def _move_markers(self, bucket: str, part_uid: str,
                      moves: list[tuple[str, str, dict]], release: list[int] | None) -> bool:
        with self._tx() as c:
            if any(self._marker_part(c, bucket, k, v) != part_uid for k, v, _ in moves):
                return False
            c.executemany("UPDATE versions SET manifest=? WHERE bucket=? AND key=? AND "
                          "version_id=?", [(json.dumps(lay), bucket, _k(k), v)
                                           for k, v, lay in moves])
            self._release(c, release)
            return True

    def _set_field(self, bucket: str, key: str, version_id: str | None, col: str,
                   value: str | None, meta_part: dict | None = None,
                   if_version: str | None = None, release: list[int] | None = None,
                   expect: dict[str, Any] | None = None) -> bool:
        kb = _k(key)
        with self._tx() as c:
            if version_id is None:
                row = c.execute("SELECT version_id FROM objects WHERE bucket=? AND key=?",
                                (bucket, kb)).fetchone()
                if row is None:
                    return False
                version_id = row[0]
            row = c.execute("SELECT version, meta_part, tags, acl, headers FROM versions "
                            "WHERE bucket=? AND key=? AND version_id=? AND delete_marker=0",
                            (bucket, kb, version_id)).fetchone()
            if row is None or (if_version is not None and row[0] != if_version):
                return False
            if not fields_are(expect, row[2], row[3], row[4]):
                return False
            if col == "headers":  # `value` is the new lock: merged into the headers
                value = json.dumps(with_lock(json.loads(row[4]), json.loads(value or "{}")))
            c.execute(f"UPDATE versions SET {col}=? WHERE bucket=? AND key=? AND version_id=?",
                      (value, bucket, kb, version_id))
            c.execute(f"UPDATE objects SET {col}=? WHERE bucket=? AND key=? AND version_id=?",
                      (value, bucket, kb, version_id))
            if meta_part is not None:
                c.execute("UPDATE versions SET meta_part=? WHERE bucket=? AND key=? AND "
                          "version_id=?", (json.dumps(meta_part), bucket, kb, version_id))
                if row[1]:
                    self._queue(c, [json.loads(row[1])], time.time() + self.free_delay)
            self._release(c, release)
            return True

    # -- reads --------------------------------------------------------------------------
    def _get_version(self, bucket: str, key: str, version_id: str | None) -> VersionRecord | None:
        c = self._conn()
        kb = _k(key)
        c.execute("BEGIN")  # the version and the key's newest, in one snapshot
        try:
            if version_id is None:
                row = c.execute(f"SELECT {VER_COLS} FROM versions WHERE bucket=? AND key=? "
                                "ORDER BY seq DESC LIMIT 1", (bucket, kb)).fetchone()
                latest = row[15] if row else None
            else:
                row = c.execute(f"SELECT {VER_COLS} FROM versions WHERE bucket=? AND key=? "
                                "AND version_id=?", (bucket, kb, version_id)).fetchone()
                latest = self._latest_seq(c, bucket, kb) if row else None
        finally:
            c.execute("COMMIT")
        return as_version(self._obj(row), row[15] == latest, bool(row[16])) if row else None

    def _list_versions(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                       version_id_marker: str, limit: int) -> ListPage:
        c = self._conn()
        marker_seq = None
        if key_marker and version_id_marker:
            row = c.execute("SELECT seq FROM versions WHERE bucket=? AND key=? AND "
                            "version_id=?", (bucket, _k(key_marker), version_id_marker)
                            ).fetchone()
            marker_seq = row[0] if row else None
        walk = VersionWalk(prefix, delimiter, key_marker, marker_seq, limit,
                           key_of=lambda r: r[1], seq_of=lambda r: r[15],
                           vid_of=lambda r: r[14],
                           item_of=lambda r, latest: as_version(self._obj(r), latest,
                                                                bool(r[16])))
        while (r := walk.next_range()) is not None:
            q, args = range_query(_LIST_VER, bucket, r, lambda _i: "?", walk.batch)
            walk.feed(c.execute(q, args).fetchall())
        return walk.page()

    # -- the async contract ---------------------------------------------------------------
    async def get_object(self, bucket: str, key: str,
                         version_id: str | None = None) -> ObjectRecord | None:
        if version_id is None:
            return self._get_object(bucket, key)
        return self._get_version(bucket, key, version_id)

    async def head_version(self, bucket: str, key: str) -> VersionRecord | None:
        return self._get_version(bucket, key, None)

    async def put_object(self, rec: ObjectRecord, *, if_version: str | None = None,
                         if_absent: bool = False, upload_id: str | None = None,
                         release: list[int] | None = None,
                         versioning: str = "off") -> ObjectRecord | None:
        return await self._w(self._put_object, rec, if_version=if_version, if_absent=if_absent,
                             upload_id=upload_id, release=release, versioning=versioning)

    async def delete_object(self, bucket: str, key: str, *,
                            if_version: str | None = None) -> ObjectRecord | None:
        return (await self._w(self._delete_many, bucket,
                              [DeleteItem(key, if_version=if_version)], "off"))[0]

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[ObjectRecord | None]:
        return await self._w(self._delete_many, bucket, [DeleteItem(k) for k in keys], "off")

    async def delete_version(self, bucket: str, key: str, version_id: str, *,
                             bypass_governance: bool = False) -> VersionRecord | None:
        got = await self._w(self._delete_many, bucket, [DeleteItem(
            key, version_id, bypass_governance=bypass_governance)], "off")
        return got[0]  # type: ignore[return-value]

    async def put_delete_marker(self, marker: VersionRecord, versioning: str, *,
                                if_version: str | None = None,
                                release: list[int] | None = None) -> VersionRecord | None:
        got = await self._w(self._delete_many, marker.bucket,
                            [DeleteItem(marker.key, marker=marker, if_version=if_version)],
                            versioning, release)
        return got[0]  # type: ignore[return-value]

    async def delete_many(self, bucket: str, items: list[DeleteItem],
                          versioning: str = "off",
                          release: list[int] | None = None) -> list[ObjectRecord | None]:
        return await self._w(self._delete_many, bucket, items, versioning, release)

    async def live_markers(self, bucket: str, part_uid: str,
                           members: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return await self._r(self._live_markers, bucket, part_uid, members)

    async def move_markers(self, bucket: str, part_uid: str,
                           moves: list[tuple[str, str, dict[str, Any]]],
                           release: list[int] | None = None) -> bool:
        return await self._w(self._move_markers, bucket, part_uid, moves, release)

    async def list_versions(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                            version_id_marker: str, limit: int) -> ListPage:
        return await self._r(self._list_versions, bucket, prefix, delimiter, key_marker,
                             version_id_marker, limit)

    async def put_object_tags(self, bucket: str, key: str, version_id: str | None,
                              tags: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_acl: Any = ANY, if_lock: Any = ANY) -> bool:
        return await self._w(self._set_field, bucket, key, version_id, "tags", json.dumps(tags),
                             meta_part, if_version, release,
                             expected(if_acl=if_acl, if_lock=if_lock))

    async def put_object_acl(self, bucket: str, key: str, version_id: str | None,
                             acl: list[dict[str, Any]] | None, *,
                             meta_part: dict[str, Any] | None = None,
                             if_version: str | None = None,
                             release: list[int] | None = None,
                             if_tags: Any = ANY, if_lock: Any = ANY) -> bool:
        return await self._w(self._set_field, bucket, key, version_id, "acl",
                             None if acl is None else json.dumps(acl), meta_part, if_version,
                             release, expected(if_tags=if_tags, if_lock=if_lock))

    async def put_object_lock(self, bucket: str, key: str, version_id: str | None,
                              lock: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_tags: Any = ANY, if_acl: Any = ANY,
                              if_lock: Any = ANY) -> bool:
        return await self._w(self._set_field, bucket, key, version_id, "headers",
                             json.dumps(lock), meta_part, if_version, release,
                             expected(if_tags=if_tags, if_acl=if_acl, if_lock=if_lock))
