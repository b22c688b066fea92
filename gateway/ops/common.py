"""What every S3 operation handler shares: the parsed request, XML and header helpers, limits."""

from __future__ import annotations

import base64
import email.errors
import email.header
import email.utils
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from starlette.requests import Request
from starlette.responses import Response

from gateway.ops.access import authorize
from gateway.s3 import checksums
from gateway.s3.auth import RequestBody
from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, uint_arg
from gateway.store.storage import coalesce

if TYPE_CHECKING:
    from gateway.server.app import Gateway

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MiB = 1024 * 1024
MAX_PART_SIZE = 5 * 1024 * MiB
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000
MAX_KEY_BYTES = 1024
MAX_USER_META = 2048
MAX_DELETE_KEYS = 1000

# Standard object headers stored with an object and returned on GET/HEAD.
STORED_HEADERS = ("content-type", "content-encoding", "content-disposition", "content-language",
                  "cache-control", "expires")
HEADER_CASE = {"content-type": "Content-Type", "content-encoding": "Content-Encoding",
               "content-disposition": "Content-Disposition",
               "content-language": "Content-Language", "cache-control": "Cache-Control",
               "expires": "Expires"}


@dataclass
class S3Request:
    """One parsed S3 request: who, which bucket/key, the raw query, and the body stream."""

    request: Request
    gw: Gateway
    request_id: str
    bucket: str
    key: str
    query: dict[str, str]
    user: str = ""
    auth: Any = None          # gateway.s3.auth.AuthResult once authenticated
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def headers(self) -> Any:
        return self.request.headers

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def resource(self) -> str:
        return "/" + self.bucket + ("/" + self.key if self.key else "") if self.bucket else "/"


def seen_configs(req: S3Request, bucket: str) -> dict[str, str] | None:
    """The bucket's configuration documents as this request's access check read them (None
    if it read none for that bucket): reused so that a GET does not read them again."""
    return (req.extra.get("configs") or {}).get(bucket)


async def bucket_config(req: S3Request, bucket: str, kind: str) -> str | None:
    """One configuration document of the bucket: from the access check's read, else the
    store."""
    seen = seen_configs(req, bucket)
    if seen is not None:
        return seen.get(kind)
    return await req.gw.store.get_bucket_config(bucket, kind)


def new_request_id() -> str:
    return uuid.uuid4().hex[:16].upper()


