"""Bulk fill of a listing bucket for the metadata benchmark: rows written into the store's own
tables (objects + versions, the columns and encodings put_object writes) in large batches, so
that a 1,000,000-object bucket takes a minute or two, not the half hour of single commits.

SQLite: executemany in one transaction per batch on the store's writer thread; PostgreSQL:
COPY (asyncpg copy_records_to_table) on one pooled connection, one transaction per batch.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from gateway.metadata import ObjectRecord

BATCH = 50_000


def records(bucket: str, owner: str, n: int, key_of: Callable[[int], str]) -> Iterator[ObjectRecord]:
    for i in range(n):
        version = uuid.uuid4().hex
        etag = hashlib.md5(str(i).encode()).hexdigest()
        yield ObjectRecord(bucket=bucket, key=key_of(i), size=1024, etag=etag,
                           last_modified=time.time(), owner=owner, version=version,
                           headers={"Content-Type": "application/octet-stream"},
                           parts=[{"number": 1, "size": 1024, "etag": etag,
                                   "layout": {"part_uid": f"{version}-1", "size": 1024}}])


def _sqlite_batch(store: Any, batch: list[ObjectRecord]) -> None:
    from gateway.metadata.sqlite_versions import OBJ_COLS, VER_COLS, _values
    objs = [_values(r, "null") for r in batch]
    with store._tx() as c:
        marks = ",".join("?" * len(objs[0]))
        c.executemany(f"INSERT INTO objects ({OBJ_COLS}) VALUES ({marks})", objs)
        c.executemany(f"INSERT INTO versions ({VER_COLS}) VALUES ({marks},?,?,?)",
                      [(*v, 1, 0, None) for v in objs])  # seq, delete_marker, meta_part


async def bulk_fill(store: Any, bucket: str, owner: str, n: int,
                    key_of: Callable[[int], str]) -> float:
    """Insert n objects (all new keys, unversioned) into an existing bucket; seconds taken."""
    t0 = time.perf_counter()
    it = records(bucket, owner, n, key_of)
    pg = type(store).__name__ == "PostgresStore"
    while True:
        batch = list(islice(it, BATCH))
        if not batch:
            break
        if pg:
            await _pg_batch(store, batch)
        else:
            await store._w(_sqlite_batch, store, batch)
    if pg:
        async with store._p().acquire() as c:
            await c.execute("ANALYZE objects")
            await c.execute("ANALYZE versions")
    return time.perf_counter() - t0


async def _pg_batch(store: Any, batch: list[ObjectRecord]) -> None:
    from gateway.metadata.pg_versions import VER_COLS, _values
    from gateway.metadata.pgrows import OBJ_COLS
    objs = [_values(r, "null") for r in batch]
    async with store._p().acquire() as c, c.transaction():
        await c.copy_records_to_table("objects", records=objs,
                                      columns=[s.strip() for s in OBJ_COLS.split(",")])
        await c.copy_records_to_table("versions", records=[(*v, 1, False, None) for v in objs],
                                      columns=[s.strip() for s in VER_COLS.split(",")])
