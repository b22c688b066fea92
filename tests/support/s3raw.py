"""Hand-built S3 requests for tests that send what a client library would not: signed with
botocore's own signers (SigV4 header and presigned, SigV2 header and query), sent over
http.client with any Host header, path bytes and body, always with a client timeout.

`Creds(port, access_key, secret_key)` says where and as whom; tests/support/gwcluster.Gateway and
tests/support/devcluster.DevCluster both give one (`creds_of`).
"""

from __future__ import annotations

import http.client
import urllib.parse
from dataclasses import dataclass

import defusedxml.ElementTree as ET
from botocore.auth import HmacV1Auth, HmacV1QueryAuth, S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

REGION = "us-east-1"


@dataclass(frozen=True)
class Creds:
    port: int
    access_key: str
    secret_key: str

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.access_key, self.secret_key)


def creds_of(cluster, access_key: str, secret_key: str) -> Creds:
    return Creds(cluster.port, access_key, secret_key)


class _V4(S3SigV4Auth):
    """botocore's S3 signer, able to sign a chosen payload hash (UNSIGNED-PAYLOAD, a
    STREAMING-* mode, or the hash of a body other than the one that will be sent)."""

    def payload(self, request):
        return request.context.get("payload_hash") or super().payload(request)


def _request(c: Creds, method: str, target: str, host: str | None, body: bytes,
             headers: dict[str, str] | None) -> AWSRequest:
    host = host or f"127.0.0.1:{c.port}"
    req = AWSRequest(method=method, url=f"http://{host}{target}", data=body,
                     headers=dict(headers or {}))
    req.headers["Host"] = host
    return req


def sign_v4(c: Creds, method: str, target: str, *, body: bytes = b"",
            headers: dict[str, str] | None = None, host: str | None = None,
            payload_hash: str | None = None) -> dict[str, str]:
    """SigV4 Authorization-header request headers (Host included) for `target` (path and
    query, as sent)."""
    req = _request(c, method, target, host, body, headers)
    if payload_hash:
        req.context["payload_hash"] = payload_hash
    _V4(c.credentials, "s3", REGION).add_auth(req)
    return dict(req.headers.items())


def presign_v4(c: Creds, method: str, target: str, *, expires: int = 300,
               headers: dict[str, str] | None = None, host: str | None = None) -> str:
    """A SigV4 presigned target (path?query) as boto3 makes them (SignedHeaders=host plus
    the headers given)."""
    req = _request(c, method, target, host, b"", headers)
    S3SigV4QueryAuth(c.credentials, "s3", REGION, expires=expires).add_auth(req)
    u = urllib.parse.urlsplit(req.url)
    return u.path + "?" + u.query


def sign_v2(c: Creds, method: str, target: str, *, auth_path: str | None = None,
            headers: dict[str, str] | None = None, host: str | None = None) -> dict[str, str]:
    """SigV2 Authorization-header request headers. `auth_path` is the resource the signer
    means ("/bucket/key"); by default the target's path."""
    req = _request(c, method, target, host, b"", headers)
    if auth_path is not None:
        req.auth_path = auth_path
    HmacV1Auth(c.credentials).add_auth(req)
    return dict(req.headers.items())


def presign_v2(c: Creds, method: str, target: str, *, expires: int = 300,
               auth_path: str | None = None) -> str:
    """A SigV2 query-signed target (AWSAccessKeyId, Signature, Expires)."""
    req = _request(c, method, target, None, b"", None)
    if auth_path is not None:
        req.auth_path = auth_path
    HmacV1QueryAuth(c.credentials, expires=expires).add_auth(req)
    u = urllib.parse.urlsplit(req.url)
    return u.path + "?" + u.query


def presign_v2_at(c: Creds, method: str, target: str, expires_at: int | str) -> str:
    """A SigV2 query-signed target whose Expires is exactly `expires_at` (botocore's signer
    otherwise adds its own clock to a duration)."""

    class At(HmacV1QueryAuth):
        def _get_date(self) -> str:
            return str(expires_at)

    req = _request(c, method, target, None, b"", None)
    At(c.credentials, expires=0).add_auth(req)
    u = urllib.parse.urlsplit(req.url)
    return u.path + "?" + u.query


AUTH_FORMS = ("v4-header", "v4-query", "v2-header", "v2-query")
_PLACEHOLDER = "AKIDPLACEHOLDER00000"


def signed_as(c: Creds, form: str, access_key: bytes, method: str, target: str
              ) -> tuple[str, dict[str, str]]:
    """(target, headers) of a request signed in `form` (one of AUTH_FORMS) whose access key
    is the raw bytes `access_key`, which no signer would send: in a header as those bytes
    (http.client sends header text as latin-1), in a query percent-encoded byte by byte."""
    pc = Creds(c.port, _PLACEHOLDER, c.secret_key)
    if form in ("v4-header", "v2-header"):
        h = (sign_v4 if form == "v4-header" else sign_v2)(pc, method, target)
        h["Authorization"] = h["Authorization"].replace(_PLACEHOLDER,
                                                        access_key.decode("latin-1"))
        return target, h
    signed = (presign_v4 if form == "v4-query" else presign_v2)(pc, method, target)
    return signed.replace(_PLACEHOLDER, urllib.parse.quote_from_bytes(access_key, safe="")), {}


def send(c: Creds, method: str, target: str, headers: dict[str, str], body: bytes = b"",
         *, timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, the target and headers exactly as given (Host
    too, when present); a timeout is a failure, never a wait."""
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_host="host" in {k.lower() for k in headers},
                        skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if not any(k.lower() in ("content-length", "transfer-encoding") for k in headers):
            conn.putheader("Content-Length", str(len(body)))  # as http.client's request()
        conn.endheaders(body or None)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def error(body: bytes) -> dict[str, str]:
    """The fields of an S3 `<Error>` body."""
    root = ET.fromstring(body)
    assert root.tag == "Error", body
    return {child.tag: child.text or "" for child in root}


def code_of(status: int, body: bytes) -> tuple[int, str]:
    """(status, S3 error code) of an answer ("" when the body is not an error)."""
    try:
        return status, error(body)["Code"]
    except Exception:
        return status, ""
