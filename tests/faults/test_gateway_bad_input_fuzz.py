"""Bad input against a real gateway (node processes plus `zonegate serve`): hypothesis-made,
correctly signed requests with odd ranges, numbers, XML bodies, keys, headers, query strings
and aws-chunked framing. Whatever they carry, the answer is a 4xx (or a success), never a 5xx,
never a hang (every request has a client timeout), the process never dies, and the cluster
serves as before afterwards. The exact inputs of issue 12 (defects 4-6, 10) come first, with
the S3 code each must get.

`make test` runs ~25 examples per category (~200 requests); `make soak` (`-m soak`) runs
400 per category.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import defusedxml.ElementTree as ET
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway
from tests.support.s3raw import (
    AUTH_FORMS,
    Creds,
    code_of,
    presign_v2_at,
    presign_v4,
    send,
    sign_v4,
    signed_as,
)

pytestmark = pytest.mark.timeout(600)

BUCKET = "fuzz"
KEY_BUCKET = "fuzz-keys"  # where generated keys go, apart from the objects the checks read
OBJ = b"0123456789" * 100  # 1000 bytes
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
SIGNED_STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EXAMPLES = 25
SOAK_EXAMPLES = 400


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gw-fuzz"))
    try:
        g.start()
        s3 = g.client()
        s3.create_bucket(Bucket=BUCKET)
        s3.create_bucket(Bucket=KEY_BUCKET)
        s3.put_object(Bucket=BUCKET, Key="obj", Body=OBJ)
        up = s3.create_multipart_upload(Bucket=BUCKET, Key="mp")["UploadId"]
        s3.upload_part(Bucket=BUCKET, Key="mp", UploadId=up, PartNumber=1, Body=b"part one")
        g.upload_id = up  # type: ignore[attr-defined]
        yield g
        # The cluster still serves, and nothing was an internal error.
        assert g.proc is not None and g.proc.poll() is None, g.log_tail()
        s3.put_object(Bucket=BUCKET, Key="after-fuzz", Body=b"still here")
        assert s3.get_object(Bucket=BUCKET, Key="after-fuzz")["Body"].read() == b"still here"
        assert s3.get_object(Bucket=BUCKET, Key="obj")["Body"].read() == OBJ
        s3.delete_object(Bucket=BUCKET, Key="after-fuzz")
    finally:
        g.stop()
    log = g.log_path.read_text(errors="replace")
    assert "internal error" not in log and "Traceback" not in log, g.log_tail(80)


@dataclass(frozen=True)
class FuzzCreds(Creds):
    upload_id: str = ""  # the multipart upload the fixture left open, for part requests


def q(value: str) -> str:
    """Percent-encoding as SigV4 canonicalises it, so that botocore's signature (made over
    the query as sent) is the one the gateway computes."""
    return urllib.parse.quote(value, safe="-_.~")


def target(path: str, query: list[tuple[str, str]] | None = None) -> str:
    qs = "&".join(f"{q(k)}={q(v)}" for k, v in (query or []))
    return urllib.parse.quote(path, safe="/~") + (f"?{qs}" if qs else "")


def call(c: Creds, method: str, tgt: str, headers: dict[str, str] | None = None,
         body: bytes = b"", payload_hash: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """Sign (SigV4 header) and send; assert the one property every bad input must keep:
    a 4xx or a success, never a server error (or, via send's timeout, a hang)."""
    h = sign_v4(c, method, tgt, body=body, headers=headers,
                payload_hash=payload_hash or hashlib.sha256(body).hexdigest())
    status, rh, answer = send(c, method, tgt, h, body, timeout=30)
    # 501 NotImplemented is S3's own answer for a subresource it does not offer.
    assert status < 500 or (status == 501 and (
        method == "HEAD" or code_of(status, answer)[1] == "NotImplemented")), \
        (method, tgt, headers, body[:200], status, answer[:500])
    assert b"InternalError" not in answer
    return status, rh, answer


# ---- strategies ----------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
# Header values http.client can send: latin-1, no line breaks.
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                    exclude_characters="\x7f"), max_size=60)
NUMBERS = st.one_of(
    st.integers(-5, 20_000).map(str),
    st.integers(0, 10**40).map(str),
    st.sampled_from(["9" * 5000, "0" * 5000 + "1", "4" * 4301, "²", "١٢", "٣", "+5", " 5",
                     "1_000", "1e3", "0x10", "-0", "", "2147483648", "9223372036854775808"]),
    st.text(alphabet="0123456789²³¹٣-+ _.eE", max_size=25),
)
HEADER_NUMBERS = NUMBERS.filter(lambda s: s.isascii() and s == s.strip() and s != "") | \
    st.sampled_from(["²", "١٢"]).map(lambda s: s.encode().decode("latin-1"))


