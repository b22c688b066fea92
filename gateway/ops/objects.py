"""Object operations: PutObject (conditional), GetObject (ranges, conditionals, overrides),
HeadObject, DeleteObject, DeleteObjects."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from starlette.responses import Response, StreamingResponse

from gateway import checksums
from gateway.errors import S3Error
from gateway.metadata import ObjectRecord
from gateway.ops.common import (
    MAX_DELETE_KEYS,
    MAX_PART_SIZE,
    S3_NS,
    S3Request,
    check_key,
    el,
    http_date,
    notify_sweeper,
    now,
    object_headers,
    parse_http_date,
    parse_xml,
    quote_etag,
    read_small_body,
    request_body,
    require_bucket,
    stored_headers,
    strip_etag,
    user_metadata,
    x,
    xml_response,
)
from gateway.storage import new_version, part_uid
from gateway.streams import stream_hint

RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


# ---- bodies -----------------------------------------------------------------------------

def body_result(body: Any) -> tuple[int, str, dict[str, str]]:
    """(size, hex MD5, checksum dict) of a fully consumed RequestBody / CopyBody."""
    ck: dict[str, str] = {}
    if body.checksum_algorithm and body.checksum:
        ck = {"algorithm": body.checksum_algorithm, "value": body.checksum}
    return body.size, (body.md5_digest or b"").hex(), ck


def known_length(body: Any) -> int:
    if body.expected_size is None:
        raise S3Error("MissingContentLength")
    return int(body.expected_size)


def checksum_headers(ck: dict[str, str]) -> dict[str, str]:
    if not ck or not ck.get("algorithm"):
        return {}
    out = {checksums.header_name(ck["algorithm"]): ck["value"]}
    if ck.get("type"):
        out["x-amz-checksum-type"] = ck["type"]
    return out


# ---- PUT --------------------------------------------------------------------------------

def put_conditions(req: S3Request) -> tuple[bool, str | None]:
    """(if_absent, required version) for a conditional PUT, checked now and at commit."""
    inm = req.headers.get("if-none-match")
    im = req.headers.get("if-match")
    cur = req.gw.store.get_object(req.bucket, req.key) if (inm or im) else None
    if inm is not None:
        if inm.strip() != "*":
            raise S3Error("NotImplemented", "If-None-Match on PUT supports only '*'.")
        if cur is not None:
            raise S3Error("PreconditionFailed", Condition="If-None-Match")
    version = None
    if im is not None:
        if cur is None:
            raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)
        if not etag_matches(im, cur.etag):
            raise S3Error("PreconditionFailed", Condition="If-Match")
        version = cur.version
    return inm is not None, version


async def store_object(req: S3Request, rec: ObjectRecord, marks: list[int], *,
                       if_absent: bool = False, if_version: str | None = None,
                       upload_id: str | None = None) -> None:
    """Commit rec (releasing the pending marks of its new data); on a lost race the new
    layouts are freed and 412 raised."""
    if os.environ.get("ZONEGATE_TEST_CRASH_BEFORE_COMMIT") == rec.key:
        os._exit(70)  # fault injection for the crash tests: data written, metadata not
    # Commits wait for fsync: off the event loop.
    conflict = await asyncio.to_thread(req.gw.store.put_object, rec, if_absent=if_absent,
                                       if_version=if_version,
                                       upload_id=upload_id, release=marks)
    if conflict is not None:
        req.gw.store.queue_orphans(rec.layouts())
        notify_sweeper(req)
        raise S3Error("PreconditionFailed",
                      Condition="If-None-Match" if if_absent else "If-Match")
    notify_sweeper(req)


def object_meta(rec: ObjectRecord) -> dict[str, Any]:
    """The object description written into every archive (for recover-metadata)."""
    return {"bucket": rec.bucket, "key": rec.key, "version": rec.version, "size": rec.size,
            "etag": rec.etag, "last_modified": rec.last_modified, "owner": rec.owner,
            "headers": rec.headers, "user_meta": rec.user_meta, "checksum": rec.checksum}


async def write_single(req: S3Request, rec: ObjectRecord, body: Any) -> int:
    """Stream body into the object's one part; fills size, ETag, checksum and parts of rec.
    Returns the pending mark to release at commit."""

    def archive_meta(_: Any) -> dict[str, Any]:
        # Called once the body is consumed and verified: the object is fully known.
        rec.size, rec.etag, ck = body_result(body)
        if ck:
            rec.checksum = {**ck, "type": "FULL_OBJECT"}
        return {"kind": "object", "part": 1, "part_size": rec.size, "part_etag": rec.etag,
                "object": object_meta(rec)}

    layout, mark = await req.gw.storage.write(req.gw.store, part_uid(rec.version, 1), body,
                                              length=known_length(body),
                                              stream=stream_hint(rec.bucket, rec.key),
                                              meta=archive_meta)
    rec.parts = [{"number": 1, "size": rec.size, "etag": rec.etag, "layout": layout}]
    return mark


async def put_object(req: S3Request) -> Response:
    require_bucket(req)
    check_key(req.key)
    headers = stored_headers(req)
    meta = user_metadata(req)
    if_absent, if_version = put_conditions(req)
    body = request_body(req, max_size=MAX_PART_SIZE)
    known_length(body)
    rec = ObjectRecord(bucket=req.bucket, key=req.key, size=0, etag="", last_modified=now(),
                       owner=req.user, version=new_version(), headers=headers, user_meta=meta)
    mark = await write_single(req, rec, body)
    await store_object(req, rec, [mark], if_absent=if_absent, if_version=if_version)
    return Response(b"", headers={"ETag": quote_etag(rec.etag),
                                  **checksum_headers(rec.checksum)})


# ---- GET / HEAD -------------------------------------------------------------------------

def etag_matches(header: str, etag: str) -> bool:
    for tag in header.split(","):
        t = tag.strip()
        if t == "*" or strip_etag(t) == etag:
            return True
    return False


def check_conditions(obj: ObjectRecord, h: Any, prefix: str = "if-",
                     copy_source: bool = False) -> None:
    """RFC 7232 as S3 applies it: If-Match beats If-Unmodified-Since, If-None-Match beats
    If-Modified-Since. Failing negative conditions give 304 on GET/HEAD, 412 for copies."""
    im, inm = h.get(prefix + "match"), h.get(prefix + "none-match")
    ims = parse_http_date(h.get(prefix + "modified-since"))
    ius = parse_http_date(h.get(prefix + "unmodified-since"))
    lm = int(obj.last_modified)
    if im is not None:
        if not etag_matches(im, obj.etag):
            raise S3Error("PreconditionFailed", Condition=prefix.title() + "Match")
    elif ius is not None and lm > ius:
        raise S3Error("PreconditionFailed", Condition=prefix.title() + "Unmodified-Since")
    neg = "PreconditionFailed" if copy_source else "NotModified"
    if inm is not None:
        if etag_matches(inm, obj.etag):
            raise S3Error(neg, Condition=prefix.title() + "None-Match")
    elif ims is not None and lm <= ims and ims <= now():
        raise S3Error(neg, Condition=prefix.title() + "Modified-Since")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end inclusive) for a single byte range; None = whole object (absent or
    malformed headers are ignored, as S3 does); unsatisfiable -> InvalidRange."""
    if not header:
        return None
    m = _RANGE.match(header.strip().replace(" ", ""))
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    a, b = m.group(1), m.group(2)
    if a == "":
        n = int(b)
        if n == 0 or size == 0:
            raise S3Error("InvalidRange", RangeRequested=header, ActualObjectSize=str(size))
        return max(0, size - n), size - 1
    start = int(a)
    end = int(b) if b else size - 1
    if b and end < start:
        return None
    if start >= size:
        raise S3Error("InvalidRange", RangeRequested=header, ActualObjectSize=str(size))
    return start, min(end, size - 1)


