"""Service-level operations: ListBuckets (with prefix, max-buckets and continuation tokens)."""

from __future__ import annotations

import base64
import binascii

from starlette.responses import Response

from gateway.ops.common import S3_NS, S3Request, el, int_arg, iso8601, owner_xml, xml_response
from gateway.s3.errors import S3Error


def _untoken(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode("ascii")).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                      ArgumentName="continuation-token", ArgumentValue=token) from None


async def list_buckets(req: S3Request) -> Response:
    if not req.user:
        raise S3Error("AccessDenied")  # an anonymous request owns no buckets
    prefix = req.query.get("prefix", "")
    token = req.query.get("continuation-token")
    after = _untoken(token) if token else ""
    limit = int_arg(req, "max-buckets", 10000, lo=1, hi=10000)
    rows = [b for b in await req.gw.store.list_buckets(owner=req.user)
            if b.name.startswith(prefix) and b.name > after]
    page, more = rows[:limit], len(rows) > limit
    body = "".join(
        f"<Bucket>{el('Name', b.name)}{el('CreationDate', iso8601(b.created))}"
        f"{el('BucketRegion', b.region)}</Bucket>" for b in page)
    tail = ""
    if more:
        tail += el("ContinuationToken",
                   base64.urlsafe_b64encode(page[-1].name.encode()).decode())
    if "prefix" in req.query:
        tail += el("Prefix", prefix)
    return xml_response(f'<ListAllMyBucketsResult xmlns="{S3_NS}">{owner_xml(req.user)}'
                        f"<Buckets>{body}</Buckets>{tail}</ListAllMyBucketsResult>")