@st.composite
def ranges(draw: Any) -> str:
    if draw(st.booleans()):
        return draw(HEADER_TEXT)
    a = draw(HEADER_NUMBERS | st.just(""))
    b = draw(HEADER_NUMBERS | st.just(""))
    extra = draw(st.sampled_from(["", ",0-1", ", 5-", ",-3"]))
    return f"{draw(st.sampled_from(['bytes=', 'bytes =', 'Bytes=', 'items=']))}{a}-{b}{extra}"


def range_request(c: FuzzCreds, rng: str, method: str) -> None:
    status, _, body = call(c, method, target(f"/{BUCKET}/obj"), {"Range": rng})
    assert status in (200, 206, 400, 416), (rng, status)
    if status == 200 and method == "GET":
        assert body == OBJ


def copy_range_request(c: FuzzCreds, rng: str) -> None:
    up = c.upload_id
    call(c, "PUT", target(f"/{BUCKET}/mp", [("partNumber", "2"), ("uploadId", up)]),
         {"x-amz-copy-source": f"/{BUCKET}/obj", "x-amz-copy-source-range": rng})


NUMBER_QUERIES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("GET", f"/{BUCKET}", [("max-keys", "{}")]),
    ("GET", f"/{BUCKET}", [("list-type", "2"), ("max-keys", "{}")]),
    ("GET", f"/{BUCKET}", [("versions", ""), ("max-keys", "{}")]),
    ("GET", f"/{BUCKET}", [("uploads", ""), ("max-uploads", "{}")]),
    ("GET", f"/{BUCKET}/mp", [("uploadId", "UPLOAD"), ("max-parts", "{}")]),
    ("GET", f"/{BUCKET}/mp", [("uploadId", "UPLOAD"), ("part-number-marker", "{}")]),
    ("GET", f"/{BUCKET}/obj", [("partNumber", "{}")]),
    ("HEAD", f"/{BUCKET}/obj", [("partNumber", "{}")]),
    ("PUT", f"/{BUCKET}/mp", [("partNumber", "{}"), ("uploadId", "UPLOAD")]),
    ("GET", "/", [("max-buckets", "{}")]),
]


def number_request(c: FuzzCreds, which: int, number: str) -> None:
    method, path, query = NUMBER_QUERIES[which]
    up = c.upload_id
    query = [(k, v.replace("{}", number).replace("UPLOAD", up)) for k, v in query]
    body = b"tiny" if method == "PUT" else b""
    call(c, method, target(path, query), body=body)


def number_header_request(c: FuzzCreds, name: str, number: str) -> None:
    headers = {name: number}
    payload_hash = None
    if name == "x-amz-decoded-content-length":
        headers["Content-Encoding"] = "aws-chunked"
        payload_hash = UNSIGNED_TRAILER
    call(c, "PUT", target(f"/{BUCKET}/num-hdr"), headers, b"4\r\nabcd\r\n0\r\n\r\n",
         payload_hash=payload_hash)


ENCODINGS = st.sampled_from(["x-bogus", "utf-16", "utf-32", "latin-1", "ascii", "cp500", "",
                             "utf-8", "UTF-8 ", "ebcdic", "idna", "rot13", "base64", "zlib"])
TAGS = st.sampled_from(["Delete", "Object", "Key", "VersionId", "Quiet",
                        "CompleteMultipartUpload", "Part", "PartNumber", "ETag",
                        "ChecksumCRC32", "CreateBucketConfiguration", "LocationConstraint", "x"])


def _xml_tree(children: Any) -> Any:
    return st.builds(lambda tag, kids, text: f"<{tag}>{text}{''.join(kids)}</{tag}>",
                     TAGS, st.lists(children, max_size=4),
                     st.sampled_from(["", "1", "k", "true", "&amp;", "\"e\"", "9" * 50,
                                      "<![CDATA[x]]>", "&#0;", "&x;", "\u00e9"]))


