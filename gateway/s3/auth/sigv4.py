"""AWS Signature Version 4 for S3: the Authorization header and presigned URLs.

Inputs are framework-free: the method, the request path *as received* (still percent-encoded,
i.e. ASGI's `raw_path`), the decoded query pairs (`urllib.parse.parse_qsl(raw_query,
keep_blank_values=True)`), and the headers. The canonical request is rebuilt exactly as AWS
defines it for S3 (path decoded then URI-encoded once, no dot-segment normalisation; query
pairs encoded and sorted, empty values as `name=`; signed headers lowercased with whitespace
collapsed; the x-amz-content-sha256 value as the payload hash). Signatures are compared in
constant time.

Chunk and trailer signatures of aws-chunked bodies (`chunk_signature`, `trailer_signature`)
live here too so that the chunked decoder and tests share one implementation.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time
from urllib.parse import quote, unquote_to_bytes

from gateway.s3.auth.common import (
    MAX_SKEW_SECONDS,
    UNSIGNED_PAYLOAD,
    AuthResult,
    Headers,
    Query,
    check_content_sha256,
    check_skew,
    first,
    format_amz_date,
    iso_time,
    lower_headers,
    parse_amz_date,
    parse_http_date,
    shown_text,
    signed_bytes,
    signed_readings,
)
from gateway.s3.auth.credentials import CredentialLookup
from gateway.s3.errors import S3Error
from gateway.s3.numbers import parse_uint

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_HEX = frozenset("0123456789abcdef")


def canonical_uri(raw_path: str | bytes) -> str:
    """The canonical URI of an S3 request path as received (decode once, encode once).
    Bytes (ASGI `raw_path`) are taken as they are; a str is UTF-8 encoded first."""
    return quote(unquote_to_bytes(raw_path or b"/"), safe="/~")


def canonical_query(query: Query) -> str:
    """Canonical query string from decoded (name, value) pairs."""
    pairs = sorted((quote(signed_bytes(k), safe="-_.~"), quote(signed_bytes(v), safe="-_.~"))
                   for k, v in query)
    return "&".join(f"{k}={v}" for k, v in pairs)


def canonical_headers(h: dict[str, list[str]], signed: list[str]) -> str:
    """`name:value\\n` for each signed header; repeated headers joined by ','."""
    lines = []
    for name in signed:
        values = h.get(name, [])
        lines.append(name + ":" + ",".join(" ".join(v.split()) for v in values) + "\n")
    return "".join(lines)


def canonical_request(
    method: str,
    raw_path: str | bytes,
    query: Query,
    h: dict[str, list[str]],
    signed: list[str],
    payload_hash: str,
) -> str:
    return "\n".join(
        (
            method.upper(),
            canonical_uri(raw_path),
            canonical_query(query),
            canonical_headers(h, signed),
            ";".join(signed),
            payload_hash,
        )
    )


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join(
        (ALGORITHM, amz_date, scope, hashlib.sha256(signed_bytes(canonical)).hexdigest())
    )


@functools.lru_cache(maxsize=512)
def signing_key(secret: str, date: str, region: str, service: str = "s3") -> bytes:
    """kSigning = HMAC chain over date, region, service, "aws4_request" (cached per day)."""
    k = hmac.new(("AWS4" + secret).encode("utf-8"), date.encode("utf-8"), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):  # a region of invalid bytes: as sent
        k = hmac.new(k, signed_bytes(part), hashlib.sha256).digest()
    return k


def sign(key: bytes, sts: str) -> str:
    return hmac.new(key, signed_bytes(sts), hashlib.sha256).hexdigest()


def chunk_signature(
    key: bytes, amz_date: str, scope: str, previous: str, chunk_sha256_hex: str
) -> str:
    """Signature of one aws-chunked chunk, chained from the previous one (or the seed)."""
    sts = "\n".join(
        ("AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, EMPTY_SHA256, chunk_sha256_hex)
    )
    return sign(key, sts)


def canonical_trailers(trailers: list[tuple[str, str]]) -> bytes:
    """The signed form of trailing headers: `name:value\\n` each, names lowercased."""
    return "".join(f"{n.lower()}:{v.strip()}\n" for n, v in trailers).encode("utf-8")


def trailer_signature(
    key: bytes, amz_date: str, scope: str, previous: str, trailers: list[tuple[str, str]]
) -> str:
    """Signature of the trailing headers, chained from the final (empty) chunk's signature."""
    digest = hashlib.sha256(canonical_trailers(trailers)).hexdigest()
    sts = "\n".join(("AWS4-HMAC-SHA256-TRAILER", amz_date, scope, previous, digest))
    return sign(key, sts)


