"""Object Lock's guards, used by the operations that a lock restrains (PutBucketVersioning,
DeleteObject, DeleteObjects) and by gateway/ops/objectlock.py: the bucket's lock configuration,
the governance bypass, and the answer to a refused delete."""

from __future__ import annotations

from typing import Any

from gateway.ops import access
from gateway.ops.common import S3Request, bucket_config
from gateway.s3 import lockrules as rules
from gateway.s3.errors import S3Error

LOCKED_MESSAGE = "Access Denied because object protected by object lock."


async def lock_config(req: S3Request, bucket: str | None = None) -> dict[str, Any] | None:
    """The bucket's Object Lock configuration (None: the bucket has no lock), from the
    configs the access check read."""
    return rules.config_from_doc(await bucket_config(req, bucket or req.bucket,
                                                     rules.CONFIG_KIND))


async def refuse_suspending(req: S3Request, status: str) -> None:
    """PutBucketVersioning: a bucket with Object Lock keeps its versioning enabled."""
    if status != "Enabled" and await lock_config(req) is not None:
        raise S3Error("InvalidBucketState", "An Object Lock configuration is present on this "
                      "bucket, so the versioning state cannot be changed.")


async def bypass_governance(req: S3Request, bucket: Any, key: str) -> bool:
    """Whether this delete may remove a version under GOVERNANCE retention: the request says
    `x-amz-bypass-governance-retention: true` and may s3:BypassGovernanceRetention."""
    if req.headers.get(rules.BYPASS, "").strip().lower() != "true":
        return False
    return await access.check_key(req, bucket, "BypassGovernanceRetention", key)


def locked_error() -> S3Error:
    """The answer to a delete of a version Object Lock protects."""
    return S3Error("AccessDenied", LOCKED_MESSAGE)