def xml_response(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = '<?xml version="1.0" encoding="UTF-8"?>\n' + body
    return Response(data.encode("utf-8"), status_code=status, headers=headers,
                    media_type="application/xml")


def x(value: Any) -> str:
    """Escape a text value for XML."""
    return escape(str(value))


def el(name: str, value: Any) -> str:
    return f"<{name}>{x(value)}</{name}>"


@lru_cache(maxsize=4096)
def _iso_seconds(sec: int) -> str:
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


def iso8601(ts: float) -> str:
    # The whole-second part cached: a listing page formats 1000 of these, mostly a few seconds
    # apart, and datetime + strftime was the biggest cost of rendering a page.
    sec = int(ts // 1)
    return f"{_iso_seconds(sec)}{int((ts - sec) * 1000):03d}Z"


def http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def parse_http_date(text: str | None) -> float | None:
    if not text:
        return None
    try:
        dt = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def quote_etag(etag: str) -> str:
    return f'"{etag}"'


def strip_etag(text: str) -> str:
    t = text.strip()
    if t.startswith("W/"):
        t = t[2:]
    return t.strip('"')


def owner_xml(name: str, tag: str = "Owner") -> str:
    """An Owner (Initiator...) element: the user's canonical id and display name."""
    from gateway.access.identity import canonical_id
    return f"<{tag}><ID>{canonical_id(name)}</ID><DisplayName>{x(name)}</DisplayName></{tag}>"


def now() -> float:
    return time.time()


def stored_headers(req: S3Request) -> dict[str, str]:
    """Standard headers to keep with an object. aws-chunked is a transfer detail: dropped."""
    out: dict[str, str] = {}
    for h in STORED_HEADERS:
        v = req.headers.get(h)
        if v is None:
            continue
        if h == "content-encoding":
            parts = [p.strip() for p in v.split(",") if p.strip()]
            if any(p.lower() == "aws-chunked" for p in parts):
                parts = [p for p in parts if p.lower() != "aws-chunked"]
                if not parts:
                    continue
                v = ", ".join(parts)
            # else kept exactly as sent ("deflate, gzip" stays so), as S3 does
        out[HEADER_CASE[h]] = v
    out.setdefault("Content-Type", "binary/octet-stream")
    return out


def meta_value_in(value: str) -> str:
    """An x-amz-meta-* value as received -> the text stored. As S3: UTF-8 bytes are taken as
    UTF-8 (other bytes as latin-1) and RFC 2047 encoded-words (`=?UTF-8?B?...?=`) decoded."""
    if not value.isascii():
        raw = value.encode("latin-1", "replace")
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if "=?" in value:
        try:
            value = str(email.header.make_header(email.header.decode_header(value)))
        except (LookupError, ValueError, UnicodeError, email.errors.HeaderParseError):
            pass  # not a well-formed encoded-word: kept as sent
    return value


def meta_value_out(value: str) -> str:
    """The stored text as a header value: US-ASCII as is, anything else RFC 2047 encoded, as
    S3 returns it (HTTP header values are not UTF-8 text)."""
    if value.isascii() and "\r" not in value and "\n" not in value:
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8", "replace")).decode() + "?="


def user_metadata(req: S3Request) -> dict[str, str]:
    meta: dict[str, str] = {}
    size = 0
    for name, value in req.headers.items():
        if name.lower().startswith("x-amz-meta-"):
            value = meta_value_in(value)
            k = name[11:].lower()
            meta[k] = value if k not in meta else meta[k] + "," + value
            size += len(k.encode()) + len(value.encode())
    if size > MAX_USER_META:
        raise S3Error("MetadataTooLarge", Size=str(size), MaxSizeAllowed=str(MAX_USER_META))
    return meta


def object_headers(headers: dict[str, str], user_meta: dict[str, str]) -> dict[str, str]:
    out = dict(headers)
    for k, v in user_meta.items():
        out["x-amz-meta-" + k] = meta_value_out(v)
    return out


def check_key(key: str) -> None:
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", Size=str(len(key.encode("utf-8", "surrogatepass"))),
                      MaxSizeAllowed=str(MAX_KEY_BYTES))


def int_arg(req: S3Request, name: str, default: int, *, lo: int = 0,
            hi: int | None = None) -> int:
    """A numeric query parameter (max-keys, max-parts, part-number-marker, ...): `[0-9]+` in
    lo..2147483647 (InvalidArgument otherwise), then capped at `hi`."""
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    v = uint_arg(raw, name, lo=lo, hi=INT32_MAX)
    if hi is not None:
        v = min(v, hi)
    return v


def requested_checksum_algorithm(name: str) -> str:
    """The algorithm a client asks for on CreateMultipartUpload / CopyObject, normalised; S3
    answers an unknown one with this InvalidRequest message on those operations."""
    try:
        return checksums.normalize_algorithm(name)
    except (ValueError, KeyError, S3Error):
        raise S3Error("InvalidRequest", "Checksum algorithm provided is unsupported.") from None


async def require_bucket(req: S3Request, got: tuple[Any, dict[str, str]] | None = None) -> Any:
    """The request's bucket record, once the request may do its action there (policy, ACL,
    ownership: gateway/ops/access.py); NoSuchBucket / AccessDenied as S3 answers. `got`: the
    bucket and its configs already read (store.read_for_get)."""
    # Both in one read (one statement on PostgreSQL: each round trip is a wait for the
    # server's process to be scheduled on a busy machine).
    b, configs = got if got is not None else await req.gw.store.bucket_and_configs(req.bucket)
    if b is None:
        raise S3Error("NoSuchBucket", resource="/" + req.bucket, BucketName=req.bucket)
    # kept for bucket_access and the handler (versioning state, lifecycle rules): one read
    req.extra.setdefault("configs", {})[b.name] = configs
    await authorize(req, b)
    return b


def request_body(req: S3Request, *, max_size: int, checksum_algorithm: str | None = None,
                 md5: bool = True) -> RequestBody:
    """The decoded, verified payload (aws-chunked undone; length, SHA-256, Content-MD5 and
    checksums checked as it ends). The raw stream is coalesced to ~1 MiB first so hashing
    runs in a worker thread beside the erasure coding. A plain body (no aws-chunked framing)
    is asked of the HTTP protocol as whole segments read straight from the socket
    (gateway/server/httpproto.py, `zonegate.segments`): no copy before the encoder's."""
    wanted = req.request.scope.get("extensions", {}).get("zonegate.segments")
    if wanted is not None and not req.auth.streaming:
        wanted()
    body = RequestBody(req.auth, req.headers, coalesce(req.request.stream()), md5=md5,
                       checksum_algorithm=checksum_algorithm or None, max_size=max_size)
    return body


async def read_small_body(req: S3Request, limit: int = 4 * MiB,
                          object_checksum: bool = False) -> bytes:
    """A whole small request body (XML documents), verified; MaxMessageLengthExceeded
    past limit. object_checksum: the x-amz-checksum-* headers describe the object being made
    (CompleteMultipartUpload), not this body: the caller checks them."""
    chunks: list[bytes] = []
    n = 0
    headers: Any = req.headers
    if object_checksum:
        headers = [(k, v) for k, v in req.headers.items()
                   if checksums.algorithm_from_header(k) is None
                   and k.lower() not in ("x-amz-sdk-checksum-algorithm", "x-amz-checksum-type")]
        headers = _Pairs(headers)
    body = RequestBody(req.auth, headers, req.request.stream(), md5=False)
    async for chunk in body:
        n += len(chunk)
        if n > limit:
            raise S3Error("MaxMessageLengthExceeded")
        chunks.append(chunk)
    return b"".join(chunks)


class _Pairs:
    """Header pairs with the `.items()` and `.get()` of a headers mapping (names repeat)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def get(self, name: str, default: Any = None) -> Any:
        for k, v in self._pairs:
            if k.lower() == name.lower():
                return v
        return default


def parse_xml(data: bytes) -> Any:
    """Parse an untrusted XML document (xmlio.parse_untrusted: defusedxml, any failure is
    MalformedXML), dropping namespaces."""
    from gateway.s3.xmlio import parse_untrusted
    root = parse_untrusted(data)
    for e in root.iter():
        if isinstance(e.tag, str) and "}" in e.tag:
            e.tag = e.tag.split("}", 1)[1]
    return root


def notify_sweeper(req: S3Request) -> None:
    """Freed layouts were queued in the commit: delete them now rather than at the next tick."""
    req.gw.kick_sweeper()
