"""S3 semantics of the gateway against real node processes and `zonegate serve`, with boto3:
buckets, objects, ranges, conditionals, listing, deletes, errors and fragment cleanup."""

from __future__ import annotations

import hashlib
import socket
import urllib.request
from datetime import UTC, datetime, timedelta
from xml.etree import ElementTree as ET

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import (
    OTHER_ACCESS,
    OTHER_SECRET,
    Gateway,
    archive_ids,
    serving,
    signed_request,
    wait_for,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with serving(Gateway(tmp_path_factory.mktemp("gw"), workers=2)) as g:
        yield g


@pytest.fixture(scope="module")
def s3(gw):
    return gw.client()


@pytest.fixture
def bucket(s3, request):
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=o["Key"])
    s3.delete_bucket(Bucket=name)


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def test_bucket_lifecycle_and_names(s3):
    s3.create_bucket(Bucket="life-bucket")
    assert "life-bucket" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket="life-bucket")
    assert s3.get_bucket_location(Bucket="life-bucket").get("LocationConstraint") in (None, "")
    # Re-creating an owned bucket in us-east-1: AWS's legacy 200 (elsewhere 409, see
    # test_gateway_core_compat).
    assert s3.create_bucket(Bucket="life-bucket")["ResponseMetadata"]["HTTPStatusCode"] == 200
    for bad in ["ab", "UPPER", "has_underscore", "-dash", "a..b", "192.168.1.1", "x" * 64]:
        with pytest.raises(ClientError) as e:
            s3.create_bucket(Bucket=bad)
        assert code(e) == "InvalidBucketName", bad
    s3.put_object(Bucket="life-bucket", Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="life-bucket")
    assert code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket="life-bucket", Key="k")
    s3.delete_bucket(Bucket="life-bucket")
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="life-bucket")
    assert e.value.response["Error"]["Code"] == "404"
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="life-bucket")
    assert code(e) == "NoSuchBucket"


def test_users_own_their_buckets(gw, s3, bucket):
    bob = gw.client(OTHER_ACCESS, OTHER_SECRET)
    assert bucket not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as e:
        bob.create_bucket(Bucket=bucket)
    assert code(e) == "BucketAlreadyExists"
    with pytest.raises(ClientError) as e:
        bob.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        gw.client(OTHER_ACCESS, "wrong-secret").list_buckets()
    assert code(e) == "SignatureDoesNotMatch"


def test_anonymous_is_denied_with_s3_error_xml(gw, bucket):
    req = urllib.request.Request(f"{gw.endpoint}/{bucket}/k", method="GET")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req)
    assert e.value.code == 403
    rid = e.value.headers["x-amz-request-id"]
    root = ET.fromstring(e.value.read())
    assert root.findtext("Code") == "AccessDenied"
    assert root.findtext("RequestId") == rid


def test_put_get_head_roundtrip(s3, bucket):
    body = b"checkpoint shard " * 1000
    r = s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=body, ContentType="application/x-ck",
                      Metadata={"epoch": "7", "Step": "100"}, CacheControl="max-age=5",
                      ContentDisposition="attachment", ContentLanguage="en")
    assert r["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    g = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert g["Body"].read() == body
    assert g["ETag"] == r["ETag"] and g["ContentLength"] == len(body)
    assert g["ContentType"] == "application/x-ck"
    assert g["Metadata"] == {"epoch": "7", "step": "100"}
    assert g["CacheControl"] == "max-age=5" and g["ContentDisposition"] == "attachment"
    h = s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert h["ContentLength"] == len(body) and h["ETag"] == r["ETag"]
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="missing")
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="missing")
    assert e.value.response["Error"]["Code"] == "404"


def test_ranges(s3, bucket):
    body = bytes(range(256)) * 8192  # 2 MiB: spans erasure segments
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    for rng, want in [("bytes=0-0", body[:1]), ("bytes=100-1048676", body[100:1048677]),
                      ("bytes=2000000-", body[2000000:]), ("bytes=-10", body[-10:]),
                      ("bytes=5-99999999", body[5:])]:
        g = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert g["Body"].read() == want, rng
        assert g["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert g["ContentRange"].endswith(f"/{len(body)}")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")
    assert code(e) == "InvalidRange"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    g = s3.get_object(Bucket=bucket, Key="r", Range="bytes=garbage")
    assert g["ResponseMetadata"]["HTTPStatusCode"] == 200 and len(g["Body"].read()) == len(body)


def test_conditional_get_and_put(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"v1")["ETag"]
    s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == etag
    future = datetime.now(UTC) + timedelta(days=1)
    past = datetime.now(UTC) - timedelta(days=1)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert code(e) == "PreconditionFailed"
    s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=past)
    s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=future)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    # Conditional PUT: If-None-Match: * refuses an existing key; If-Match needs the ETag.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfNoneMatch="*")
    assert code(e) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="c-new", Body=b"n", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfMatch='"0000"')
    assert code(e) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"v2"


