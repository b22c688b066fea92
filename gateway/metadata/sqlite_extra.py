"""SqliteStore's bucket ACLs, configuration documents, users and lifecycle runs (a mixin of
SqliteStore: it uses the store's transactions, `_tx`, and its writer thread, `_w`)."""

from __future__ import annotations

import json
import time
from typing import Any

from gateway.metadata.store import CONFIG_KINDS, LifecycleClaim, UserRecord, storable_key

_USER_COLS = "access_key, secret, canonical_id, display_name, created"


def check_kind(kind: str) -> None:
    if kind not in CONFIG_KINDS:
        raise ValueError(f"unknown bucket configuration kind {kind!r}")


class SqliteExtras:
    # -- bucket ACL and configuration documents --------------------------------------------
    def _put_bucket_acl(self, bucket: str, acl: list[dict[str, Any]] | None) -> bool:
        with self._tx() as c:
            return c.execute("UPDATE buckets SET acl=? WHERE name=?",
                             (None if acl is None else json.dumps(acl), bucket)).rowcount > 0

    async def put_bucket_acl(self, bucket: str, acl: list[dict[str, Any]] | None) -> bool:
        return await self._w(self._put_bucket_acl, bucket, acl)

    async def get_bucket_config(self, bucket: str, kind: str) -> str | None:
        check_kind(kind)
        row = self._conn().execute("SELECT doc FROM bucket_configs WHERE bucket=? AND kind=?",
                                   (bucket, kind)).fetchone()
        return row[0] if row else None

    def _put_bucket_config(self, bucket: str, kind: str, doc: str | None) -> bool:
        with self._tx() as c:
            if c.execute("SELECT 1 FROM buckets WHERE name=?", (bucket,)).fetchone() is None:
                return False
            if doc is None:
                c.execute("DELETE FROM bucket_configs WHERE bucket=? AND kind=?", (bucket, kind))
                return True
            c.execute("INSERT OR REPLACE INTO bucket_configs VALUES (?,?,?)", (bucket, kind, doc))
            if kind == "lifecycle":
                # the bucket's run row, locked by lifecycle_claim (never run: day -1)
                c.execute("INSERT OR IGNORE INTO lifecycle_runs VALUES (?,-1,-1,'','',0)",
                          (bucket,))
        return True

    async def put_bucket_config(self, bucket: str, kind: str, doc: str | None) -> bool:
        check_kind(kind)
        return await self._w(self._put_bucket_config, bucket, kind, doc)

    async def bucket_configs(self, bucket: str) -> dict[str, str]:
        return dict(self._conn().execute(
            "SELECT kind, doc FROM bucket_configs WHERE bucket=? ORDER BY kind", (bucket,)))

    # -- users ------------------------------------------------------------------------------
    def _add_user(self, rec: UserRecord) -> bool:
        with self._tx() as c:
            return c.execute(f"INSERT OR IGNORE INTO users ({_USER_COLS}) VALUES (?,?,?,?,?)",
                             (rec.access_key, rec.secret, rec.canonical_id, rec.display_name,
                              rec.created)).rowcount > 0

    async def add_user(self, rec: UserRecord) -> bool:
        return await self._w(self._add_user, rec)

    async def get_user(self, access_key: str) -> UserRecord | None:
        if not storable_key(access_key):
            return None
        row = self._conn().execute(f"SELECT {_USER_COLS} FROM users WHERE access_key=?",
                                   (access_key,)).fetchone()
        return UserRecord(*row) if row else None

    async def list_users(self) -> list[UserRecord]:
        return [UserRecord(*r) for r in self._conn().execute(
            f"SELECT {_USER_COLS} FROM users ORDER BY access_key")]

    def _remove_user(self, access_key: str) -> bool:
        with self._tx() as c:
            return c.execute("DELETE FROM users WHERE access_key=?", (access_key,)).rowcount > 0

    async def remove_user(self, access_key: str) -> bool:
        return await self._w(self._remove_user, access_key)

    # -- lifecycle runs ---------------------------------------------------------------------
    def _lifecycle_claim(self, worker: str, day: int, lease: float,
                         limit: int) -> list[LifecycleClaim]:
        now = time.time()
        with self._tx() as c:
            rows = c.execute(
                "SELECT r.bucket, r.run_day, r.marker FROM lifecycle_runs r "
                "JOIN bucket_configs k ON k.bucket = r.bucket AND k.kind = 'lifecycle' "
                "WHERE r.done_day < ? AND (r.lease_until <= ? OR r.worker = ?) "
                "ORDER BY r.bucket LIMIT ?", (day, now, worker, limit)).fetchall()
            out = [LifecycleClaim(b, day, marker if run_day == day else "")
                   for b, run_day, marker in rows]
            c.executemany("UPDATE lifecycle_runs SET run_day=?, marker=?, worker=?, "
                          "lease_until=? WHERE bucket=?",
                          [(day, x.marker, worker, now + lease, x.bucket) for x in out])
        return out

    async def lifecycle_claim(self, worker: str, day: int, lease: float,
                              limit: int = 10) -> list[LifecycleClaim]:
        return await self._w(self._lifecycle_claim, worker, day, lease, limit)

    def _lifecycle_progress(self, bucket: str, worker: str, day: int, marker: str,
                            lease: float) -> bool:
        with self._tx() as c:
            return c.execute("UPDATE lifecycle_runs SET marker=?, lease_until=? WHERE bucket=? "
                             "AND worker=? AND run_day=? AND done_day < run_day",
                             (marker, time.time() + lease, bucket, worker, day)).rowcount > 0

    async def lifecycle_progress(self, bucket: str, worker: str, day: int, marker: str,
                                 lease: float) -> bool:
        return await self._w(self._lifecycle_progress, bucket, worker, day, marker, lease)

    def _lifecycle_done(self, bucket: str, worker: str, day: int) -> bool:
        with self._tx() as c:
            return c.execute("UPDATE lifecycle_runs SET done_day=run_day, marker='', "
                             "lease_until=0 WHERE bucket=? AND worker=? AND run_day=? "
                             "AND done_day < run_day", (bucket, worker, day)).rowcount > 0

    async def lifecycle_done(self, bucket: str, worker: str, day: int) -> bool:
        return await self._w(self._lifecycle_done, bucket, worker, day)