def signatures_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


# ---- parsing -----------------------------------------------------------------------------


def _parse_credential(value: str, err_code: str) -> tuple[str, str, str, str]:
    parts = value.split("/")
    if len(parts) != 5 or not parts[0]:
        raise S3Error(err_code, f"Error parsing the X-Amz-Credential parameter; the Credential "
                                f"is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/"
                                f"aws4_request\". Got {value!r}")
    access_key, date, region, service, terminator = parts
    if terminator != "aws4_request":
        raise S3Error(err_code, "Error parsing the X-Amz-Credential parameter; incorrect "
                                "terminal. This endpoint uses \"aws4_request\".")
    if service != "s3":
        raise S3Error(err_code, f"Error parsing the X-Amz-Credential parameter; incorrect "
                                f"service {service!r}. This endpoint belongs to \"s3\".")
    if len(date) != 8 or not (date.isascii() and date.isdigit()):
        raise S3Error(err_code, f"Error parsing the X-Amz-Credential parameter; incorrect date "
                                f"format {date!r}. This date in the credential must be in the "
                                f"format \"yyyyMMdd\".")
    if not region:
        raise S3Error(err_code, "Error parsing the X-Amz-Credential parameter; the region is "
                                "empty.")
    return access_key, date, region, service


def parse_authorization(value: str) -> tuple[str, list[str], str]:
    """`AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...` ->
    (credential, signed header names, signature). Malformed -> AuthorizationHeaderMalformed."""
    algo, _, rest = value.strip().partition(" ")
    if algo != ALGORITHM:
        raise S3Error("AuthorizationHeaderMalformed",
                      f"The authorization header is malformed; unsupported algorithm {algo!r}.")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, val = item.strip().partition("=")
        if not sep or name in fields:
            raise S3Error("AuthorizationHeaderMalformed",
                          f"The authorization header is malformed; bad component {item.strip()!r}.")
        fields[name] = val.strip()
    missing = [n for n in ("Credential", "SignedHeaders", "Signature") if not fields.get(n)]
    if missing or len(fields) != 3:
        raise S3Error("AuthorizationHeaderMalformed",
                      "The authorization header is malformed; it needs exactly Credential, "
                      "SignedHeaders and Signature.")
    return fields["Credential"], _parse_signed_headers(fields["SignedHeaders"],
                                                       "AuthorizationHeaderMalformed"), \
        fields["Signature"]


def _parse_signed_headers(value: str, err_code: str) -> list[str]:
    names = value.split(";")
    if any(not n or n != n.lower().strip() for n in names):
        raise S3Error(err_code, f"SignedHeaders must be lowercase names separated by ';': {value!r}")
    if "host" not in names:
        raise S3Error(err_code, "SignedHeaders must include host.")
    return names


def _check_signature_format(sig: str, err_code: str) -> None:
    if len(sig) != 64 or not set(sig) <= _HEX:
        raise S3Error(err_code, "The signature must be 64 lowercase hexadecimal characters.")


def _lookup(lookup: CredentialLookup, access_key: str) -> tuple[str, str]:
    found = lookup(access_key)
    if found is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    return found


