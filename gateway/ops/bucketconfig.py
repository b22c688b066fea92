"""Saving a bucket configuration document (versioning, lifecycle, tagging, ...): the store's
row, then the bucket marker on the nodes rewritten with every document the bucket has, so
`recover-metadata` brings them back (gateway/bucketmarkers.py)."""

from __future__ import annotations

import logging
from typing import Any

from erasure.errors import ErasureError
from gateway import bucketmarkers
from gateway.errors import S3Error

log = logging.getLogger("zonegate.bucketconfig")


async def save_bucket_config(gw: Any, bucket: str, kind: str, doc: str | None) -> bool:
    """Set (doc: normalised JSON) or delete (None) the bucket's document of `kind`, then
    rewrite its marker. False: no such bucket. The document is stored even when too few nodes
    answer the marker rewrite; the client then gets 503 ServiceUnavailable, and its retry
    rewrites the marker."""
    if not await gw.store.put_bucket_config(bucket, kind, doc):
        return False
    rec = await gw.store.get_bucket(bucket)
    if rec is None:
        return False
    try:
        await bucketmarkers.rewrite_marker(gw.storage.cluster, gw.store, rec)
    except ErasureError as e:
        log.warning("bucket marker of %s not rewritten after a %s change: %s", bucket, kind, e)
        raise S3Error("ServiceUnavailable", "Not enough storage nodes answered to record the "
                      "bucket configuration on them. Please retry.") from None
    return True
