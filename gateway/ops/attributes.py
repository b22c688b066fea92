"""GetObjectAttributes (`GET /bucket/key?attributes`): what newer SDKs and Mountpoint-style
clients ask instead of a HEAD: the ETag, the checksum, the parts of a multipart object
(paginated with x-amz-max-parts / x-amz-part-number-marker), the storage class and the size,
each only when `x-amz-object-attributes` names it; `versionId` for a version."""

from __future__ import annotations

from starlette.responses import Response

from gateway.metadata import ObjectRecord
from gateway.ops import encryption
from gateway.ops.common import (
    MAX_PARTS,
    S3_NS,
    S3Request,
    el,
    http_date,
    require_bucket,
    xml_response,
)
from gateway.ops.objects import is_multipart
from gateway.ops.versioning import object_for_read, read_headers, requested_version
from gateway.s3 import checksums
from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, parse_uint, shown

ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
DEFAULT_MAX_PARTS = 1000


def requested(req: S3Request) -> set[str]:
    """The attributes `x-amz-object-attributes` names (a comma-separated list; the header
    may repeat); InvalidArgument for an unknown one or none."""
    raw = ",".join(v for k, v in req.headers.items() if k.lower() == "x-amz-object-attributes")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if not names:
        raise S3Error("InvalidArgument", "Missing required header for this request: "
                      "x-amz-object-attributes", ArgumentName="x-amz-object-attributes",
                      ArgumentValue="")
    bad = sorted(names - set(ATTRIBUTES))
    if bad:
        raise S3Error("InvalidArgument", "Invalid attribute name specified.",
                      ArgumentName="x-amz-object-attributes", ArgumentValue=shown(bad[0]))
    return names


def _count(req: S3Request, header: str, default: int) -> int:
    raw = req.headers.get(header)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse_uint(raw.strip(), hi=INT32_MAX)
    except ValueError:
        raise S3Error("InvalidArgument", f"Invalid {header} header value.",
                      ArgumentName=header, ArgumentValue=shown(raw)) from None


def _checksum_xml(ck: dict[str, str], with_type: bool) -> str:
    if not ck or not ck.get("algorithm") or not ck.get("value"):
        return ""
    out = el(checksums.xml_name(ck["algorithm"]), ck["value"])
    if with_type and ck.get("type"):
        out += el("ChecksumType", ck["type"])
    return out


def _parts_xml(obj: ObjectRecord, marker: int, limit: int) -> str:
    after = [p for p in obj.parts if int(p["number"]) > marker]
    page, truncated = after[:limit], len(after) > limit
    out = [el("PartsCount", len(obj.parts)), el("PartNumberMarker", marker)]
    if page:
        out.append(el("NextPartNumberMarker", page[-1]["number"]))
    out += [el("MaxParts", limit), el("IsTruncated", "true" if truncated else "false")]
    for p in page:
        out.append(f"<Part>{_checksum_xml(p.get('checksum') or {}, False)}"
                   f"{el('PartNumber', p['number'])}{el('Size', p['size'])}</Part>")
    return "<ObjectParts>" + "".join(out) + "</ObjectParts>"


async def get_object_attributes(req: S3Request) -> Response:
    await require_bucket(req)
    names = requested(req)
    marker = _count(req, "x-amz-part-number-marker", 0)
    limit = min(_count(req, "x-amz-max-parts", DEFAULT_MAX_PARTS), MAX_PARTS)
    obj = await object_for_read(req, req.bucket, req.key, requested_version(req))
    encryption.for_read(req, obj)  # an SSE-C object's attributes need its key, as its GET does
    body = []
    if "ETag" in names:
        body.append(el("ETag", obj.etag))  # unquoted, as S3 answers it here
    if "Checksum" in names and obj.checksum.get("algorithm"):
        body.append("<Checksum>" + _checksum_xml(obj.checksum, True) + "</Checksum>")
    if "ObjectParts" in names and is_multipart(obj):
        body.append(_parts_xml(obj, marker, limit))
    if "StorageClass" in names:
        body.append(el("StorageClass", "STANDARD"))
    if "ObjectSize" in names:
        body.append(el("ObjectSize", obj.size))
    headers = {"Last-Modified": http_date(obj.last_modified), **read_headers(req, obj)}
    return xml_response(f'<GetObjectAttributesResponse xmlns="{S3_NS}">{"".join(body)}'
                        f'</GetObjectAttributesResponse>', headers=headers)
