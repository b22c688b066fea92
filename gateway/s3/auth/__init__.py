"""S3 request authentication: SigV4 (header, presigned), SigV2 (header, query), and the
verified, decoded request body.

Entry points for the app:

    from gateway.s3.auth import authenticate, RequestBody, StaticCredentials
    auth = authenticate(method, raw_path, query_pairs, headers, lookup)   # raises S3Error
    body = RequestBody(auth, headers, request.stream())                   # async iterator

`raw_path` is the path as received (percent-encoded): ASGI's `scope["raw_path"]` bytes as they
are; `query_pairs` are the decoded pairs of the raw query string
(`parse_query(scope["query_string"])`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from gateway.s3.auth import sigv2, sigv4
from gateway.s3.auth.chunked import AwsChunkedDecoder
from gateway.s3.auth.common import (
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    AuthResult,
    Headers,
    Query,
    first,
    lower_headers,
)
from gateway.s3.auth.credentials import CredentialLookup, StaticCredentials
from gateway.s3.auth.payload import RequestBody, stored_content_encoding
from gateway.s3.errors import S3Error

__all__ = [
    "STREAMING_SIGNED", "STREAMING_SIGNED_TRAILER", "STREAMING_UNSIGNED_TRAILER",
    "UNSIGNED_PAYLOAD", "AuthResult", "AwsChunkedDecoder", "CredentialLookup", "RequestBody",
    "StaticCredentials", "authenticate", "parse_query", "stored_content_encoding",
]


def parse_query(raw_query: str | bytes) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs of a raw query string, blank values kept (`?uploads`).
    Bytes that are not UTF-8 are kept as surrogate escapes (as header values are, see
    common.wire_text): a signature is checked over the bytes sent, and an access key made of
    them is an unknown key, not one that collides with its U+FFFD-replaced reading."""
    if isinstance(raw_query, bytes):
        raw_query = raw_query.decode("latin-1")
    return parse_qsl(raw_query, keep_blank_values=True, errors="surrogateescape")


def authenticate(
    method: str,
    raw_path: str | bytes,
    query: Query,
    headers: Headers,
    lookup: CredentialLookup,
    *,
    now: float | None = None,
    allow_anonymous: bool = False,
    resource_prefix: str = "",
) -> AuthResult:
    """Authenticate one request by whichever scheme it uses.

    Raises S3Error (AccessDenied for an anonymous request unless `allow_anonymous`, in which
    case an AuthResult with user None is returned). `resource_prefix` ("/bucket") is needed only
    for SigV2 on virtual-hosted-style requests. `now` (epoch seconds) is for tests.
    """
    query = list(query)
    h = lower_headers(headers)
    authz = (first(h, "authorization") or "").strip()
    names = {k for k, _ in query}
    v4_query = "X-Amz-Algorithm" in names or "X-Amz-Signature" in names
    v2_query = "AWSAccessKeyId" in names and "Signature" in names
    if authz and (v4_query or v2_query):
        raise S3Error("InvalidArgument", "Only one auth mechanism allowed; only the "
                                         "X-Amz-Algorithm query parameter, Signature query "
                                         "string parameter or the Authorization header should "
                                         "be specified", ArgumentName="Authorization")
    if authz.startswith("AWS4-"):
        return sigv4.verify_header(method, raw_path, query, headers, lookup, now=now)
    if authz.startswith("AWS "):
        return sigv2.verify_header(method, raw_path, query, headers, lookup, now=now,
                                   resource_prefix=resource_prefix)
    if authz:
        raise S3Error("InvalidArgument", "Unsupported Authorization Type",
                      ArgumentName="Authorization", ArgumentValue=authz.split(" ", 1)[0])
    if v4_query:
        return sigv4.verify_presigned(method, raw_path, query, headers, lookup, now=now)
    if v2_query or "AWSAccessKeyId" in names:
        return sigv2.verify_query(method, raw_path, query, headers, lookup, now=now,
                                  resource_prefix=resource_prefix)
    if allow_anonymous:
        return AuthResult(user=None, access_key=None, method="anonymous")
    raise S3Error("AccessDenied")
