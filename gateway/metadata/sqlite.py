"""SQLite (WAL) metadata store: one file shared by every gateway worker process on a host.

Keys are stored as BLOBs of their UTF-8 bytes so ORDER BY is S3's binary order and prefix
ranges are plain byte ranges. The schema is versioned: MIGRATIONS[i] upgrades version i to i+1,
applied in one transaction at open.

The async contract over a blocking library: every write transaction runs on one writer thread
per store (SQLite has one writer at a time anyway, and a commit waits for fsync), listings on
the default thread pool. Point reads (a bucket, an object, an upload, the next due orphan) run
inline: a WAL reader never waits for a writer's lock, and a B-tree lookup in the page cache
takes a few microseconds, less than handing it to a thread would.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

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
from gateway.metadata.layouts_sqlite import MIGRATION as LAYOUTS_MIGRATION
from gateway.metadata.layouts_sqlite import SqliteLayouts
from gateway.metadata.moves_sqlite import MIGRATION as MOVES_MIGRATION
from gateway.metadata.moves_sqlite import SqliteMoves
from gateway.metadata.queues_sqlite import LEASES_MIGRATION, SqliteQueues
from gateway.metadata.queues_sqlite import MIGRATION as QUEUES_MIGRATION
from gateway.metadata.sqlite_extra import SqliteExtras
from gateway.metadata.sqlite_versions import OBJ_COLS, SqliteVersions
from gateway.metadata.store import (
    BucketNotEmptyError,
    BucketRecord,
    ListPage,
    MetadataStore,
    NoSuchBucketError,
    ObjectRecord,
    OrphanEntry,
    PartRecord,
    UploadRecord,
)

T = TypeVar("T")

__all__ = ["MIGRATIONS", "SqliteStore", "prefix_end"]

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE buckets (name TEXT PRIMARY KEY, owner TEXT NOT NULL, created REAL NOT NULL,
                          region TEXT NOT NULL);
    CREATE TABLE objects (bucket TEXT NOT NULL, key BLOB NOT NULL, size INTEGER NOT NULL,
                          etag TEXT NOT NULL, last_modified REAL NOT NULL, owner TEXT NOT NULL,
                          version TEXT NOT NULL, headers TEXT NOT NULL, user_meta TEXT NOT NULL,
                          checksum TEXT NOT NULL, parts TEXT NOT NULL, manifest TEXT,
                          PRIMARY KEY (bucket, key)) WITHOUT ROWID;
    CREATE TABLE uploads (upload_id TEXT PRIMARY KEY, bucket TEXT NOT NULL, key BLOB NOT NULL,
                          owner TEXT NOT NULL, initiated REAL NOT NULL, headers TEXT NOT NULL,
                          user_meta TEXT NOT NULL, checksum_algorithm TEXT NOT NULL,
                          checksum_type TEXT NOT NULL);
    CREATE INDEX uploads_by_key ON uploads (bucket, key, upload_id);
    CREATE TABLE parts (upload_id TEXT NOT NULL, number INTEGER NOT NULL, size INTEGER NOT NULL,
                        etag TEXT NOT NULL, last_modified REAL NOT NULL, layout TEXT NOT NULL,
                        checksum TEXT NOT NULL, PRIMARY KEY (upload_id, number)) WITHOUT ROWID;
    CREATE TABLE orphans (id INTEGER PRIMARY KEY AUTOINCREMENT, layout TEXT NOT NULL,
                          due REAL NOT NULL);
    CREATE INDEX orphans_due ON orphans (due);
    """,
    # 1 -> 2: ACLs, tags, version ids; bucket configuration documents, users, lifecycle runs
    """
    ALTER TABLE buckets ADD COLUMN acl TEXT;
    ALTER TABLE objects ADD COLUMN tags TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE objects ADD COLUMN acl TEXT;
    ALTER TABLE objects ADD COLUMN version_id TEXT NOT NULL DEFAULT 'null';
    CREATE TABLE bucket_configs (bucket TEXT NOT NULL, kind TEXT NOT NULL, doc TEXT NOT NULL,
                                 PRIMARY KEY (bucket, kind)) WITHOUT ROWID;
    CREATE TABLE users (access_key TEXT PRIMARY KEY, secret TEXT NOT NULL,
                        canonical_id TEXT NOT NULL, display_name TEXT NOT NULL,
                        created REAL NOT NULL);
    CREATE TABLE lifecycle_runs (bucket TEXT PRIMARY KEY, done_day INTEGER NOT NULL,
                                 run_day INTEGER NOT NULL, marker TEXT NOT NULL,
                                 worker TEXT NOT NULL, lease_until REAL NOT NULL);
    """,
    # 2 -> 3: every version (delete markers included) in `versions`; the current objects
    # become their keys' "null" versions
    """
    CREATE TABLE versions (bucket TEXT NOT NULL, key BLOB NOT NULL, seq INTEGER NOT NULL,
                           version_id TEXT NOT NULL, delete_marker INTEGER NOT NULL,
                           size INTEGER NOT NULL, etag TEXT NOT NULL,
                           last_modified REAL NOT NULL, owner TEXT NOT NULL,
                           version TEXT NOT NULL, headers TEXT NOT NULL,
                           user_meta TEXT NOT NULL, checksum TEXT NOT NULL, parts TEXT NOT NULL,
                           manifest TEXT, tags TEXT NOT NULL, acl TEXT,
                           PRIMARY KEY (bucket, key, seq DESC)) WITHOUT ROWID;
    CREATE UNIQUE INDEX versions_by_id ON versions (bucket, key, version_id);
    INSERT INTO versions (bucket, key, seq, version_id, delete_marker, size, etag,
                          last_modified, owner, version, headers, user_meta, checksum, parts,
                          manifest, tags, acl)
        SELECT bucket, key, 1, 'null', 0, size, etag, last_modified, owner, version, headers,
               user_meta, checksum, parts, manifest, tags, acl FROM objects;
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


# get_object keeps parsed part lists of at least this many bytes of JSON, up to this total
PARTS_CACHE_MIN = 4096
PARTS_CACHE_BYTES = 16 * 1024 * 1024


_k, _s = key_bytes, key_str


def _js(v: Any) -> str | None:
    """JSON text of an optional column (None stays NULL)."""
    return None if v is None else json.dumps(v)


def _bk(row: tuple) -> BucketRecord:
    return BucketRecord(row[0], row[1], row[2], row[3], json.loads(row[4]) if row[4] else None)


class SqliteStore(SqliteVersions, SqliteExtras, SqliteQueues, SqliteLayouts, SqliteMoves,
                  MetadataStore):
    def __init__(self, path: str | Path, *, free_delay: float = 0.0) -> None:
        self.path = str(path)
        # Seconds between an object's data being replaced or deleted and its fragments
        # becoming due for deletion: GETs already streaming the old data can finish.
        self.free_delay = free_delay
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One connection per thread: the store is called from the event loop thread, and
        # sometimes from worker threads (recovery, sweeps).
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # (bucket, key) -> (parts JSON, parsed parts), least recently used first
        self._parts_cache: OrderedDict[tuple[str, bytes], tuple[str, list]] = OrderedDict()
        self._parts_cache_bytes = 0
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="zonegate-sqlite-writer")
        self._migrate()

    # -- plumbing -------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                check_same_thread=False)
            c.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before the PUT is acknowledged, like the data on the
            # nodes (NORMAL would only lose the newest commits on power loss, but an
            # acknowledged object must survive that too).
            c.execute("PRAGMA synchronous=FULL")
            c.execute("PRAGMA busy_timeout=30000")
            self._local.conn = c
            with self._lock:
                self._conns.append(c)
        return c

    class _Tx:
        def __init__(self, c: sqlite3.Connection) -> None:
            self.c = c

        def __enter__(self) -> sqlite3.Connection:
            self.c.execute("BEGIN IMMEDIATE")
            return self.c

        def __exit__(self, et: Any, *_: Any) -> None:
            self.c.execute("COMMIT" if et is None else "ROLLBACK")

    def _tx(self) -> _Tx:
        return self._Tx(self._conn())

    def _migrate(self) -> None:
        c = self._conn()
        with self._tx():
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = c.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if row is None:
                c.execute("INSERT INTO schema_version VALUES (0)")
            if version > len(MIGRATIONS):
                raise ValueError(f"metadata store {self.path} has schema version {version}, "
                                 f"newer than this gateway ({len(MIGRATIONS)})")
            for v in range(version, len(MIGRATIONS)):
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        c.execute(stmt)
            c.execute("UPDATE schema_version SET version=?", (len(MIGRATIONS),))

    def _schema_version(self) -> int:
        return self._conn().execute("SELECT version FROM schema_version").fetchone()[0]

    def _close(self) -> None:
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()
        self._local = threading.local()

    # -- buckets --------------------------------------------------------------------------
    @staticmethod
    def _require_bucket(c: sqlite3.Connection, name: str) -> None:
        # Inside the writer's transaction: a DeleteBucket committed since the request checked
        # its bucket is seen here, so no object or upload lands in a bucket that is gone.
        if c.execute("SELECT 1 FROM buckets WHERE name=?", (name,)).fetchone() is None:
            raise NoSuchBucketError(name)

    def _create_bucket(self, rec: BucketRecord) -> BucketRecord | None:
        with self._tx() as c:
            existing = self._bucket(c, rec.name)
            if existing:
                return existing
            c.execute("INSERT INTO buckets (name, owner, created, region, acl) VALUES (?,?,?,?,?)",
                      (rec.name, rec.owner, rec.created, rec.region, _js(rec.acl)))
        return None

    @staticmethod
    def _bucket(c: sqlite3.Connection, name: str) -> BucketRecord | None:
        row = c.execute("SELECT name, owner, created, region, acl FROM buckets WHERE name=?",
                        (name,)).fetchone()
        return _bk(row) if row else None

    def _get_bucket(self, name: str) -> BucketRecord | None:
        return self._bucket(self._conn(), name)

    def _list_buckets(self, owner: str | None = None) -> list[BucketRecord]:
        q = "SELECT name, owner, created, region, acl FROM buckets"
        args: tuple = ()
        if owner is not None:
            q += " WHERE owner=?"
            args = (owner,)
        return [_bk(r) for r in self._conn().execute(q + " ORDER BY name", args)]

    def _delete_bucket(self, name: str) -> bool:
        with self._tx() as c:
            # versions, not objects: noncurrent versions and delete markers keep it too
            if c.execute("SELECT 1 FROM versions WHERE bucket=? LIMIT 1", (name,)).fetchone():
                raise BucketNotEmptyError(name)
            # Uploads in progress die with the bucket (as in S3); their parts are freed.
            ups = [r[0] for r in c.execute("SELECT upload_id FROM uploads WHERE bucket=? ORDER BY upload_id",
                                           (name,))]
            for up in ups:
                lays = [json.loads(r[0]) for r in
                        c.execute("SELECT layout FROM parts WHERE upload_id=? ORDER BY number",
                                  (up,))]
                self._queue(c, lays, time.time())
                c.execute("DELETE FROM parts WHERE upload_id=?", (up,))
            c.execute("DELETE FROM uploads WHERE bucket=?", (name,))
            c.execute("DELETE FROM bucket_configs WHERE bucket=?", (name,))
            c.execute("DELETE FROM lifecycle_runs WHERE bucket=?", (name,))
            return c.execute("DELETE FROM buckets WHERE name=?", (name,)).rowcount > 0

    # -- objects --------------------------------------------------------------------------
    _OBJ_COLS = OBJ_COLS

    _LIST_COLS = "bucket, key, size, etag, last_modified, owner, version, checksum, version_id"

    @staticmethod
    def _obj(row: tuple, parts: list[dict[str, Any]] | None = None) -> ObjectRecord:
        return ObjectRecord(
            bucket=row[0], key=_s(row[1]), size=row[2], etag=row[3], last_modified=row[4],
            owner=row[5], version=row[6], headers=json.loads(row[7]),
            user_meta=json.loads(row[8]), checksum=json.loads(row[9]),
            parts=json.loads(row[10]) if parts is None else parts,
            manifest=json.loads(row[11]) if row[11] else None, tags=json.loads(row[12]),
            acl=json.loads(row[13]) if row[13] else None, version_id=row[14],
            meta_part=json.loads(row[17]) if len(row) > 17 and row[17] else None)

    def _get_obj(self, c: sqlite3.Connection, bucket: str, key: str) -> ObjectRecord | None:
        row = c.execute(f"SELECT {self._OBJ_COLS} FROM objects WHERE bucket=? AND key=?",
                        (bucket, _k(key))).fetchone()
        return self._obj(row) if row else None

    def _get_object(self, bucket: str, key: str) -> ObjectRecord | None:
        """The object's record. Its `parts` list may be shared with other callers (it is
        parsed once per stored version and kept): callers must not change it."""
        row = self._conn().execute(
            f"SELECT {self._OBJ_COLS} FROM objects WHERE bucket=? AND key=?",
            (bucket, _k(key))).fetchone()
        if row is None:
            return None
        raw = row[10]
        if len(raw) < PARTS_CACHE_MIN:
            return self._obj(row)
        # A multipart object's parts are tens of kB of JSON, parsed for every ranged GET of
        # it (a boto3 download_file makes one GET per 8 MiB): parse them once per version.
        ck = (bucket, row[1])
        with self._lock:
            hit = self._parts_cache.get(ck)
            if hit is not None and hit[0] == raw:
                self._parts_cache.move_to_end(ck)
        if hit is not None and hit[0] == raw:
            parts = hit[1]
        else:
            parts = json.loads(raw)
            with self._lock:
                old = self._parts_cache.pop(ck, None)
                self._parts_cache_bytes += len(raw) - (len(old[0]) if old else 0)
                self._parts_cache[ck] = (raw, parts)
                while self._parts_cache_bytes > PARTS_CACHE_BYTES and self._parts_cache:
                    _, (r, _p) = self._parts_cache.popitem(last=False)
                    self._parts_cache_bytes -= len(r)
        return self._obj(row, parts)

    def _list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                      limit: int) -> ListPage:
        c = self._conn()
        walk = ObjectWalk(prefix, delimiter, after, limit, itemgetter(1), listed_object)
        while (r := walk.next_range()) is not None:
            lower, inclusive, end = r
            if delimiter:
                n = walk.steps()
                sq, sargs = skipscan.sqlite_query(self._LIST_COLS, bucket, prefix, delimiter,
                                                  lower, inclusive, end, n)
                walk.feed(c.execute(sq, sargs).fetchall(), n)
                continue
            # Listings never need the part layouts (a 10,000-part object's row is megabytes).
            q = (f"SELECT {self._LIST_COLS} FROM objects WHERE bucket=? AND "
                 + ("key >= ?" if inclusive else "key > ?"))
            args: list[Any] = [bucket, lower]
            if end is not None:
                q += " AND key < ?"
                args.append(end)
            walk.feed(c.execute(q + f" ORDER BY key LIMIT {walk.batch}", args).fetchall())
        return walk.page()

    # -- uploads --------------------------------------------------------------------------
    _UP_COLS = ("upload_id, bucket, key, owner, initiated, headers, user_meta, "
                "checksum_algorithm, checksum_type")

    @staticmethod
    def _up(row: tuple) -> UploadRecord:
        return UploadRecord(row[0], row[1], _s(row[2]), row[3], row[4], json.loads(row[5]),
                            json.loads(row[6]), row[7], row[8])

    def _create_upload(self, rec: UploadRecord) -> None:
        with self._tx() as c:
            self._require_bucket(c, rec.bucket)
            c.execute(f"INSERT INTO uploads ({self._UP_COLS}) VALUES (?,?,?,?,?,?,?,?,?)",
                      (rec.upload_id, rec.bucket, _k(rec.key), rec.owner, rec.initiated,
                       json.dumps(rec.headers), json.dumps(rec.user_meta),
                       rec.checksum_algorithm, rec.checksum_type))

    def _get_upload(self, upload_id: str) -> UploadRecord | None:
        row = self._conn().execute(f"SELECT {self._UP_COLS} FROM uploads WHERE upload_id=?",
                                   (upload_id,)).fetchone()
        return self._up(row) if row else None

    def _put_part(self, part: PartRecord, release: list[int] | None = None) -> bool:
        with self._tx() as c:
            if not c.execute("SELECT 1 FROM uploads WHERE upload_id=?",
                             (part.upload_id,)).fetchone():
                return False
            self._release(c, release)
            old = c.execute("SELECT layout FROM parts WHERE upload_id=? AND number=?",
                            (part.upload_id, part.number)).fetchone()
            if old:
                self._queue(c, [json.loads(old[0])], time.time())
            c.execute("INSERT OR REPLACE INTO parts VALUES (?,?,?,?,?,?,?)",
                      (part.upload_id, part.number, part.size, part.etag, part.last_modified,
                       json.dumps(part.layout), json.dumps(part.checksum)))
        return True

    def _list_parts(self, upload_id: str, after: int = 0, limit: int = 10000) -> list[PartRecord]:
        rows = self._conn().execute(
            "SELECT upload_id, number, size, etag, last_modified, layout, checksum FROM parts "
            "WHERE upload_id=? AND number>? ORDER BY number LIMIT ?", (upload_id, after, limit))
        return [PartRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), json.loads(r[6]))
                for r in rows]

    def _abort_upload(self, upload_id: str) -> bool:
        with self._tx() as c:
            lays = [json.loads(r[0]) for r in
                    c.execute("SELECT layout FROM parts WHERE upload_id=? ORDER BY number",
                              (upload_id,))]
            c.execute("DELETE FROM parts WHERE upload_id=?", (upload_id,))
            gone = c.execute("DELETE FROM uploads WHERE upload_id=?", (upload_id,)).rowcount > 0
            self._queue(c, lays, time.time())
        return gone

    def _list_uploads(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                     upload_id_marker: str, limit: int) -> ListPage:
        c = self._conn()
        bp = _k(prefix)
        q = f"SELECT {self._UP_COLS} FROM uploads WHERE bucket=?"
        args: list[Any] = [bucket]
        if key_marker:
            if upload_id_marker:
                q += " AND (key > ? OR (key = ? AND upload_id > ?))"
                args += [_k(key_marker), _k(key_marker), upload_id_marker]
            else:
                q += " AND key > ?"
                args.append(_k(key_marker))
        if bp:
            q += " AND key >= ?"
            args.append(bp)
            end = prefix_end(bp)
            if end is not None:
                q += " AND key < ?"
                args.append(end)
        # Sorted by key, then upload id: the order the (key, upload-id) markers resume from.
        q += " ORDER BY key, upload_id"
        return rollup_uploads(c.execute(q, args), prefix, delimiter, limit, lambda r: r[2],
                              self._up)

    def _stale_uploads(self, older_than: float) -> list[str]:
        return [r[0] for r in self._conn().execute(
            "SELECT upload_id FROM uploads WHERE initiated < ?", (older_than,))]

    # -- orphan queue ---------------------------------------------------------------------
    @staticmethod
    def _queue(c: sqlite3.Connection, layouts: list[dict], due: float) -> list[int]:
        ids = []
        for lay in layouts:
            cur = c.execute("INSERT INTO orphans (layout, due) VALUES (?, ?)",
                            (json.dumps(lay), due))
            ids.append(int(cur.lastrowid or 0))
        return ids

    @staticmethod
    def _release(c: sqlite3.Connection, ids: list[int] | None) -> None:
        if ids:
            c.executemany("DELETE FROM orphans WHERE id=?", [(i,) for i in ids])

    def _queue_orphans(self, layouts: list[dict[str, Any]], delay: float = 0.0) -> list[int]:
        with self._tx() as c:
            return self._queue(c, layouts, time.time() + delay)

    def _claim_orphans(self, limit: int = 100, lease: float = 300.0) -> list[OrphanEntry]:
        now = time.time()
        with self._tx() as c:
            rows = c.execute("SELECT id, layout FROM orphans WHERE due <= ? ORDER BY due, id LIMIT ?",
                             (now, limit)).fetchall()
            c.executemany("UPDATE orphans SET due=? WHERE id=?", [(now + lease, r[0]) for r in rows])
        return [OrphanEntry(r[0], json.loads(r[1])) for r in rows]

    def _done_orphans(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._tx() as c:
            c.executemany("DELETE FROM orphans WHERE id=?", [(i,) for i in ids])

    def _next_due(self) -> float | None:
        row = self._conn().execute("SELECT MIN(due) FROM orphans").fetchone()
        return row[0] if row and row[0] is not None else None

    def _orphan_count(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM orphans").fetchone()[0]

    # -- the async contract -----------------------------------------------------------------
    async def _w(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a write transaction on the writer thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, functools.partial(fn, *args, **kw))

    @staticmethod
    async def _r(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a longer read (a listing) on the default thread pool."""
        return await asyncio.to_thread(fn, *args, **kw)

    async def schema_version(self) -> int:
        return self._schema_version()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._writer.shutdown)
        self._close()

    async def create_bucket(self, rec: BucketRecord) -> BucketRecord | None:
        return await self._w(self._create_bucket, rec)

    async def get_bucket(self, name: str) -> BucketRecord | None:
        return self._get_bucket(name)

    async def list_buckets(self, owner: str | None = None) -> list[BucketRecord]:
        return await self._r(self._list_buckets, owner)

    async def delete_bucket(self, name: str) -> bool:
        return await self._w(self._delete_bucket, name)

    async def list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                           limit: int) -> ListPage:
        # On the pool even without a delimiter: a 1000-row page is ~2 ms from the page cache
        # but can wait on the disk when cold, and the loop must not (inline it measured fewer
        # schedulings a page on a loaded machine: bench/README.md, Metadata).
        return await self._r(self._list_objects, bucket, prefix, delimiter, after, limit)

    async def create_upload(self, rec: UploadRecord) -> None:
        await self._w(self._create_upload, rec)

    async def get_upload(self, upload_id: str) -> UploadRecord | None:
        return self._get_upload(upload_id)

    async def put_part(self, part: PartRecord, release: list[int] | None = None) -> bool:
        return await self._w(self._put_part, part, release)

    async def list_parts(self, upload_id: str, after: int = 0,
                         limit: int = 10000) -> list[PartRecord]:
        return await self._r(self._list_parts, upload_id, after, limit)

    async def abort_upload(self, upload_id: str) -> bool:
        return await self._w(self._abort_upload, upload_id)

    async def list_uploads(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                           upload_id_marker: str, limit: int) -> ListPage:
        return await self._r(self._list_uploads, bucket, prefix, delimiter, key_marker,
                             upload_id_marker, limit)

    async def stale_uploads(self, older_than: float) -> list[str]:
        return await self._r(self._stale_uploads, older_than)

    async def queue_orphans(self, layouts: list[dict[str, Any]], delay: float = 0.0) -> list[int]:
        return await self._w(self._queue_orphans, layouts, delay)

    async def claim_orphans(self, limit: int = 100, lease: float = 300.0) -> list[OrphanEntry]:
        return await self._w(self._claim_orphans, limit, lease)

    async def done_orphans(self, ids: list[int]) -> None:
        if ids:
            await self._w(self._done_orphans, ids)

    async def next_due(self) -> float | None:
        return self._next_due()

    def _wake_orphans(self) -> int:
        with self._tx() as c:
            return c.execute("UPDATE orphans SET due=0 WHERE due > 0 AND "
                             "layout LIKE '%\"purge_nodes\"%'").rowcount

    async def wake_orphans(self) -> int:
        return await self._w(self._wake_orphans)

    async def orphan_count(self) -> int:
        return self._orphan_count()

    async def part_owners(self) -> dict[str, str]:
        return await self._r(self._part_owners)

    # -- fragment audit -------------------------------------------------------------------
    def _part_owners(self) -> dict[str, str]:
        """Every part uid something here owns -> what: "live" (an object's part or manifest,
        an upload's part, a bucket's marker), "pending write" or "queued for deletion" (the
        orphan queue). For the fragment audit (gateway/store/partowners.py)."""
        out: dict[str, str] = {}
        c = self._conn()
        c.execute("BEGIN")  # one snapshot of every table
        try:
            for (layout,) in c.execute("SELECT layout FROM orphans"):
                d = json.loads(layout)
                out[d.get("part_uid", "")] = ("pending write" if d.get("pending")
                                              else "queued for deletion")
            # every version (objects holds copies of the current ones); markers' manifests too
            for parts, manifest, meta_part in c.execute(
                    "SELECT parts, manifest, meta_part FROM versions"):
                for p in json.loads(parts):
                    out[p["layout"]["part_uid"]] = "live"
                for lay in (manifest, meta_part):
                    if lay:
                        out[json.loads(lay)["part_uid"]] = "live"
            for (layout,) in c.execute("SELECT layout FROM parts"):
                out[json.loads(layout)["part_uid"]] = "live"
            for name, created in c.execute("SELECT name, created FROM buckets"):
                out[marker_uid(name, created)] = "live"
        finally:
            c.execute("COMMIT")
        return out
