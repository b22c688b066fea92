"""PostgreSQL metadata store (asyncpg): one database shared by any number of gateways.

Chosen by `[gateway] metadata = "postgresql://user@host:5432/db"`. asyncpg speaks the wire
protocol itself on asyncio (no thread per query), binary-encoded and with every statement
prepared once per connection, which is what many short metadata transactions want; it reads
the password from `[gateway] metadata_password_file`, PGPASSWORD or ~/.pgpass (passfile) as
libpq does.

Same semantics as the SQLite store, transaction for transaction:
- keys are `bytea` (S3's binary order, no collation); ordered text columns are COLLATE "C";
- a commit that replaces or drops data queues the old layouts in the orphan queue in the same
  transaction; read-modify-write commits lock the row they change (SELECT ... FOR UPDATE), and
  an insert that finds the row taken meanwhile (ON CONFLICT DO NOTHING) runs the transaction
  again, so conditional puts are atomic under READ COMMITTED as on SERIALIZABLE databases;
- orphans are claimed with FOR UPDATE SKIP LOCKED: two sweepers never lease the same entry.

The schema is created and upgraded at start (zonegate_schema: one row per applied version),
in plain SQL that PostgreSQL-wire distributed databases (CockroachDB, YugabyteDB) also accept:
no advisory locks, no PL/pgSQL; two gateways migrating at once serialise on the version row.

A lost database is StoreUnavailableError (S3's 503 SlowDown); the pool reconnects by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from gateway.metadata import skipscan
from gateway.metadata.keys import (
    ObjectWalk,
    key_bytes,
    key_str,
    listed_object,
    marker_uid,
    prefix_end,
    rollup_uploads,
)
from gateway.metadata.layouts_pg import MIGRATION as LAYOUTS_MIGRATION
from gateway.metadata.layouts_pg import PostgresLayouts
from gateway.metadata.moves_pg import MIGRATION as MOVES_MIGRATION
from gateway.metadata.moves_pg import PostgresMoves
from gateway.metadata.partscache import PartsCache
from gateway.metadata.pg_extra import PgExtras
from gateway.metadata.pg_versions import PgVersions
from gateway.metadata.pgrows import OBJ_COLS, Again, js, obj_row
from gateway.metadata.queues_pg import LEASES_MIGRATION, PostgresQueues
from gateway.metadata.queues_pg import MIGRATION as QUEUES_MIGRATION
from gateway.metadata.store import (
    BucketNotEmptyError,
    BucketRecord,
    ListPage,
    MetadataStore,
    NoSuchBucketError,
    ObjectRecord,
    OrphanEntry,
    PartRecord,
    StoreUnavailableError,
    UploadRecord,
)

T = TypeVar("T")
log = logging.getLogger("zonegate.metadata")

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE buckets (name TEXT COLLATE "C" PRIMARY KEY, owner TEXT NOT NULL,
                          created DOUBLE PRECISION NOT NULL, region TEXT NOT NULL);
    CREATE TABLE objects (bucket TEXT COLLATE "C" NOT NULL, key BYTEA NOT NULL,
                          size BIGINT NOT NULL, etag TEXT NOT NULL,
                          last_modified DOUBLE PRECISION NOT NULL, owner TEXT NOT NULL,
                          version TEXT NOT NULL, headers TEXT NOT NULL, user_meta TEXT NOT NULL,
                          checksum TEXT NOT NULL, parts TEXT NOT NULL, manifest TEXT,
                          PRIMARY KEY (bucket, key));
    CREATE TABLE uploads (upload_id TEXT COLLATE "C" PRIMARY KEY, bucket TEXT COLLATE "C" NOT NULL,
                          key BYTEA NOT NULL, owner TEXT NOT NULL,
                          initiated DOUBLE PRECISION NOT NULL, headers TEXT NOT NULL,
                          user_meta TEXT NOT NULL, checksum_algorithm TEXT NOT NULL,
                          checksum_type TEXT NOT NULL);
    CREATE INDEX uploads_by_key ON uploads (bucket, key, upload_id);
    CREATE INDEX uploads_by_age ON uploads (initiated);
    CREATE TABLE parts (upload_id TEXT COLLATE "C" NOT NULL, number INTEGER NOT NULL,
                        size BIGINT NOT NULL, etag TEXT NOT NULL,
                        last_modified DOUBLE PRECISION NOT NULL, layout TEXT NOT NULL,
                        checksum TEXT NOT NULL, PRIMARY KEY (upload_id, number));
    CREATE TABLE orphans (id BIGSERIAL PRIMARY KEY, layout TEXT NOT NULL,
                          due DOUBLE PRECISION NOT NULL);
    CREATE INDEX orphans_due ON orphans (due, id);
    """,
    # 1 -> 2: ACLs, tags, version ids; bucket configuration documents, users, lifecycle runs
    """
    ALTER TABLE buckets ADD COLUMN acl TEXT;
    ALTER TABLE objects ADD COLUMN tags TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE objects ADD COLUMN acl TEXT;
    ALTER TABLE objects ADD COLUMN version_id TEXT NOT NULL DEFAULT 'null';
    CREATE TABLE bucket_configs (bucket TEXT COLLATE "C" NOT NULL, kind TEXT COLLATE "C" NOT NULL,
                                 doc TEXT NOT NULL, PRIMARY KEY (bucket, kind));
    CREATE TABLE users (access_key TEXT COLLATE "C" PRIMARY KEY, secret TEXT NOT NULL,
                        canonical_id TEXT NOT NULL, display_name TEXT NOT NULL,
                        created DOUBLE PRECISION NOT NULL);
    CREATE TABLE lifecycle_runs (bucket TEXT COLLATE "C" PRIMARY KEY, done_day BIGINT NOT NULL,
                                 run_day BIGINT NOT NULL, marker TEXT NOT NULL,
                                 worker TEXT NOT NULL, lease_until DOUBLE PRECISION NOT NULL);
    """,
    # 2 -> 3: every version (delete markers included) in `versions`; the current objects
    # become their keys' "null" versions
    """
    CREATE TABLE versions (bucket TEXT COLLATE "C" NOT NULL, key BYTEA NOT NULL,
                           seq BIGINT NOT NULL, version_id TEXT COLLATE "C" NOT NULL,
                           delete_marker BOOLEAN NOT NULL, size BIGINT NOT NULL,
                           etag TEXT NOT NULL, last_modified DOUBLE PRECISION NOT NULL,
                           owner TEXT NOT NULL, version TEXT NOT NULL, headers TEXT NOT NULL,
                           user_meta TEXT NOT NULL, checksum TEXT NOT NULL,
                           parts TEXT NOT NULL, manifest TEXT, tags TEXT NOT NULL, acl TEXT,
                           PRIMARY KEY (bucket, key, version_id));
    CREATE UNIQUE INDEX versions_walk ON versions (bucket, key, seq DESC);
    INSERT INTO versions (bucket, key, seq, version_id, delete_marker, size, etag,
                          last_modified, owner, version, headers, user_meta, checksum, parts,
                          manifest, tags, acl)
        SELECT bucket, key, 1, 'null', false, size, etag, last_modified, owner, version,
               headers, user_meta, checksum, parts, manifest, tags, acl FROM objects;
    UPDATE objects SET version_id = 'null';
    """,
    # the repair queue and deletion records, shared by every gateway (issue 13)
    QUEUES_MIGRATION,
    # the archive recording tags/ACL set after a version's write (gateway/store/tagarchives.py)
    "ALTER TABLE versions ADD COLUMN meta_part TEXT",
    # the versioned cluster layout and its staged changes (issue 25)
    LAYOUTS_MIGRATION,
    # work leases shared by every gateway worker: rehoming and healing a part once
    LEASES_MIGRATION,
    # the data mover's leases and progress (issue 25, gateway/metadata/moves.py)
    MOVES_MIGRATION,
]

