"""Saving a bucket's configuration documents and ACL: in the metadata store, then in the
bucket's marker on the nodes (gateway/store/bucketmarkers.py), so `recover-metadata` brings them
back. The operations (versioning, lifecycle, tagging, policy, CORS, ACLs, ...) call these after
validating and normalising the client's document.

Order: the store first, then the marker rewrite; the change is acknowledged only once the
marker is durable. A marker that cannot be written (below the write quorum) is 503 for the
client: the store holds the new document already, and the retry rewrites the marker. Marker
rewrites of one bucket are serialised within a gateway process, and each checks the store
again after its write (another gateway may have changed it meanwhile), so the marker ends
holding what the store holds."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from erasure.errors import ErasureError
from gateway.s3.errors import S3Error
from gateway.store import bucketmarkers

log = logging.getLogger("zonegate.bucketconfig")

_locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = \
    weakref.WeakValueDictionary()


def _lock(gw: Any, bucket: str) -> asyncio.Lock:
    key = (id(gw), bucket)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = asyncio.Lock()
    return lock


async def save_bucket_config(gw: Any, bucket: str, kind: str, doc: str | None) -> None:
    """Store the bucket's document of this kind (None deletes it) and rewrite its marker.
    NoSuchBucket if the bucket is gone; ServiceUnavailable if the marker cannot be written."""
    if not await gw.store.put_bucket_config(bucket, kind, doc):
        raise S3Error("NoSuchBucket", BucketName=bucket)
    await rewrite_marker(gw, bucket)


async def save_bucket_acl(gw: Any, bucket: str, acl: list[dict[str, Any]] | None) -> None:
    """Store the bucket's grant list (None: owner only) and rewrite its marker."""
    if not await gw.store.put_bucket_acl(bucket, acl):
        raise S3Error("NoSuchBucket", BucketName=bucket)
    await rewrite_marker(gw, bucket)


async def rewrite_marker(gw: Any, bucket: str) -> None:
    """Write the bucket's marker again from what the store holds now. Another gateway's change
    may race this one, each writing what it read: so the store is read again after the write,
    and the marker written again until it holds what the store holds. A bucket deleted
    meanwhile (its DeleteBucket may have removed the marker before this write put it back)
    has the marker removed again."""
    cluster = gw.storage.cluster
    async with _lock(gw, bucket):
        rec = await gw.store.get_bucket(bucket)
        if rec is None:
            raise S3Error("NoSuchBucket", BucketName=bucket)
        want = (rec, await gw.store.bucket_configs(bucket))
        for _ in range(5):
            try:
                await bucketmarkers.write_marker(cluster, want[0], want[1])
            except ErasureError as e:
                log.warning("bucket %s: configuration stored but its marker not rewritten: %s",
                            bucket, e)
                raise S3Error("ServiceUnavailable", "Not enough storage nodes answered; "
                              "please retry.") from None
            cur = await gw.store.get_bucket(bucket)
            if cur is None or cur.created != rec.created:
                await bucketmarkers.delete_marker(cluster, gw.store, rec)
                raise S3Error("NoSuchBucket", BucketName=bucket)
            now = (cur, await gw.store.bucket_configs(bucket))
            if now == want:
                return
            want = now