XML_BODIES = st.one_of(
    st.builds(lambda enc, tree: f'<?xml version="1.0" encoding="{enc}"?>{tree}'.encode(),
              ENCODINGS | st.text(alphabet="abcxyz-_019", max_size=12),
              st.recursive(TAGS.map(lambda t: f"<{t}/>"), _xml_tree, max_leaves=12)),
    st.recursive(TAGS.map(lambda t: f"<{t}/>"), _xml_tree, max_leaves=20).map(str.encode),
    st.binary(max_size=300),
    st.sampled_from([b"<a>" * 5000, b'<!DOCTYPE d [<!ENTITY e "x">]><Delete>&e;</Delete>',
                     b"<?xml version='1.0' encoding='utf-16'?><Delete/>".decode().encode("utf-16"),
                     "<Delete><Object><Key>\ud7ff</Key></Object></Delete>".encode(),
                     b"\xff\xfe<\x00D\x00/\x00>\x00", b"<Delete>\x00</Delete>"]),
)
XML_TARGETS = ["delete", "complete", "create-bucket"]


def xml_request(c: FuzzCreds, where: str, body: bytes) -> None:
    up = c.upload_id
    if where == "delete":
        call(c, "POST", target(f"/{BUCKET}", [("delete", "")]), body=body)
    elif where == "complete":
        call(c, "POST", target(f"/{BUCKET}/mp", [("uploadId", up)]), body=body)
    else:
        call(c, "PUT", target("/fuzz-created"), body=body)


# Keys: any text S3 takes. Dot segments are left out: HTTP clients (urllib3) remove them
# from URLs before sending, so no real client can address such a key by path.
# Line breaks, slashes and other characters that trip routers are drawn often.
KEY_CHARS = st.sampled_from(list("\n\r\t /%?#+&=;:~*\\\"'<>.")) | st.characters(
    exclude_categories=("Cs",))
KEYS = st.text(KEY_CHARS, min_size=1, max_size=60).filter(
    lambda k: not any(seg in (".", "..") for seg in k.split("/")))


def key_roundtrip(c: FuzzCreds, key: str) -> None:
    """PUT, GET, LIST and DELETE of the key through hand-signed requests."""
    path = f"/{KEY_BUCKET}/{key}"
    body = key.encode("utf-8", "surrogatepass")[:100] or b"-"
    too_long = len(key.encode()) > 1024
    status, _, answer = call(c, "PUT", target(path), body=body)
    if too_long:
        assert status == 400
        return
    assert status == 200, (key, answer[:300])
    status, _, got = call(c, "GET", target(path))
    assert (status, got) == (200, body), key
    status, _, listing = call(c, "GET", target(f"/{KEY_BUCKET}", [("list-type", "2"),
                                                              ("prefix", key),
                                                              ("encoding-type", "url")]))
    assert status == 200
    root = ET.fromstring(listing)
    listed = [urllib.parse.unquote_plus(e.text or "") for e in root.iter()
              if e.tag.endswith("}Key") or e.tag == "Key"]
    assert key in listed, (key, listed)
    status, _, _ = call(c, "DELETE", target(path))
    assert status == 204
    status, _, _ = call(c, "HEAD", target(path))
    assert status == 404, key


def raw_key_request(c: FuzzCreds, key: str, method: str) -> None:
    call(c, method, target(f"/{KEY_BUCKET}/{key}"), body=b"raw" if method == "PUT" else b"")


HEADER_NAMES = st.sampled_from([
    "x-amz-meta-a", "x-amz-checksum-crc32", "x-amz-checksum-sha256", "x-amz-checksum-crc64nvme",
    "x-amz-sdk-checksum-algorithm", "x-amz-checksum-algorithm", "content-md5", "content-type",
    "x-amz-copy-source", "x-amz-metadata-directive", "if-match", "if-none-match",
    "if-modified-since", "x-amz-trailer", "content-encoding", "cache-control", "expires",
    "x-amz-copy-source-if-match", "x-amz-checksum-type", "x-amz-checksum-mode", "range",
    "x-amz-storage-class", "x-amz-tagging", "content-disposition",
]) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20).map(
    lambda s: "x-amz-meta-" + s)


def header_request(c: FuzzCreds, method: str, headers: dict[str, str], body: bytes) -> None:
    path = f"/{BUCKET}/hdr" if method != "GET" else f"/{BUCKET}/obj"
    call(c, method, target(path), headers, body if method == "PUT" else b"")


