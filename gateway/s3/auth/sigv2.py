"""AWS Signature Version 2 (HMAC-SHA1), still sent by older S3 tools.

Header form: `Authorization: AWS <access key>:<base64 signature>`; query form:
`?AWSAccessKeyId=..&Signature=..&Expires=<epoch seconds>`. The string to sign is
method, Content-MD5, Content-Type, Date (or Expires), the x-amz-* headers and the canonical
resource (the path as received, plus the sub-resources S3 signs). Payloads are unsigned.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from gateway.s3.auth.common import (
    UNSIGNED_PAYLOAD,
    AuthResult,
    Headers,
    Query,
    check_skew,
    first,
    lower_headers,
    parse_http_date,
    shown_text,
    signed_bytes,
    signed_readings,
)
from gateway.s3.auth.credentials import CredentialLookup
from gateway.s3.errors import S3Error
from gateway.s3.numbers import parse_uint

MAX_EXPIRES = 253402300799  # 9999-12-31T23:59:59Z, the last second time.strftime shows

# Query parameters that are part of the SigV2 canonical resource (botocore's list, plus the
# response-* overrides S3 documents).
SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "inventory",
    "lifecycle", "location", "logging", "metrics", "notification", "object-lock", "partNumber",
    "policy", "replication", "requestPayment", "restore", "select", "select-type",
    "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning",
    "versions", "website",
    "response-cache-control", "response-content-disposition", "response-content-encoding",
    "response-content-language", "response-content-type", "response-expires",
})


def _path_str(raw_path: str | bytes) -> str:
    if isinstance(raw_path, bytes):
        return raw_path.decode("utf-8", "replace")
    return raw_path


def canonical_resource(raw_path: str | bytes, query: Query, resource_prefix: str = "") -> str:
    """Path as received (with `resource_prefix`, e.g. "/bucket" for virtual-hosted requests)
    plus the signed sub-resources, sorted by name, `name` or `name=value` (decoded)."""
    subs = sorted(((k, v) for k, v in query if k in SUBRESOURCES), key=lambda kv: kv[0])
    out = resource_prefix + (_path_str(raw_path) or "/")
    if subs:
        out += "?" + "&".join(f"{k}={v}" if v else k for k, v in subs)
    return out


def _resources(raw_path: str | bytes, query: Query, resource_prefix: str) -> list[str]:
    # A bucket is "/bucket/" in the canonical resource (AWS's rule, and what botocore signs)
    # even when the request line says "/bucket"; tools that sign "/bucket" are accepted too.
    raw = _path_str(raw_path)
    first_try = canonical_resource(raw, query, resource_prefix)
    path = resource_prefix + (raw or "/")
    if path.count("/") == 1 and len(path) > 1:
        return [canonical_resource(raw + "/", query, resource_prefix), first_try]
    return [first_try]


def canonical_amz_headers(h: dict[str, list[str]]) -> str:
    return "".join(
        f"{name}:{','.join(v.strip() for v in h[name])}\n"
        for name in sorted(h)
        if name.startswith("x-amz-")
    )


def string_to_sign(method: str, h: dict[str, list[str]], date_line: str, resource: str) -> str:
    return (
        f"{method.upper()}\n{(first(h, 'content-md5') or '').strip()}\n"
        f"{(first(h, 'content-type') or '').strip()}\n{date_line}\n"
        f"{canonical_amz_headers(h)}{resource}"
    )


def sign(secret: str, sts: str) -> str:
    mac = hmac.new(secret.encode("utf-8"), signed_bytes(sts), hashlib.sha1).digest()
    return base64.b64encode(mac).decode("ascii")


def _equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def verify_header(
    method: str,
    raw_path: str | bytes,
    query: Query,
    headers: Headers,
    lookup: CredentialLookup,
    *,
    now: float | None = None,
    resource_prefix: str = "",
) -> AuthResult:
    """Verify `Authorization: AWS key:signature`."""
    now = time.time() if now is None else now
    h = lower_headers(headers)
    value = (first(h, "authorization") or "").strip()
    if not value.startswith("AWS ") or ":" not in value:
        raise S3Error("AuthorizationHeaderMalformed",
                      "The authorization header is malformed; expecting \"AWS key:signature\".")
    access_key, _, sig = value[4:].strip().rpartition(":")
    if not access_key or not sig:
        raise S3Error("AuthorizationHeaderMalformed",
                      "The authorization header is malformed; expecting \"AWS key:signature\".")
    found = lookup(access_key)
    if found is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    user, secret = found
    date = first(h, "date")
    amz_date = first(h, "x-amz-date")
    try:
        request_time = parse_http_date(amz_date if amz_date is not None else (date or ""))
        if request_time < 0:
            raise ValueError("before the epoch")  # S3: AccessDenied, not a clock skew
    except (ValueError, OverflowError):
        raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date "
                                      "header") from None
    check_skew(request_time, now)
    # With x-amz-date present, AWS signs an empty Date line; some clients sign the Date
    # header anyway. Both are the signer's own statement, so either is accepted.
    date_lines = [(date or "").strip()]
    if amz_date is not None and date_lines[0] != "":
        date_lines.append("")
    sts = ""
    for reading in signed_readings(h):
        for resource in _resources(raw_path, query, resource_prefix):
            for date_line in date_lines:
                sts = sts or string_to_sign(method, reading, date_line, resource)
                if _equal(sign(secret, string_to_sign(method, reading, date_line, resource)),
                          sig):
                    return AuthResult(user=user, access_key=access_key, method="v2-header",
                                      content_sha256=UNSIGNED_PAYLOAD, signature=sig)
    raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=shown_text(sts),
                  SignatureProvided=sig)


def verify_query(
    method: str,
    raw_path: str | bytes,
    query: Query,
    headers: Headers,
    lookup: CredentialLookup,
    *,
    now: float | None = None,
    resource_prefix: str = "",
) -> AuthResult:
    """Verify a SigV2 presigned URL (`AWSAccessKeyId`, `Signature`, `Expires`)."""
    now = time.time() if now is None else now
    query = list(query)
    q: dict[str, str] = {}
    for k, v in query:
        q.setdefault(k, v)
    access_key, sig, expires_s = q.get("AWSAccessKeyId"), q.get("Signature"), q.get("Expires")
    if not access_key or not sig or not expires_s:
        raise S3Error("AccessDenied", "Query-string authentication requires the Signature, "
                                      "Expires and AWSAccessKeyId parameters")
    # A raw '+' in a base64 signature arrives as a space after form decoding.
    sig = sig.replace(" ", "+")
    try:
        # `[0-9]+`, at most the year 9999: a negative, 5,000-digit or far-future Expires is a
        # 403 before any signature check (never an OverflowError, a 500, in the date
        # formatting; never a URL that stays valid forever).
        expires = parse_uint(expires_s, hi=MAX_EXPIRES)
    except ValueError:
        raise S3Error("AccessDenied", "Expires must be a number of seconds since the epoch, "
                                      "before the year 10000") from None
    found = lookup(access_key)
    if found is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    user, secret = found
    if now > expires:
        raise S3Error("AccessDenied", "Request has expired", Expires=time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)), ServerTime=time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    h = lower_headers(headers)
    sts = ""
    for reading in signed_readings(h):
        for resource in _resources(raw_path, query, resource_prefix):
            sts = sts or string_to_sign(method, reading, expires_s, resource)
            if _equal(sign(secret, string_to_sign(method, reading, expires_s, resource)), sig):
                return AuthResult(user=user, access_key=access_key, method="v2-query",
                                  content_sha256=UNSIGNED_PAYLOAD, signature=sig)
    raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=shown_text(sts),
                  SignatureProvided=sig)
