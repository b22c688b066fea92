"""POST object: a browser form upload (`POST /bucket`, multipart/form-data) signed with a
policy document (SigV4 or SigV2 form fields, gateway/s3/postpolicy.py), or anonymous where
the bucket's policy or ACL lets anyone write.

The form's text fields come first (gateway/s3/formdata.py, bounded), are checked (signature,
policy expiration and conditions, then the bucket's access for the signer as a PutObject of
the key), and only then does the file part stream into the store, as a PUT of unknown length
does (gateway/ops/objects.py: write_streamed); its size is checked against the policy's
content-length-range as it arrives and at its end, so a refused form stores nothing (what was
written is freed, nothing is committed). The object's headers, metadata, ACL, tags and lock
come from the form fields as a PutObject's come from its headers: the form is turned into the
headers of a request that the PutObject helpers read."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator
from urllib.parse import quote, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from gateway.metadata import ObjectRecord
from gateway.ops import objectlock, versioning
from gateway.ops.acl_ops import new_object_acl
from gateway.ops.common import (
    MAX_PART_SIZE,
    S3_NS,
    S3Request,
    check_key,
    el,
    now,
    quote_etag,
    require_bucket,
    stored_headers,
    user_metadata,
    xml_response,
)
from gateway.ops.objects import store_object, write_streamed
from gateway.ops.tagging import request_tags
from gateway.s3 import postpolicy
from gateway.s3.errors import S3Error
from gateway.s3.formdata import FormReader, boundary_of
from gateway.s3.tagsets import parse_tagging
from gateway.store.storage import new_version

# Form fields that become the request headers a PutObject would carry.
HEADER_FIELDS = ("cache-control", "content-disposition", "content-encoding", "expires",
                 "x-amz-storage-class", "x-amz-object-lock-mode",
                 "x-amz-object-lock-retain-until-date", "x-amz-object-lock-legal-hold")
# Form fields that would change what is stored and that a form upload here cannot honour:
# refused (NotImplemented) rather than ignored.
UNSUPPORTED_PREFIXES = ("x-amz-server-side-encryption", "x-amz-checksum-",
                        "x-amz-website-redirect-location")
HASH_IN_THREAD = 256 * 1024


class FileBody:
    """The file part as the PUT writers want a body: an async iterable of bytes, then its
    size and MD5 (`body_result`); EntityTooLarge past `max_size` as it arrives, and the
    policy's content-length-range checked at its end (before anything is committed)."""

    checksum_algorithm: str | None = None
    checksum: str | None = None
    expected_size: int | None = None

    def __init__(self, chunks: AsyncIterator[bytes], policy: postpolicy.Policy | None) -> None:
        self._chunks = chunks
        self._policy = policy
        rng = policy.length_range if policy is not None else None
        self._max = min(MAX_PART_SIZE, rng[1]) if rng else MAX_PART_SIZE
        self.size = 0
        self._md5 = hashlib.md5()
        self.md5_digest: bytes | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            self.size += len(chunk)
            if self.size > self._max:
                postpolicy.check_length(self._policy, self.size)
                raise S3Error("EntityTooLarge", MaxSizeAllowed=self._max)
            if len(chunk) >= HASH_IN_THREAD:
                await asyncio.to_thread(self._md5.update, chunk)
            else:
                self._md5.update(chunk)
            yield chunk
        postpolicy.check_length(self._policy, self.size)
        self.md5_digest = self._md5.digest()