def test_response_overrides(s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"x", ContentType="text/plain")
    g = s3.get_object(Bucket=bucket, Key="o", ResponseContentType="application/json",
                      ResponseContentDisposition="inline; filename=a.json",
                      ResponseCacheControl="no-cache")
    assert g["ContentType"] == "application/json"
    assert g["ContentDisposition"] == "inline; filename=a.json"
    assert g["CacheControl"] == "no-cache"


def test_listing_v1_v2_delimiter_pagination_encoding(s3, bucket):
    keys = ["a/1", "a/2", "b", "c/x/1", "c/y", "d e+f", "é", "z\x01"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"1")
    r = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in r["Contents"]] == sorted(keys, key=lambda k: k.encode())
    assert "Owner" not in r["Contents"][0]
    assert "Owner" in s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"][0]
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "c/"]
    assert r["KeyCount"] == 6
    # Pages of 2 with a delimiter: prefixes count toward max-keys.
    pages = list(s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 2}))
    seen = [p["Prefix"] for pg in pages for p in pg.get("CommonPrefixes", [])] + \
        [o["Key"] for pg in pages for o in pg.get("Contents", [])]
    assert sorted(seen) == sorted(["a/", "c/", "b", "d e+f", "é", "z\x01"])
    assert all(pg["KeyCount"] <= 2 for pg in pages) and len(pages) == 3
    r = s3.list_objects_v2(Bucket=bucket, Prefix="c/", Delimiter="/", StartAfter="c/")
    assert [o["Key"] for o in r["Contents"]] == ["c/y"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["c/x/"]
    # v1: Marker echoed, NextMarker only with a delimiter.
    r = s3.list_objects(Bucket=bucket, MaxKeys=3)
    assert r["IsTruncated"] and "NextMarker" not in r and r["Marker"] == ""
    r = s3.list_objects(Bucket=bucket, MaxKeys=2, Delimiter="/")
    assert r["IsTruncated"] and r["NextMarker"] == "b"
    r = s3.list_objects(Bucket=bucket, Marker="b", Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["d e+f", "z\x01", "é"]
    with pytest.raises(ClientError) as e:
        s3.list_objects(Bucket=bucket, MaxKeys=-1)
    assert code(e) == "InvalidArgument"


def test_list_encoding_type_url_raw(gw, bucket):
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="sp ace/ü+x", Body=b"1")
    status, _, body = signed_request(gw, "GET", f"/{bucket}",
                                     query="delimiter=%2F&encoding-type=url&list-type=2")
    assert status == 200
    root = ET.fromstring(body)
    ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
    assert root.find("s:CommonPrefixes/s:Prefix", ns).text == "sp%20ace/"
    assert root.findtext("s:EncodingType", namespaces=ns) == "url"
    r = s3.list_objects_v2(Bucket=bucket)  # boto3 asks for url encoding and decodes it
    assert [o["Key"] for o in r["Contents"]] == ["sp ace/ü+x"]


def test_list_object_versions_as_unversioned(s3, bucket):
    for k in ["v1", "v2"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    r = s3.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in r["Versions"]] == \
        [("v1", "null", True), ("v2", "null", True)]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "v1", "VersionId": "null"}]})
    assert r["Deleted"][0]["Key"] == "v1"


def test_delete_objects_quiet_and_limits(gw, s3, bucket):
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k0"}, {"Key": "nope"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["k0", "nope"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k1"}], "Quiet": True})
    assert "Deleted" not in r
    with pytest.raises(ClientError) as e:
        s3.delete_objects(Bucket=bucket,
                          Delete={"Objects": [{"Key": f"x{i}"} for i in range(1001)]})
    assert code(e) == "MalformedXML"
    status, _, body = signed_request(gw, "POST", f"/{bucket}", query="delete=",
                                     body=b"<Delete><Object><Key>k2</Key>", headers={})
    assert status == 400 and ET.fromstring(body).findtext("Code") == "MalformedXML"
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]) == \
        ["k2", "k3", "k4"]


def test_limits_and_bad_input(gw, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert code(e) == "KeyTooLongError"
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="m", Body=b"x", Metadata={"big": "v" * 2100})
    assert code(e) == "MetadataTooLarge"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5", Body=b"abc",
                      ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")  # MD5 of b""
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="ck", Body=b"abc", ChecksumCRC32="AAAAAA==")
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_website(Bucket=bucket)  # a subresource not served: NotImplemented
    assert code(e) == "NotImplemented"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert keys == {"k" * 1024}  # nothing of the refused uploads was stored


