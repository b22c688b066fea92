"""boto3 against a real `zonegate dev` cluster, over HTTP and over HTTPS.

HTTPS is not a formality: there boto3 sends streaming uploads as aws-chunked bodies with a
trailing checksum (STREAMING-UNSIGNED-PAYLOAD-TRAILER), where over HTTP it signs the payload
hash and sends the checksum in a header. Every test runs against both.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.client
import itertools
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3.s3.transfer
import crc32c
import pytest
from awscrt import checksums as crt_checksums
from botocore.exceptions import ClientError

from tests.support.devcluster import MiB, file_md5, make_file, multipart_etag, start_cluster

pytestmark = pytest.mark.slow

_names = itertools.count()


@pytest.fixture(scope="module", params=["http", "https"])
def cluster(request, tmp_path_factory):
    yield from start_cluster(tmp_path_factory, f"boto3-{request.param}",
                             tls=request.param == "https")


@pytest.fixture(scope="module")
def s3(cluster):
    return cluster.client()


@pytest.fixture
def bucket(s3, request):
    name = f"b{next(_names)}-{request.node.name[:30].lower().replace('_', '-')}".strip("-[]")
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")
    s3.create_bucket(Bucket=name)
    return name


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    r = excinfo.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def urlopen(cluster, req: urllib.request.Request):
    ctx = ssl.create_default_context(cafile=str(cluster.cert)) if cluster.tls else None
    return urllib.request.urlopen(req, context=ctx, timeout=60)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_dev_prints_how_to_connect(cluster):
    out = cluster.output()
    assert f"endpoint:    {cluster.endpoint}" in out
    assert f"export AWS_ENDPOINT_URL={cluster.endpoint}" in out
    if cluster.tls:
        assert f"trust CA:    {cluster.ca}" in out
        assert f"export AWS_CA_BUNDLE={cluster.ca}" in out   # what the aws cli and boto3 read


# ------------------------------------------------------------------------------- buckets

def test_bucket_lifecycle(s3, bucket):
    assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket=bucket)
    loc = s3.get_bucket_location(Bucket=bucket)
    assert loc.get("LocationConstraint") in (None, "", "us-east-1")
    # us-east-1: re-creating an owned bucket is AWS's legacy 200.
    assert s3.create_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert error_of(e) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=bucket, Key="k")
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=bucket)
    assert error_of(e)[1] == 404
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=bucket)
    assert error_of(e) == ("NoSuchBucket", 404)


# ------------------------------------------------------------------------------- objects

def test_put_get_head_with_metadata(s3, bucket):
    body = bytes(range(256)) * 4099
    r = s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=body, ContentType="application/x-zg",
                      Metadata={"shard": "7", "owner": "team-a"}, CacheControl="max-age=60",
                      ContentDisposition='attachment; filename="obj.bin"')
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    assert r["ETag"] == etag
    h = s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert h["ContentLength"] == len(body)
    assert h["ETag"] == etag
    assert h["ContentType"] == "application/x-zg"
    assert h["Metadata"] == {"shard": "7", "owner": "team-a"}
    assert h["CacheControl"] == "max-age=60"
    assert h["ContentDisposition"] == 'attachment; filename="obj.bin"'
    assert h.get("ContentEncoding") in (None, "")  # aws-chunked is never stored
    g = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert g["Body"].read() == body
    assert g["ETag"] == etag
    # Overwrite replaces the whole object.
    s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=b"short")
    assert s3.get_object(Bucket=bucket, Key="dir/obj.bin")["Body"].read() == b"short"
    assert s3.head_object(Bucket=bucket, Key="dir/obj.bin")["Metadata"] == {}
    # Empty objects exist too.
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    g = s3.get_object(Bucket=bucket, Key="empty")
    assert g["ContentLength"] == 0 and g["Body"].read() == b""
    assert g["ETag"] == f'"{hashlib.md5(b"").hexdigest()}"'
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="missing")
    assert error_of(e) == ("NoSuchKey", 404)


def test_get_with_ranges(s3, bucket):
    body = make_bytes(3 * MiB + 12345)
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    cases = {
        "bytes=0-9": body[:10],
        "bytes=1048570-1048600": body[1048570:1048601],
        f"bytes={len(body) - 100}-": body[-100:],
        "bytes=-4097": body[-4097:],
        f"bytes=5-{len(body) + 1000}": body[5:],  # clipped to the object
    }
    for rng, want in cases.items():
        g = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert g["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert g["Body"].read() == want, rng
        assert g["ContentLength"] == len(want)
        assert g["ContentRange"].endswith(f"/{len(body)}")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")
    assert error_of(e) == ("InvalidRange", 416)
    g = s3.get_object(Bucket=bucket, Key="r", Range="bytes=oops")  # malformed: ignored
    assert g["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert g["Body"].read() == body


def make_bytes(n: int, seed: int = 1) -> bytes:
    return hashlib.shake_256(f"zg-{seed}".encode()).digest(n)


def test_list_with_delimiters_and_pagination(s3, bucket):
    keys = sorted(
        [f"logs/2024/a{i:02d}" for i in range(7)] + [f"logs/2025/b{i:02d}" for i in range(5)]
        + [f"top{i}" for i in range(4)] + ["with space/ü+x.txt", "zz/deep/er/k"]
    )
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["logs/", "with space/", "zz/"]
    assert [o["Key"] for o in r["Contents"]] == [f"top{i}" for i in range(4)]
    r = s3.list_objects_v2(Bucket=bucket, Prefix="logs/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["logs/2024/", "logs/2025/"]
    assert "Contents" not in r
    # Pagination by hand: every key exactly once, in order.
    seen, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_objects_v2(Bucket=bucket, MaxKeys=4, **kw)
        assert r["KeyCount"] == len(r.get("Contents", []))
        assert r["KeyCount"] <= 4
        seen += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    assert seen == keys
    for o in s3.list_objects_v2(Bucket=bucket, Prefix="top0")["Contents"]:
        assert o["Size"] == 4 and o["ETag"] == f'"{hashlib.md5(b"top0").hexdigest()}"'
    # The paginator, with a delimiter: prefixes count toward the page size.
    pages = list(s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 2}))
    assert len(pages) >= 3
    got = [p["Prefix"] for pg in pages for p in pg.get("CommonPrefixes", [])]
    got += [o["Key"] for pg in pages for o in pg.get("Contents", [])]
    assert sorted(got) == ["logs/", "top0", "top1", "top2", "top3", "with space/", "zz/"]
    r = s3.list_objects_v2(Bucket=bucket, StartAfter="top3")
    assert [o["Key"] for o in r["Contents"]] == ["with space/ü+x.txt", "zz/deep/er/k"]
    # ListObjects v1 with markers.
    seen, marker = [], ""
    while True:
        r = s3.list_objects(Bucket=bucket, MaxKeys=5, Marker=marker)
        assert r["Marker"] == marker
        seen += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        marker = r.get("NextMarker") or seen[-1]
    assert seen == keys
    r = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert r["IsTruncated"] and r["NextMarker"]
    # Unversioned stores still answer ListObjectVersions (test harnesses clean up with it).
    r = s3.list_object_versions(Bucket=bucket, Prefix="top")
    assert [(v["Key"], v["VersionId"]) for v in r["Versions"]] == [
        (f"top{i}", "null") for i in range(4)]


def test_copy_object(s3, bucket):
    src = "dir/with space/ünï.bin"
    body = make_bytes(70_000)
    s3.put_object(Bucket=bucket, Key=src, Body=body, ContentType="text/x-src",
                  Metadata={"a": "1"})
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    r = s3.copy_object(Bucket=bucket, Key="copy1", CopySource={"Bucket": bucket, "Key": src})
    assert r["CopyObjectResult"]["ETag"] == etag
    h = s3.head_object(Bucket=bucket, Key="copy1")
    assert (h["ETag"], h["ContentType"], h["Metadata"]) == (etag, "text/x-src", {"a": "1"})
    assert s3.get_object(Bucket=bucket, Key="copy1")["Body"].read() == body
    s3.copy_object(Bucket=bucket, Key="copy2", CopySource={"Bucket": bucket, "Key": src},
                   MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/x-dst")
    h = s3.head_object(Bucket=bucket, Key="copy2")
    assert (h["ContentType"], h["Metadata"]) == ("text/x-dst", {"b": "2"})
    assert s3.get_object(Bucket=bucket, Key="copy2")["Body"].read() == body
    # Onto itself: only with REPLACE.
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key=src, CopySource={"Bucket": bucket, "Key": src})
    assert error_of(e) == ("InvalidRequest", 400)
    s3.copy_object(Bucket=bucket, Key=src, CopySource={"Bucket": bucket, "Key": src},
                   MetadataDirective="REPLACE", Metadata={"c": "3"})
    assert s3.head_object(Bucket=bucket, Key=src)["Metadata"] == {"c": "3"}
    assert s3.get_object(Bucket=bucket, Key=src)["Body"].read() == body
    # Across buckets, and copy-source conditions.
    other = bucket[:40] + "-other"
    s3.create_bucket(Bucket=other)
    s3.copy_object(Bucket=other, Key="x", CopySource={"Bucket": bucket, "Key": src},
                   CopySourceIfMatch=etag)
    assert s3.get_object(Bucket=other, Key="x")["Body"].read() == body
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=other, Key="y", CopySource={"Bucket": bucket, "Key": src},
                       CopySourceIfNoneMatch=etag)
    assert error_of(e) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=other, Key="y", CopySource={"Bucket": bucket, "Key": "nope"})
    assert error_of(e) == ("NoSuchKey", 404)
    assert "Contents" not in s3.list_objects_v2(Bucket=other, Prefix="y")


def test_delete_and_multi_delete(s3, bucket):
    for i in range(6):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x" * i)
    r = s3.delete_object(Bucket=bucket, Key="k0")
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k0")
    assert error_of(e)[1] == 404
    # Deleting what is not there succeeds, as in S3.
    assert s3.delete_object(Bucket=bucket, Key="k0")["ResponseMetadata"]["HTTPStatusCode"] == 204
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "k1"}, {"Key": "k2"}, {"Key": "never-existed"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["k1", "k2", "never-existed"]
    assert not r.get("Errors")
    r = s3.delete_objects(Bucket=bucket, Delete={
        "Objects": [{"Key": "k3"}, {"Key": "k4", "VersionId": "null"}], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k5"]


def http_call(cluster, method: str, url: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request exactly as given (urllib would add a Content-Type that SigV2 signs)."""
    u = urllib.parse.urlsplit(url)
    if cluster.tls:
        ctx = ssl.create_default_context(cafile=str(cluster.cert))
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            u.hostname, u.port, context=ctx, timeout=60)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request(method, f"{u.path}?{u.query}", body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("sigver", ["default", "s3v4"])
def test_presigned_get_and_put(cluster, s3, bucket, sigver):
    signer = s3 if sigver == "default" else cluster.client(signature_version="s3v4")
    body = make_bytes(100_000, seed=3)
    url = signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p/up"},
                                        ExpiresIn=300)
    status, headers, _ = http_call(cluster, "PUT", url, body)
    assert status == 200
    assert headers["etag"] == f'"{hashlib.md5(body).hexdigest()}"'
    url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p/up"},
                                        ExpiresIn=300)
    with urlopen(cluster, urllib.request.Request(url)) as resp:
        assert resp.read() == body
    with urlopen(cluster, urllib.request.Request(url, headers={"Range": "bytes=10-19"})) as resp:
        assert resp.status == 206 and resp.read() == body[10:20]
    # The signature covers the key: the same query on another key is refused.
    other = url.replace("/p/up?", "/p/other?")
    with pytest.raises(urllib.error.HTTPError) as e:
        urlopen(cluster, urllib.request.Request(other))
    assert e.value.code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in e.value.read()


