"""Service-level operations: ListBuckets."""

from __future__ import annotations

from starlette.responses import Response

from gateway.ops.common import S3_NS, S3Request, el, iso8601, owner_xml, xml_response


async def list_buckets(req: S3Request) -> Response:
    rows = req.gw.store.list_buckets(owner=req.user)
    body = "".join(
        f"<Bucket>{el('Name', b.name)}{el('CreationDate', iso8601(b.created))}"
        f"{el('BucketRegion', b.region)}</Bucket>" for b in rows)
    return xml_response(f'<ListAllMyBucketsResult xmlns="{S3_NS}">{owner_xml(req.user)}'
                        f"<Buckets>{body}</Buckets></ListAllMyBucketsResult>")
