"""S3 Object Lock: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
Put/GetObjectLegalHold, the lock of new versions (PutObject, CreateMultipartUpload /
Complete, CopyObject) and the bypass of GOVERNANCE retention on deletes.

The rules are gateway/s3/lockrules.py (pure); the lock itself is in each version's headers
and is enforced by the metadata store in the delete's own transaction (store.LOCKED), so
DeleteObject, DeleteObjects, lifecycle expiry and anything else that would free a locked
version's data are all refused alike. Later changes are recorded on the nodes by
gateway/store/tagarchives.py, so recover-metadata brings them back."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from gateway.metadata import ObjectRecord
from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import (
    S3Request,
    now,
    read_small_body,
    require_bucket,
    xml_response,
)
from gateway.ops.lockguard import (
    bypass_governance,
    lock_config,
)
from gateway.ops.tagging import require_integrity_header
from gateway.ops.versioning import (
    bucket_state,
    checked_version_id,
    object_for_read,
)
from gateway.s3 import lockrules as rules
from gateway.s3.errors import S3Error
from gateway.store.tagarchives import save_change

MAX_BODY = 64 * 1024


# ---- the bucket's configuration -------------------------------------------------------------

def enabled_at_creation(req: S3Request) -> bool:
    """CreateBucket's `x-amz-bucket-object-lock-enabled: true`."""
    return req.headers.get("x-amz-bucket-object-lock-enabled", "").strip().lower() == "true"


def creation_configs() -> dict[str, str]:
    """The documents a bucket created with Object Lock starts with: versioning enabled (for
    good: it cannot be suspended) and the lock enabled without a default retention."""
    return {"versioning": json.dumps({"Status": "Enabled"}),
            rules.CONFIG_KIND: json.dumps({"enabled": True})}


async def put_lock_config(req: S3Request) -> Response:
    """PutObjectLockConfiguration. A bucket created without Object Lock may have it turned on
    once its versioning is enabled (as S3 allows today); never turned off."""
    await require_bucket(req)
    require_integrity_header(req)
    config = rules.parse_lock_config(await read_small_body(req, MAX_BODY))
    if await lock_config(req) is None and \
            await bucket_state(req.gw.store, req.bucket) != "enabled":
        raise S3Error("InvalidBucketState", "Versioning must be 'Enabled' on the bucket to "
                      "apply a Object Lock configuration")
    await save_bucket_config(req.gw, req.bucket, rules.CONFIG_KIND,
                             json.dumps(config, separators=(",", ":")))
    return Response(b"")


async def get_lock_config(req: S3Request) -> Response:
    await require_bucket(req)
    config = await lock_config(req)
    if config is None:
        raise S3Error("ObjectLockConfigurationNotFoundError", BucketName=req.bucket)
    return xml_response(rules.render_lock_config(config))


# ---- new versions ----------------------------------------------------------------------------

async def write_headers(req: S3Request, headers: dict[str, str], *,
                        upload: bool = False) -> dict[str, str]:
    """The stored headers of a new version (PutObject, CopyObject) with its lock: the
    x-amz-object-lock-* headers sent, else the bucket's default retention. `upload`:
    CreateMultipartUpload, which keeps only what was sent (the default retention is
    counted from CompleteMultipartUpload, when the object is made). InvalidRequest for lock
    headers on a bucket without Object Lock."""
    config = await lock_config(req)
    base = {k: v for k, v in headers.items() if k not in rules.LOCK_HEADERS}
    if upload:
        asked = rules.parse_write_headers(req.headers, now())
        if asked and config is None:
            raise S3Error("InvalidRequest", rules.MISSING_CONFIG)
        return {**base, **asked}
    lock = rules.write_lock(req.headers, config, now())
    if lock and req.method == "PUT" and "x-amz-copy-source" not in req.headers:
        # S3 wants an integrity check on every upload it will lock
        try:
            require_integrity_header(req)
        except S3Error:
            raise S3Error("InvalidRequest", "Content-MD5 OR x-amz-checksum- HTTP header is "
                          "required for Put Object requests with Object Lock parameters"
                          ) from None
    return {**base, **lock}


async def completed_headers(req: S3Request, headers: dict[str, str]) -> dict[str, str]:
    """CompleteMultipartUpload: the upload's headers (with the lock its creation asked for),
    the bucket's default retention added when it asked for none."""
    config = await lock_config(req)
    if config is None or rules.MODE in headers:
        return headers
    return {**headers, **rules.default_lock(config, now())}


# ---- deletes ---------------------------------------------------------------------------------

# ---- retention and legal hold ----------------------------------------------------------------

async def _locked_version(req: S3Request) -> tuple[Any, ObjectRecord, str | None]:
    b = await require_bucket(req)
    if await lock_config(req) is None:
        raise S3Error("InvalidRequest", rules.MISSING_CONFIG)
    vid = req.query.get("versionId")
    vid = checked_version_id(vid) if vid is not None else None
    return b, await object_for_read(req, req.bucket, req.key, vid), vid


def _version_header(obj: ObjectRecord) -> dict[str, str]:
    return {"x-amz-version-id": obj.version_id} if obj.version_id != "null" else {}


async def _save_lock(req: S3Request, obj: ObjectRecord, lock: dict[str, str]) -> None:
    if not await save_change(req, obj, obj.tags, obj.acl, "lock", lock):
        # the version went (or the key's current object changed) since it was read
        if "versionId" in req.query:
            raise S3Error("NoSuchVersion", Key=req.key, VersionId=req.query["versionId"])
        raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)


async def put_retention(req: S3Request) -> Response:
    b, obj, _ = await _locked_version(req)
    require_integrity_header(req)
    mode, until = rules.parse_retention(await read_small_body(req, MAX_BODY))
    bypass = await bypass_governance(req, b, req.key)
    rules.check_retention_change(obj.headers, mode, until, now(), bypass)
    lock = {k: v for k, v in rules.lock_of(obj.headers).items()
            if k not in (rules.MODE, rules.UNTIL)}
    if mode is not None and until is not None:
        lock.update({rules.MODE: mode, rules.UNTIL: rules.iso_ms(until)})
    await _save_lock(req, obj, lock)
    return Response(b"", headers=_version_header(obj))


async def get_retention(req: S3Request) -> Response:
    _, obj, _ = await _locked_version(req)
    if rules.retention(obj.headers)[0] is None:
        raise S3Error("NoSuchObjectLockConfiguration")
    return xml_response(rules.render_retention(obj.headers), headers=_version_header(obj))


async def put_legal_hold(req: S3Request) -> Response:
    _, obj, _ = await _locked_version(req)
    require_integrity_header(req)
    status = rules.parse_legal_hold(await read_small_body(req, MAX_BODY))
    lock = {**rules.lock_of(obj.headers), rules.HOLD: status}
    await _save_lock(req, obj, lock)
    return Response(b"", headers=_version_header(obj))


async def get_legal_hold(req: S3Request) -> Response:
    _, obj, _ = await _locked_version(req)
    status = obj.headers.get(rules.HOLD)
    if status is None:
        raise S3Error("NoSuchObjectLockConfiguration")
    return xml_response(rules.render_legal_hold(status), headers=_version_header(obj))
