"""Server-side encryption in the S3 operations: what a write seals with, what a read needs,
and Put/Get/DeleteBucketEncryption.

The handlers (objects.py, copy.py, multipart.py) ask here for a `Sealing` (writes) or
`Opening` (reads); the headers are parsed by gateway/s3/sse.py, the keys handled by
gateway/store/ssekeys.py, the bytes sealed by gateway/store/encryption.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from gateway.access import proxies
from gateway.metadata import ObjectRecord, UploadRecord
from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import (
    S3_NS,
    S3Request,
    bucket_config,
    parse_xml,
    read_small_body,
    require_bucket,
    xml_response,
)
from gateway.s3 import sse
from gateway.s3.errors import S3Error
from gateway.store import encryption, ssekeys
from gateway.store.ssekeys import ENVELOPE_HEADER, SSE_C, SSE_S3, Envelope

KIND = "encryption"  # the bucket configuration document: {"algorithm": "AES256"}


def settings(req: S3Request) -> ssekeys.SseSettings:
    return getattr(req.gw, "sse", None) or ssekeys.SseSettings()


def secure(req: S3Request) -> bool:
    _, scheme = proxies.from_request(req.gw.proxies, req.request)
    return scheme == "https"


def customer_key(req: S3Request, prefix: str = sse.CUSTOMER) -> sse.CustomerKey | None:
    return sse.parse_customer_key(req.headers, prefix, secure=secure(req),
                                  allow_http=settings(req).allow_http)


@dataclass
class Sealing:
    """How a write seals its parts: the envelope to store with the object (or upload), the
    data key, and the client's SSE-C key to echo."""

    envelope: Envelope
    data_key: bytes
    customer: sse.CustomerKey | None = None

    @property
    def mode(self) -> str:
        return self.envelope.mode

    def stored_length(self, n: int) -> int:
        return encryption.stored_size(n)

    def seal(self, body: AsyncIterable[bytes], number: int, uid: str) -> AsyncIterator[bytes]:
        return encryption.seal(body, encryption.part_aead(self.data_key, uid), number)

    def etag(self, md5_hex: str) -> str:
        """S3: an SSE-S3 object's ETag is the MD5 of its plaintext, an SSE-C one's is not."""
        return ssekeys.opaque_etag(self.data_key, md5_hex) if self.mode == SSE_C else md5_hex

    def store_in(self, headers: dict[str, str]) -> dict[str, str]:
        return {**headers, ENVELOPE_HEADER: self.envelope.to_text()}

    def response_headers(self) -> dict[str, str]:
        return sse.response_headers(self.mode, self.customer)


async def default_mode(req: S3Request, bucket: str) -> str:
    """The bucket's default encryption ("" or AES256)."""
    doc = await bucket_config(req, bucket, KIND)
    if not doc:
        return ""
    try:
        return str(json.loads(doc).get("algorithm") or "")
    except (ValueError, AttributeError):
        return ""


async def for_write(req: S3Request) -> Sealing | None:
    """The sealing a write asks for (its SSE headers, else the bucket's default); None: the
    object is stored as sent. Call after require_bucket (the bucket's configs are read)."""
    target = sse.parse_target(req.headers, secure=secure(req),
                              allow_http=settings(req).allow_http)
    mode = target.mode or await default_mode(req, req.bucket)
    if not mode:
        return None
    data_key = ssekeys.new_data_key()
    env = ssekeys.seal_key(mode, data_key, master=settings(req).master,
                           customer_key=target.customer.key if target.customer else None)
    return Sealing(env, data_key, target.customer)


def wants_encryption(req: S3Request) -> bool:
    """The request changes the encryption of what a copy writes: it names one for the
    destination, or gives an SSE-C source's key (the copy may store it otherwise). A copy
    onto itself may then keep the object's metadata."""
    h = req.headers
    return sse.SSE in h or (sse.CUSTOMER + "algorithm") in h or \
        (sse.COPY_CUSTOMER + "algorithm") in h


@dataclass
class Opening:
    """What a read of an object needs: its data key (None: stored as sent) and the SSE
    headers of the answer."""

    data_key: bytes | None
    headers: dict[str, str]

    async def open_read(self, storage: Any, parts: list[dict[str, Any]], offset: int,
                        length: int) -> AsyncIterator[bytes]:
        if self.data_key is None:
            return await storage.open_read(parts, offset, length)
        return await encryption.open_plain(storage, parts, self.data_key, offset, length)

    def read(self, storage: Any, parts: list[dict[str, Any]], offset: int, length: int
             ) -> AsyncIterator[bytes]:
        if self.data_key is None:
            return storage.read(parts, offset, length)
        return encryption.read_plain(storage, parts, self.data_key, offset, length)