def refuse_unsigned_amz_headers(h: dict[str, list[str]], signed: list[str]) -> None:
    """AccessDenied when an x-amz-* header is present that the signature does not cover, as
    AWS answers (header and presigned alike): such a header would change what the request
    does (x-amz-copy-source turns a PUT into a copy, x-amz-meta-* are stored) without the
    signer having asked for it."""
    signed_set = set(signed)
    unsigned = sorted(n for n in h if n.startswith("x-amz-") and n not in signed_set)
    if unsigned:
        raise S3Error("AccessDenied",
                      "There were headers present in the request which were not signed",
                      HeadersNotSigned=", ".join(unsigned)[:1024])


def _mismatch(access_key: str, sts: str, sig: str, canonical: str) -> S3Error:
    return S3Error(
        "SignatureDoesNotMatch",
        AWSAccessKeyId=access_key,
        StringToSign=sts,
        SignatureProvided=sig,
        CanonicalRequest=shown_text(canonical),
    )


# ---- verification ------------------------------------------------------------------------


def verify_header(
    method: str,
    raw_path: str | bytes,
    query: Query,
    headers: Headers,
    lookup: CredentialLookup,
    *,
    now: float | None = None,
) -> AuthResult:
    """Verify a request signed with SigV4 in the Authorization header.

    Raises S3Error: AuthorizationHeaderMalformed, InvalidAccessKeyId, AccessDenied (no date,
    unsigned x-amz-* headers), RequestTimeTooSkewed, InvalidRequest (no x-amz-content-sha256),
    InvalidArgument (bad x-amz-content-sha256), SignatureDoesNotMatch.
    """
    now = time.time() if now is None else now
    h = lower_headers(headers)
    credential, signed, sig = parse_authorization(first(h, "authorization") or "")
    access_key, cred_date, region, service = _parse_credential(
        credential, "AuthorizationHeaderMalformed")
    _check_signature_format(sig, "AuthorizationHeaderMalformed")
    amz_date = first(h, "x-amz-date")
    try:
        if amz_date is not None:
            request_time = parse_amz_date(amz_date)
        else:
            date = first(h, "date")
            if date is None:
                raise ValueError("no date")
            request_time = parse_http_date(date)
            amz_date = format_amz_date(request_time)
    except (ValueError, OverflowError):
        raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date "
                                      "header") from None
    if amz_date[:8] != cred_date:
        raise S3Error("AuthorizationHeaderMalformed",
                      f"Invalid credential date \"{cred_date}\". This date is not the same as "
                      f"X-Amz-Date: \"{amz_date[:8]}\".")
    user, secret = _lookup(lookup, access_key)
    check_skew(request_time, now)
    content_sha256 = first(h, "x-amz-content-sha256")
    if content_sha256 is None:
        raise S3Error("InvalidRequest",
                      "Missing required header for this request: x-amz-content-sha256")
    content_sha256 = check_content_sha256(content_sha256)
    refuse_unsigned_amz_headers(h, signed)
    scope = f"{cred_date}/{region}/{service}/aws4_request"
    key = signing_key(secret, cred_date, region, service)
    first_try: tuple[str, str] | None = None
    for reading in signed_readings(h):
        canonical = canonical_request(method, raw_path, query, reading, signed,
                                      first(h, "x-amz-content-sha256") or "")
        sts = string_to_sign(amz_date, scope, canonical)
        first_try = first_try or (sts, canonical)
        if signatures_equal(sign(key, sts), sig):
            break
    else:
        assert first_try is not None
        raise _mismatch(access_key, first_try[0], sig, first_try[1])
    return AuthResult(
        user=user, access_key=access_key, method="v4-header", content_sha256=content_sha256,
        signature=sig, signing_key=key, scope=scope, amz_date=amz_date, region=region,
    )