def check_version_id(req: S3Request) -> None:
    """An unversioned store has one version per key, whose id is "null"."""
    vid = req.query.get("versionId")
    if vid is not None and vid != "null":
        raise S3Error("NoSuchVersion", Key=req.key, VersionId=vid)


def get_existing(req: S3Request) -> ObjectRecord:
    require_bucket(req)
    check_version_id(req)
    obj = req.gw.store.get_object(req.bucket, req.key)
    if obj is None:
        raise S3Error("NoSuchKey", resource=req.resource, Key=req.key)
    return obj


def response_headers(req: S3Request, obj: ObjectRecord) -> dict[str, str]:
    h = object_headers(obj.headers, obj.user_meta)
    h["ETag"] = quote_etag(obj.etag)
    h["Last-Modified"] = http_date(obj.last_modified)
    h["Accept-Ranges"] = "bytes"
    if len(obj.parts) > 1 or obj.manifest:
        h["x-amz-mp-parts-count"] = str(len(obj.parts))
    for q, name in RESPONSE_OVERRIDES.items():
        if q in req.query:
            h[name] = req.query[q]
    return h


async def _get_or_head(req: S3Request, head: bool) -> Response:
    obj = get_existing(req)
    headers = response_headers(req, obj)
    try:
        check_conditions(obj, req.headers)
    except S3Error as e:
        if e.code != "NotModified":
            raise
        # 304 carries the validators (and no body), as HTTP caches expect.
        return Response(status_code=304, headers={"ETag": headers["ETag"],
                                                  "Last-Modified": headers["Last-Modified"]})
    size = obj.size
    rng: tuple[int, int] | None
    part_number = req.query.get("partNumber")
    if part_number is not None:
        try:
            pn = int(part_number)
        except ValueError:
            raise S3Error("InvalidArgument", "Part number must be an integer between 1 and "
                          "10000, inclusive", ArgumentName="partNumber",
                          ArgumentValue=part_number) from None
        if pn < 1 or pn > max(1, len(obj.parts)):
            raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable",
                          status=416)
        start = sum(int(p["size"]) for p in obj.parts[:pn - 1])
        psize = int(obj.parts[pn - 1]["size"]) if obj.parts else 0
        rng = (start, start + psize - 1) if psize else None
        headers["x-amz-mp-parts-count"] = str(max(1, len(obj.parts)))
    else:
        rng = parse_range(req.headers.get("range"), size)
    status = 200
    if rng is not None:
        start, end = rng
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    else:
        start, end = 0, size - 1
        if req.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            headers.update(checksum_headers(obj.checksum))
    length = end - start + 1 if size else 0
    headers["Content-Length"] = str(length)
    if head or length == 0:
        return Response(b"", status_code=status, headers=headers)
    body = await req.gw.storage.open_read(obj.parts, start, length)
    return StreamingResponse(body, status_code=status, headers=headers)


