"""Server-side encryption request headers (pure: no I/O, no keys kept).

- `x-amz-server-side-encryption`: AES256 (SSE-S3) or aws:kms / aws:kms:dsse (NotImplemented:
  no KMS is configured); anything else is InvalidArgument.
- SSE-C: `x-amz-server-side-encryption-customer-{algorithm,key,key-MD5}` (and the same trio
  under `x-amz-copy-source-` for a copy's source): all three or none, algorithm AES256, a
  base64 256-bit key whose MD5 is the one sent. The errors are S3's (code and wording).

`parse_target` reads what a write asks for (PutObject, CreateMultipartUpload, the destination
of a copy), `parse_customer_key` the SSE-C key of a read, an UploadPart or a copy source.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.s3.errors import S3Error

SSE = "x-amz-server-side-encryption"
SSE_KMS_KEY = "x-amz-server-side-encryption-aws-kms-key-id"
SSE_KMS_CONTEXT = "x-amz-server-side-encryption-context"
SSE_BUCKET_KEY = "x-amz-server-side-encryption-bucket-key-enabled"
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"

AES256 = "AES256"
KMS_VALUES = ("aws:kms", "aws:kms:dsse")
KEY_BYTES = 32

_NOT_SECURE = ("Requests specifying Server Side Encryption with Customer provided keys must be "
               "made over a secure connection.")
_NEED_ALGORITHM = ("Requests specifying Server Side Encryption with Customer provided keys must "
                   "provide a valid encryption algorithm.")
_NEED_KEY = ("Requests specifying Server Side Encryption with Customer provided keys must "
             "provide an appropriate secret key.")
_NEED_MD5 = ("Requests specifying Server Side Encryption with Customer provided keys must "
             "provide the client calculated MD5 of the secret key.")
_BAD_KEY = "The secret key was invalid for the specified algorithm."
_MD5_MISMATCH = "The calculated MD5 hash of the key did not match the hash that was provided."
STORED_ENCRYPTED = ("The object was stored using a form of Server Side Encryption. The correct "
                    "parameters must be provided to retrieve the object.")
NOT_APPLICABLE = "The encryption parameters are not applicable to this object."


@dataclass(frozen=True)
class CustomerKey:
    """An SSE-C key as sent: the 32 key bytes and the base64 MD5 to echo. Its repr never
    shows the key (it may end up in a log line or a traceback)."""

    key: bytes
    key_md5: str

    def __repr__(self) -> str:
        return "CustomerKey(<redacted>)"

    def headers(self) -> dict[str, str]:
        """The response headers of a request that used this key."""
        return {CUSTOMER + "algorithm": AES256, CUSTOMER + "key-MD5": self.key_md5}


@dataclass(frozen=True)
class Target:
    """What a write asks for: "" (nothing: the bucket default applies), "AES256" (SSE-S3) or
    "SSE-C" with its key."""

    mode: str = ""
    customer: CustomerKey | None = None


def _header(h: Mapping[str, str], name: str) -> str | None:
    v = h.get(name)
    return None if v is None else v.strip()


def parse_customer_key(h: Mapping[str, str], prefix: str = CUSTOMER, *,
                       secure: bool = True, allow_http: bool = False) -> CustomerKey | None:
    """The SSE-C key a request carries under `prefix` (None without any of the trio);
    S3's InvalidArgument / InvalidEncryptionAlgorithmError / InvalidRequest otherwise."""
    algo, key, md5 = (_header(h, prefix + n) for n in ("algorithm", "key", "key-md5"))
    if algo is None and key is None and md5 is None:
        return None
    arg = SSE if prefix == CUSTOMER else "x-amz-copy-source-server-side-encryption"
    if not secure and not allow_http:
        raise S3Error("InvalidRequest", _NOT_SECURE)
    if algo is None:
        raise S3Error("InvalidArgument", _NEED_ALGORITHM, ArgumentName=arg + "-customer-algorithm",
                      ArgumentValue="null")
    if algo != AES256:
        raise S3Error("InvalidEncryptionAlgorithmError", "The Encryption request you specified "
                      "is not valid. Supported value: AES256.",
                      ArgumentName=arg + "-customer-algorithm", ArgumentValue=algo[:64])
    if not key:
        raise S3Error("InvalidArgument", _NEED_KEY, ArgumentName=arg + "-customer-key",
                      ArgumentValue="null")
    if not md5:
        raise S3Error("InvalidArgument", _NEED_MD5, ArgumentName=arg + "-customer-key-MD5",
                      ArgumentValue="null")
    raw = _b64(key)
    if raw is None or len(raw) != KEY_BYTES:
        raise S3Error("InvalidArgument", _BAD_KEY, ArgumentName=arg + "-customer-key",
                      ArgumentValue="null")  # never the key itself, even a bad one
    want = _b64(md5)
    if want is None or not hmac.compare_digest(hashlib.md5(raw).digest(), want):
        raise S3Error("InvalidArgument", _MD5_MISMATCH, ArgumentName=arg,
                      ArgumentValue="null")
    return CustomerKey(raw, base64.b64encode(want).decode())


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_method(h: Mapping[str, str]) -> str:
    """x-amz-server-side-encryption of a write: "" or "AES256"; aws:kms* NotImplemented.
    x-amz-server-side-encryption-bucket-key-enabled only tunes KMS calls: a boolean, else
    InvalidArgument; with no KMS here it changes nothing."""
    bucket_key = _header(h, SSE_BUCKET_KEY)
    if bucket_key is not None and bucket_key.strip().lower() not in ("true", "false"):
        raise S3Error("InvalidArgument", "x-amz-server-side-encryption-bucket-key-enabled must "
                      "be true or false", ArgumentName=SSE_BUCKET_KEY,
                      ArgumentValue=bucket_key[:64])
    v = _header(h, SSE)
    if v is None:
        if _header(h, SSE_KMS_KEY) is not None or _header(h, SSE_KMS_CONTEXT) is not None:
            raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key "
                          "requires HTTP header x-amz-server-side-encryption : aws:kms",
                          ArgumentName=SSE, ArgumentValue="null")
        return ""
    if v == AES256:
        if _header(h, SSE_KMS_KEY) is not None:
            raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key "
                          "requires HTTP header x-amz-server-side-encryption : aws:kms",
                          ArgumentName=SSE, ArgumentValue=v)
        return AES256
    if v in KMS_VALUES:
        raise S3Error("NotImplemented", "Server-side encryption with AWS KMS keys is not "
                      "available: no KMS is configured on this server.")
    raise S3Error("InvalidArgument", "The encryption method specified is not supported",
                  ArgumentName=SSE, ArgumentValue=v[:64])


