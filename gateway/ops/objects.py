"""Object operations: PutObject (conditional), GetObject (ranges, conditionals, overrides),
HeadObject. DeleteObject and DeleteObjects are in gateway/ops/versioning.py."""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from starlette.responses import Response, StreamingResponse

from gateway.metadata import ObjectRecord
from gateway.metadata.store import NoSuchBucketError
from gateway.ops import encryption, objectlock, versioning
from gateway.ops.acl_ops import new_object_acl
from gateway.ops.common import (
    MAX_PART_SIZE,
    MAX_PARTS,
    S3Request,
    check_key,
    http_date,
    notify_sweeper,
    now,
    object_headers,
    parse_http_date,
    quote_etag,
    request_body,
    require_bucket,
    stored_headers,
    strip_etag,
    user_metadata,
)
from gateway.ops.lifecycle import expiration_headers, tag_and_expiry_headers
from gateway.ops.tagging import request_tags
from gateway.s3 import checksums
from gateway.s3.errors import S3Error
from gateway.s3.md5lanes import md5_of
from gateway.s3.numbers import parse_uint, shown
from gateway.store.ssekeys import visible
from gateway.store.storage import COALESCE, MANIFEST_PART, new_version, part_uid
from gateway.store.streamhints import stream_hint

RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
# [0-9], not \d: \d also matches other scripts' digits, which int() would then accept.
_RANGE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")


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