# What a lost, restarting or overloaded database raises: the request gets 503 SlowDown.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError, asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.CannotConnectNowError,
)
# Serialization failures and deadlocks: the transaction is run again, a few times.
RETRIES = 8
CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 15.0
POOL_SIZE = 8

_OBJ_COLS = OBJ_COLS
_LIST_COLS = "bucket, key, size, etag, last_modified, owner, version, checksum, version_id"
_BUCKET_COLS = "name, owner, created, region, acl"
# a request's first read: the bucket and its configuration documents (GET: and the object)
_BUCKET_READ = (
    "SELECT " + ", ".join("b." + c for c in _BUCKET_COLS.split(", ")) + ", "
    "ARRAY(SELECT kind FROM bucket_configs WHERE bucket=$1 ORDER BY kind), "
    "ARRAY(SELECT doc FROM bucket_configs WHERE bucket=$1 ORDER BY kind)")
_BUCKET_AND_CONFIGS = _BUCKET_READ + " FROM (SELECT 1) one LEFT JOIN buckets b ON b.name=$1"
_READ_FOR_GET = (
    _BUCKET_READ + ", " + ", ".join("o." + c.strip() for c in OBJ_COLS.split(",")) +
    " FROM (SELECT 1) one LEFT JOIN buckets b ON b.name=$1 "
    "LEFT JOIN objects o ON o.bucket=$1 AND o.key=$2")