def _crc64nvme(data: bytes) -> bytes:
    return crt_checksums.crc64nvme(data).to_bytes(8, "big")


CHECKSUMS = {
    "CRC32": lambda d: zlib.crc32(d).to_bytes(4, "big"),
    "CRC32C": lambda d: crc32c.crc32c(d).to_bytes(4, "big"),
    "SHA256": lambda d: hashlib.sha256(d).digest(),
    "SHA1": lambda d: hashlib.sha1(d).digest(),
    "CRC64NVME": _crc64nvme,
}


@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "SHA256", "SHA1", "CRC64NVME"])
def test_checksums_are_validated_stored_and_returned(s3, bucket, algo):
    body = make_bytes(1_500_000, seed=len(algo))
    want = b64(CHECKSUMS[algo](body))
    r = s3.put_object(Bucket=bucket, Key=algo, Body=body, ChecksumAlgorithm=algo)
    assert r[f"Checksum{algo}"] == want
    h = s3.head_object(Bucket=bucket, Key=algo, ChecksumMode="ENABLED")
    assert h[f"Checksum{algo}"] == want
    g = s3.get_object(Bucket=bucket, Key=algo, ChecksumMode="ENABLED")
    assert g[f"Checksum{algo}"] == want
    assert g["Body"].read() == body  # botocore validates it against the header too
    # A checksum that does not match the body stores nothing.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key=algo, Body=body + b"!", **{f"Checksum{algo}": want})
    assert error_of(e)[1] == 400
    assert error_of(e)[0] in ("BadDigest", "InvalidRequest")
    assert s3.get_object(Bucket=bucket, Key=algo)["Body"].read() == body


