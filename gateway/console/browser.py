"""The console's bucket browser: the user's buckets, a listing with prefix and delimiter, an
object's details, and a presigned download URL.

Reads go straight to the metadata store with S3's ownership rule (a bucket of another user is
AccessDenied, as the S3 API answers). Downloads never pass through the console: the page gets
a SigV4 presigned GET URL, signed here with the logged-in user's key from the cluster config
using the same SigV4 code the gateway verifies with, valid for PRESIGN_SECONDS, and the
browser fetches the object from the S3 API itself. The URL carries the access key id and a
signature, as every presigned URL does, never the secret key.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from gateway.s3.auth import sigv4
from gateway.s3.auth.common import format_amz_date
from gateway.s3.errors import S3Error
from gateway.store.ssekeys import visible

PRESIGN_SECONDS = 300
MAX_KEYS = 1000


async def _bucket(gw: Any, user: str, name: str) -> Any:
    if not name:
        raise S3Error("InvalidBucketName")
    b = await gw.store.get_bucket(name)
    if b is None:
        raise S3Error("NoSuchBucket")
    if b.owner != user:
        raise S3Error("AccessDenied")
    return b


async def list_buckets(gw: Any, user: str) -> dict[str, Any]:
    return {"buckets": [{"name": b.name, "created": b.created, "region": b.region}
                        for b in await gw.store.list_buckets(owner=user)]}


async def list_objects(gw: Any, user: str, bucket: str, prefix: str = "", delimiter: str = "",
                 after: str = "", limit: int = MAX_KEYS) -> dict[str, Any]:
    await _bucket(gw, user, bucket)
    limit = max(1, min(MAX_KEYS, limit))
    page = await gw.store.list_objects(bucket, prefix, delimiter, after, limit)
    return {"bucket": bucket, "prefix": prefix, "delimiter": delimiter,
            "objects": [{"key": o.key, "size": o.size, "etag": o.etag,
                         "last_modified": o.last_modified} for o in page.items],
            "prefixes": list(page.prefixes), "truncated": page.truncated,
            "next": page.next_marker if page.truncated else None}


async def object_details(gw: Any, user: str, bucket: str, key: str) -> dict[str, Any]:
    await _bucket(gw, user, bucket)
    o = await gw.store.get_object(bucket, key)
    if o is None:
        raise S3Error("NoSuchKey")
    parts = []
    for p in o.parts:
        layout = p.get("layout") or {}
        scheme = layout.get("scheme") or {}
        placement = layout.get("placement") or {}
        parts.append({"number": p.get("number"), "size": p.get("size"), "etag": p.get("etag"),
                      "scheme": f"{scheme.get('k')}+{scheme.get('m')}" if scheme else None,
                      "nodes": sorted({str(n) for n in placement.values()}),
                      "missing": list(layout.get("missing") or [])})
    return {"bucket": bucket, "key": key, "size": o.size, "etag": o.etag,
            "last_modified": o.last_modified, "owner": o.owner, "version": o.version,
            "headers": dict(visible(o.headers)), "user_meta": dict(o.user_meta),
            "checksum": dict(o.checksum), "multipart": o.manifest is not None, "parts": parts}


def presign_get(*, scheme: str, host: str, bucket: str, key: str, access_key: str,
                secret_key: str, region: str, expires: int = PRESIGN_SECONDS,
                now: float | None = None) -> str:
    """A path-style SigV4 presigned GET URL of bucket/key, downloaded as an attachment."""
    now = time.time() if now is None else now
    amz_date = format_amz_date(now)
    date = amz_date[:8]
    scope = f"{date}/{region}/s3/aws4_request"
    path = "/" + quote(bucket, safe="") + "/" + quote(key, safe="/~")
    filename = key.rsplit("/", 1)[-1] or "download"
    query = [
        ("X-Amz-Algorithm", sigv4.ALGORITHM),
        ("X-Amz-Credential", f"{access_key}/{scope}"),
        ("X-Amz-Date", amz_date),
        ("X-Amz-Expires", str(expires)),
        ("X-Amz-SignedHeaders", "host"),
        ("response-content-disposition",
         f"attachment; filename*=UTF-8''{quote(filename, safe='')}"),
    ]
    canonical = sigv4.canonical_request("GET", path, query, {"host": [host]}, ["host"],
                                        "UNSIGNED-PAYLOAD")
    sts = sigv4.string_to_sign(amz_date, scope, canonical)
    signature = sigv4.sign(sigv4.signing_key(secret_key, date, region), sts)
    qs = sigv4.canonical_query(query) + "&X-Amz-Signature=" + signature
    return f"{scheme}://{host}{path}?{qs}"