async def get_object(req: S3Request) -> Response:
    return await _get_or_head(req, head=False)


async def head_object(req: S3Request) -> Response:
    return await _get_or_head(req, head=True)


# ---- DELETE -----------------------------------------------------------------------------

async def delete_object(req: S3Request) -> Response:
    require_bucket(req)
    check_version_id(req)
    if req.gw.store.delete_object(req.bucket, req.key) is not None:
        notify_sweeper(req)
    return Response(status_code=204)


async def delete_objects(req: S3Request) -> Response:
    require_bucket(req)
    root = parse_xml(await read_small_body(req))
    if root.tag != "Delete":
        raise S3Error("MalformedXML")
    quiet = (root.findtext("Quiet") or "").strip().lower() == "true"
    objs = root.findall("Object")
    if not objs or len(objs) > MAX_DELETE_KEYS:
        raise S3Error("MalformedXML")
    out: list[str] = []
    freed = False
    for o in objs:
        key = o.findtext("Key")
        vid = o.findtext("VersionId")
        if key is None:
            raise S3Error("MalformedXML")
        vxml = el("VersionId", vid) if vid else ""
        if vid and vid != "null":
            out.append(f"<Error>{el('Key', key)}{vxml}<Code>NoSuchVersion</Code>"
                       "<Message>The specified version does not exist.</Message></Error>")
            continue
        try:
            check_key(key)
            if req.gw.store.delete_object(req.bucket, key) is not None:
                freed = True
        except S3Error as e:
            out.append(f"<Error>{el('Key', key)}{vxml}{el('Code', e.code)}"
                       f"{el('Message', e.message)}</Error>")
            continue
        if not quiet:
            out.append(f"<Deleted>{el('Key', key)}{vxml}</Deleted>")
    if freed:
        notify_sweeper(req)
    return xml_response(f'<DeleteResult xmlns="{x(S3_NS)}">{"".join(out)}</DeleteResult>')