_UP_COLS = ("upload_id, bucket, key, owner, initiated, headers, user_meta, "
            "checksum_algorithm, checksum_type")
_PART_COLS = "upload_id, number, size, etag, last_modified, layout, checksum"


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        u = urlsplit(url)
    except ValueError:
        return "postgresql://..."
    if u.password is None:
        return url
    host = u.hostname or ""
    netloc = f"{u.username or ''}:***@{host}" + (f":{u.port}" if u.port else "")
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


_last_warning = 0.0


def _unavailable(e: BaseException) -> StoreUnavailableError:
    """The error for a database that does not answer; logged at most every 30 s."""
    global _last_warning
    detail = f"metadata database: {type(e).__name__}: {e}"
    now = time.monotonic()
    if now - _last_warning > 30.0:
        _last_warning = now
        log.warning("%s (requests get 503 SlowDown until it answers again)", detail)
    return StoreUnavailableError(detail)


_Again, _obj, _js = Again, obj_row, js


async def _no_reset(c: asyncpg.Connection) -> None:
    """A connection back in the pool needs no session reset: the store keeps no session state
    (no SET, LISTEN, advisory locks or cursors), and asyncpg still rolls back an open
    transaction first. Its default reset is one more round trip per store call, as many as the
    store's own queries for most requests."""


def _bk(r: Any) -> BucketRecord:
    return BucketRecord(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None)


def _up(r: Any) -> UploadRecord:
    return UploadRecord(r[0], r[1], key_str(r[2]), r[3], r[4], json.loads(r[5]),
                        json.loads(r[6]), r[7], r[8])


def _part(r: Any) -> PartRecord:
    return PartRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), json.loads(r[6]))