def for_read(req: S3Request, obj: ObjectRecord, prefix: str = sse.CUSTOMER) -> Opening:
    """The key to read obj with: an SSE-C object needs its key under `prefix` (the request's
    own SSE-C headers, or the copy-source ones): missing 400 InvalidRequest, wrong 403
    AccessDenied; SSE-C headers for an object not stored with SSE-C: 400 InvalidRequest."""
    if prefix == sse.CUSTOMER:
        sse.refuse_method_on_read(req.headers)
    given = customer_key(req, prefix)
    env = ssekeys.envelope_of(obj.headers)
    if env is None or env.mode != SSE_C:
        if given is not None:
            raise S3Error("InvalidRequest", sse.NOT_APPLICABLE)
        if env is None:
            return Opening(None, {})
        return Opening(ssekeys.open_key(env, master=settings(req).master),
                       sse.response_headers(SSE_S3))
    if given is None:
        raise S3Error("InvalidRequest", sse.STORED_ENCRYPTED)
    key = ssekeys.open_key(env, customer_key=given.key)
    return Opening(key, given.headers())


def for_part(req: S3Request, up: UploadRecord) -> Sealing | None:
    """UploadPart / UploadPartCopy: the upload's sealing; SSE-C needs the upload's key."""
    given = customer_key(req)
    env = ssekeys.envelope_of(up.headers)
    if env is None or env.mode != SSE_C:
        if given is not None:
            raise S3Error("InvalidRequest", "The multipart upload initiate requested no "
                          "encryption with a customer provided key: the part request must not "
                          "include one.")
        if env is None:
            return None
        return Sealing(env, ssekeys.open_key(env, master=settings(req).master))
    if given is None:
        raise S3Error("InvalidRequest", "The multipart upload initiate requested encryption. "
                      "Subsequent part requests must include the appropriate encryption "
                      "parameters.")
    return Sealing(env, ssekeys.open_key(env, customer_key=given.key), given)


def object_headers(obj: ObjectRecord | UploadRecord) -> dict[str, str]:
    """The SSE headers that describe a stored object without its key (PUT-less answers:
    CompleteMultipartUpload, and HEAD-like listings)."""
    env = ssekeys.envelope_of(obj.headers)
    if env is None:
        return {}
    if env.mode == SSE_S3:
        return {sse.SSE: SSE_S3}
    return {sse.CUSTOMER + "algorithm": sse.AES256}


# ---- Put/Get/DeleteBucketEncryption ------------------------------------------------------

MAX_BODY = 64 * 1024


def parse_config(data: bytes) -> str:
    """A ServerSideEncryptionConfiguration document -> the algorithm (AES256); aws:kms
    NotImplemented, anything else MalformedXML / InvalidArgument as S3 answers."""
    root = parse_xml(data)
    if root.tag != "ServerSideEncryptionConfiguration":
        raise S3Error("MalformedXML")
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise S3Error("MalformedXML")
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise S3Error("MalformedXML")
    algo = (default.findtext("SSEAlgorithm") or "").strip()
    if algo in sse.KMS_VALUES:
        raise S3Error("NotImplemented", "Server-side encryption with AWS KMS keys is not "
                      "available: no KMS is configured on this server.")
    if algo != SSE_S3:
        raise S3Error("MalformedXML")
    if default.find("KMSMasterKeyID") is not None:
        raise S3Error("InvalidArgument", "a KMSMasterKeyID is not applicable if the default "
                      "sse algorithm is not aws:kms or aws:kms:dsse",
                      ArgumentName="ApplyServerSideEncryptionByDefault")
    bucket_key = (rules[0].findtext("BucketKeyEnabled") or "false").strip().lower()
    if bucket_key not in ("true", "false"):
        raise S3Error("MalformedXML")
    return algo


async def put_bucket_encryption(req: S3Request) -> Response:
    from gateway.ops.tagging import require_integrity_header
    await require_bucket(req)
    require_integrity_header(req)  # checksum-required, as PutBucketTagging
    algo = parse_config(await read_small_body(req, MAX_BODY))
    if settings(req).master is None:
        raise S3Error("NotImplemented", "Server-side encryption with S3 managed keys is not "
                      "available: no sse_master_key_file is configured on this server.")
    await save_bucket_config(req.gw, req.bucket, KIND,
                             json.dumps({"algorithm": algo}, separators=(",", ":")))
    return Response(status_code=200)


async def get_bucket_encryption(req: S3Request) -> Response:
    await require_bucket(req)
    algo = await default_mode(req, req.bucket)
    if not algo:
        raise S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName=req.bucket)
    return xml_response(
        f'<ServerSideEncryptionConfiguration xmlns="{S3_NS}"><Rule>'
        f"<ApplyServerSideEncryptionByDefault><SSEAlgorithm>{algo}</SSEAlgorithm>"
        f"</ApplyServerSideEncryptionByDefault><BucketKeyEnabled>false</BucketKeyEnabled>"
        f"</Rule></ServerSideEncryptionConfiguration>")


async def delete_bucket_encryption(req: S3Request) -> Response:
    await require_bucket(req)
    await save_bucket_config(req.gw, req.bucket, KIND, None)
    return Response(status_code=204)