QUERY_NAMES = st.sampled_from([
    "acl", "delete", "uploads", "uploadId", "partNumber", "versionId", "versions", "location",
    "versioning", "list-type", "max-keys", "prefix", "delimiter", "marker", "start-after",
    "continuation-token", "encoding-type", "fetch-owner", "key-marker", "upload-id-marker",
    "response-content-type", "response-content-disposition", "response-expires",
    "response-cache-control", "response-content-encoding", "response-content-language",
    "tagging", "select", "X-Amz-Expires", "Signature", "AWSAccessKeyId", "Expires",
]) | TEXT


def query_request(c: FuzzCreds, method: str, path: str, query: list[tuple[str, str]]) -> None:
    call(c, method, target(path, query), body=b"q" if method == "PUT" else b"")


@st.composite
def chunked_bodies(draw: Any) -> tuple[str, dict[str, str], bytes]:
    """An aws-chunked body, well-formed or not, with the headers announcing it."""
    mode = draw(st.sampled_from([UNSIGNED_TRAILER, UNSIGNED_TRAILER, SIGNED_STREAMING]))
    chunks = draw(st.lists(st.binary(max_size=70), max_size=4))
    out = b""
    for data in chunks:
        size = draw(st.sampled_from([f"{len(data):x}", f"{len(data):X}", f"{len(data) + 1:x}",
                                     "", "zz", "-1", "f" * 17, f"{len(data):x} ",
                                     f"0{len(data):x}"]))
        ext = b";chunk-signature=" + b"0" * 64 if mode == SIGNED_STREAMING else b""
        ext = draw(st.sampled_from([ext, b"", b";x=y", b";chunk-signature=zz"]))
        out += size.encode() + ext + b"\r\n" + data + draw(st.sampled_from([b"\r\n", b"\n", b""]))
    last_ext = b";chunk-signature=" + b"0" * 64 if mode == SIGNED_STREAMING else b""
    out += b"0" + last_ext + b"\r\n"
    trailer = draw(st.sampled_from([b"", b"x-amz-checksum-crc32:AAAAAA==\r\n",
                                    b"x-amz-checksum-crc32:not base64\r\n", b"garbage\r\n",
                                    b"x-amz-checksum-crc32:" + b"A" * 5000 + b"\r\n"]))
    out += trailer + draw(st.sampled_from([b"\r\n", b"", b"\r\n\r\nextra"]))
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(out)))
        out = out[:cut]
    total = sum(map(len, chunks))
    headers = {
        "Content-Encoding": draw(st.sampled_from(["aws-chunked", "aws-chunked,gzip", "gzip"])),
        "x-amz-decoded-content-length": draw(st.sampled_from(
            [str(total), str(total + 1), "0", "9" * 30]) | HEADER_NUMBERS),
    }
    if draw(st.booleans()):
        headers["x-amz-trailer"] = draw(st.sampled_from(["x-amz-checksum-crc32",
                                                         "x-amz-checksum-sha1", "bogus", ""]))
    return mode, headers, out


def chunked_request(c: FuzzCreds, body: tuple[str, dict[str, str], bytes]) -> None:
    mode, headers, data = body
    call(c, "PUT", target(f"/{BUCKET}/chunked"), headers, data, payload_hash=mode)


def override_request(c: FuzzCreds, name: str, value: str) -> None:
    status, headers, _ = call(c, "GET", target(f"/{BUCKET}/obj", [(name, value)]))
    sendable = all(c == "\t" or " " <= c <= "~" or "\xa0" <= c <= "\xff" for c in value)
    assert status == (200 if sendable else 400), (name, value, status)
    if status == 200:
        assert name[len("response-"):] in headers


# Access-key bytes: invalid UTF-8 drawn often, then anything a header can carry.
KEY_BYTES = st.one_of(
    st.sampled_from([b"\xff", b"\x80", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                     b"\xc0\xaf", b"\xfe\xff", b"\x00"]).flatmap(
        lambda bad: st.builds(lambda a, b: a + bad + b, st.binary(max_size=4).map(
            lambda x: bytes(48 + v % 43 for v in x)), st.binary(max_size=4).map(
            lambda x: bytes(48 + v % 43 for v in x)))),
    st.binary(min_size=1, max_size=24).filter(lambda b: not b.isascii()),
)


