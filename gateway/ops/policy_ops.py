"""Bucket policy (Get/Put/Delete, GetBucketPolicyStatus), ownership controls and public
access block operations. Documents are validated (gateway/access) and stored in their
normalised JSON form as bucket configuration documents."""

from __future__ import annotations

from starlette.responses import Response

from gateway.access import acl
from gateway.access import controls as ctl
from gateway.access.policy import MAX_POLICY_BYTES, parse_policy
from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import (
    S3_NS,
    S3Request,
    bucket_config,
    read_small_body,
    require_bucket,
    xml_response,
)
from gateway.s3.errors import S3Error


async def save_config(req: S3Request, kind: str, doc: str | None) -> None:
    """Store (or drop) a bucket configuration document and rewrite the bucket's marker, so
    recover-metadata brings it back (gateway/ops/bucketconfig.py)."""
    await save_bucket_config(req.gw, req.bucket, kind, doc)


# ---- policy ------------------------------------------------------------------------------

async def get_policy(req: S3Request) -> Response:
    await require_bucket(req)
    doc = await bucket_config(req, req.bucket, "policy")
    if doc is None:
        raise S3Error("NoSuchBucketPolicy", BucketName=req.bucket)
    return Response(doc.encode("utf-8"), media_type="application/json")


async def put_policy(req: S3Request) -> Response:
    await require_bucket(req)
    body = await read_small_body(req, 4 * MAX_POLICY_BYTES)  # past 20 KB: MalformedPolicy
    names = await req.gw.directory.known_names(fresh=True)
    policy = parse_policy(body, req.bucket, names.__contains__)
    pab = req.extra["access"].pab
    if pab.block_public_policy and policy.is_public():
        raise S3Error("AccessDenied")
    await save_config(req, "policy", policy.text)
    return Response(status_code=204)


async def delete_policy(req: S3Request) -> Response:
    await require_bucket(req)
    await save_config(req, "policy", None)
    return Response(status_code=204)


async def get_policy_status(req: S3Request) -> Response:
    await require_bucket(req)
    policy = req.extra["access"].policy
    if policy is None:
        raise S3Error("NoSuchBucketPolicy", BucketName=req.bucket)
    public = "true" if policy.is_public() else "false"
    return xml_response(f'<PolicyStatus xmlns="{S3_NS}"><IsPublic>{public}</IsPublic>'
                        "</PolicyStatus>")


# ---- ownership controls -----------------------------------------------------------------------

async def get_ownership(req: S3Request) -> Response:
    await require_bucket(req)
    value, exists = ctl.ownership_from_doc(
        await bucket_config(req, req.bucket, "ownership"))
    if not exists:
        raise S3Error("OwnershipControlsNotFoundError", BucketName=req.bucket)
    return xml_response(ctl.ownership_xml(value))


async def put_ownership(req: S3Request) -> Response:
    b = await require_bucket(req)
    value = ctl.parse_ownership_xml(await read_small_body(req, 64 * 1024))
    if value == "BucketOwnerEnforced" and \
            not acl.only_owner(acl.from_list(b.acl, b.owner), b.owner):
        raise S3Error("InvalidBucketAclWithObjectOwnership")
    await save_config(req, "ownership", ctl.ownership_doc(value))
    return Response(b"")


async def delete_ownership(req: S3Request) -> Response:
    await require_bucket(req)
    await save_config(req, "ownership", ctl.ownership_doc(None))
    return Response(status_code=204)


# ---- public access block ------------------------------------------------------------------------

async def get_pab(req: S3Request) -> Response:
    await require_bucket(req)
    pab, exists = ctl.pab_from_doc(
        await bucket_config(req, req.bucket, "public-access-block"))
    if not exists:
        raise S3Error("NoSuchPublicAccessBlockConfiguration", BucketName=req.bucket)
    return xml_response(ctl.pab_xml(pab))


async def put_pab(req: S3Request) -> Response:
    await require_bucket(req)
    pab = ctl.parse_pab_xml(await read_small_body(req, 64 * 1024))
    await save_config(req, "public-access-block", ctl.pab_doc(pab))
    return Response(b"")


async def delete_pab(req: S3Request) -> Response:
    await require_bucket(req)
    await save_config(req, "public-access-block", ctl.pab_doc(None))
    return Response(status_code=204)