def test_uploads_take_the_protocol_specific_path(cluster, s3, bucket):
    """Over HTTPS boto3 streams aws-chunked bodies with a trailing checksum; over HTTP it signs
    the payload's SHA-256 and sends the checksum in a header. Prove each run takes its path."""
    seen: list[dict[str, str]] = []

    def capture(request, **_):
        seen.append({k.lower(): v.decode() if isinstance(v, bytes) else v
                     for k, v in request.headers.items()})

    s3.meta.events.register("before-send.s3.PutObject", capture)
    try:
        s3.put_object(Bucket=bucket, Key="path", Body=b"p" * 100_000)
    finally:
        s3.meta.events.unregister("before-send.s3.PutObject", capture)
    h = seen[-1]
    if cluster.tls:
        assert h["x-amz-content-sha256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
        assert "aws-chunked" in h["content-encoding"]
        assert h["x-amz-trailer"] == "x-amz-checksum-crc32"
    else:
        assert h["x-amz-content-sha256"] == hashlib.sha256(b"p" * 100_000).hexdigest()
        assert "x-amz-checksum-crc32" in h
    got = s3.head_object(Bucket=bucket, Key="path")
    assert got["ContentLength"] == 100_000
    assert got.get("ContentEncoding") in (None, "")  # aws-chunked is never stored


def test_default_checksum_is_crc32(s3, bucket):
    body = b"default integrity protection"
    r = s3.put_object(Bucket=bucket, Key="d", Body=body)
    assert r["ChecksumCRC32"] == b64(zlib.crc32(body).to_bytes(4, "big"))


def test_conditional_requests(s3, bucket):
    r = s3.put_object(Bucket=bucket, Key="c", Body=b"v1")
    etag = r["ETag"]
    lm = s3.head_object(Bucket=bucket, Key="c")["LastModified"]
    # LastModified itself: "not modified since" at S3's one-second resolution. (A date in the
    # future is avoided: HTTP lets servers ignore it.)
    before, after = lm - dt.timedelta(days=1), lm
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"v1"
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"')
        assert error_of(e)[1] == 412
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", IfNoneMatch=etag)
        assert error_of(e)[1] == 304
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", IfModifiedSince=after)
        assert error_of(e)[1] == 304
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", IfUnmodifiedSince=before)
        assert error_of(e)[1] == 412
        assert call(Bucket=bucket, Key="c", IfModifiedSince=before)["ETag"] == etag
        assert call(Bucket=bucket, Key="c", IfUnmodifiedSince=after)["ETag"] == etag
        assert call(Bucket=bucket, Key="c", IfNoneMatch='"other"')["ETag"] == etag
    # Conditional writes.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfNoneMatch="*")
    assert error_of(e) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfMatch='"not-the-etag"')
    assert error_of(e) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"v1"
    s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"v2"
    s3.put_object(Bucket=bucket, Key="new", Body=b"n", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"n"


# ----------------------------------------------------------------------------- multipart

def test_every_multipart_call(s3, bucket):
    src = make_bytes(6 * MiB, seed=9)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp/obj", ContentType="application/x-mp",
                                    Metadata={"kind": "checkpoint"})
    uid = up["UploadId"]
    p1 = make_bytes(5 * MiB, seed=10)
    p3 = make_bytes(1000, seed=11)
    r1 = s3.upload_part(Bucket=bucket, Key="mp/obj", UploadId=uid, PartNumber=1, Body=p1)
    r2 = s3.upload_part_copy(Bucket=bucket, Key="mp/obj", UploadId=uid, PartNumber=2,
                             CopySource={"Bucket": bucket, "Key": "src"},
                             CopySourceRange=f"bytes=100-{100 + 5 * MiB - 1}")
    r3 = s3.upload_part(Bucket=bucket, Key="mp/obj", UploadId=uid, PartNumber=3, Body=p3)
    p2 = src[100:100 + 5 * MiB]
    assert r1["ETag"] == f'"{hashlib.md5(p1).hexdigest()}"'
    assert r2["CopyPartResult"]["ETag"] == f'"{hashlib.md5(p2).hexdigest()}"'
    # A second upload to the same key, to list and abort.
    other = s3.create_multipart_upload(Bucket=bucket, Key="mp/other")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp/other", UploadId=other, PartNumber=1, Body=b"zz")
    # ListParts, paginated.
    lp = s3.list_parts(Bucket=bucket, Key="mp/obj", UploadId=uid, MaxParts=2)
    assert [p["PartNumber"] for p in lp["Parts"]] == [1, 2]
    assert lp["IsTruncated"]
    lp2 = s3.list_parts(Bucket=bucket, Key="mp/obj", UploadId=uid,
                        PartNumberMarker=lp["NextPartNumberMarker"])
    assert [(p["PartNumber"], p["Size"]) for p in lp2["Parts"]] == [(3, 1000)]
    assert not lp2["IsTruncated"]
    # ListMultipartUploads, paginated.
    lu = s3.list_multipart_uploads(Bucket=bucket)
    assert sorted(u["UploadId"] for u in lu["Uploads"]) == sorted([uid, other])
    lu1 = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=1)
    assert len(lu1["Uploads"]) == 1 and lu1["IsTruncated"]
    lu2 = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=1,
                                    KeyMarker=lu1["NextKeyMarker"],
                                    UploadIdMarker=lu1["NextUploadIdMarker"])
    assert [u["UploadId"] for u in lu1["Uploads"] + lu2["Uploads"]] == [uid, other]
    # Not visible before Complete.
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="mp/obj")
    parts = [{"PartNumber": 1, "ETag": r1["ETag"]},
             {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]},
             {"PartNumber": 3, "ETag": r3["ETag"]}]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid,
                                        MultipartUpload={"Parts": parts})
    want_etag = multipart_etag([hashlib.md5(p).digest() for p in (p1, p2, p3)])
    assert done["ETag"] == want_etag
    h = s3.head_object(Bucket=bucket, Key="mp/obj")
    assert h["ETag"] == want_etag
    assert h["ContentLength"] == len(p1) + len(p2) + len(p3)
    assert (h["ContentType"], h["Metadata"]) == ("application/x-mp", {"kind": "checkpoint"})
    whole = s3.get_object(Bucket=bucket, Key="mp/obj")["Body"].read()
    assert hashlib.md5(whole).digest() == hashlib.md5(p1 + p2 + p3).digest()
    edge = s3.get_object(Bucket=bucket, Key="mp/obj", Range=f"bytes={5 * MiB - 10}-{5 * MiB + 9}")
    assert edge["Body"].read() == (p1 + p2)[5 * MiB - 10:5 * MiB + 10]
    # Abort.
    s3.abort_multipart_upload(Bucket=bucket, Key="mp/other", UploadId=other)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp/other", UploadId=other)
    assert error_of(e) == ("NoSuchUpload", 404)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")  # both finished
    # The upload is gone once completed; retrying its Complete gets the same answer, as from S3.
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid,
                                         MultipartUpload={"Parts": parts})
    assert again["ETag"] == done["ETag"]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid,
                                     MultipartUpload={"Parts": parts[:1]})
    assert error_of(e) == ("NoSuchUpload", 404)