def credential_request(c: FuzzCreds, form: str, key: bytes, method: str) -> None:
    if form.endswith("header") and any(b in key for b in b"\x00\r\n"):
        key = key.replace(b"\x00", b"~").replace(b"\r", b"~").replace(b"\n", b"~")
    tgt, headers = signed_as(c, form, key, method, f"/{BUCKET}/obj")
    status, _, answer = send(c, method, tgt, headers, timeout=30)
    assert status < 500 and b"InternalError" not in answer, (form, key, status, answer[:300])
    # A key with a byte that is not UTF-8 is no user's key (a header whose
    # credential the signer cannot parse is malformed first: 400).
    assert status in (400, 403), (form, key, status, answer[:300])


# category -> (strategy of arguments, function(c, *args))
CATEGORIES: dict[str, tuple[Any, Callable[..., None]]] = {
    "range": (st.tuples(ranges(), st.sampled_from(["GET", "HEAD"])), range_request),
    "copy-source-range": (st.tuples(ranges()), copy_range_request),
    "query-numbers": (st.tuples(st.integers(0, len(NUMBER_QUERIES) - 1), NUMBERS),
                      number_request),
    "header-numbers": (st.one_of(
        st.tuples(st.sampled_from(["x-amz-decoded-content-length", "x-amz-mp-parts-count"]),
                  HEADER_NUMBERS),
        # Content-Length itself only where it is no number: a wrong number is a stalled body.
        st.tuples(st.just("content-length"), HEADER_NUMBERS.filter(lambda n: not n.isdigit()))),
        number_header_request),
    "xml": (st.tuples(st.sampled_from(XML_TARGETS), XML_BODIES), xml_request),
    "keys": (st.tuples(KEYS), key_roundtrip),
    "raw-keys": (st.tuples(st.text(KEY_CHARS, min_size=1, max_size=40),
                           st.sampled_from(["GET", "HEAD", "PUT", "DELETE"])),
                 raw_key_request),
    "headers": (st.tuples(st.sampled_from(["PUT", "GET", "HEAD", "POST"]),
                          st.dictionaries(HEADER_NAMES, HEADER_TEXT, max_size=4),
                          st.binary(max_size=64)), header_request),
    "query": (st.tuples(st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE"]),
                        st.sampled_from(["/", f"/{BUCKET}", f"/{BUCKET}/q", f"/{BUCKET}/mp"]),
                        st.lists(st.tuples(QUERY_NAMES, TEXT), max_size=4)), query_request),
    "aws-chunked": (st.tuples(chunked_bodies()), chunked_request),
    "response-overrides": (st.tuples(st.sampled_from(
        ["response-content-type", "response-content-disposition", "response-expires",
         "response-cache-control", "response-content-encoding", "response-content-language"]),
        TEXT), override_request),
    "credentials": (st.tuples(st.sampled_from(AUTH_FORMS), KEY_BYTES,
                              st.sampled_from(["GET", "HEAD", "PUT"])), credential_request),
}


def run_category(c: FuzzCreds, name: str, examples: int) -> None:
    strategy, check = CATEGORIES[name]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def inner(args: tuple) -> None:
        check(c, *args)

    inner()


@pytest.fixture(scope="module")
def cu(gw) -> FuzzCreds:
    return FuzzCreds(gw.port, ACCESS_KEY, SECRET_KEY, gw.upload_id)


@pytest.mark.parametrize("category", list(CATEGORIES))
def test_bad_input_never_5xx(cu, category):
    run_category(cu, category, EXAMPLES)


@pytest.mark.soak
@pytest.mark.parametrize("category", list(CATEGORIES))
def test_bad_input_never_5xx_soak(cu, category):
    run_category(cu, category, SOAK_EXAMPLES)


# ---- the exact inputs of issue 24 (D3, D4) -------------------------------------------------


@pytest.mark.parametrize("form", AUTH_FORMS)
@pytest.mark.parametrize("key", [b"AK\xff", b"\xc3(", b"AKID\xed\xa0\x80", b"\xe9t\xe9",
                                 b"AKIDNOTUTF8\x80\x80"])
def test_issue24_non_utf8_access_key_is_invalid_access_key_id(cu, form, key):
    """D3: a 500 from the store's user lookup (SigV4 and SigV2 headers) before."""
    for method in ("GET", "PUT"):
        tgt, headers = signed_as(cu, form, key, method, f"/{BUCKET}/obj")
        status, _, body = send(cu, method, tgt, headers, b"x" if method == "PUT" else b"",
                               timeout=30)
        assert code_of(status, body) == (403, "InvalidAccessKeyId"), (form, key, body[:300])
    tgt, headers = signed_as(cu, form, key, "HEAD", f"/{BUCKET}/obj")
    assert send(cu, "HEAD", tgt, headers, timeout=30)[0] == 403