async def put_conditions(req: S3Request) -> tuple[bool, str | None]:
    """(if_absent, required version) for a conditional PUT, checked now and at commit."""
    inm = req.headers.get("if-none-match")
    im = req.headers.get("if-match")
    cur = await req.gw.store.get_object(req.bucket, req.key) if (inm or im) else None
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
    layouts are freed and 412 raised (NoSuchBucket if the bucket was deleted meanwhile, by
    this gateway or another)."""
    if os.environ.get("ZONEGATE_TEST_CRASH_BEFORE_COMMIT") == rec.key:
        os._exit(70)  # fault injection for the crash tests: data written, metadata not
    freeing = req.gw.store.freeing_puts
    try:
        conflict = await req.gw.store.put_object(rec, if_absent=if_absent,
                                                 if_version=if_version,
                                                 upload_id=upload_id, release=marks,
                                                 versioning=versioning.store_state(req))
    except NoSuchBucketError:
        await req.gw.store.queue_orphans(rec.layouts())
        notify_sweeper(req)
        raise S3Error("NoSuchBucket", resource="/" + rec.bucket, BucketName=rec.bucket) from None
    if conflict is not None:
        await req.gw.store.queue_orphans(rec.layouts())
        notify_sweeper(req)
        raise S3Error("PreconditionFailed",
                      Condition="If-None-Match" if if_absent else "If-Match")
    if req.gw.store.freeing_puts != freeing:
        notify_sweeper(req)  # the commit queued what it replaced


def object_meta(rec: ObjectRecord) -> dict[str, Any]:
    """The object description written into every archive (for recover-metadata); the
    write-time ACL (x-amz-acl / x-amz-grant-*) only when there is one (None: the default)."""
    out = {"bucket": rec.bucket, "key": rec.key, "version": rec.version, "size": rec.size,
           "etag": rec.etag, "last_modified": rec.last_modified, "owner": rec.owner,
           "headers": rec.headers, "user_meta": rec.user_meta, "checksum": rec.checksum,
           "version_id": rec.version_id, "tags": rec.tags}
    if rec.acl is not None:
        out["acl"] = rec.acl
    return out


async def write_single(req: S3Request, rec: ObjectRecord, body: Any,
                       source: Any = None, length: int | None = None,
                       sealing: encryption.Sealing | None = None) -> int:
    """Stream body into the object's one part; fills size, ETag, checksum and parts of rec.
    Returns the pending mark to release at commit. `source`/`length`: the bytes to write
    when body was already consumed into a buffer (a streamed PUT that fitted in one part).
    `sealing`: the part is stored encrypted (its envelope already in rec.headers)."""

    def archive_meta(_: Any) -> dict[str, Any]:
        # Called once the body is consumed and verified: the object is fully known.
        rec.size, rec.etag, ck = body_result(body)
        if sealing is not None:
            rec.etag = sealing.etag(rec.etag)
        if ck:
            rec.checksum = {**ck, "type": "FULL_OBJECT"}
        return {"kind": "object", "part": 1, "part_size": rec.size, "part_etag": rec.etag,
                "object": object_meta(rec)}

    uid = part_uid(rec.version, 1)
    data = body if source is None else source
    n = known_length(body) if length is None else length
    if sealing is not None:
        data, n = sealing.seal(data, 1, uid), sealing.stored_length(n)
    layout, mark = await req.gw.storage.write(
        req.gw.store, uid, data, length=n, stream=stream_hint(rec.bucket, rec.key),
        meta=archive_meta)
    rec.parts = [{"number": 1, "size": rec.size, "etag": rec.etag, "layout": layout}]
    return mark


# A PUT without a length (Transfer-Encoding: chunked, e.g. from a pipe): the erasure layer
# needs each part's length before it starts, so the body is cut into internal parts of this
# size, each buffered whole (bounded memory: one such part per request). A body that ends
# within the first one is an ordinary one-part object; a longer one is stored like a multipart
# object (parts plus a manifest, so recover-metadata finds it) but keeps the plain MD5 ETag
# of a single PUT, and GET ?partNumber=1 still addresses the whole object.
STREAM_PART = 8 * 1024 * 1024


async def _fill(it: Any, carry: bytes) -> tuple[bytes, bytes, bool]:
    """(up to STREAM_PART bytes, what was read past them, whether the body ended). Reads one
    chunk past a full part to learn whether more follows (the chunks are ~1 MiB)."""
    buf, n = [carry], len(carry)
    while n <= STREAM_PART:
        try:
            chunk = await anext(it)
        except StopAsyncIteration:
            data = b"".join(buf)
            return data, b"", True
        buf.append(chunk)
        n += len(chunk)
    data = b"".join(buf)
    return data[:STREAM_PART], data[STREAM_PART:], False


async def _one(data: bytes) -> Any:
    # In COALESCE-sized pieces, as a streamed body arrives: the erasure writer encodes them
    # without regrouping.
    view = memoryview(data)
    for i in range(0, len(data), COALESCE):
        yield bytes(view[i:i + COALESCE])


async def write_streamed(req: S3Request, rec: ObjectRecord, body: Any,
                         sealing: encryption.Sealing | None = None) -> list[int]:
    """Store a body of unknown length (see STREAM_PART); returns the pending marks."""
    it = aiter(body)
    data, carry, ended = await _fill(it, b"")
    if ended:
        return [await write_single(req, rec, body, _one(data), len(data), sealing)]
    marks: list[int] = []
    parts: list[dict[str, Any]] = []
    try:
        while True:
            n = len(parts) + 1
            etag = (await asyncio.to_thread(md5_of, data)).hexdigest()
            size = len(data)
            uid = part_uid(rec.version, n)
            src: Any = _one(data)
            if sealing is not None:
                etag = sealing.etag(etag)
                src = sealing.seal(src, n, uid)
            layout, mark = await req.gw.storage.write(
                req.gw.store, uid, src,
                length=size if sealing is None else sealing.stored_length(size),
                stream=stream_hint(rec.bucket, rec.key),
                meta=lambda _, n=n, size=size, etag=etag: {
                    "kind": "part", "bucket": rec.bucket, "key": rec.key,
                    "upload": rec.version, "part": n, "part_size": size, "part_etag": etag})
            marks.append(mark)
            parts.append({"number": n, "size": size, "etag": etag, "layout": layout})
            if ended:
                break
            data, carry, ended = await _fill(it, carry)
            if not data:
                break
        rec.size, rec.etag, ck = body_result(body)
        if sealing is not None:
            rec.etag = sealing.etag(rec.etag)
        if ck:
            rec.checksum = {**ck, "type": "FULL_OBJECT"}
        rec.parts = parts
        manifest = json.dumps({"object": object_meta(rec), "parts": parts},
                              separators=(",", ":")).encode()
        rec.manifest, mark = await req.gw.storage.write(
            req.gw.store, part_uid(rec.version, MANIFEST_PART), _one(manifest),
            length=len(manifest), stream=stream_hint(rec.bucket, rec.key),
            meta=lambda _: {"kind": "manifest", "upload": rec.version,
                            "object": object_meta(rec)})
        marks.append(mark)
    except BaseException:
        # A bad body (digest, length, disconnect): free what was written, commit nothing.
        if parts:
            await req.gw.store.queue_orphans([p["layout"] for p in parts])
        await req.gw.store.done_orphans(marks)
        notify_sweeper(req)
        raise
    return marks


async def put_object(req: S3Request) -> Response:
    await require_bucket(req)
    check_key(req.key)
    headers = await objectlock.write_headers(req, stored_headers(req))
    meta = user_metadata(req)
    tags = request_tags(req)
    owner, grants = await new_object_acl(req)
    if_absent, if_version = await put_conditions(req)
    sealing = await encryption.for_write(req)
    if sealing is not None:
        headers = sealing.store_in(headers)
    body = request_body(req, max_size=MAX_PART_SIZE)
    if body.expected_size is None and "chunked" not in \
            req.headers.get("transfer-encoding", "").lower():
        raise S3Error("MissingContentLength")
    rec = ObjectRecord(bucket=req.bucket, key=req.key, size=0, etag="", last_modified=now(),
                       owner=owner, version=new_version(), headers=headers, user_meta=meta,
                       tags=tags, acl=grants)
    await versioning.prepare_write(req, rec)
    if body.expected_size is None:
        marks = await write_streamed(req, rec, body, sealing)
    else:
        marks = [await write_single(req, rec, body, sealing=sealing)]
    await store_object(req, rec, marks, if_absent=if_absent, if_version=if_version)
    return Response(b"", headers={"ETag": quote_etag(rec.etag),
                                  **checksum_headers(rec.checksum),
                                  **(sealing.response_headers() if sealing else {}),
                                  **versioning.written_headers(req, rec),
                                  **await expiration_headers(req, rec)})


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
    # Numbers past any object size saturate: a suffix or an end that long means "all of it",
    # a start that long is past the end (416), whatever the count of digits.
    if a == "":
        n = parse_uint(b, saturate=True)
        if n == 0 or size == 0:
            raise S3Error("InvalidRange", RangeRequested=shown(header),
                          ActualObjectSize=str(size))
        return max(0, size - n), size - 1
    start = parse_uint(a, saturate=True)
    end = parse_uint(b, saturate=True) if b else size - 1
    if b and end < start:
        return None
    if start >= size:
        raise S3Error("InvalidRange", RangeRequested=shown(header), ActualObjectSize=str(size))
    return start, min(end, size - 1)


async def get_existing(req: S3Request) -> ObjectRecord:
    if "versionId" in req.query:
        await require_bucket(req)
        vid = versioning.requested_version(req)
        return await versioning.object_for_read(req, req.bucket, req.key, vid)
    # The current object read with the bucket (one statement on PostgreSQL), answered only
    # once access is checked; without one, object_for_read says why (delete marker or not).
    b, configs, obj = await req.gw.store.read_for_get(req.bucket, req.key)
    await require_bucket(req, (b, configs))
    if obj is not None:
        return obj
    return await versioning.object_for_read(req, req.bucket, req.key, None)


def is_multipart(obj: ObjectRecord) -> bool:
    """Made by CompleteMultipartUpload (its ETag ends in -N). A streamed PUT may be stored in
    several internal parts, but for S3 it is a one-part object."""
    return "-" in obj.etag


def response_headers(req: S3Request, obj: ObjectRecord) -> dict[str, str]:
    h = object_headers(visible(obj.headers), obj.user_meta)
    h["ETag"] = quote_etag(obj.etag)
    h["Last-Modified"] = http_date(obj.last_modified)
    h["Accept-Ranges"] = "bytes"
    h.update(versioning.read_headers(req, obj))
    if is_multipart(obj):
        h["x-amz-mp-parts-count"] = str(len(obj.parts))
    for q, name in RESPONSE_OVERRIDES.items():
        if q in req.query:
            h[name] = override_value(q, req.query[q])
    return h


def override_value(param: str, value: str) -> str:
    """A response-* override as a header value: latin-1 text without control characters
    (CR/LF would split the response head, NUL/DEL and others are refused by HTTP stacks, and
    anything outside latin-1 cannot be sent), else InvalidArgument."""
    if any(c < " " and c != "\t" or "\x7f" <= c <= "\x9f" or c > "\xff" for c in value):
        raise S3Error("InvalidArgument", f"Invalid value for the {param} parameter: it must "
                      "be latin-1 text without control characters", ArgumentName=param,
                      ArgumentValue=shown(value))
    return value


async def _get_or_head(req: S3Request, head: bool) -> Response:
    obj = await get_existing(req)
    opening = encryption.for_read(req, obj)  # an SSE-C object's key: missing 400, wrong 403
    headers = response_headers(req, obj)
    headers.update(opening.headers)
    headers.update(await tag_and_expiry_headers(req, obj))  # x-amz-tagging-count, -expiration
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
            pn = parse_uint(part_number, hi=MAX_PARTS)
        except ValueError:
            pn = 0
        if pn < 1:  # not a number in 1..10000: S3's InvalidArgument; a part it lacks: 416
            raise S3Error("InvalidArgument", "Part number must be an integer between 1 and "
                          "10000, inclusive", ArgumentName="partNumber",
                          ArgumentValue=shown(part_number))
        if req.headers.get("range"):
            raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber "
                          "query parameter.")
        count = len(obj.parts) if is_multipart(obj) else 1
        if pn > count:
            # 400, as AWS answers it (its error table lists the code with 416, but GetObject
            # and HeadObject answer 400 InvalidPartNumber)
            raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable",
                          status=400, PartNumberRequested=str(pn), ActualPartCount=str(count))
        if is_multipart(obj):
            start = sum(int(p["size"]) for p in obj.parts[:pn - 1])
            psize = int(obj.parts[pn - 1]["size"])
        else:
            start, psize = 0, size
        # As S3: a part's bytes come as a 206 with the part's Content-Range (an empty
        # object's one part is a plain 200).
        rng = (start, start + psize - 1) if psize else None
        headers["x-amz-mp-parts-count"] = str(count)
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
    body = await opening.open_read(req.gw.storage, obj.parts, start, length)
    return StreamingResponse(body, status_code=status, headers=headers)


async def get_object(req: S3Request) -> Response:
    return await _get_or_head(req, head=False)


async def head_object(req: S3Request) -> Response:
    return await _get_or_head(req, head=True)
