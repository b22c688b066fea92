"""PostgresStore's bucket ACLs, configuration documents, users and lifecycle runs (a mixin of
PostgresStore: it uses the store's `_tx` and `_read`)."""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

from gateway.metadata.sqlite_extra import check_kind
from gateway.metadata.store import LifecycleClaim, UserRecord, storable_key

_USER_COLS = "access_key, secret, canonical_id, display_name, created"


class PgExtras:
    # -- bucket ACL and configuration documents --------------------------------------------
    async def put_bucket_acl(self, bucket: str, acl: list[dict[str, Any]] | None) -> bool:
        doc = None if acl is None else json.dumps(acl)
        return (await self._tx(lambda c: c.execute(
            "UPDATE buckets SET acl=$1 WHERE name=$2", doc, bucket))).endswith(" 1")

    async def get_bucket_config(self, bucket: str, kind: str) -> str | None:
        check_kind(kind)
        return await self._read(lambda c: c.fetchval(
            "SELECT doc FROM bucket_configs WHERE bucket=$1 AND kind=$2", bucket, kind))

    async def put_bucket_config(self, bucket: str, kind: str, doc: str | None) -> bool:
        check_kind(kind)

        async def tx(c: asyncpg.Connection) -> bool:
            # share-locked as put_object does: a DeleteBucket waits for this, or wins first
            if not await c.fetchval("SELECT 1 FROM buckets WHERE name=$1 FOR SHARE", bucket):
                return False
            if doc is None:
                await c.execute("DELETE FROM bucket_configs WHERE bucket=$1 AND kind=$2",
                                bucket, kind)
                return True
            await c.execute("INSERT INTO bucket_configs VALUES ($1,$2,$3) ON CONFLICT "
                            "(bucket, kind) DO UPDATE SET doc=EXCLUDED.doc", bucket, kind, doc)
            if kind == "lifecycle":
                # the bucket's run row, locked by lifecycle_claim (never run: day -1)
                await c.execute("INSERT INTO lifecycle_runs VALUES ($1,-1,-1,'','',0) "
                                "ON CONFLICT (bucket) DO NOTHING", bucket)
            return True
        return await self._tx(tx)

    async def bucket_configs(self, bucket: str) -> dict[str, str]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT kind, doc FROM bucket_configs WHERE bucket=$1 ORDER BY kind", bucket))
        return {r[0]: r[1] for r in rows}

    # -- users ------------------------------------------------------------------------------
    async def add_user(self, rec: UserRecord) -> bool:
        return (await self._tx(lambda c: c.execute(
            f"INSERT INTO users ({_USER_COLS}) VALUES ($1,$2,$3,$4,$5) "
            "ON CONFLICT (access_key) DO NOTHING", rec.access_key, rec.secret,
            rec.canonical_id, rec.display_name, rec.created))).endswith(" 1")

    async def get_user(self, access_key: str) -> UserRecord | None:
        if not storable_key(access_key):
            return None
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {_USER_COLS} FROM users WHERE access_key=$1", access_key))
        return UserRecord(*row) if row else None

    async def list_users(self) -> list[UserRecord]:
        rows = await self._read(lambda c: c.fetch(
            f"SELECT {_USER_COLS} FROM users ORDER BY access_key"))
        return [UserRecord(*r) for r in rows]

    async def remove_user(self, access_key: str) -> bool:
        return (await self._tx(lambda c: c.execute(
            "DELETE FROM users WHERE access_key=$1", access_key))).endswith(" 1")

    # -- lifecycle runs ---------------------------------------------------------------------
    async def lifecycle_claim(self, worker: str, day: int, lease: float,
                              limit: int = 10) -> list[LifecycleClaim]:
        async def tx(c: asyncpg.Connection) -> list[LifecycleClaim]:
            now = time.time()
            # SKIP LOCKED: a bucket another gateway is claiming right now is left to it
            rows = await c.fetch(
                "SELECT r.bucket, r.run_day, r.marker FROM lifecycle_runs r "
                "JOIN bucket_configs k ON k.bucket = r.bucket AND k.kind = 'lifecycle' "
                "WHERE r.done_day < $1 AND (r.lease_until <= $2 OR r.worker = $3) "
                "ORDER BY r.bucket LIMIT $4 FOR UPDATE OF r SKIP LOCKED",
                day, now, worker, limit)
            out = [LifecycleClaim(r[0], day, r[2] if r[1] == day else "") for r in rows]
            for x in out:
                await c.execute("UPDATE lifecycle_runs SET run_day=$1, marker=$2, worker=$3, "
                                "lease_until=$4 WHERE bucket=$5",
                                day, x.marker, worker, now + lease, x.bucket)
            return out
        return await self._tx(tx)

    async def lifecycle_progress(self, bucket: str, worker: str, day: int, marker: str,
                                 lease: float) -> bool:
        return (await self._tx(lambda c: c.execute(
            "UPDATE lifecycle_runs SET marker=$1, lease_until=$2 WHERE bucket=$3 AND worker=$4 "
            "AND run_day=$5 AND done_day < run_day",
            marker, time.time() + lease, bucket, worker, day))).endswith(" 1")

    async def lifecycle_done(self, bucket: str, worker: str, day: int) -> bool:
        return (await self._tx(lambda c: c.execute(
            "UPDATE lifecycle_runs SET done_day=run_day, marker='', lease_until=0 "
            "WHERE bucket=$1 AND worker=$2 AND run_day=$3 AND done_day < run_day",
            bucket, worker, day))).endswith(" 1")
