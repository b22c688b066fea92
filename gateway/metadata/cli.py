"""`zonegate metadata ...`: the metadata store's schema and moving a store to PostgreSQL.

- `zonegate metadata migrate --config C`: create or upgrade the schema of the configured store
  (a gateway also does it at start; this is for doing it ahead, from any machine).
- `zonegate metadata copy --from <sqlite path> --to <postgresql URL>`: copy an embedded store
  (every table: buckets and their configuration, objects, uploads, parts, the orphan
  queue, users, lifecycle runs) into an empty PostgreSQL database, in
  one transaction, to move a cluster from one gateway on SQLite to several on PostgreSQL. Run
  it with the gateway stopped; the SQLite file is read in one snapshot and left as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from pathlib import Path

TABLES: dict[str, str] = {
    "buckets": "name, owner, created, region, acl",
    "objects": "bucket, key, size, etag, last_modified, owner, version, headers, user_meta, "
               "checksum, parts, manifest, tags, acl, version_id",
    "uploads": "upload_id, bucket, key, owner, initiated, headers, user_meta, "
               "checksum_algorithm, checksum_type",
    "parts": "upload_id, number, size, etag, last_modified, layout, checksum",
    # ids are the target's own (a new sequence); only what is queued and when it is due moves
    "orphans": "layout, due",
    "bucket_configs": "bucket, kind, doc",
    "users": "access_key, secret, canonical_id, display_name, created",
    "lifecycle_runs": "bucket, done_day, run_day, marker, worker, lease_until",
    "versions": "bucket, key, seq, version_id, delete_marker, size, etag, last_modified, owner, "
                "version, headers, user_meta, checksum, parts, manifest, tags, acl",
}
# SQLite keeps booleans as integers
BOOLEANS = {"versions": {"delete_marker"}}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="the metadata store: schema migrations, copying a "
                                        "SQLite store into PostgreSQL")
    msub = p.add_subparsers(dest="metadata_command", required=True, metavar="ACTION")
    m = msub.add_parser("migrate", help="create or upgrade the configured store's schema")
    m.add_argument("--config", required=True, help="cluster config (TOML)")
    m.set_defaults(func=cmd_migrate)
    c = msub.add_parser("copy", help="copy a SQLite metadata store into an empty PostgreSQL "
                                     "database (gateway stopped)")
    c.add_argument("--from", dest="source", required=True, help="the SQLite file")
    c.add_argument("--to", dest="target", required=True,
                   help="postgresql:// URL (password: --password-file, PGPASSWORD or ~/.pgpass)")
    c.add_argument("--password-file", default=None, help="file holding the database password")
    c.set_defaults(func=cmd_copy)


def cmd_migrate(args: argparse.Namespace) -> int:
    from erasure.config import ClusterConfig
    from gateway.metadata import check_store, describe, store_from_config, store_path
    gw = ClusterConfig.load(args.config).gateway
    asyncio.run(check_store(gw))

    async def version() -> int:
        store = store_from_config(gw)
        try:
            await store.start()
            return await store.schema_version()
        finally:
            await store.close()
    print(f"metadata store {describe(store_path(gw))}: schema version {asyncio.run(version())}")
    return 0


async def copy_store(source: str, target: str, password_file: str | None = None
                     ) -> dict[str, int]:
    """Copy every row of the SQLite store at source into the empty PostgreSQL store at
    target (schema created if needed); returns rows copied per table."""
    from gateway.metadata import SqliteStore, is_database_url
    from gateway.metadata.postgres import PostgresStore
    if not is_database_url(target):
        raise ValueError(f"--to {target!r} is not a postgresql:// URL")
    if not Path(source).is_file():
        raise ValueError(f"--from {source!r}: no such SQLite metadata store")
    # Opening it brings an older SQLite schema up to date first.
    await SqliteStore(source).close()
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = PostgresStore(target, password_file=password_file)
    await dst.start()
    try:
        src.execute("BEGIN")  # one snapshot of the whole store
        async with dst._p().acquire() as c, c.transaction():
            for table in TABLES:
                if await c.fetchval(f"SELECT 1 FROM {table} LIMIT 1"):
                    raise ValueError(f"--to {dst!r} is not empty (table {table} has rows); "
                                     "copy only into a new database")
            counts: dict[str, int] = {}
            for table, cols in TABLES.items():
                cur = src.execute(f"SELECT {cols} FROM {table}")
                names = [x.strip() for x in cols.split(",")]
                n = 0
                flags = [i for i, n in enumerate(names) if n in BOOLEANS.get(table, ())]
                while rows := cur.fetchmany(5000):
                    if flags:
                        rows = [tuple(bool(v) if i in flags else v for i, v in enumerate(r))
                                for r in rows]
                    await c.copy_records_to_table(table, records=rows, columns=names)
                    n += len(rows)
                counts[table] = n
        return counts
    finally:
        src.close()
        await dst.close()


def cmd_copy(args: argparse.Namespace) -> int:
    from gateway.metadata import StoreUnavailableError, describe
    try:
        counts = asyncio.run(copy_store(args.source, args.target, args.password_file))
    except StoreUnavailableError as e:
        raise ValueError(str(e)) from None
    print(f"copied {args.source} into {describe(args.target)}: "
          + ", ".join(f"{n} {t}" for t, n in counts.items()))
    return 0
