"""What an S3 request addresses: the bucket and key from (Host, raw path), path style or
virtual-host style (`bucket.<domain>`), and its query parameters. Pure parsing, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.requests import Request

from gateway.s3.errors import S3Error


def split_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class Target:
    """What a request addresses, from one parse of (Host, raw path): the resource that is
    verified (SigV2 signs "/bucket/key" whichever way the bucket was named) is then always
    the resource served."""

    bucket: str
    key: str
    virtual: bool      # the bucket came from the Host header (bucket.<domain>)
    raw_path: bytes    # the path as received, still percent-encoded, no query

    @property
    def resource_prefix(self) -> str:
        """What SigV2's canonical resource puts before the raw path."""
        return "/" + self.bucket if self.virtual else ""


def request_target(domains: Sequence[str], request: Request) -> Target:
    """The request's Target. Virtual-host style when Host is `<bucket>.<one of
    domains>` (the port ignored); otherwise path style, the bucket being the path's first
    segment up to its first `/`. A path that does not start with `/` or is not UTF-8 once
    decoded is InvalidURI."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    raw = raw.split(b"?", 1)[0]
    if not raw.startswith(b"/"):
        raise S3Error("InvalidURI")
    try:
        path = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI") from None
    host = split_host(request.headers.get("host", ""))
    for dom in domains:
        if host.endswith("." + dom) and len(host) > len(dom) + 1:
            return Target(host[: -len(dom) - 1], path[1:], True, raw)
    bucket, _, key = path[1:].partition("/")
    return Target(bucket, key, False, raw)


def parse_target(domains: Sequence[str], request: Request) -> tuple[str, str]:
    """(bucket, key) of `request_target`."""
    t = request_target(domains, request)
    return t.bucket, t.key


def parse_query_pairs(qs: bytes) -> list[tuple[str, str]]:
    try:
        return parse_qsl(qs.decode("latin-1"), keep_blank_values=True, encoding="utf-8",
                         errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise S3Error("InvalidURI") from None


def parse_query(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in parse_query_pairs(request.scope.get("query_string", b"")):
        out.setdefault(k, v)
    return out