def test_checksums_echoed_and_returned(s3, bucket):
    body = b"some training data" * 1000
    for algo in ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]:
        r = s3.put_object(Bucket=bucket, Key=f"ck-{algo}", Body=body, ChecksumAlgorithm=algo)
        value = r[f"Checksum{algo}"]
        h = s3.head_object(Bucket=bucket, Key=f"ck-{algo}", ChecksumMode="ENABLED")
        assert h[f"Checksum{algo}"] == value
        g = s3.get_object(Bucket=bucket, Key=f"ck-{algo}", ChecksumMode="ENABLED")
        assert g["Body"].read() == body and g[f"Checksum{algo}"] == value
    assert "ChecksumSHA256" not in s3.head_object(Bucket=bucket, Key="ck-SHA256")


def test_virtual_host_style_and_expect_continue(gw, s3, bucket):
    s3.put_object(Bucket=bucket, Key="vh/key", Body=b"virtual")
    status, headers, body = signed_request(gw, "GET", "/vh/key",
                                           host=f"{bucket}.localhost:{gw.port}")
    assert status == 200 and body == b"virtual"
    assert headers.get("x-amz-request-id")
    # Expect: 100-continue: the gateway answers 100 before the body is sent.
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    payload = b"p" * 100_000
    areq = AWSRequest(method="PUT", url=f"http://127.0.0.1:{gw.port}/{bucket}/cont",
                      data=payload, headers={"Expect": "100-continue",
                                             "Content-Length": str(len(payload)),
                                             "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(areq)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        head = f"PUT /{bucket}/cont HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in areq.headers.items()) + "\r\n"
        sock.sendall(head.encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 100")
        sock.sendall(payload)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    assert s3.get_object(Bucket=bucket, Key="cont")["Body"].read() == payload


def test_overwrite_and_delete_free_fragments(gw, s3, bucket):
    s3.put_object(Bucket=bucket, Key="seed", Body=b"s")  # the bucket's stream exists
    base = archive_ids(gw)
    s3.put_object(Bucket=bucket, Key="f", Body=b"1" * 3000)
    one = archive_ids(gw) - base
    assert len(one) == gw.k + gw.m
    s3.put_object(Bucket=bucket, Key="f", Body=b"2" * 3000)
    assert wait_for(lambda: not (archive_ids(gw) & one))  # old fragments deleted
    assert len(archive_ids(gw) - base) == gw.k + gw.m
    s3.delete_object(Bucket=bucket, Key="f")
    assert wait_for(lambda: not (archive_ids(gw) - base))


def test_presigned_urls_v4_and_v2(gw, s3, bucket):
    import http.client
    from urllib.parse import urlsplit

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY

    def call(method, url, body=None):
        u = urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.request(method, f"{u.path}?{u.query}", body=body)
            r = conn.getresponse()
            return r.status, r.getheader("ETag"), r.read()
        finally:
            conn.close()

    v2 = gw.client(ACCESS_KEY, SECRET_KEY, signature_version="s3")
    for signer in (s3, v2):
        url = signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "ps"},
                                            ExpiresIn=60)
        status, etag, _ = call("PUT", url, b"presigned body")
        assert status == 200 and etag == f'"{hashlib.md5(b"presigned body").hexdigest()}"'
        url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "ps"},
                                            ExpiresIn=60)
        assert call("GET", url)[2] == b"presigned body"
        status, _, body = call("GET", url.replace("/ps?", "/other?"))
        assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "ps"},
                                    ExpiresIn=1)
    import time
    time.sleep(2.1)
    status, _, body = call("GET", url)
    assert status == 403 and b"expired" in body


def test_unusual_keys_roundtrip(gw, s3, bucket):
    keys = ["ü/é ä+b%20", "a b?c#d", "x/../y", "//dbl", "tab\tk", "~!@$&'()*,;=:"]
    v2 = gw.client(signature_version="s3")
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == k.encode(), k
        assert v2.get_object(Bucket=bucket, Key=k)["Body"].read() == k.encode(), k
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(keys, key=lambda k: k.encode())