def test_multipart_rules(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    small = [s3.upload_part(Bucket=bucket, Key="m", UploadId=uid, PartNumber=n, Body=b"s" * 100)
             for n in (1, 2)]
    parts = [{"PartNumber": n, "ETag": r["ETag"]} for n, r in zip((1, 2), small, strict=True)]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid,
                                     MultipartUpload={"Parts": parts})
    assert error_of(e) == ("EntityTooSmall", 400)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid,
                                     MultipartUpload={"Parts": parts[::-1]})
    assert error_of(e) == ("InvalidPartOrder", 400)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]})
    assert error_of(e) == ("InvalidPart", 400)
    # Still open after the refusals: a valid completion (one small last part) works.
    s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid,
                                 MultipartUpload={"Parts": parts[:1]})
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"s" * 100


def test_upload_and_download_200mb_file(cluster, s3, bucket, tmp_path):
    src, dst = tmp_path / "big.bin", tmp_path / "big.out"
    size = 200_000_000
    md5 = make_file(src, size, seed=42)
    s3.upload_file(str(src), bucket, "big.bin")  # s3transfer: 8 MiB parts, 10 threads, CRC32
    h = s3.head_object(Bucket=bucket, Key="big.bin", ChecksumMode="ENABLED")
    assert h["ContentLength"] == size
    nparts = -(-size // (8 * MiB))
    assert h["ETag"].endswith(f'-{nparts}"')
    # The object's CRC32 as S3 defines it for multipart: composite (-N) or full-object.
    crc = h["ChecksumCRC32"]
    if "-" in crc:
        assert crc.endswith(f"-{nparts}")
    else:
        full = 0
        with open(src, "rb") as f:
            while chunk := f.read(8 * MiB):
                full = zlib.crc32(chunk, full)
        assert crc == b64(full.to_bytes(4, "big"))
    s3.download_file(bucket, "big.bin", str(dst))  # ranged GETs in parallel
    assert file_md5(dst) == md5
    dst.unlink()
    # Checkpoint-writer settings: 64 MiB parts, two streams.
    cfg = boto3.s3.transfer.TransferConfig(multipart_chunksize=64 * MiB, max_concurrency=2)
    s3.upload_file(str(src), bucket, "big64.bin", Config=cfg)
    assert s3.head_object(Bucket=bucket, Key="big64.bin")["ETag"].endswith('-3"')
    s3.download_file(bucket, "big64.bin", str(dst), Config=cfg)
    assert file_md5(dst) == md5


def test_aws_cli_on_the_same_endpoint(cluster, s3, bucket, tmp_path):
    """The aws cli, over this module's protocol too (over HTTPS it trusts the certificate by
    AWS_CA_BUNDLE and sends aws-chunked bodies with trailers, like boto3)."""
    env = cluster.aws_env(tmp_path / "awsconfig")
    aws = [str(Path(sys.executable).with_name("aws")), "--endpoint-url", cluster.endpoint]
    src = tmp_path / "nine.bin"
    md5 = make_file(src, 9_000_000, seed=19)  # above the cli's 8 MiB multipart threshold
    for args in (["s3", "cp", str(src), f"s3://{bucket}/cli/nine.bin"],
                 ["s3", "cp", f"s3://{bucket}/cli/nine.bin", str(tmp_path / "back.bin")]):
        p = subprocess.run(aws + args, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    assert file_md5(tmp_path / "back.bin") == md5
    assert s3.head_object(Bucket=bucket, Key="cli/nine.bin")["ETag"].endswith('-2"')
    p = subprocess.run(aws + ["s3", "ls", f"s3://{bucket}/cli/"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "nine.bin" in p.stdout


def test_concurrent_clients(cluster, s3, bucket):
    """Many clients at once, as a data loader's workers are: both gateway worker processes
    share the metadata store; no request may fail, and racing overwrites of one key leave one
    whole version."""
    def worker(w: int) -> list[str]:
        c = cluster.client(max_pool_connections=4)
        keys = []
        for i in range(12):
            key = f"conc/{w:02d}/{i:02d}"
            body = make_bytes(1000 + 97 * i, seed=w * 100 + i)
            assert c.put_object(Bucket=bucket, Key=key, Body=body)["ETag"] == \
                f'"{hashlib.md5(body).hexdigest()}"'
            assert c.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            c.put_object(Bucket=bucket, Key="conc/shared", Body=make_bytes(5000, seed=w))
            if i % 3 == 0:
                c.delete_object(Bucket=bucket, Key=key)
            else:
                keys.append(key)
        return keys

    with ThreadPoolExecutor(8) as pool:
        kept = sorted(k for ks in pool.map(worker, range(8)) for k in ks)
    listed = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="conc/") for o in page.get("Contents", [])]
    assert listed == sorted(kept + ["conc/shared"])
    g = s3.get_object(Bucket=bucket, Key="conc/shared")
    body = g["Body"].read()
    assert body in {make_bytes(5000, seed=w) for w in range(8)}
    assert g["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'


def _gateway_memory(cluster) -> dict[int, dict[str, int]]:
    """VmRSS / VmHWM (MiB) of the gateway's processes: `serve` and its workers."""
    out = {}
    for pid in cluster.child_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"node" in argv:
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        out[pid] = {line.split(":")[0]: int(line.split()[1]) // 1024
                    for line in status.splitlines() if line.startswith(("VmRSS", "VmHWM"))}
    return out


def test_one_300mb_put_and_get_stream_through_bounded_memory(cluster, s3, bucket, tmp_path):
    """A single PUT (no multipart) and a GET of 300 MB: no gateway process may grow by more
    than a third of that, i.e. bodies stream instead of being held."""
    src = tmp_path / "single.bin"
    md5 = make_file(src, 300_000_000, seed=77)
    before = _gateway_memory(cluster)
    assert before
    for pid in before:  # reset the peak (VmHWM) to the current RSS
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    with open(src, "rb") as f:
        assert s3.put_object(Bucket=bucket, Key="single", Body=f)["ETag"] == f'"{md5}"'
    body = s3.get_object(Bucket=bucket, Key="single")["Body"]
    got = hashlib.md5()
    for chunk in iter(lambda: body.read(MiB), b""):
        got.update(chunk)
    assert got.hexdigest() == md5
    after = _gateway_memory(cluster)
    for pid, mem in after.items():
        if pid in before:
            growth = mem["VmHWM"] - before[pid]["VmRSS"]
            assert growth < 100, (pid, before[pid], mem)