def verify_presigned(
    method: str,
    raw_path: str | bytes,
    query: Query,
    headers: Headers,
    lookup: CredentialLookup,
    *,
    now: float | None = None,
) -> AuthResult:
    """Verify a SigV4 presigned URL (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date,
    X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature in the query).

    X-Amz-Expires must be 0..604800 (7 days), else AccessDenied; past it -> AccessDenied
    "Request has expired".
    An x-amz-* header the URL did not sign -> AccessDenied, as for the header form.
    The payload is UNSIGNED-PAYLOAD unless the URL (or a signed header) fixes
    x-amz-content-sha256.
    """
    now = time.time() if now is None else now
    query = list(query)
    q: dict[str, str] = {}
    for k, v in query:
        q.setdefault(k, v)
    err = "AuthorizationQueryParametersError"
    needed = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
              "X-Amz-SignedHeaders", "X-Amz-Signature")
    if any(not q.get(n) for n in needed):
        raise S3Error(err, "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                           "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                           "and X-Amz-Expires parameters.")
    if q["X-Amz-Algorithm"] != ALGORITHM:
        raise S3Error(err, "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
    access_key, cred_date, region, service = _parse_credential(q["X-Amz-Credential"], err)
    sig = q["X-Amz-Signature"]
    _check_signature_format(sig, err)
    signed = _parse_signed_headers(q["X-Amz-SignedHeaders"], err)
    amz_date = q["X-Amz-Date"]
    try:
        request_time = parse_amz_date(amz_date)
    except (ValueError, OverflowError):
        raise S3Error(err, "X-Amz-Date must be in the ISO8601 Long Format "
                           "\"yyyyMMdd'T'HHmmss'Z'\"") from None
    expires_s = q["X-Amz-Expires"]
    # Out of range is a 403 AccessDenied (with S3's wording), as for an expired URL.
    if expires_s.startswith("-") and expires_s[1:].isascii() and expires_s[1:].isdigit():
        raise S3Error("AccessDenied", "X-Amz-Expires must be non-negative")
    try:
        # Saturated: any count of digits past a week is "more than a week", never a 500.
        expires = parse_uint(expires_s, hi=MAX_PRESIGN_EXPIRES + 1, saturate=True)
    except ValueError:
        raise S3Error("AccessDenied", "X-Amz-Expires should be a number") from None
    if expires > MAX_PRESIGN_EXPIRES:
        raise S3Error("AccessDenied",
                      "X-Amz-Expires must be less than a week (in seconds) that is 604800")
    if amz_date[:8] != cred_date:
        raise S3Error(err, f"Invalid credential date \"{cred_date}\". This date is not the same "
                           f"as X-Amz-Date: \"{amz_date[:8]}\".")
    user, secret = _lookup(lookup, access_key)
    if request_time - now > MAX_SKEW_SECONDS:
        raise S3Error("AccessDenied", "Request is not valid yet")
    if now > request_time + expires:
        raise S3Error(
            "AccessDenied", "Request has expired", **{
                "X-Amz-Expires": str(expires),
                "Expires": iso_time(request_time + expires),
                "ServerTime": iso_time(now),
            })
    h = lower_headers(headers)
    refuse_unsigned_amz_headers(h, signed)
    payload = q.get("X-Amz-Content-Sha256")
    if payload is None and "x-amz-content-sha256" in signed:
        payload = first(h, "x-amz-content-sha256")
    payload = check_content_sha256(payload) if payload is not None else UNSIGNED_PAYLOAD
    scope = f"{cred_date}/{region}/{service}/aws4_request"
    key = signing_key(secret, cred_date, region, service)
    first_try: tuple[str, str] | None = None
    for reading in signed_readings(h):
        canonical = canonical_request(
            method, raw_path, [(k, v) for k, v in query if k != "X-Amz-Signature"], reading,
            signed, payload)
        sts = string_to_sign(amz_date, scope, canonical)
        first_try = first_try or (sts, canonical)
        if signatures_equal(sign(key, sts), sig):
            break
    else:
        assert first_try is not None
        raise _mismatch(access_key, first_try[0], sig, first_try[1])
    return AuthResult(
        user=user, access_key=access_key, method="v4-query", content_sha256=payload,
        signature=sig, signing_key=key, scope=scope, amz_date=amz_date, region=region,
    )
