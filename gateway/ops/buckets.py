"""Bucket operations: CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation
(versioning: gateway/ops/versioning.py).

CreateBucket and DeleteBucket also write and remove the bucket's marker on the nodes
(gateway/store/bucketmarkers.py says why, and in which order).
"""

from __future__ import annotations

import ipaddress
import logging
import re

from starlette.responses import Response

from erasure.errors import ErasureError
from gateway.access import acl
from gateway.access import controls as ctl
from gateway.metadata import BucketRecord
from gateway.metadata.store import BucketNotEmptyError
from gateway.ops import objectlock
from gateway.ops.common import (
    S3_NS,
    S3Request,
    notify_sweeper,
    now,
    parse_xml,
    read_small_body,
    require_bucket,
    x,
    xml_response,
)
from gateway.s3.errors import S3Error
from gateway.store import bucketmarkers

log = logging.getLogger("zonegate.buckets")
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def valid_bucket_name(name: str) -> bool:
    """S3's general-purpose bucket naming rules."""
    if not _NAME.match(name) or ".." in name or ".-" in name or "-." in name:
        return False
    if name.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or \
       name.endswith(("-s3alias", "--ol-s3", "--x-s3", ".mrap")):
        return False
    try:
        ipaddress.IPv4Address(name)
        return False
    except ValueError:
        return True


async def create_bucket(req: S3Request) -> Response:
    name = req.bucket
    if not req.user:
        raise S3Error("AccessDenied")  # an anonymous request owns nothing
    if not valid_bucket_name(name):
        raise S3Error("InvalidBucketName", BucketName=name)
    ownership, grants = await creation_access(req)
    region = req.gw.region
    data = await read_small_body(req, 64 * 1024)
    if data.strip():
        root = parse_xml(data)
        if root.tag != "CreateBucketConfiguration":
            raise S3Error("MalformedXML")
        lc = root.find("LocationConstraint")
        if lc is not None and (lc.text or "").strip():
            region = (lc.text or "").strip()
    rec = BucketRecord(name, req.user, now(), region, acl=grants)
    existing = await req.gw.store.create_bucket(rec)
    if existing is not None:
        if existing.owner == req.user:
            if existing.region == "us-east-1" and region == "us-east-1":
                # AWS's legacy us-east-1 answer: 200, and nothing about the bucket changes.
                return Response(b"", headers={"Location": "/" + name})
            raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
        raise S3Error("BucketAlreadyExists", BucketName=name)
    configs = {}
    if ownership is not None:
        configs["ownership"] = ctl.ownership_doc(ownership)
    if objectlock.enabled_at_creation(req):
        configs.update(objectlock.creation_configs())  # versioning on, for good
    for kind, doc in configs.items():
        await req.gw.store.put_bucket_config(name, kind, doc)
    try:
        await bucketmarkers.write_marker(req.gw.storage.cluster, rec, configs or None)
    except BaseException as e:
        await _undo_create(req, rec)
        if isinstance(e, ErasureError):
            log.warning("bucket %s not created: its marker could not be written: %s", name, e)
            raise S3Error("ServiceUnavailable", "Not enough storage nodes answered; the "
                          "bucket was not created. Please retry.") from None
        raise
    return Response(b"", headers={"Location": "/" + name})


async def creation_access(req: S3Request) -> tuple[str | None, list[dict] | None]:
    """CreateBucket's x-amz-object-ownership and ACL headers: (ownership to store, grants to
    store). With ACLs disabled (BucketOwnerEnforced, the default) only an ACL giving the owner
    alone full control is accepted (InvalidBucketAclWithObjectOwnership); a public ACL is
    refused (AccessDenied) since a new bucket blocks public ACLs."""
    raw = req.headers.get("x-amz-object-ownership")
    ownership = ctl.check_ownership(raw.strip()) if raw is not None else None
    ids = await req.gw.directory.ids()
    grants = acl.from_headers(req.headers, req.user, ids.get)
    if grants is None or grants == [acl.owner_grant(req.user)]:
        return ownership, None
    if (ownership or ctl.DEFAULT_OWNERSHIP) == "BucketOwnerEnforced":
        if not acl.only_owner(grants, req.user):
            raise S3Error("InvalidBucketAclWithObjectOwnership")
        return ownership, None
    if acl.is_public(grants):
        raise S3Error("AccessDenied")
    return ownership, acl.to_list(grants)


async def _undo_create(req: S3Request, rec: BucketRecord) -> None:
    """Take back a bucket whose marker was not written (the writer left no archive)."""
    cur = await req.gw.store.get_bucket(rec.name)
    if cur is None or cur.created != rec.created:
        return  # deleted meanwhile (and perhaps created again by another request): not ours
    try:
        await req.gw.store.delete_bucket(rec.name)
    except BucketNotEmptyError:
        # An object landed in it before CreateBucket answered: keep the bucket; its marker is
        # written by `zonegate bucket-markers` or the next recover-metadata.
        log.warning("bucket %s kept without a marker: it is no longer empty", rec.name)


async def head_bucket(req: S3Request) -> Response:
    b = await require_bucket(req)
    return Response(b"", headers={"x-amz-bucket-region": b.region})


async def delete_bucket(req: S3Request) -> Response:
    rec = await require_bucket(req)
    cluster = req.gw.storage.cluster
    if len(cluster.clients) - len(cluster.down_nodes()) < cluster.write_quorum:
        # Fewer nodes up than a marker write needs: a marker removal could then leave k
        # archives behind, enough for recovery to bring the bucket back.
        raise S3Error("ServiceUnavailable", "Not enough storage nodes answered; the bucket "
                      "was not deleted. Please retry.")
    try:
        await req.gw.store.delete_bucket(req.bucket)
    except BucketNotEmptyError:
        raise S3Error("BucketNotEmpty", BucketName=req.bucket) from None
    # A marker that could not be removed from every node stays queued for the sweeper.
    await bucketmarkers.delete_marker(cluster, req.gw.store, rec)
    notify_sweeper(req)  # parts of uploads that died with the bucket, a marker left queued
    return Response(status_code=204)


async def get_location(req: S3Request) -> Response:
    b = await require_bucket(req)
    # us-east-1 is reported as an empty constraint, as S3 does.
    value = "" if b.region == "us-east-1" else b.region
    return xml_response(f'<LocationConstraint xmlns="{S3_NS}">{x(value)}</LocationConstraint>')
