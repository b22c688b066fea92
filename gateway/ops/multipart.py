"""Multipart uploads: Create, UploadPart, UploadPartCopy, Complete, Abort, ListParts,
ListMultipartUploads.

Each part is its own erasure-coded part (uid = fresh uuid + `.p{n}`, stream hint = the key's
"directory", gateway/store/streamhints.py),
so re-uploading a part number never touches the fragments of the earlier attempt until the
store has swapped them. Complete writes a manifest part (part 0) naming the parts in order and
the final object metadata, so `recover-metadata` can rebuild the object from the nodes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from starlette.responses import Response

from gateway.metadata import ObjectRecord, PartRecord, UploadRecord
from gateway.metadata.store import NoSuchBucketError, UploadChangedError
from gateway.ops import encryption, objectlock, versioning
from gateway.ops.acl_ops import from_upload, upload_acl_headers
from gateway.ops.common import (
    MAX_PART_SIZE,
    MAX_PARTS,
    MIN_PART_SIZE,
    S3_NS,
    S3Request,
    check_key,
    el,
    int_arg,
    iso8601,
    notify_sweeper,
    now,
    owner_xml,
    parse_xml,
    quote_etag,
    read_small_body,
    request_body,
    requested_checksum_algorithm,
    require_bucket,
    stored_headers,
    strip_etag,
    user_metadata,
    xml_response,
)
from gateway.ops.lifecycle import abort_headers, expiration_headers
from gateway.ops.objects import (
    body_result,
    checksum_headers,
    known_length,
    object_meta,
    put_conditions,
    store_object,
)
from gateway.ops.tagging import split_upload_tags, upload_headers_with_tags
from gateway.s3 import checksums, sse
from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, INT64_MAX, parse_uint, uint_arg
from gateway.store.storage import MANIFEST_PART, CopyBody, new_version, part_uid
from gateway.store.streamhints import stream_hint


async def _get_upload(req: S3Request) -> UploadRecord:
    await require_bucket(req)
    up = await req.gw.store.get_upload(req.query.get("uploadId", ""))
    if up is None or up.bucket != req.bucket or up.key != req.key:
        raise S3Error("NoSuchUpload", UploadId=req.query.get("uploadId", ""))
    if up.owner != req.user:
        raise S3Error("AccessDenied")
    return up


def _part_number(req: S3Request) -> int:
    raw = req.query.get("partNumber", "")
    try:
        n = parse_uint(raw, hi=INT32_MAX)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_PARTS:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, "
                      "inclusive", ArgumentName="partNumber", ArgumentValue=raw)
    return n


async def create_upload(req: S3Request) -> Response:
    await require_bucket(req)
    check_key(req.key)
    algo = req.headers.get("x-amz-checksum-algorithm", "").strip()
    ctype = req.headers.get("x-amz-checksum-type", "").strip().upper()
    if algo:
        algo = requested_checksum_algorithm(algo)
        ctype = ctype or ("FULL_OBJECT" if algo == "CRC64NVME" else "COMPOSITE")
        if ctype not in ("COMPOSITE", "FULL_OBJECT"):
            raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
        if ctype == "FULL_OBJECT" and algo not in checksums.CRC_ALGORITHMS:
            raise S3Error("InvalidRequest", f"The FULL_OBJECT checksum type is not supported "
                          f"for the {algo} algorithm.")
        if ctype == "COMPOSITE" and algo == "CRC64NVME":
            raise S3Error("InvalidRequest", "The COMPOSITE checksum type is not supported for "
                          "the CRC64NVME algorithm.")
    elif ctype:
        raise S3Error("InvalidRequest", "The x-amz-checksum-type header can only be used with "
                      "the x-amz-checksum-algorithm header.")
    sealing = await encryption.for_write(req)
    stored = stored_headers(req) if sealing is None else sealing.store_in(stored_headers(req))
    up = UploadRecord(upload_id=new_version(), bucket=req.bucket, key=req.key, owner=req.user,
                      initiated=now(),
                      headers=await upload_acl_headers(
                          req, upload_headers_with_tags(req, await objectlock.write_headers(
                              req, stored, upload=True))),
                      user_meta=user_metadata(req),
                      checksum_algorithm=algo, checksum_type=ctype)
    try:
        await req.gw.store.create_upload(up)
    except NoSuchBucketError:  # deleted since require_bucket, by this gateway or another
        raise S3Error("NoSuchBucket", resource="/" + req.bucket, BucketName=req.bucket) from None
    headers = await abort_headers(req, up.bucket, up.key, up.initiated)
    if algo:
        headers.update({"x-amz-checksum-algorithm": algo, "x-amz-checksum-type": ctype})
    if sealing is not None:
        headers.update(sealing.response_headers())
    return xml_response(
        f'<InitiateMultipartUploadResult xmlns="{S3_NS}">{el("Bucket", req.bucket)}'
        f'{el("Key", req.key)}{el("UploadId", up.upload_id)}</InitiateMultipartUploadResult>',
        headers=headers)


async def _store_part(req: S3Request, up: UploadRecord, number: int, body: Any,
                      sealing: encryption.Sealing | None = None) -> PartRecord:
    def result() -> tuple[int, str, dict[str, str]]:
        size, etag, ck = body_result(body)
        return size, etag if sealing is None else sealing.etag(etag), ck

    def archive_meta(_: Any) -> dict[str, Any]:
        size, etag, ck = result()
        return {"kind": "part", "bucket": up.bucket, "key": up.key, "upload": up.upload_id,
                "part": number, "part_size": size, "part_etag": etag, "checksum": ck}

    uid = part_uid(new_version(), number)
    data: Any = body
    length = known_length(body)
    if sealing is not None:
        data, length = sealing.seal(body, number, uid), sealing.stored_length(length)
    layout, mark = await req.gw.storage.write(req.gw.store, uid, data, length=length,
                                              stream=stream_hint(up.bucket, up.key),
                                              meta=archive_meta)
    size, etag, ck = result()
    part = PartRecord(upload_id=up.upload_id, number=number, size=size, etag=etag,
                      last_modified=now(), layout=layout, checksum=ck)
    if not await req.gw.store.put_part(part, release=[mark]):
        await req.gw.store.queue_orphans([layout])
        notify_sweeper(req)
        raise S3Error("NoSuchUpload", UploadId=up.upload_id)
    notify_sweeper(req)
    return part


async def upload_part(req: S3Request) -> Response:
    number = _part_number(req)
    up = await _get_upload(req)
    sealing = encryption.for_part(req, up)
    body = request_body(req, max_size=MAX_PART_SIZE, checksum_algorithm=up.checksum_algorithm)
    known_length(body)
    part = await _store_part(req, up, number, body, sealing)
    return Response(b"", headers={"ETag": quote_etag(part.etag),
                                  **checksum_headers(part.checksum),
                                  **(sealing.response_headers() if sealing else {})})


async def upload_part_copy(req: S3Request) -> Response:
    from gateway.ops.copy import copy_source_headers, copy_source_range, resolve_copy_source
    number = _part_number(req)
    up = await _get_upload(req)
    sealing = encryption.for_part(req, up)
    src = await resolve_copy_source(req)
    opening = encryption.for_read(req, src, sse.COPY_CUSTOMER)
    start, length = copy_source_range(req, src.size)
    if length > MAX_PART_SIZE:
        raise S3Error("InvalidRequest", "The specified copy source is larger than the maximum "
                      "allowable size for a copy source: 5368709120")
    body = CopyBody(opening.read(req.gw.storage, src.parts, start, length), length,
                    up.checksum_algorithm)
    part = await _store_part(req, up, number, body, sealing)
    return xml_response(f'<CopyPartResult xmlns="{S3_NS}">{el("ETag", quote_etag(part.etag))}'
                        f'{el("LastModified", iso8601(part.last_modified))}'
                        f'{_checksum_xml(part.checksum)}</CopyPartResult>',
                        headers={**checksum_headers(part.checksum), **copy_source_headers(req),
                                 **(sealing.response_headers() if sealing else {})})


def _checksum_xml(ck: dict[str, str]) -> str:
    if not ck or not ck.get("algorithm"):
        return ""
    return el(checksums.xml_name(ck["algorithm"]), ck["value"])


def _complete_result(bucket: str, key: str, etag: str, checksum: dict[str, str],
                     headers: dict[str, str] | None = None) -> Response:
    loc = f"/{quote(bucket)}/{quote(key)}"
    return xml_response(
        f'<CompleteMultipartUploadResult xmlns="{S3_NS}">{el("Location", loc)}'
        f'{el("Bucket", bucket)}{el("Key", key)}{el("ETag", quote_etag(etag))}'
        f'{_checksum_xml(checksum)}'
        f'{el("ChecksumType", checksum["type"]) if checksum else ""}'
        f'</CompleteMultipartUploadResult>', headers=headers)


async def _listed_parts(req: S3Request) -> list[tuple[int, str, dict[str, str]]]:
    """The (part number, ETag, checksums) a CompleteMultipartUpload body lists."""
    root = parse_xml(await read_small_body(req, 16 * 1024 * 1024, object_checksum=True))
    if root.tag != "CompleteMultipartUpload":
        raise S3Error("MalformedXML")
    listed: list[tuple[int, str, dict[str, str]]] = []
    for p in root.findall("Part"):
        try:
            n = parse_uint((p.findtext("PartNumber") or "").strip(), hi=INT32_MAX)
        except ValueError:
            raise S3Error("MalformedXML") from None
        cks = {c.tag[len("Checksum"):]: (c.text or "").strip() for c in p
               if c.tag.startswith("Checksum") and c.tag != "ChecksumType"}
        listed.append((n, strip_etag(p.findtext("ETag") or ""), cks))
    if not listed:
        raise S3Error("MalformedXML")
    return listed


async def _complete_again(req: S3Request, unknown: S3Error) -> Response:
    """A Complete for an upload that is no longer open. S3 answers a retried Complete of an
    upload it already completed with the same result (clients retry when the answer to a long
    Complete is lost), as long as the object that upload made is still the key's current
    version and the same parts are listed; anything else is NoSuchUpload."""
    upload_id = req.query.get("uploadId", "")
    obj = await req.gw.store.get_object(req.bucket, req.key) if upload_id else None
    # (The caller may write this key: require_bucket checked; the upload id is the write's.)
    if obj is None or obj.version != upload_id:
        raise unknown
    listed = await _listed_parts(req)
    if [(n, etag) for n, etag, _ in listed] != [(p["number"], p["etag"]) for p in obj.parts]:
        raise unknown
    return _complete_result(obj.bucket, obj.key, obj.etag, obj.checksum,
                            versioning.read_headers(req, obj))


def _check_object_checksum(req: S3Request, up: UploadRecord, computed: dict[str, str]) -> None:
    """An x-amz-checksum-<algo> header on CompleteMultipartUpload is the client's checksum of
    the whole object (FULL_OBJECT: the CRC of all the bytes; COMPOSITE: with or without its
    "-N"): compared with the one computed from the parts; mismatch -> BadDigest, nothing
    stored."""
    sent = [(a, v.strip()) for k, v in req.headers.items()
            if (a := checksums.algorithm_from_header(k)) is not None]
    if not sent:
        return
    ctype = req.headers.get("x-amz-checksum-type", "").strip().upper()
    if ctype and up.checksum_type and ctype != up.checksum_type:
        raise S3Error("InvalidRequest", f"The upload was created using the {up.checksum_type} "
                      f"checksum mode. The complete request must use the same checksum mode.")
    if len(sent) > 1:
        raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header. "
                                        "Multiple checksum Types are not allowed.")
    algo, value = sent[0]
    if not computed or algo != computed["algorithm"]:
        raise S3Error("InvalidRequest", f"The upload was created using the "
                      f"{up.checksum_algorithm or 'null'} checksum algorithm. The complete "
                      f"request must use the same checksum algorithm.")
    mine = computed["value"]
    if value != mine and value != mine.split("-")[0]:
        checksums.parse_value(algo, value.split("-")[0])  # malformed: InvalidRequest
        raise S3Error("BadDigest", f"The {algo} you specified did not match the calculated "
                      "checksum.")


async def complete_upload(req: S3Request) -> Response:
    try:
        up = await _get_upload(req)
    except S3Error as e:
        if e.code != "NoSuchUpload":
            raise
        return await _complete_again(req, e)
    if_absent, if_version = await put_conditions(req)  # conditional writes apply to Complete too
    listed = await _listed_parts(req)
    if len(listed) > MAX_PARTS:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000",
                      ArgumentName="partNumber")
    for a, b in zip(listed, listed[1:], strict=False):
        if b[0] <= a[0]:
            raise S3Error("InvalidPartOrder", UploadId=up.upload_id)
    stored = {p.number: p for p in await req.gw.store.list_parts(up.upload_id)}
    parts: list[PartRecord] = []
    for i, (n, etag, cks) in enumerate(listed):
        p = stored.get(n)
        if p is None or p.etag != etag:
            raise S3Error("InvalidPart", UploadId=up.upload_id, PartNumber=str(n), ETag=etag)
        for algo, value in cks.items():
            mine = p.checksum.get("value") if p.checksum.get("algorithm") == algo.upper() else None
            if mine is not None and mine != value:
                raise S3Error("InvalidPart", UploadId=up.upload_id, PartNumber=str(n))
        if i < len(listed) - 1 and p.size < MIN_PART_SIZE:
            raise S3Error("EntityTooSmall", ProposedSize=str(p.size),
                          MinSizeAllowed=str(MIN_PART_SIZE), PartNumber=str(n), ETag=etag)
        parts.append(p)
    expected = req.headers.get("x-amz-mp-object-size")
    if expected is not None and uint_arg(expected.strip(), "x-amz-mp-object-size",
                                         hi=INT64_MAX) != sum(p.size for p in parts):
        raise S3Error("InvalidRequest", "The provided 'x-amz-mp-object-size' header value does "
                      "not match the total size of the parts.")
    md5s = [bytes.fromhex(p.etag) for p in parts]
    etag = hashlib.md5(b"".join(md5s)).hexdigest() + f"-{len(parts)}"
    checksum: dict[str, str] = {}
    algo = up.checksum_algorithm
    if algo and all(p.checksum.get("algorithm") == algo for p in parts):
        if up.checksum_type == "FULL_OBJECT":
            value = checksums.full_object(algo, [(p.checksum["value"], p.size) for p in parts])
        else:
            value = checksums.composite(algo, [p.checksum["value"] for p in parts])
        checksum = {"algorithm": algo, "value": value, "type": up.checksum_type}
    elif algo:
        raise S3Error("InvalidRequest", f"The upload was created using a {algo} checksum. The "
                      f"complete request must include the checksum for each part.")
    _check_object_checksum(req, up, checksum)
    acl_headers, owner, grants = from_upload(up)
    headers, tags = split_upload_tags(acl_headers)  # CreateMultipartUpload's x-amz-tagging
    headers = await objectlock.completed_headers(req, headers)
    rec = ObjectRecord(bucket=up.bucket, key=up.key, size=sum(p.size for p in parts), etag=etag,
                       last_modified=now(), owner=owner, version=up.upload_id, acl=grants,
                       headers=headers, user_meta=up.user_meta, checksum=checksum, tags=tags,
                       parts=[{"number": p.number, "size": p.size, "etag": p.etag,
                               "layout": p.layout, "checksum": p.checksum} for p in parts])
    await versioning.prepare_write(req, rec)
    manifest = json.dumps({"object": object_meta(rec), "parts": rec.parts},
                          separators=(",", ":")).encode()

    async def one() -> AsyncIterator[bytes]:
        yield manifest

    rec.manifest, mark = await req.gw.storage.write(
        # a fresh uid per attempt: a retried Complete must not reuse the uid of a failed
        # write, whose pending mark makes the sweeper delete whatever carries it
        req.gw.store, part_uid(new_version(), MANIFEST_PART), one(), length=len(manifest),
        stream=stream_hint(up.bucket, up.key),
        meta=lambda _: {"kind": "manifest", "upload": up.upload_id, "object": object_meta(rec)})
    try:
        await store_object(req, rec, [mark], upload_id=up.upload_id, if_absent=if_absent,
                           if_version=if_version)
    except UploadChangedError:
        await req.gw.store.queue_orphans([rec.manifest])
        notify_sweeper(req)
        raise S3Error("NoSuchUpload", "The upload was aborted, or one of its parts replaced, "
                      "while it was being completed.", UploadId=up.upload_id) from None
    return _complete_result(up.bucket, up.key, etag, checksum,
                            {**versioning.written_headers(req, rec),
                             **encryption.object_headers(rec),
                             **await expiration_headers(req, rec)})


async def abort_upload(req: S3Request) -> Response:
    up = await _get_upload(req)
    if not await req.gw.store.abort_upload(up.upload_id):
        raise S3Error("NoSuchUpload", UploadId=up.upload_id)
    notify_sweeper(req)
    return Response(status_code=204)


async def list_parts(req: S3Request) -> Response:
    up = await _get_upload(req)
    marker = int_arg(req, "part-number-marker", 0)
    max_parts = int_arg(req, "max-parts", 1000, hi=1000)
    rows = await req.gw.store.list_parts(up.upload_id, after=marker, limit=max_parts + 1)
    truncated = len(rows) > max_parts
    rows = rows[:max_parts]
    body = [f'<ListPartsResult xmlns="{S3_NS}">', el("Bucket", up.bucket), el("Key", up.key),
            el("UploadId", up.upload_id), owner_xml(up.owner, "Initiator"),
            # the owner the object will have (the bucket's under BucketOwnerEnforced, or
            # BucketOwnerPreferred with bucket-owner-full-control), not always the initiator
            owner_xml(from_upload(up)[1]),
            "<StorageClass>STANDARD</StorageClass>", el("PartNumberMarker", marker)]
    if rows:
        body.append(el("NextPartNumberMarker", rows[-1].number))
    body += [el("MaxParts", max_parts), el("IsTruncated", "true" if truncated else "false")]
    if up.checksum_algorithm:
        body += [el("ChecksumAlgorithm", up.checksum_algorithm),
                 el("ChecksumType", up.checksum_type)]
    for p in rows:
        body.append(f"<Part>{el('PartNumber', p.number)}"
                    f"{el('LastModified', iso8601(p.last_modified))}"
                    f"{el('ETag', quote_etag(p.etag))}{el('Size', p.size)}"
                    f"{_checksum_xml(p.checksum)}</Part>")
    body.append("</ListPartsResult>")
    return xml_response("".join(body),
                        headers=await abort_headers(req, up.bucket, up.key, up.initiated))


async def list_uploads(req: S3Request) -> Response:
    from gateway.ops.listing import _encoder
    await require_bucket(req)
    enc, enc_xml = _encoder(req)
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    key_marker = req.query.get("key-marker", "")
    uid_marker = req.query.get("upload-id-marker", "")
    max_uploads = int_arg(req, "max-uploads", 1000, hi=1000)
    page = await req.gw.store.list_uploads(req.bucket, prefix, delimiter, key_marker,
                                     uid_marker if key_marker else "", max_uploads)
    body = [f'<ListMultipartUploadsResult xmlns="{S3_NS}">', el("Bucket", req.bucket),
            el("KeyMarker", enc(key_marker)), el("UploadIdMarker", uid_marker)]
    if page.truncated and page.next_marker is not None:
        body.append(el("NextKeyMarker", enc(page.next_marker)))
        nxt_uid = page.items[-1].upload_id if page.items and \
            page.items[-1].key == page.next_marker else ""
        body.append(el("NextUploadIdMarker", nxt_uid))
    body.append(el("Prefix", enc(prefix)))
    if delimiter:
        body.append(el("Delimiter", enc(delimiter)))
    body += [el("MaxUploads", max_uploads),
             el("IsTruncated", "true" if page.truncated else "false"), enc_xml]
    for u in page.items:
        body.append(f"<Upload>{el('Key', enc(u.key))}{el('UploadId', u.upload_id)}"
                    f"{owner_xml(u.owner, 'Initiator')}{owner_xml(u.owner)}"
                    f"<StorageClass>STANDARD</StorageClass>"
                    f"{el('Initiated', iso8601(u.initiated))}"
                    f"{el('ChecksumAlgorithm', u.checksum_algorithm) if u.checksum_algorithm else ''}"
                    f"</Upload>")
    body += [f"<CommonPrefixes>{el('Prefix', enc(p))}</CommonPrefixes>" for p in page.prefixes]
    body.append("</ListMultipartUploadsResult>")
    return xml_response("".join(body))
