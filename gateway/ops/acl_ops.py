"""Get/PutBucketAcl, Get/PutObjectAcl, and the ACL (and owner) a write gives a new object
from its x-amz-acl / x-amz-grant-* headers, per the bucket's ownership controls.

With BucketOwnerEnforced (the default) ACLs are disabled: reads answer the owner's
FULL_CONTROL, and a request setting any ACL other than one that only gives the bucket
owner full control (bucket-owner-full-control, or private from the owner) is 400
AccessControlListNotSupported. BlockPublicAcls refuses public ACLs with 403 AccessDenied."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from gateway.access import acl
from gateway.access.evaluate import BucketAccess
from gateway.metadata import ObjectRecord, UploadRecord
from gateway.ops.bucketconfig import save_bucket_acl
from gateway.ops.common import S3Request, read_small_body, require_bucket, xml_response
from gateway.s3.errors import S3Error
from gateway.store.tagarchives import save_change

UPLOAD_ACL_HEADER = "x-zg-acl"  # kept in an upload's stored headers until it completes


def _has_acl_headers(req: S3Request) -> bool:
    return req.headers.get("x-amz-acl") is not None or any(
        req.headers.get(h) is not None for h in acl.GRANT_HEADERS)


async def _ids(req: S3Request) -> dict[str, str]:
    # Fresh when the request names grantees: a user added a moment ago must resolve.
    return await req.gw.directory.ids(fresh=_names_grantees(req))


def _names_grantees(req: S3Request) -> bool:
    return req.method == "PUT" and (any(req.headers.get(h) is not None
                                        for h in acl.GRANT_HEADERS) or "acl" in req.query)


def _not_supported() -> S3Error:
    return S3Error("AccessControlListNotSupported", "The bucket does not allow ACLs")


async def _requested(req: S3Request, owner: str, bucket_owner: str) -> list[acl.Grant]:
    """The ACL a Put*Acl asks for: headers or an AccessControlPolicy body, not both."""
    ids = await _ids(req)
    from_headers = acl.from_headers(req.headers, owner, ids.get, bucket_owner)
    body = await read_small_body(req, 64 * 1024)
    if from_headers is not None:
        if body.strip():
            raise S3Error("UnexpectedContent", "This request does not support content",
                          status=400)
        return from_headers
    if not body.strip():
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header",
                      MissingHeaderName="x-amz-acl")
    return acl.parse_xml(body, owner, ids.get)


def _access(req: S3Request) -> BucketAccess:
    return req.extra["access"]


async def get_bucket_acl(req: S3Request) -> Response:
    b = await require_bucket(req)
    grants = acl.from_list(b.acl, b.owner) if _access(req).acls_enabled else \
        [acl.owner_grant(b.owner)]
    return xml_response(acl.render(b.owner, grants, (await _ids(req)).get))


async def put_bucket_acl(req: S3Request) -> Response:
    b = await require_bucket(req)
    access = _access(req)
    grants = await _requested(req, b.owner, b.owner)
    if not access.acls_enabled:
        if not acl.only_owner(grants, b.owner):
            raise _not_supported()
        return Response(b"")
    if access.pab.block_public_acls and acl.is_public(grants):
        raise S3Error("AccessDenied")
    await save_bucket_acl(req.gw, b.name, acl.to_list(grants))  # store, then the marker
    return Response(b"")


async def _target_object(req: S3Request) -> tuple[ObjectRecord, str | None]:
    vid = req.query.get("versionId") or None
    obj = await req.gw.store.get_object(req.bucket, req.key, vid) if vid else \
        await req.gw.store.get_object(req.bucket, req.key)
    if obj is None or getattr(obj, "delete_marker", False):
        if vid:
            raise S3Error("NoSuchVersion", Key=req.key, VersionId=vid)
        raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)
    return obj, vid


async def get_object_acl(req: S3Request) -> Response:
    b = await require_bucket(req)
    obj, _ = await _target_object(req)
    if _access(req).acls_enabled:
        owner, grants = obj.owner, acl.from_list(obj.acl, obj.owner)
    else:
        owner, grants = b.owner, [acl.owner_grant(b.owner)]
    return xml_response(acl.render(owner, grants, (await _ids(req)).get))


async def put_object_acl(req: S3Request) -> Response:
    b = await require_bucket(req)
    access = _access(req)
    obj, vid = await _target_object(req)
    owner = obj.owner if access.acls_enabled else b.owner
    grants = await _requested(req, owner, b.owner)
    if not access.acls_enabled:
        if not acl.only_owner(grants, b.owner):
            raise _not_supported()
        return Response(b"")
    if access.pab.block_public_acls and acl.is_public(grants):
        raise S3Error("AccessDenied")
    if not await save_change(req, obj, obj.tags, acl.to_list(grants), "acl"):
        raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)
    return Response(b"")


# ---- the ACL of a new object ---------------------------------------------------------------

async def new_object_acl(req: S3Request) -> tuple[str, list[dict[str, Any]] | None]:
    """(owner, stored grants or None for the default) of the object a PutObject, CopyObject
    or CreateMultipartUpload makes, after require_bucket."""
    access = _access(req)
    bucket_owner = access.owner
    writer = req.user or bucket_owner  # an anonymous write (public-read-write) is the owner's
    given = _has_acl_headers(req)
    if not access.acls_enabled:
        canned = (req.headers.get("x-amz-acl") or "").strip()
        if given and not (canned == "bucket-owner-full-control" and
                          not any(req.headers.get(h) for h in acl.GRANT_HEADERS)):
            # bucket-owner-full-control is what cross-account uploaders (aws s3 cp --acl,
            # Hadoop S3A) send: S3 accepts exactly that canned ACL here, whoever writes
            grants = acl.from_headers(req.headers, writer, (await _ids(req)).get,
                                      bucket_owner) or []
            if not acl.only_owner(grants, bucket_owner):
                raise _not_supported()
        return bucket_owner, None
    owner = writer
    if access.ownership == "BucketOwnerPreferred" and \
            (req.headers.get("x-amz-acl") or "").strip() == "bucket-owner-full-control":
        owner = bucket_owner
    if not given:
        return owner, None
    grants = acl.from_headers(req.headers, owner, (await _ids(req)).get, bucket_owner) or []
    if access.pab.block_public_acls and acl.is_public(grants):
        raise S3Error("AccessDenied")
    if grants == [acl.owner_grant(owner)]:
        return owner, None
    return owner, acl.to_list(grants)


async def upload_acl_headers(req: S3Request, headers: dict[str, str]) -> dict[str, str]:
    """CreateMultipartUpload: the new object's owner and ACL, kept with the upload."""
    owner, grants = await new_object_acl(req)
    out = dict(headers)
    out[UPLOAD_ACL_HEADER] = json.dumps({"owner": owner, "acl": grants}, separators=(",", ":"))
    return out


def from_upload(up: UploadRecord) -> tuple[dict[str, str], str, list[dict[str, Any]] | None]:
    """(object headers, owner, grants) for the object an upload completes into."""
    headers = dict(up.headers)
    raw = headers.pop(UPLOAD_ACL_HEADER, None)
    if raw is None:
        return headers, up.owner, None  # an upload made before access control
    d = json.loads(raw)
    return headers, str(d.get("owner") or up.owner), d.get("acl")
