"""Bucket operations: CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation, versioning."""

from __future__ import annotations

import ipaddress
import re

from starlette.responses import Response

from gateway.errors import S3Error
from gateway.metadata import BucketRecord
from gateway.metadata.store import BucketNotEmptyError
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
    if not valid_bucket_name(name):
        raise S3Error("InvalidBucketName", BucketName=name)
    region = req.gw.region
    data = await read_small_body(req, 64 * 1024)
    if data.strip():
        root = parse_xml(data)
        if root.tag != "CreateBucketConfiguration":
            raise S3Error("MalformedXML")
        lc = root.find("LocationConstraint")
        if lc is not None and (lc.text or "").strip():
            region = (lc.text or "").strip()
    existing = req.gw.store.create_bucket(BucketRecord(name, req.user, now(), region))
    if existing is not None:
        if existing.owner == req.user:
            raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
        raise S3Error("BucketAlreadyExists", BucketName=name)
    return Response(b"", headers={"Location": "/" + name})


async def head_bucket(req: S3Request) -> Response:
    b = require_bucket(req)
    return Response(b"", headers={"x-amz-bucket-region": b.region})


async def delete_bucket(req: S3Request) -> Response:
    require_bucket(req)
    try:
        req.gw.store.delete_bucket(req.bucket)
    except BucketNotEmptyError:
        raise S3Error("BucketNotEmpty", BucketName=req.bucket) from None
    notify_sweeper(req)
    return Response(status_code=204)


async def get_location(req: S3Request) -> Response:
    b = require_bucket(req)
    # us-east-1 is reported as an empty constraint, as S3 does.
    value = "" if b.region == "us-east-1" else b.region
    return xml_response(f'<LocationConstraint xmlns="{S3_NS}">{x(value)}</LocationConstraint>')


async def get_versioning(req: S3Request) -> Response:
    require_bucket(req)
    return xml_response(f'<VersioningConfiguration xmlns="{S3_NS}"/>')
