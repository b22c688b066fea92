"""Put/Get/DeleteBucketLifecycleConfiguration, and the `x-amz-expiration` header that GET,
HEAD, PUT, CopyObject and CompleteMultipartUpload of an object the rules will expire carry
(`x-amz-abort-date` / `x-amz-abort-rule-id` on CreateMultipartUpload and ListParts).

The configuration is validated and normalised by gateway/lifecycle/config.py and kept as the
bucket's `lifecycle` config document; the worker (gateway/lifecycle/worker.py) applies it.
"""

from __future__ import annotations

import email.utils
from typing import Any

from starlette.responses import Response

from gateway.lifecycle import config as lcconfig
from gateway.lifecycle import rules
from gateway.metadata import ObjectRecord
from gateway.ops.common import S3Request, bucket_config, read_small_body, require_bucket
from gateway.ops.tagging import require_integrity_header, save_config
from gateway.s3.errors import S3Error

MAX_LIFECYCLE_BODY = 4 * 1024 * 1024  # 1000 rules of several tags each fit


def day_seconds(gw: Any) -> float:
    """The length of a lifecycle day (`[gateway] lifecycle_day_seconds`, 86400)."""
    return float(getattr(gw, "lifecycle_day", None) or rules.DAY)


async def put_bucket_lifecycle(req: S3Request) -> Response:
    await require_bucket(req)
    require_integrity_header(req)
    doc = lcconfig.parse_lifecycle(await read_small_body(req, MAX_LIFECYCLE_BODY))
    await save_config(req, "lifecycle", lcconfig.dump(doc))
    return Response(b"", headers={
        "x-amz-transition-default-minimum-object-size": "all_storage_classes_128K"})


async def get_bucket_lifecycle(req: S3Request) -> Response:
    await require_bucket(req)
    doc = lcconfig.load(await req.gw.store.get_bucket_config(req.bucket, "lifecycle"))
    if not doc:
        raise S3Error("NoSuchLifecycleConfiguration", BucketName=req.bucket)
    return Response(lcconfig.render_lifecycle(doc), media_type="application/xml", headers={
        "x-amz-transition-default-minimum-object-size": "all_storage_classes_128K"})


async def delete_bucket_lifecycle(req: S3Request) -> Response:
    await require_bucket(req)
    await save_config(req, "lifecycle", None)
    return Response(status_code=204)


async def expiration_headers(req: S3Request, obj: ObjectRecord) -> dict[str, str]:
    """`x-amz-expiration` for the current version of an object a rule will expire ({} when
    none does, or when a specific version was asked for, as S3 answers)."""
    if req.query.get("versionId") is not None:
        return {}
    doc = lcconfig.load(await bucket_config(req, obj.bucket, "lifecycle"))
    if not doc:
        return {}
    hit = rules.current_expiry(doc, obj.key, obj.size, getattr(obj, "tags", None) or {},
                               obj.last_modified, day_seconds(req.gw))
    if hit is None:
        return {}
    return {"x-amz-expiration": rules.expiration_header(*hit)}


async def tag_and_expiry_headers(req: S3Request, obj: ObjectRecord) -> dict[str, str]:
    """The headers GET and HEAD add for tagging and lifecycle."""
    from gateway.ops.tagging import tag_count_header
    return {**tag_count_header(obj), **await expiration_headers(req, obj)}


async def abort_headers(req: S3Request, bucket: str, key: str,
                        initiated: float) -> dict[str, str]:
    """`x-amz-abort-date` and `x-amz-abort-rule-id` for an upload an
    AbortIncompleteMultipartUpload rule will abort ({} when none does), as S3 answers
    CreateMultipartUpload and ListParts."""
    doc = lcconfig.load(await bucket_config(req, bucket, "lifecycle"))
    if not doc:
        return {}
    hit = rules.upload_abort(doc, key, initiated, day_seconds(req.gw))
    if hit is None:
        return {}
    return {"x-amz-abort-date": email.utils.formatdate(hit[0], usegmt=True),
            "x-amz-abort-rule-id": hit[1]}
