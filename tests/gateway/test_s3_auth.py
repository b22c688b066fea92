"""S3 request authentication: real botocore-signed requests verify; every tampering, clock
skew, expiry and malformed credential is refused with the S3 error a client expects.

Requests are produced by a real botocore client whose `before-send` hook captures the signed
request instead of sending it (no network), then fed to the verifier as the app would.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from urllib.parse import urlsplit

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from gateway.s3.auth import (
    RequestBody,
    StaticCredentials,
    authenticate,
    parse_query,
    stored_content_encoding,
)
from gateway.s3.auth.sigv4 import canonical_query, canonical_uri
from gateway.s3.errors import S3Error

AK, SK = "AKIDZONEGATETEST", "zonegate/secret+key/0123456789"
CREDS = StaticCredentials([("alice", AK, SK), ("bob", "AKIDBOB", "bobsecret")])


class _EmptyRaw:
    def stream(self, *args, **kwargs):
        return iter([b""])


class Captured:
    """A request as the gateway sees it: method, raw path, query pairs, headers, body."""

    def __init__(self, request) -> None:
        split = urlsplit(request.url)
        self.method = request.method
        self.path = split.path
        self.query = parse_query(split.query)
        self.headers: dict[str, str] = {}
        for k, v in request.headers.items():
            self.headers[k] = v.decode() if isinstance(v, bytes) else str(v)
        if not any(k.lower() == "host" for k in self.headers):
            self.headers["Host"] = split.netloc
        body = request.body
        if body is None:
            self.body = b""
        elif hasattr(body, "read"):
            self.body = body.read()
        else:
            self.body = bytes(body) if not isinstance(body, str) else body.encode()

    def auth(self, **kw):
        return authenticate(self.method, self.path, self.query, self.headers, CREDS, **kw)

    def with_header(self, name: str, value: str | None) -> Captured:
        c = object.__new__(Captured)
        c.__dict__.update(self.__dict__)
        c.headers = {k: v for k, v in self.headers.items() if k.lower() != name.lower()}
        if value is not None:
            c.headers[name] = value
        return c


_SESSION = botocore.session.get_session()  # one session: its loaded service models are reused


def make_client(endpoint: str = "http://127.0.0.1:9000", sigver: str = "s3v4",
                secret: str = SK, access_key: str = AK, region: str = "us-east-1"):
    return _SESSION.create_client(
        "s3", region_name=region, endpoint_url=endpoint, aws_access_key_id=access_key,
        aws_secret_access_key=secret,
        config=Config(signature_version=sigver, s3={"addressing_style": "path"},
                      retries={"max_attempts": 1}))


def capture(op: str, *, endpoint: str = "http://127.0.0.1:9000", sigver: str = "s3v4",
            secret: str = SK, access_key: str = AK, region: str = "us-east-1",
            **params) -> Captured:
    """Run one botocore operation up to the wire and return the signed request."""
    client = make_client(endpoint, sigver, secret, access_key, region)
    box: dict[str, object] = {}

    def before_send(request, **kwargs):
        box["request"] = request
        return AWSResponse(request.url, 200, {}, _EmptyRaw())

    client.meta.events.register("before-send.s3", before_send)
    try:
        getattr(client, op)(**params)
    except Exception:
        pass  # the fake empty response may not parse; the request is what we want
    return Captured(box["request"])


def presigned(op: str, params: dict, *, expires: int = 3600, sigver: str = "s3v4",
              secret: str = SK) -> Captured:
    url = make_client(sigver=sigver, secret=secret).generate_presigned_url(
        op, Params=params, ExpiresIn=expires)
    split = urlsplit(url)
    method = {"get_object": "GET", "put_object": "PUT", "head_object": "HEAD"}[op]
    c = object.__new__(Captured)
    c.method, c.path, c.query = method, split.path, parse_query(split.query)
    c.headers, c.body = {"Host": split.netloc}, b""
    return c


async def _aiter(data: bytes, piece: int = 7000):
    for i in range(0, len(data), piece):
        yield data[i:i + piece]


async def consume(body: RequestBody) -> bytes:
    out = bytearray()
    async for chunk in body:
        out += chunk
    return bytes(out)


def read_body(c: Captured, body: bytes | None = None, **kw) -> tuple[RequestBody, bytes]:
    auth = c.auth()
    rb = RequestBody(auth, c.headers, _aiter(c.body if body is None else body), **kw)
    return rb, asyncio.run(consume(rb))


ODD_KEY = "dir/a b+c~!é%.txt;=&?*'()[]"


# ---- SigV4 header ------------------------------------------------------------------------


@pytest.mark.parametrize("op,params", [
    ("list_buckets", {}),
    ("list_objects_v2", {"Bucket": "b", "Prefix": "a b/", "Delimiter": "/", "MaxKeys": 5,
                         "StartAfter": "x+y"}),
    ("list_objects", {"Bucket": "b", "Marker": "m=1&2"}),
    ("get_object", {"Bucket": "b", "Key": ODD_KEY, "Range": "bytes=0-9"}),
    ("head_object", {"Bucket": "b", "Key": "k", "IfNoneMatch": '"abc"'}),
    ("create_multipart_upload", {"Bucket": "b", "Key": ODD_KEY, "Metadata": {"a": "1 2"}}),
    ("list_parts", {"Bucket": "b", "Key": "k", "UploadId": "u/+=", "PartNumberMarker": 3}),
    ("delete_objects", {"Bucket": "b", "Delete": {"Objects": [{"Key": "a"}], "Quiet": True}}),
    ("copy_object", {"Bucket": "b", "Key": "dst", "CopySource": {"Bucket": "s", "Key": ODD_KEY}}),
    ("list_object_versions", {"Bucket": "b"}),
    ("get_bucket_location", {"Bucket": "b"}),
])
def test_botocore_sigv4_requests_verify(op, params):
    c = capture(op, **params)
    auth = c.auth()
    assert auth.user == "alice" and auth.access_key == AK and auth.method == "v4-header"
    assert auth.region == "us-east-1" and auth.scope.endswith("/us-east-1/s3/aws4_request")


def test_any_signing_region_is_accepted():
    auth = capture("list_buckets", region="eu-west-3").auth()
    assert auth.region == "eu-west-3"


def test_put_over_http_signs_the_payload_and_the_body_verifies():
    data = b"checkpoint shard " * 5000
    c = capture("put_object", Bucket="b", Key=ODD_KEY, Body=data)
    auth = c.auth()
    assert auth.payload_sha256 == hashlib.sha256(data).hexdigest()
    rb, out = read_body(c)
    assert out == data
    assert rb.etag == '"' + hashlib.md5(data).hexdigest() + '"'
    assert rb.checksum_algorithm == "CRC32" and rb.size == len(data)
    assert rb.checksum == c.headers["x-amz-checksum-crc32"]


def test_put_over_https_streams_aws_chunked_with_a_trailer_and_the_body_verifies():
    data = bytes(range(256)) * 9000  # > 2 MiB: several 1 MiB aws-chunks
    c = capture("put_object", endpoint="https://127.0.0.1:9443", Bucket="b", Key="k", Body=data,
                ContentEncoding="gzip")
    auth = c.auth()
    assert auth.content_sha256 == "STREAMING-UNSIGNED-PAYLOAD-TRAILER" and auth.streaming
    rb, out = read_body(c)
    assert out == data and rb.size == len(data)
    assert rb.trailers == {"x-amz-checksum-crc32": rb.checksum}
    assert stored_content_encoding(c.headers) == "gzip"
    # a wrong trailer value stores nothing: the iteration fails at the end
    bad = c.body.replace(rb.checksum.encode(), b"AAAAAA==")
    with pytest.raises(S3Error) as e:
        read_body(c, bad)
    assert e.value.code == "BadDigest"
    assert e.value.message == "The CRC32 you specified did not match the calculated checksum."


def _flip(s: str) -> str:
    return s[:-1] + ("0" if s[-1] != "0" else "1")


def _tampered(c: Captured, what: str) -> Captured:
    t = object.__new__(Captured)
    t.__dict__.update(c.__dict__)
    t.headers = dict(c.headers)
    t.query = list(c.query)
    if what == "method":
        t.method = "DELETE"
    elif what == "path":
        t.path = c.path + "x"
    elif what == "query-value":
        t.query = [(k, v + "1") for k, v in c.query]
    elif what == "query-added":
        t.query = c.query + [("versionId", "1")]
    elif what == "host":
        t.headers["host"] = "evil.example:9000"
    elif what == "date":
        d = c.headers["X-Amz-Date"]
        t.headers["X-Amz-Date"] = d[:-3] + ("00Z" if d[-3:] != "00Z" else "01Z")
    elif what == "signed-header":
        t.headers["x-amz-sdk-checksum-algorithm"] = "CRC32C"
    elif what == "content-sha256":
        t.headers["x-amz-content-sha256"] = hashlib.sha256(b"other").hexdigest()
    elif what == "signature":
        t.headers["Authorization"] = _flip(c.headers["Authorization"])
    return t


@pytest.mark.parametrize("what", ["method", "path", "query-value", "query-added", "host", "date",
                                  "signed-header", "content-sha256", "signature"])
def test_tampering_with_any_signed_part_is_signature_does_not_match(what):
    c = capture("put_object", Bucket="b", Key="k", Body=b"x", ACL="private")
    if what.startswith("query"):
        c = capture("list_objects_v2", Bucket="b", Prefix="p")
    c.auth()
    with pytest.raises(S3Error) as e:
        _tampered(c, what).auth()
    assert e.value.code == "SignatureDoesNotMatch" and e.value.status == 403
    assert "CanonicalRequest" in e.value.extra


def test_wrong_secret_and_unknown_key():
    with pytest.raises(S3Error) as e:
        capture("list_buckets", secret="not-the-secret").auth()
    assert e.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error) as e:
        capture("list_buckets", access_key="AKIDNOBODY").auth()
    assert (e.value.code, e.value.status) == ("InvalidAccessKeyId", 403)


def test_unsigned_amz_header_is_refused():
    c = capture("put_object", Bucket="b", Key="k", Body=b"x")
    with pytest.raises(S3Error) as e:
        c.with_header("x-amz-meta-injected", "1").auth()
    assert e.value.code == "AccessDenied" and "not signed" in e.value.message


@pytest.mark.parametrize("offset,ok", [(-14 * 60, True), (14 * 60, True), (-16 * 60, False),
                                       (16 * 60, False), (86400, False)])
def test_clock_skew_beyond_15_minutes_is_request_time_too_skewed(offset, ok):
    c = capture("list_buckets")
    if ok:
        c.auth(now=time.time() + offset)
    else:
        with pytest.raises(S3Error) as e:
            c.auth(now=time.time() + offset)
        assert (e.value.code, e.value.status) == ("RequestTimeTooSkewed", 403)


def test_anonymous_is_denied_unless_allowed():
    with pytest.raises(S3Error) as e:
        authenticate("GET", "/b/k", [], {"Host": "x"}, CREDS)
    assert (e.value.code, e.value.status) == ("AccessDenied", 403)
    assert authenticate("GET", "/b/k", [], {}, CREDS, allow_anonymous=True).anonymous


@pytest.mark.parametrize("mutate,code", [
    (lambda a: a.replace("Credential=", "Credentials="), "AuthorizationHeaderMalformed"),
    (lambda a: a.replace("/s3/", "/ec2/"), "AuthorizationHeaderMalformed"),
    (lambda a: a.replace("aws4_request", "aws3_request"), "AuthorizationHeaderMalformed"),
    (lambda a: a.replace("SignedHeaders=host;", "SignedHeaders="), "AuthorizationHeaderMalformed"),
    (lambda a: a.split(", Signature=")[0], "AuthorizationHeaderMalformed"),
    (lambda a: a + "zz", "AuthorizationHeaderMalformed"),
    (lambda a: a.replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512"), "AuthorizationHeaderMalformed"),
    (lambda a: "Bearer abc", "InvalidArgument"),
])
def test_malformed_authorization_header(mutate, code):
    c = capture("list_buckets")
    with pytest.raises(S3Error) as e:
        c.with_header("Authorization", mutate(c.headers["Authorization"])).auth()
    assert e.value.code == code and e.value.status == 400


def test_credential_date_must_match_request_date():
    c = capture("list_buckets")
    d = c.headers["X-Amz-Date"]
    auth = c.headers["Authorization"].replace(f"/{d[:8]}/", "/20200101/")
    with pytest.raises(S3Error) as e:
        c.with_header("Authorization", auth).auth()
    assert e.value.code == "AuthorizationHeaderMalformed"


def test_missing_date_and_missing_content_sha256():
    c = capture("list_buckets")
    with pytest.raises(S3Error) as e:
        c.with_header("X-Amz-Date", None).auth()
    assert e.value.code == "AccessDenied"
    with pytest.raises(S3Error) as e:
        c.with_header("x-amz-content-sha256", None).auth()
    assert e.value.code == "InvalidRequest"
    with pytest.raises(S3Error) as e:
        c.with_header("x-amz-content-sha256", "NOT-A-HASH").auth()
    assert e.value.code == "InvalidArgument"


def test_header_and_query_auth_together_is_invalid_argument():
    c = capture("list_buckets")
    c.query = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256")]
    with pytest.raises(S3Error) as e:
        c.auth()
    assert e.value.code == "InvalidArgument"


# ---- payload verification ----------------------------------------------------------------


def test_body_not_matching_signed_sha256_fails_at_the_end():
    data = b"a" * 300_000
    c = capture("put_object", Bucket="b", Key="k", Body=data, ChecksumAlgorithm="SHA256")
    body = RequestBody(c.auth(), c.headers, _aiter(b"b" + data[1:]))
    got = []

    async def run():
        async for chunk in body:
            got.append(chunk)

    with pytest.raises(S3Error) as e:
        asyncio.run(run())
    assert (e.value.code, e.value.status) == ("XAmzContentSHA256Mismatch", 400)
    assert sum(map(len, got)) == len(data)  # streamed; the failure came at the end
    assert not body.complete


def test_content_md5_checked_bad_digest_and_invalid_digest():
    data = b"hello"
    good = base64.b64encode(hashlib.md5(data).digest()).decode()
    c = capture("put_object", Bucket="b", Key="k", Body=data, ContentMD5=good)
    rb, out = read_body(c)
    assert out == data and rb.md5_digest == hashlib.md5(data).digest()
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    c = capture("put_object", Bucket="b", Key="k", Body=data, ContentMD5=wrong)
    with pytest.raises(S3Error) as e:
        read_body(c)
    assert e.value.code == "BadDigest"
    c = capture("put_object", Bucket="b", Key="k", Body=data, ContentMD5="not-base64!")
    with pytest.raises(S3Error) as e:
        read_body(c)
    assert e.value.code == "InvalidDigest"


@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
def test_each_checksum_header_is_verified(algo):
    data = b"0123456789" * 1000
    c = capture("put_object", Bucket="b", Key="k", Body=data, ChecksumAlgorithm=algo)
    header = f"x-amz-checksum-{algo.lower()}"
    rb, out = read_body(c)
    assert rb.checksum == c.headers[header] and rb.checksum_algorithm == algo
    # the same headers with another body: signature is fine if payload is unsigned
    c2 = c.with_header(header, c.headers[header])
    with pytest.raises(S3Error) as e:
        RequestBodyRunner(c2, data[:-1] + b"x", unsigned=True)
    assert e.value.code == "BadDigest"
    assert e.value.message == f"The {algo} you specified did not match the calculated checksum."


def RequestBodyRunner(c: Captured, data: bytes, unsigned: bool = False) -> RequestBody:
    auth = c.auth()
    if unsigned:
        from dataclasses import replace
        auth = replace(auth, content_sha256="UNSIGNED-PAYLOAD")
    rb = RequestBody(auth, c.headers, _aiter(data))
    asyncio.run(consume(rb))
    return rb


def test_malformed_checksum_and_conflicting_checksum_headers_are_refused_up_front():
    c = capture("put_object", Bucket="b", Key="k", Body=b"x")
    auth = c.auth()
    for extra, code in [({"x-amz-checksum-crc32": "!!"}, "InvalidRequest"),
                        ({"x-amz-checksum-crc32": "AAAA"}, "InvalidRequest"),
                        ({"x-amz-checksum-crc32c": "AAAAAA=="}, "InvalidRequest"),
                        ({"x-amz-trailer": "x-amz-checksum-crc32"}, "InvalidRequest")]:
        with pytest.raises(S3Error) as e:
            RequestBody(auth, {**c.headers, **extra}, _aiter(b"x"))
        assert e.value.code == code


def test_short_body_is_incomplete_body():
    c = capture("put_object", Bucket="b", Key="k", Body=b"x" * 1000)
    with pytest.raises(S3Error) as e:
        RequestBodyRunner(c, b"x" * 999, unsigned=True)
    assert e.value.code == "IncompleteBody"


def test_max_size_is_entity_too_large_before_reading():
    c = capture("put_object", Bucket="b", Key="k", Body=b"x" * 1000)
    with pytest.raises(S3Error) as e:
        RequestBody(c.auth(), c.headers, _aiter(b""), max_size=999)
    assert e.value.code == "EntityTooLarge"


# ---- SigV4 presigned ---------------------------------------------------------------------


def test_presigned_get_and_put_verify():
    for op in ("get_object", "put_object", "head_object"):
        p = presigned(op, {"Bucket": "b", "Key": ODD_KEY})
        auth = p.auth()
        assert auth.method == "v4-query" and auth.user == "alice"
        assert auth.content_sha256 == "UNSIGNED-PAYLOAD"


def test_presigned_url_expires():
    p = presigned("get_object", {"Bucket": "b", "Key": "k"}, expires=60)
    p.auth(now=time.time() + 30)
    with pytest.raises(S3Error) as e:
        p.auth(now=time.time() + 120)
    assert (e.value.code, e.value.message, e.value.status) == (
        "AccessDenied", "Request has expired", 403)


def test_presigned_expiry_over_seven_days_is_refused():
    p = presigned("get_object", {"Bucket": "b", "Key": "k"}, expires=7 * 24 * 3600)
    p.auth()
    p.query = [(k, "604801" if k == "X-Amz-Expires" else v) for k, v in p.query]
    with pytest.raises(S3Error) as e:
        p.auth()
    assert (e.value.code, e.value.status, e.value.message) == (
        "AccessDenied", 403, "X-Amz-Expires must be less than a week (in seconds) that is 604800")


@pytest.mark.parametrize("what", ["path", "method", "expires", "signature", "secret", "extra"])
def test_presigned_tampering(what):
    p = presigned("get_object", {"Bucket": "b", "Key": "k"},
                  secret="wrong" if what == "secret" else SK)
    if what == "path":
        p.path = "/b/other"
    elif what == "method":
        p.method = "PUT"
    elif what == "expires":
        p.query = [(k, "3000" if k == "X-Amz-Expires" else v) for k, v in p.query]
    elif what == "signature":
        p.query = [(k, _flip(v) if k == "X-Amz-Signature" else v) for k, v in p.query]
    elif what == "extra":
        p.query = p.query + [("response-content-type", "text/html")]
    with pytest.raises(S3Error) as e:
        p.auth()
    assert e.value.code == "SignatureDoesNotMatch"


@pytest.mark.parametrize("header", ["x-amz-copy-source", "x-amz-meta-owner", "x-amz-acl",
                                    "X-Amz-Content-Sha256"])
def test_presigned_url_refuses_unsigned_amz_headers(header):
    """Issue 12 defect 1: a presigned URL (SignedHeaders=host) plus an x-amz-* header it did
    not sign: refused as the header form refuses it, before the signature is looked at."""
    p = presigned("put_object", {"Bucket": "b", "Key": "k"})
    p.auth()
    p.headers = {**p.headers, header: "/b/private-key"}
    with pytest.raises(S3Error) as e:
        p.auth()
    assert (e.value.code, e.value.status) == ("AccessDenied", 403)
    assert e.value.message == "There were headers present in the request which were not signed"
    assert e.value.extra["HeadersNotSigned"] == header.lower()
    # Signed at presign time, the header is accepted (and must then be sent).
    p = presigned("put_object", {"Bucket": "b", "Key": "k", "Metadata": {"owner": "me"}})
    p.headers = {**p.headers, "x-amz-meta-owner": "me"}
    assert p.auth().user == "alice"


@pytest.mark.parametrize("expires,code", [
    ("9" * 5000, "AccessDenied"), ("-1", "AccessDenied"), ("\u0663", "AccessDenied"),
    ("+60", "AccessDenied"),
])
def test_presigned_odd_expires_numbers(expires, code):
    p = presigned("get_object", {"Bucket": "b", "Key": "k"})
    p.query = [(k, expires if k == "X-Amz-Expires" else v) for k, v in p.query]
    with pytest.raises(S3Error) as e:
        p.auth()
    assert (e.value.code, e.value.status) == (code, 403)


@pytest.mark.parametrize("expires", ["-99999999999999999999", "9" * 5000, "\u00b2", "1e9", ""])
def test_sigv2_odd_expires_is_403_before_any_signature_check(expires):
    """Issue 12 defect 7: these used to raise OverflowError (500) for anyone."""
    p = presigned("get_object", {"Bucket": "b", "Key": "k"}, sigver="s3")
    p.query = [(k, expires if k == "Expires" else "bogus" if k == "Signature" else v)
               for k, v in p.query]
    with pytest.raises(S3Error) as e:
        p.auth()
    assert e.value.status == 403


def test_presigned_missing_parameter():
    p = presigned("get_object", {"Bucket": "b", "Key": "k"})
    p.query = [(k, v) for k, v in p.query if k != "X-Amz-Date"]
    with pytest.raises(S3Error) as e:
        p.auth()
    assert e.value.code == "AuthorizationQueryParametersError"


# ---- SigV2 -------------------------------------------------------------------------------


@pytest.mark.parametrize("op,params", [
    ("list_buckets", {}),
    ("list_objects", {"Bucket": "b", "Prefix": "a b"}),
    ("get_object", {"Bucket": "b", "Key": ODD_KEY, "ResponseContentType": "text/plain"}),
    ("put_object", {"Bucket": "b", "Key": "k", "Body": b"data", "ContentType": "x/y",
                    "Metadata": {"m": "v"}}),
    ("upload_part", {"Bucket": "b", "Key": "k", "UploadId": "u1", "PartNumber": 2,
                     "Body": b"p"}),
    ("create_multipart_upload", {"Bucket": "b", "Key": "k"}),
])
def test_botocore_sigv2_header_requests_verify(op, params):
    c = capture(op, sigver="s3", **params)
    assert c.headers["Authorization"].startswith("AWS ")
    auth = c.auth()
    assert auth.method == "v2-header" and auth.user == "alice"


def test_sigv2_tampering_and_skew():
    c = capture("put_object", sigver="s3", Bucket="b", Key="k", Body=b"d", ContentType="a/b",
                Metadata={"m": "v"})
    for t in (c.with_header("Content-Type", "c/d"), c.with_header("x-amz-meta-m", "w"),
              c.with_header("Authorization", c.headers["Authorization"][:-3] + "AA=")):
        with pytest.raises(S3Error) as e:
            t.auth()
        assert e.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error) as e:
        c.auth(now=time.time() + 3600)
    assert e.value.code == "RequestTimeTooSkewed"
    with pytest.raises(S3Error) as e:
        capture("list_buckets", sigver="s3", secret="bad").auth()
    assert e.value.code == "SignatureDoesNotMatch"


def test_sigv2_presigned_query_verifies_and_expires():
    p = presigned("get_object", {"Bucket": "b", "Key": ODD_KEY}, sigver="s3", expires=60)
    auth = p.auth()
    assert auth.method == "v2-query"
    with pytest.raises(S3Error) as e:
        p.auth(now=time.time() + 120)
    assert (e.value.code, e.value.message) == ("AccessDenied", "Request has expired")
    p.path = "/b/other"
    with pytest.raises(S3Error) as e:
        p.auth()
    assert e.value.code == "SignatureDoesNotMatch"


# ---- canonical forms ---------------------------------------------------------------------


def test_canonical_uri_and_query_follow_aws_rules():
    assert canonical_uri("/b/a%20b%2Bc~%21%C3%A9") == "/b/a%20b%2Bc~%21%C3%A9"
    assert canonical_uri("/b/a b+c!é") == "/b/a%20b%2Bc%21%C3%A9"
    assert canonical_uri("/b/./x//y") == "/b/./x//y"  # S3 does not normalise paths
    assert canonical_query([("uploads", ""), ("b", "2"), ("a", "x y/z"), ("a", "1")]) == \
        "a=1&a=x%20y%2Fz&b=2&uploads="


def test_credentials_from_config():
    creds = StaticCredentials.from_config(
        [{"name": "root", "access_key": "AK1", "secret_key": "S1"}])
    assert creds("AK1") == ("root", "S1") and creds("nope") is None
    with pytest.raises(ValueError):
        StaticCredentials.from_config([{"name": "x", "access_key": "AK"}])


def test_sigv2_virtual_hosted_request_needs_the_bucket_as_resource_prefix():
    client = _SESSION.create_client(
        "s3", region_name="us-east-1", endpoint_url="http://s3.zonegate.test:9000",
        aws_access_key_id=AK, aws_secret_access_key=SK,
        config=Config(signature_version="s3", s3={"addressing_style": "virtual"}))
    box = {}

    def before_send(request, **kwargs):
        box["request"] = request
        return AWSResponse(request.url, 200, {}, _EmptyRaw())

    client.meta.events.register("before-send.s3", before_send)
    client.get_object(Bucket="vbucket", Key="a b.txt")
    c = Captured(box["request"])
    assert c.headers["Host"].startswith("vbucket.") and c.path == "/a%20b.txt"
    auth = authenticate(c.method, c.path, c.query, c.headers, CREDS, resource_prefix="/vbucket")
    assert auth.method == "v2-header"
    with pytest.raises(S3Error):
        c.auth()  # without the prefix the canonical resource differs


def test_raw_path_bytes_as_asgi_gives_them():
    c = capture("get_object", Bucket="b", Key=ODD_KEY)
    assert authenticate(c.method, c.path.encode("ascii"), c.query, c.headers, CREDS).user
    # a client that sends UTF-8 unescaped but signed the escaped form still verifies
    raw = "/b/dir/é".encode()
    c = capture("get_object", Bucket="b", Key="dir/é")
    assert authenticate(c.method, raw, c.query, c.headers, CREDS).user


def test_query_parsing_and_stored_content_encoding():
    assert parse_query(b"uploads&prefix=a%20b+c&x=%2B") == [
        ("uploads", ""), ("prefix", "a b c"), ("x", "+")]
    assert stored_content_encoding({"Content-Encoding": "aws-chunked"}) is None
    assert stored_content_encoding({"content-encoding": "aws-chunked,gzip"}) == "gzip"
    assert stored_content_encoding({"content-encoding": "gzip, br"}) == "gzip, br"
    assert stored_content_encoding({}) is None