class PostgresStore(PgVersions, PgExtras, PostgresQueues, PostgresLayouts, PostgresMoves,
                    MetadataStore):
    _again = Again

    def __init__(self, url: str, *, free_delay: float = 0.0, password_file: str | None = None,
                 pool_size: int = POOL_SIZE, connect_timeout: float = CONNECT_TIMEOUT,
                 command_timeout: float = COMMAND_TIMEOUT) -> None:
        self.url = url
        self.free_delay = free_delay
        self.password_file = password_file
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._pool: asyncpg.Pool | None = None
        self._parts = PartsCache()

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)})"

    # -- plumbing -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._pool is not None:
            return
        kw: dict[str, Any] = {}
        if self.password_file:
            kw["password"] = Path(self.password_file).read_text().strip()
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=self.pool_size, timeout=self.connect_timeout,
                command_timeout=self.command_timeout, reset=_no_reset, **kw)
        except UNAVAILABLE as e:
            raise StoreUnavailableError(
                f"cannot reach the metadata database {redact(self.url)}: "
                f"{type(e).__name__}: {e}") from None
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, *UNAVAILABLE):
                pool.terminate()

    def _p(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreUnavailableError("the metadata store is not started")
        return self._pool

    async def _tx(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run fn in a transaction, again on a serialization failure, a deadlock or a lost
        insert race; a database that does not answer is StoreUnavailableError."""
        return await self._retrying(fn, tx=True)

    async def _auto(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """_tx for fn of one statement: no BEGIN and COMMIT around it (two round trips of
        three); a single statement is a transaction of its own."""
        return await self._retrying(fn, tx=False)

    async def _retrying(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], *,
                        tx: bool) -> T:
        for attempt in range(RETRIES):
            try:
                async with self._p().acquire() as c:
                    if not tx:
                        return await fn(c)
                    async with c.transaction():
                        return await fn(c)
            except _Again:
                continue
            except asyncpg.exceptions.TransactionRollbackError:
                await asyncio.sleep(0.002 * (attempt + 1))
                continue
            except UNAVAILABLE as e:
                raise _unavailable(e) from None
        raise StoreUnavailableError("metadata database: transaction kept conflicting")

    async def _read(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        try:
            async with self._p().acquire() as c:
                return await fn(c)
        except UNAVAILABLE as e:
            raise _unavailable(e) from None

    async def _migrate(self) -> None:
        async def step(c: asyncpg.Connection) -> bool:
            await c.execute("CREATE TABLE IF NOT EXISTS zonegate_schema "
                            "(version INTEGER PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)")
            version = await c.fetchval("SELECT COALESCE(MAX(version), 0) FROM zonegate_schema")
            if version > len(MIGRATIONS):
                raise ValueError(f"metadata store {redact(self.url)} has schema version "
                                 f"{version}, newer than this gateway ({len(MIGRATIONS)})")
            if version == len(MIGRATIONS):
                return False
            # Claim the version first: a second gateway migrating at once waits on this row
            # and then fails on it (unique violation), and runs again to find it applied.
            await c.execute("INSERT INTO zonegate_schema VALUES ($1, $2)", version + 1,
                            time.time())
            await c.execute(MIGRATIONS[version])
            return True

        for _ in range(len(MIGRATIONS) + RETRIES):
            try:
                if not await self._tx(step):
                    return
            except (asyncpg.UniqueViolationError, asyncpg.DuplicateTableError):
                await asyncio.sleep(0.05)  # another gateway migrated meanwhile
        raise StoreUnavailableError("metadata database: schema migration kept conflicting")

    async def schema_version(self) -> int:
        return await self._read(
            lambda c: c.fetchval("SELECT COALESCE(MAX(version), 0) FROM zonegate_schema"))

    @staticmethod
    async def _queue(c: asyncpg.Connection, layouts: list[dict], due: float) -> list[int]:
        """Queue layouts in one statement; their ids in the order given (ids are taken in
        insertion order, the rows inserted in `n` order)."""
        if not layouts:
            return []
        rows = await c.fetch("INSERT INTO orphans (layout, due) SELECT l, $2 FROM "
                             "unnest($1::TEXT[]) WITH ORDINALITY AS f(l, n) ORDER BY n "
                             "RETURNING id", [json.dumps(lay) for lay in layouts], due)
        return sorted(r[0] for r in rows)

    @staticmethod
    async def _release(c: asyncpg.Connection, ids: list[int] | None) -> None:
        if ids:
            await c.execute("DELETE FROM orphans WHERE id = ANY($1::BIGINT[])", ids)

    # -- buckets --------------------------------------------------------------------------
    async def create_bucket(self, rec: BucketRecord) -> BucketRecord | None:
        async def tx(c: asyncpg.Connection) -> BucketRecord | None:
            got = await c.execute(f"INSERT INTO buckets ({_BUCKET_COLS}) VALUES ($1,$2,$3,$4,$5) "
                                  "ON CONFLICT (name) DO NOTHING",
                                  rec.name, rec.owner, rec.created, rec.region, _js(rec.acl))
            if got.endswith(" 1"):
                return None
            row = await c.fetchrow(f"SELECT {_BUCKET_COLS} FROM buckets WHERE name=$1",
                                   rec.name)
            if row is None:
                raise _Again  # taken and deleted again meanwhile
            return _bk(row)
        return await self._tx(tx)

    async def get_bucket(self, name: str) -> BucketRecord | None:
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {_BUCKET_COLS} FROM buckets WHERE name=$1", name))
        return _bk(row) if row else None

    async def bucket_and_configs(self, name: str) -> tuple[BucketRecord | None, dict[str, str]]:
        # one statement, one snapshot: a request's first read (two before, in parallel)
        row = await self._read(lambda c: c.fetchrow(
            _BUCKET_AND_CONFIGS, name))
        return (_bk(row) if row[0] is not None else None), dict(zip(row[5], row[6], strict=True))

    async def read_for_get(self, bucket: str, key: str
                           ) -> tuple[BucketRecord | None, dict[str, str], ObjectRecord | None]:
        row = await self._read(lambda c: c.fetchrow(_READ_FOR_GET, bucket, key_bytes(key)))
        o = row[7:]
        obj = _obj(o, self._parts.parts(bucket, o[1], o[10])) if o[0] is not None else None
        return ((_bk(row) if row[0] is not None else None),
                dict(zip(row[5], row[6], strict=True)), obj)

    async def list_buckets(self, owner: str | None = None) -> list[BucketRecord]:
        if owner is None:
            rows = await self._read(lambda c: c.fetch(
                f"SELECT {_BUCKET_COLS} FROM buckets ORDER BY name"))
        else:
            rows = await self._read(lambda c: c.fetch(
                f"SELECT {_BUCKET_COLS} FROM buckets WHERE owner=$1 ORDER BY name", owner))
        return [_bk(r) for r in rows]

    async def delete_bucket(self, name: str) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            # Locked first: a concurrent delete of the same bucket waits for this one.
            await c.execute("SELECT 1 FROM buckets WHERE name=$1 FOR UPDATE", name)
            # versions, not objects: noncurrent versions and delete markers keep it too
            if await c.fetchval("SELECT 1 FROM versions WHERE bucket=$1 LIMIT 1", name):
                raise BucketNotEmptyError(name)
            # Uploads in progress die with the bucket (as in S3); their parts are freed.
            ups = [r[0] for r in await c.fetch(
                "DELETE FROM uploads WHERE bucket=$1 RETURNING upload_id", name)]
            if ups:
                rows = await c.fetch("DELETE FROM parts WHERE upload_id = ANY($1::TEXT[]) "
                                     "RETURNING upload_id, number, layout", ups)
                # queued in (upload, part number) order, as on SQLite
                await self._queue(c, [json.loads(r[2]) for r in sorted(rows, key=lambda r: (r[0], r[1]))],
                                  time.time())
            await c.execute("DELETE FROM bucket_configs WHERE bucket=$1", name)
            await c.execute("DELETE FROM lifecycle_runs WHERE bucket=$1", name)
            return (await c.execute("DELETE FROM buckets WHERE name=$1", name)).endswith(" 1")
        return await self._tx(tx)

    # -- objects --------------------------------------------------------------------------
    async def list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                           limit: int) -> ListPage:
        walk = ObjectWalk(prefix, delimiter, after, limit, itemgetter(1), listed_object)

        async def run(c: asyncpg.Connection) -> ListPage:
            while (r := walk.next_range()) is not None:
                lower, inclusive, end = r
                if delimiter:
                    n = walk.steps()
                    sq, sargs = skipscan.pg_query(_LIST_COLS, bucket, prefix, delimiter, lower,
                                                  inclusive, end, n)
                    walk.feed(await c.fetch(sq, *sargs), n)
                    continue
                q = (f"SELECT {_LIST_COLS} FROM objects WHERE bucket=$1 AND "
                     + ("key >= $2" if inclusive else "key > $2"))
                args: list[Any] = [bucket, lower]
                if end is not None:
                    q += " AND key < $3"
                    args.append(end)
                walk.feed(await c.fetch(q + f" ORDER BY key LIMIT {walk.batch}", *args))
            return walk.page()
        return await self._read(run)

    # -- uploads --------------------------------------------------------------------------
    async def create_upload(self, rec: UploadRecord) -> None:
        async def tx(c: asyncpg.Connection) -> None:
            if not await c.fetchval("SELECT 1 FROM buckets WHERE name=$1 FOR SHARE", rec.bucket):
                raise NoSuchBucketError(rec.bucket)
            await c.execute(f"INSERT INTO uploads ({_UP_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
                            rec.upload_id, rec.bucket, key_bytes(rec.key), rec.owner,
                            rec.initiated, json.dumps(rec.headers), json.dumps(rec.user_meta),
                            rec.checksum_algorithm, rec.checksum_type)
        await self._tx(tx)

    async def get_upload(self, upload_id: str) -> UploadRecord | None:
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {_UP_COLS} FROM uploads WHERE upload_id=$1", upload_id))
        return _up(row) if row else None

    async def put_part(self, part: PartRecord, release: list[int] | None = None) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            # A shared lock: parts upload in parallel, and Complete / Abort wait for them.
            if await c.fetchval("SELECT 1 FROM uploads WHERE upload_id=$1 FOR SHARE",
                                part.upload_id) is None:
                return False
            await self._release(c, release)
            old = await c.fetchval("SELECT layout FROM parts WHERE upload_id=$1 AND number=$2 "
                                   "FOR UPDATE", part.upload_id, part.number)
            values = (part.upload_id, part.number, part.size, part.etag, part.last_modified,
                      json.dumps(part.layout), json.dumps(part.checksum))
            if old is None:
                got = await c.execute(f"INSERT INTO parts ({_PART_COLS}) VALUES "
                                      "($1,$2,$3,$4,$5,$6,$7) ON CONFLICT DO NOTHING", *values)
                if not got.endswith(" 1"):
                    raise _Again
            else:
                await self._queue(c, [json.loads(old)], time.time())
                await c.execute("UPDATE parts SET size=$3, etag=$4, last_modified=$5, "
                                "layout=$6, checksum=$7 WHERE upload_id=$1 AND number=$2",
                                *values)
            return True
        return await self._tx(tx)

    async def list_parts(self, upload_id: str, after: int = 0,
                         limit: int = 10000) -> list[PartRecord]:
        rows = await self._read(lambda c: c.fetch(
            f"SELECT {_PART_COLS} FROM parts WHERE upload_id=$1 AND number>$2 "
            "ORDER BY number LIMIT $3", upload_id, after, limit))
        return [_part(r) for r in rows]

    async def abort_upload(self, upload_id: str) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            gone = (await c.execute("DELETE FROM uploads WHERE upload_id=$1",
                                    upload_id)).endswith(" 1")
            rows = await c.fetch("DELETE FROM parts WHERE upload_id=$1 RETURNING number, layout",
                                 upload_id)
            await self._queue(c, [json.loads(r[1]) for r in sorted(rows, key=lambda r: r[0])],
                              time.time())
            return gone
        return await self._tx(tx)

    async def list_uploads(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                           upload_id_marker: str, limit: int) -> ListPage:
        bp = key_bytes(prefix)
        q = f"SELECT {_UP_COLS} FROM uploads WHERE bucket=$1"
        args: list[Any] = [bucket]

        def arg(v: Any) -> str:
            args.append(v)
            return f"${len(args)}"
        if key_marker:
            km = key_bytes(key_marker)
            if upload_id_marker:
                q += f" AND (key > {arg(km)} OR (key = {arg(km)} AND upload_id > " \
                     f"{arg(upload_id_marker)}))"
            else:
                q += f" AND key > {arg(km)}"
        if bp:
            q += f" AND key >= {arg(bp)}"
            end = prefix_end(bp)
            if end is not None:
                q += f" AND key < {arg(end)}"
        q += " ORDER BY key, upload_id"
        rows = await self._read(lambda c: c.fetch(q, *args))
        return rollup_uploads(rows, prefix, delimiter, limit, lambda r: r[2], _up)

    async def stale_uploads(self, older_than: float) -> list[str]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT upload_id FROM uploads WHERE initiated < $1", older_than))
        return [r[0] for r in rows]

    # -- orphan queue ---------------------------------------------------------------------
    # Each of these is one statement, run without BEGIN/COMMIT: the pending mark of every
    # write (queue_orphans) and the sweep a commit wakes (claim_orphans) are per request.
    async def queue_orphans(self, layouts: list[dict[str, Any]], delay: float = 0.0) -> list[int]:
        return await self._auto(lambda c: self._queue(c, layouts, time.time() + delay))

    async def claim_orphans(self, limit: int = 100, lease: float = 300.0) -> list[OrphanEntry]:
        now = time.time()
        rows = await self._auto(lambda c: c.fetch(
            "WITH c AS (SELECT id, layout, due FROM orphans WHERE due <= $1 "
            "ORDER BY due, id LIMIT $2 FOR UPDATE SKIP LOCKED), "
            "u AS (UPDATE orphans o SET due=$3 FROM c WHERE o.id = c.id) "
            "SELECT id, layout FROM c ORDER BY due, id", now, limit, now + lease))
        return [OrphanEntry(r[0], json.loads(r[1])) for r in rows]

    async def done_orphans(self, ids: list[int]) -> None:
        if ids:
            await self._auto(lambda c: self._release(c, ids))

    async def next_due(self) -> float | None:
        return await self._read(lambda c: c.fetchval("SELECT MIN(due) FROM orphans"))

    async def orphan_count(self) -> int:
        return await self._read(lambda c: c.fetchval("SELECT COUNT(*) FROM orphans"))

    async def wake_orphans(self) -> int:
        got = await self._tx(lambda c: c.execute(
            "UPDATE orphans SET due=0 WHERE due > 0 AND layout LIKE '%\"purge_nodes\"%'"))
        return int(got.rsplit(" ", 1)[-1]) if got and got[-1].isdigit() else 0

    async def part_owners(self) -> dict[str, str]:

        async def snap(c: asyncpg.Connection) -> dict[str, str]:
            out: dict[str, str] = {}
            async with c.transaction(isolation="repeatable_read", readonly=True):
                for r in await c.fetch("SELECT layout FROM orphans"):
                    d = json.loads(r[0])
                    out[d.get("part_uid", "")] = ("pending write" if d.get("pending")
                                                  else "queued for deletion")
                # every version (objects holds copies of the current ones); markers too
                for parts, manifest, meta_part in await c.fetch(
                        "SELECT parts, manifest, meta_part FROM versions"):
                    for p in json.loads(parts):
                        out[p["layout"]["part_uid"]] = "live"
                    for lay in (manifest, meta_part):
                        if lay:
                            out[json.loads(lay)["part_uid"]] = "live"
                for r in await c.fetch("SELECT layout FROM parts"):
                    out[json.loads(r[0])["part_uid"]] = "live"
                for name, created in await c.fetch("SELECT name, created FROM buckets"):
                    out[marker_uid(name, created)] = "live"
            return out
        return await self._read(snap)
