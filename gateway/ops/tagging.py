"""Object and bucket tagging: Put/Get/DeleteObjectTagging (per version),
Put/Get/DeleteBucketTagging, and the `x-amz-tagging` header of the writes.

Tag sets are validated by gateway/s3/tagsets.py; object tags live on each version
(`ObjectRecord.tags`, `store.put_object_tags`), bucket tags in the bucket's `tagging`
config document (JSON). A multipart upload keeps the tags of its CreateMultipartUpload in
its stored headers under UPLOAD_TAGS_HEADER until Complete moves them onto the object.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from gateway.metadata import ObjectRecord
from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import S3Request, read_small_body, require_bucket
from gateway.ops.versioning import checked_version_id, object_for_read
from gateway.s3 import checksums
from gateway.s3.errors import S3Error
from gateway.s3.tagsets import parse_tagging, parse_tagging_header, render_tagging
from gateway.store.tagarchives import save_change

MAX_TAGGING_BODY = 256 * 1024
# Internal key in an upload's stored headers (never sent to clients: Complete pops it).
UPLOAD_TAGS_HEADER = "x-zg-tagging"


def require_integrity_header(req: S3Request) -> None:
    """Operations S3 marks checksum-required (PutObjectTagging, PutBucketTagging,
    PutBucketLifecycleConfiguration) need Content-MD5 or an x-amz-checksum-* value (a header
    or a trailer); the body is then verified against it as it is read."""
    h = req.headers
    if h.get("content-md5") is not None:
        return  # the body is checked against it (an empty one is InvalidDigest)
    if any(checksums.algorithm_from_header(k) is not None for k in h.keys()):
        return
    trailer = h.get("x-amz-trailer", "")
    if any(checksums.algorithm_from_header(t.strip()) is not None for t in trailer.split(",")):
        return
    raise S3Error("InvalidRequest", "Missing required header for this request: Content-MD5")


# ---- the header on writes ---------------------------------------------------------------

def request_tags(req: S3Request) -> dict[str, str]:
    """Tags sent with a PutObject / CreateMultipartUpload (`x-amz-tagging`); {} if none."""
    value = req.headers.get("x-amz-tagging")
    return parse_tagging_header(value) if value is not None else {}


def copy_tags(req: S3Request, src: ObjectRecord) -> dict[str, str]:
    """CopyObject's tags: the source's (x-amz-tagging-directive COPY, the default) or the
    request's x-amz-tagging (REPLACE)."""
    directive = req.headers.get("x-amz-tagging-directive", "COPY").strip().upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown tagging directive.",
                      ArgumentName="x-amz-tagging-directive", ArgumentValue=directive)
    if directive == "COPY":
        return dict(getattr(src, "tags", None) or {})
    return request_tags(req)


def upload_headers_with_tags(req: S3Request, headers: dict[str, str]) -> dict[str, str]:
    """CreateMultipartUpload: the upload's stored headers, carrying its tags to Complete."""
    tags = request_tags(req)
    if tags:
        headers = {**headers, UPLOAD_TAGS_HEADER: json.dumps(tags, separators=(",", ":"))}
    return headers


def split_upload_tags(headers: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """CompleteMultipartUpload: (the object's headers, its tags) from the upload's headers."""
    if UPLOAD_TAGS_HEADER not in headers:
        return headers, {}
    rest = {k: v for k, v in headers.items() if k != UPLOAD_TAGS_HEADER}
    try:
        tags = json.loads(headers[UPLOAD_TAGS_HEADER])
    except ValueError:
        tags = {}
    return rest, tags if isinstance(tags, dict) else {}


def tag_count_header(obj: ObjectRecord) -> dict[str, str]:
    """`x-amz-tagging-count` on GET/HEAD of a tagged object."""
    tags = getattr(obj, "tags", None)
    return {"x-amz-tagging-count": str(len(tags))} if tags else {}


# ---- object tagging ---------------------------------------------------------------------

def _version_query(req: S3Request) -> str | None:
    vid = req.query.get("versionId")
    return checked_version_id(vid) if vid is not None else None


async def tagged_version(req: S3Request) -> ObjectRecord:
    """The object (or the version `versionId` names) whose tags a request addresses:
    NoSuchKey, NoSuchVersion, or 405 for a delete marker, as GET answers."""
    await require_bucket(req)
    return await object_for_read(req, req.bucket, req.key, _version_query(req))


def _version_header(obj: ObjectRecord, vid: str | None) -> dict[str, str]:
    version_id = getattr(obj, "version_id", "null") or "null"
    if vid is not None or version_id != "null":
        return {"x-amz-version-id": version_id}
    return {}


async def _set_object_tags(req: S3Request, tags: dict[str, str]) -> ObjectRecord:
    vid = _version_query(req)
    for _ in range(3):  # the current object may be replaced while its archive is written
        obj = await tagged_version(req)
        if await save_change(req, obj, tags, obj.acl, "tags"):
            return obj
        if vid is not None:
            break
    # removed (or overwritten by a marker) since it was read
    if vid is None:
        raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)
    raise S3Error("NoSuchVersion", Key=req.key, VersionId=vid)


async def put_object_tagging(req: S3Request) -> Response:
    await require_bucket(req)
    require_integrity_header(req)
    tags = parse_tagging(await read_small_body(req, MAX_TAGGING_BODY), "object")
    obj = await _set_object_tags(req, tags)
    return Response(b"", headers=_version_header(obj, _version_query(req)))


async def get_object_tagging(req: S3Request) -> Response:
    obj = await tagged_version(req)
    return Response(render_tagging(getattr(obj, "tags", None) or {}),
                    media_type="application/xml",
                    headers=_version_header(obj, _version_query(req)))


async def delete_object_tagging(req: S3Request) -> Response:
    obj = await _set_object_tags(req, {})
    return Response(status_code=204, headers=_version_header(obj, _version_query(req)))


# ---- bucket tagging ---------------------------------------------------------------------

async def save_config(req: S3Request, kind: str, doc: str | None) -> None:
    """Store a bucket config document; its bucket marker is rewritten with it."""
    await save_bucket_config(req.gw, req.bucket, kind, doc)  # NoSuchBucket if gone


async def put_bucket_tagging(req: S3Request) -> Response:
    await require_bucket(req)
    require_integrity_header(req)
    tags = parse_tagging(await read_small_body(req, MAX_TAGGING_BODY), "bucket")
    await save_config(req, "tagging", json.dumps(tags, separators=(",", ":"), ensure_ascii=False)
                if tags else None)
    return Response(status_code=204)


def _bucket_tags(doc: str | None) -> dict[str, Any] | None:
    if not doc:
        return None
    try:
        tags = json.loads(doc)
    except ValueError:
        return None
    return tags if isinstance(tags, dict) and tags else None


async def get_bucket_tagging(req: S3Request) -> Response:
    await require_bucket(req)
    tags = _bucket_tags(await req.gw.store.get_bucket_config(req.bucket, "tagging"))
    if tags is None:
        raise S3Error("NoSuchTagSet", BucketName=req.bucket)
    return Response(render_tagging(tags), media_type="application/xml")


async def delete_bucket_tagging(req: S3Request) -> Response:
    await require_bucket(req)
    await save_config(req, "tagging", None)
    return Response(status_code=204)