@pytest.mark.parametrize("form", ["v4-query", "v2-query"])
def test_issue24_nul_in_query_access_key_is_invalid_access_key_id(cu, form):
    """A NUL no PostgreSQL text can hold; the error body stays well-formed XML."""
    tgt, headers = signed_as(cu, form, b"AK\x00ID", "GET", f"/{BUCKET}/obj")
    status, _, body = send(cu, "GET", tgt, headers, timeout=30)
    assert code_of(status, body) == (403, "InvalidAccessKeyId"), body[:300]


def test_issue24_non_utf8_bytes_elsewhere_in_a_signed_query(cu):
    """Invalid bytes in another parameter of a validly signed URL: the signature holds over
    the bytes sent (no 403), the query is then refused as S3 does (InvalidURI)."""
    tgt = presign_v4(cu, "GET", f"/{BUCKET}/obj?prefix=AB")
    status, _, body = send(cu, "GET", tgt.replace("prefix=AB", "prefix=%FF"), {}, timeout=30)
    assert code_of(status, body) == (403, "SignatureDoesNotMatch"), body[:300]
    h = sign_v4(cu, "GET", f"/{BUCKET}/obj?prefix=%FF")
    status, _, body = send(cu, "GET", f"/{BUCKET}/obj?prefix=%FF", h, timeout=30)
    assert code_of(status, body) == (400, "InvalidURI"), body[:300]


@pytest.mark.parametrize("expires_at,expect", [
    (253402300800, (403, "AccessDenied")),           # 10000-01-01T00:00:00Z
    (10**12, (403, "AccessDenied")),
    (10**40, (403, "AccessDenied")),
    (253402300799, (200, "")),                       # the last second of 9999: still valid
])
def test_issue24_sigv2_expires_beyond_year_9999(cu, expires_at, expect):
    """D4: a validly signed SigV2 URL valid forever was accepted (200)."""
    tgt = presign_v2_at(cu, "GET", f"/{BUCKET}/obj", expires_at)
    assert f"Expires={expires_at}" in tgt
    status, _, body = send(cu, "GET", tgt, {}, timeout=30)
    assert code_of(status, body) == expect, body[:300]
    if status == 200:
        assert body == OBJ


# ---- the exact inputs of issue 12, with the code each gets ----------------------------------

BIG = "4" * 4301


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("rng,status", [
    (f"bytes=0-{BIG}", 206),          # an end past any object is cut at the end
    (f"bytes={BIG}-", 416),           # a start past the end: InvalidRange
    # two such numbers make the head itself too large (> 8 KiB): refused before parsing
    (f"bytes={BIG}-{BIG}", 400),
    (f"bytes=-{BIG}", 206),           # a suffix longer than the object: all of it
    ("bytes=-0", 416),
    ("bytes=²-5", 200),               # malformed: ignored, as S3 does
])
def test_issue_ranges(cu, method, rng, status):
    got, headers, body = call(cu, method, target(f"/{BUCKET}/obj"), {"Range": rng})
    assert got == status, (rng, body[:300])
    if status == 206:
        assert headers["content-range"] == f"bytes 0-{len(OBJ) - 1}/{len(OBJ)}"
    if status == 416 and method == "GET":
        assert code_of(got, body) == (416, "InvalidRange")


@pytest.mark.parametrize("rng,expect", [
    (f"bytes=0-{BIG}", (416, "InvalidRange")),
    (f"bytes={BIG}-{BIG}", (400, "RequestHeaderSectionTooLarge")),  # a head over 8 KiB
    ("bytes=²-3", (400, "InvalidArgument")),
    ("bytes=0-9", (200, "")),
])
def test_issue_copy_source_range(cu, rng, expect):
    up = cu.upload_id
    status, _, body = call(cu, "PUT", target(f"/{BUCKET}/mp", [("partNumber", "3"),
                                                                ("uploadId", up)]),
                           {"x-amz-copy-source": f"/{BUCKET}/obj",
                            "x-amz-copy-source-range": rng})
    assert code_of(status, body) == expect, body[:300]


