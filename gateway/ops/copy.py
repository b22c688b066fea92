"""CopyObject, and the copy-source parsing UploadPartCopy shares.

Copies stream the source through the normal upload pipeline into new fragments (no shared
layouts, so deleting either object never touches the other's data).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from starlette.responses import Response

from gateway.metadata import ObjectRecord
from gateway.ops import encryption, objectlock, versioning
from gateway.ops.access import authorize_source, check_expected_owner
from gateway.ops.acl_ops import new_object_acl
from gateway.ops.common import (
    MAX_PART_SIZE,
    S3_NS,
    S3Request,
    check_key,
    el,
    iso8601,
    now,
    quote_etag,
    requested_checksum_algorithm,
    stored_headers,
    user_metadata,
    xml_response,
)
from gateway.ops.lifecycle import expiration_headers
from gateway.ops.objects import (
    check_conditions,
    checksum_headers,
    put_conditions,
    store_object,
    write_single,
)
from gateway.ops.tagging import copy_tags
from gateway.s3 import checksums, sse
from gateway.s3.errors import S3Error
from gateway.s3.numbers import parse_uint, shown
from gateway.store.ssekeys import visible
from gateway.store.storage import CopyBody, new_version

_COPY_RANGE = re.compile(r"^bytes=([0-9]+)-([0-9]+)$")  # [0-9]: \d takes other digits


def parse_copy_source(value: str) -> tuple[str, str, str | None]:
    """(bucket, key, version id or None) of x-amz-copy-source."""
    v = unquote(value.split("?", 1)[0]) if "?versionId=" in value else unquote(value)
    vid = None
    if "?versionId=" in value:
        vid = versioning.checked_version_id(unquote(value.split("?versionId=", 1)[1]))
    v = v.lstrip("/")
    bucket, _, key = v.partition("/")
    if not bucket or not key:
        raise S3Error("InvalidArgument", "Copy Source must mention the source bucket and key: "
                      "sourcebucket/sourcekey", ArgumentName="x-amz-copy-source",
                      ArgumentValue=value)
    return bucket, key, vid


async def resolve_copy_source(req: S3Request) -> ObjectRecord:
    """The source object of a copy, its bucket's owner checked and its conditions applied."""
    bucket, key, vid = parse_copy_source(req.headers["x-amz-copy-source"])
    b = await req.gw.store.get_bucket(bucket)
    if b is None:
        raise S3Error("NoSuchBucket", BucketName=bucket, resource="/" + bucket)
    check_expected_owner(req, b.owner, "x-amz-source-expected-bucket-owner")
    await authorize_source(req, b, key)
    try:
        src = await versioning.object_for_read(req, bucket, key, vid)
    except S3Error as e:
        e.headers = {}  # the delete marker headers describe the source, not this answer
        if e.code == "MethodNotAllowed":
            raise S3Error("InvalidRequest", "The source of a copy request may not "
                          "specifically refer to a delete marker by version id.") from None
        raise
    req.extra["copy_source_version"] = (vid, src.version_id)
    check_conditions(src, req.headers, prefix="x-amz-copy-source-if-", copy_source=True)
    return src


def copy_source_range(req: S3Request, size: int) -> tuple[int, int]:
    """(start, length) from x-amz-copy-source-range (whole object without it)."""
    raw = req.headers.get("x-amz-copy-source-range")
    if raw is None:
        return 0, size
    m = _COPY_RANGE.match(raw.strip())
    if not m:
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the "
                      "form bytes=first-last where first and last are the zero-based offsets "
                      "of the first and last bytes to copy", ArgumentName="x-amz-copy-source-range",
                      ArgumentValue=shown(raw))
    # Saturated, however many digits: a number that long is past the end of any source.
    a, b = parse_uint(m.group(1), saturate=True), parse_uint(m.group(2), saturate=True)
    if b < a or b >= size:
        raise S3Error("InvalidRange", RangeRequested=shown(raw), ActualObjectSize=str(size))
    return a, b - a + 1


async def copy_object(req: S3Request) -> Response:
    from gateway.ops.common import require_bucket
    await require_bucket(req)
    check_key(req.key)
    src = await resolve_copy_source(req)
    directive = req.headers.get("x-amz-metadata-directive", "COPY").strip().upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown metadata directive.",
                      ArgumentName="x-amz-metadata-directive", ArgumentValue=directive)
    algo = req.headers.get("x-amz-checksum-algorithm", "").strip()
    if src.bucket == req.bucket and src.key == req.key and directive != "REPLACE" and not algo \
            and req.extra["copy_source_version"][0] is None \
            and not encryption.wants_encryption(req):
        raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to "
                      "copy an object to itself without changing the object's metadata, "
                      "storage class, website redirect location or encryption attributes.")
    if src.size > MAX_PART_SIZE:
        raise S3Error("InvalidRequest", "The specified copy source is larger than the maximum "
                      "allowable size for a copy source: 5368709120")
    # The source's key (SSE-C: the x-amz-copy-source-server-side-encryption-customer-* trio)
    opening = encryption.for_read(req, src, sse.COPY_CUSTOMER)
    if directive == "REPLACE":
        headers, meta = stored_headers(req), user_metadata(req)
    else:  # never the source's envelope: the copy gets its own data key, or none
        headers, meta = dict(visible(src.headers)), dict(src.user_meta)
    # the source's lock is not copied: the copy gets its own (headers or bucket default)
    headers = await objectlock.write_headers(req, headers)
    if algo:
        algo = requested_checksum_algorithm(algo)
    else:
        algo = src.checksum.get("algorithm", "") if src.checksum.get("type") != "COMPOSITE" else ""
    owner, grants = await new_object_acl(req)
    if_absent, if_version = await put_conditions(req)
    sealing = await encryption.for_write(req)
    if sealing is not None:
        headers = sealing.store_in(headers)
    rec = ObjectRecord(bucket=req.bucket, key=req.key, size=0, etag="", last_modified=now(),
                       owner=owner, version=new_version(), headers=headers, user_meta=meta,
                       tags=copy_tags(req, src), acl=grants)
    await versioning.prepare_write(req, rec)
    body = CopyBody(opening.read(req.gw.storage, src.parts, 0, src.size), src.size, algo)
    mark = await write_single(req, rec, body, sealing=sealing)
    await store_object(req, rec, [mark], if_absent=if_absent, if_version=if_version)
    ck = {k: v for k, v in rec.checksum.items() if k != "type"}
    ck_xml = el(checksums.xml_name(ck["algorithm"]), ck["value"]) if ck else ""
    return xml_response(f'<CopyObjectResult xmlns="{S3_NS}">{el("ETag", quote_etag(rec.etag))}'
                        f'{el("LastModified", iso8601(rec.last_modified))}{ck_xml}'
                        f'</CopyObjectResult>',
                        headers={**checksum_headers(ck), **copy_source_headers(req),
                                 **(sealing.response_headers() if sealing else {}),
                                 **versioning.written_headers(req, rec),
                                 **await expiration_headers(req, rec)})


def copy_source_headers(req: S3Request) -> dict[str, str]:
    """x-amz-copy-source-version-id: the version copied, when it has an id or one was named."""
    asked, vid = req.extra.get("copy_source_version", (None, "null"))
    if asked is None and vid == "null":
        return {}
    return {"x-amz-copy-source-version-id": vid}