def _form_request(req: S3Request, fields: dict[str, str], file_type: str | None) -> S3Request:
    """A copy of req whose headers are the form's fields as S3 maps them (x-amz-acl from
    `acl`, x-amz-tagging from the `tagging` document, ...), for the PutObject helpers."""
    for name in fields:
        if name.startswith(UNSUPPORTED_PREFIXES):
            raise S3Error("NotImplemented", f"The form field {name} is not supported for POST "
                          "uploads by this server.")
    h: list[tuple[str, str]] = []
    ctype = fields.get("content-type") or file_type
    if ctype:
        h.append(("content-type", ctype))
    for name in HEADER_FIELDS:
        if name in fields:
            h.append((name, fields[name]))
    if "acl" in fields:
        h.append(("x-amz-acl", fields["acl"]))
    if "tagging" in fields:
        tags = parse_tagging(fields["tagging"].encode("utf-8"), "object")
        h.append(("x-amz-tagging", urlencode(tags)))
    h += [(k, v) for k, v in fields.items() if k.startswith("x-amz-meta-")]
    keep = [(k, v) for k, v in req.request.headers.raw
            if k.lower() in (b"host", b"x-forwarded-for", b"x-forwarded-proto", b"user-agent",
                             b"referer", b"origin")]
    raw = keep + [(k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in h]
    scope = {**req.request.scope, "headers": raw}
    return dataclasses.replace(req, request=Request(scope, req.request.receive))


async def _signer(req: S3Request, fields: dict[str, str]) -> str:
    """The user who signed the form ("" for an anonymous one), its signature verified."""
    signed = postpolicy.signer(fields)
    if signed is None:
        return ""
    kind, access_key = signed
    directory = req.gw.directory
    if directory.needs_load(access_key):
        await directory.load(access_key)
    found = directory.lookup(access_key)
    if found is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key[:128])
    name, secret = found
    postpolicy.verify(kind, fields, secret)
    return name


def _answer(req: S3Request, fields: dict[str, str], rec: ObjectRecord) -> Response:
    host = req.headers.get("host", "")
    location = f"http://{host}/{quote(rec.bucket)}/{quote(rec.key)}"
    headers = {"ETag": quote_etag(rec.etag), "Location": location,
               **versioning.written_headers(req, rec)}
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect:
        u = urlsplit(redirect)
        if u.scheme in ("http", "https") and u.netloc:
            q = urlencode({"bucket": rec.bucket, "key": rec.key, "etag": quote_etag(rec.etag)})
            sep = "&" if u.query else "?"
            return Response(status_code=303, headers={**headers,
                                                      "Location": redirect + sep + q})
    status = fields.get("success_action_status", "204").strip()
    if status == "201":
        return xml_response(f'<PostResponse xmlns="{S3_NS}">{el("Location", location)}'
                            f'{el("Bucket", rec.bucket)}{el("Key", rec.key)}'
                            f'{el("ETag", quote_etag(rec.etag))}</PostResponse>', status=201,
                            headers=headers)
    return Response(status_code=200 if status == "200" else 204, headers=headers)


async def post_object(req: S3Request) -> Response:
    """PostObject."""
    ctype = req.headers.get("content-type", "")
    if not ctype.lower().lstrip().startswith("multipart/form-data"):
        raise S3Error("PreconditionFailed", "Bucket POST must be of the enclosure-type "
                      "multipart/form-data", Condition="Bucket POST must be of the "
                      "enclosure-type-multipart/form-data")
    reader = FormReader(aiter(req.request.stream()), boundary_of(ctype))
    fields, filename, file_type = await reader.fields()
    if "key" not in fields:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'key'.  If it "
                      "is specified, please check the order of the fields.",
                      ArgumentName="key", ArgumentValue="")
    key = fields["key"].replace("${filename}", filename)
    if not key:
        raise S3Error("InvalidArgument", "User key must have a length greater than 0.",
                      ArgumentName="key", ArgumentValue="")
    check_key(key)
    user = await _signer(req, fields)
    policy = postpolicy.decode(fields["policy"]) if "policy" in fields else None
    if user and policy is None:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'policy'.",
                      ArgumentName="policy", ArgumentValue="")
    if policy is not None:
        postpolicy.check(policy, fields, req.bucket, time.time())
    form = _form_request(req, fields, file_type)
    form.user, form.key = user, key
    await require_bucket(form)   # the signer's PutObject of the key
    headers = await objectlock.write_headers(form, stored_headers(form))
    meta = user_metadata(form)
    tags = request_tags(form)
    owner, grants = await new_object_acl(form)
    rec = ObjectRecord(bucket=req.bucket, key=key, size=0, etag="", last_modified=now(),
                       owner=owner, version=new_version(), headers=headers, user_meta=meta,
                       tags=tags, acl=grants)
    await versioning.prepare_write(form, rec)
    marks = await write_streamed(form, rec, FileBody(reader.file_chunks(), policy))
    await store_object(form, rec, marks)
    await reader.drain()
    return _answer(form, fields, rec)