@pytest.mark.parametrize("value,expect", [
    ("²".encode().decode("latin-1"), (400, "InvalidArgument")),
    (BIG, (400, "EntityTooLarge")),
    ("-1", (400, "InvalidArgument")),
])
def test_issue_decoded_content_length(cu, value, expect):
    status, _, body = call(cu, "PUT", target(f"/{BUCKET}/dcl"),
                           {"Content-Encoding": "aws-chunked",
                            "x-amz-decoded-content-length": value},
                           b"4\r\nabcd\r\n0\r\n\r\n", payload_hash=UNSIGNED_TRAILER)
    assert code_of(status, body) == expect, body[:300]


@pytest.mark.parametrize("where", XML_TARGETS)
@pytest.mark.parametrize("encoding", ["x-bogus", "utf-16", "rot13", "zlib"])
def test_issue_xml_with_unknown_encoding(cu, where, encoding):
    body = {"delete": "<Delete><Object><Key>obj</Key></Object></Delete>",
            "complete": "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                        "<ETag>x</ETag></Part></CompleteMultipartUpload>",
            "create-bucket": "<CreateBucketConfiguration><LocationConstraint>eu-west-1"
                             "</LocationConstraint></CreateBucketConfiguration>"}[where]
    data = f'<?xml version="1.0" encoding="{encoding}"?>{body}'.encode()
    up = cu.upload_id
    tgt = {"delete": target(f"/{BUCKET}", [("delete", "")]),
           "complete": target(f"/{BUCKET}/mp", [("uploadId", up)]),
           "create-bucket": target("/fuzz-xml-bucket")}[where]
    status, _, answer = call(cu, "POST" if where != "create-bucket" else "PUT", tgt, body=data)
    assert code_of(status, answer) == (400, "MalformedXML"), answer[:300]


@pytest.mark.parametrize("value", ["text/html\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b",
                                   "a\x7fb", "\u20ac", "\u4e2d\u6587", "a\x85b"])
@pytest.mark.parametrize("name", ["response-content-type", "response-content-disposition",
                                  "response-expires", "response-cache-control"])
def test_issue_response_overrides(cu, name, value):
    for method in ("GET", "HEAD"):
        status, headers, body = call(cu, method, target(f"/{BUCKET}/obj", [(name, value)]))
        assert status == 400 and "x-injected" not in headers, (method, body[:300])
        if method == "GET":
            assert code_of(status, body) == (400, "InvalidArgument")
    # Latin-1 text is fine (an override is a header value, as S3 sends it).
    status, headers, _ = call(cu, "GET", target(f"/{BUCKET}/obj", [(name, "caf\u00e9; a=b")]))
    assert status == 200 and headers[name[len("response-"):]] == "caf\u00e9; a=b"


@pytest.mark.parametrize("query,expect", [
    ([("partNumber", "0")], (400, "InvalidArgument")),
    ([("partNumber", "10001")], (400, "InvalidArgument")),
    ([("partNumber", "9" * 5000)], (400, "InvalidArgument")),
    ([("partNumber", "\u0661")], (400, "InvalidArgument")),
    ([("partNumber", "2")], (400, "InvalidPartNumber")),  # AWS: 400 (issue 22)
    ([("partNumber", "1")], (206, "")),
    ([("partNumber", "0001")], (206, "")),
])
def test_issue_part_numbers(cu, query, expect):
    status, _, body = call(cu, "GET", target(f"/{BUCKET}/obj", query))
    assert code_of(status, body) == expect, body[:300]


@pytest.mark.parametrize("name", ["max-keys", "max-uploads", "max-parts", "part-number-marker"])
@pytest.mark.parametrize("value,status", [("-1", 400), ("9" * 5000, 400), ("\u0663", 400),
                                          ("+5", 400), (" 5", 400), ("2147483648", 400),
                                          ("5", 200), ("00005", 200)])
def test_issue_list_numbers(cu, name, value, status):
    up = cu.upload_id
    path, query = {"max-keys": (f"/{BUCKET}", []), "max-uploads": (f"/{BUCKET}", [("uploads", "")]),
                   "max-parts": (f"/{BUCKET}/mp", [("uploadId", up)]),
                   "part-number-marker": (f"/{BUCKET}/mp", [("uploadId", up)])}[name]
    got, _, body = call(cu, "GET", target(path, query + [(name, value)]))
    assert code_of(got, body)[0] == status, body[:300]
    if status == 400:
        assert code_of(got, body) == (400, "InvalidArgument")