def parse_target(h: Mapping[str, str], *, secure: bool, allow_http: bool) -> Target:
    """The encryption a write asks for. Both SSE-S3 and SSE-C: InvalidArgument."""
    method = parse_method(h)
    customer = parse_customer_key(h, secure=secure, allow_http=allow_http)
    if customer is not None and method:
        raise S3Error("InvalidArgument", "Server Side Encryption with Customer provided key is "
                      "incompatible with the encryption method specified",
                      ArgumentName=SSE, ArgumentValue=method)
    if customer is not None:
        return Target("SSE-C", customer)
    return Target(method)


def refuse_method_on_read(h: Mapping[str, str]) -> None:
    """GET/HEAD take no x-amz-server-side-encryption header (S3: 400 InvalidArgument)."""
    v = _header(h, SSE)
    if v is not None:
        raise S3Error("InvalidArgument", "x-amz-server-side-encryption header is not supported "
                      "for this operation.", ArgumentName=SSE, ArgumentValue=v[:64])


def response_headers(mode: str, customer: CustomerKey | None = None) -> dict[str, str]:
    """The SSE headers of an answer about an object stored with `mode`."""
    if mode == AES256:
        return {SSE: AES256}
    if mode == "SSE-C" and customer is not None:
        return customer.headers()
    return {}