def test_oversized_put_refused_before_the_body(gw, bucket):
    """A 6 GB single PUT announced with Expect: 100-continue is refused at once: no 100, no
    body read, an EntityTooLarge error, and the connection closed."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    size = 6_000_000_000
    areq = AWSRequest(method="PUT", url=f"http://127.0.0.1:{gw.port}/{bucket}/huge",
                      headers={"Expect": "100-continue", "Content-Length": str(size),
                               "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(areq)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        head = f"PUT /{bucket}/huge HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in areq.headers.items() if k != "Content-Length") + \
            f"Content-Length: {size}\r\n\r\n"
        sock.sendall(head.encode())
        reply = b""
        while b"</Error>" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    assert reply.startswith(b"HTTP/1.1 400")
    assert b"<Code>EntityTooLarge</Code>" in reply
    assert b"connection: close" in reply.lower()


def test_version_ids_of_an_unversioned_store(s3, bucket):
    s3.put_object(Bucket=bucket, Key="v", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key="v", VersionId="null")["Body"].read() == b"x"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ")
    assert code(e) == "InvalidArgument"  # not a version id of ours, as S3 answers
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="v", VersionId="0123456789abcdef0123456789abcdef")
    assert code(e) == "NoSuchVersion"
    s3.delete_object(Bucket=bucket, Key="v", VersionId="null")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="v")
    assert e.value.response["Error"]["Code"] == "404"


def test_body_cut_short_stores_nothing(gw, s3, bucket):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    s3.put_object(Bucket=bucket, Key="seed", Body=b"s")
    base = archive_ids(gw)
    size = 8 * 1024 * 1024
    areq = AWSRequest(method="PUT", url=f"http://127.0.0.1:{gw.port}/{bucket}/cut",
                      headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(areq)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        head = f"PUT /{bucket}/cut HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in areq.headers.items()) + f"Content-Length: {size}\r\n\r\n"
        sock.sendall(head.encode() + b"c" * (3 * 1024 * 1024))
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="cut")
    assert e.value.response["Error"]["Code"] == "404"
    assert wait_for(lambda: not (archive_ids(gw) - base))


def test_concurrent_overwrites_across_workers(gw, s3, bucket):
    """Racing PUTs of one key through both worker processes: the last commit wins whole, and
    every loser's fragments are freed."""
    from concurrent.futures import ThreadPoolExecutor
    s3.put_object(Bucket=bucket, Key="seed", Body=b"s")
    base = archive_ids(gw)
    bodies = [bytes([i]) * (50_000 + i) for i in range(24)]
    clients = [gw.client() for _ in range(6)]  # separate connections: the kernel spreads them
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda i: clients[i % 6].put_object(Bucket=bucket, Key="race",
                                                          Body=bodies[i]), range(24)))
    g = s3.get_object(Bucket=bucket, Key="race")
    data = g["Body"].read()
    assert data in bodies and g["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert wait_for(lambda: len(archive_ids(gw) - base) == gw.k + gw.m)


def test_list_buckets_prefix_and_pages(s3):
    names = [f"lb-page-{i}" for i in range(5)]
    for n in names:
        s3.create_bucket(Bucket=n)
    try:
        pages = list(s3.get_paginator("list_buckets").paginate(
            Prefix="lb-page-", PaginationConfig={"PageSize": 2}))
        assert [b["Name"] for p in pages for b in p["Buckets"]] == names
        assert len(pages) == 3
    finally:
        for n in names:
            s3.delete_bucket(Bucket=n)


@pytest.mark.parametrize("tamper", [False, True])
def test_signed_aws_chunked_upload_with_trailer(gw, s3, bucket, tamper):
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER end to end: chunk signatures chained from
    the seed, a signed trailer checksum; a tampered chunk stores nothing."""
    import base64
    import http.client

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.gateway.test_aws_chunked import ref_encode_signed, ref_key
    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    data = bytes(range(256)) * 3000
    key = f"chunked-{tamper}"
    req = AWSRequest(method="PUT", url=f"http://127.0.0.1:{gw.port}/{bucket}/{key}", headers={
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-sha256"})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in req.headers.items()}
    amz_date = headers["X-Amz-Date"]
    seed = headers["Authorization"].rsplit("Signature=", 1)[1]
    sk = ref_key(SECRET_KEY, amz_date[:8])
    value = base64.b64encode(hashlib.sha256(data).digest()).decode()
    wire = ref_encode_signed(sk, amz_date, f"{amz_date[:8]}/us-east-1/s3/aws4_request", seed,
                             [data[i:i + 65536] for i in range(0, len(data), 65536)],
                             [("x-amz-checksum-sha256", value)])
    if tamper:
        i = wire.index(b"\r\n") + 10
        wire = wire[:i] + bytes([wire[i] ^ 1]) + wire[i + 1:]
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("PUT", f"/{bucket}/{key}", body=wire,
                     headers={**headers, "Content-Length": str(len(wire))})
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    if tamper:
        assert r.status == 403 and b"SignatureDoesNotMatch" in body
        with pytest.raises(ClientError):
            s3.head_object(Bucket=bucket, Key=key)
        return
    assert r.status == 200, body
    assert r.getheader("x-amz-checksum-sha256") == value
    h = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert h["ChecksumSHA256"] == value and h.get("ContentEncoding") is None
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data
