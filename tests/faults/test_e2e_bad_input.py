"""Bad input against a real `zonegate dev` cluster: each gets S3's error code and status, and
nothing is stored or changed. Requests are built by hand (signed with botocore's signer) and
sent over raw sockets where a client library would refuse to send them."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import socket
import time
import urllib.parse
from unittest import mock

import pytest
from botocore.exceptions import ClientError

from tests.support import s3raw
from tests.support.devcluster import ACCESS_KEY, SECRET_KEY, MiB, start_cluster

pytestmark = pytest.mark.slow

BUCKET = "bad-input"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from start_cluster(tmp_path_factory, "badinput")


@pytest.fixture(scope="module")
def s3(cluster):
    c = cluster.client()
    c.create_bucket(Bucket=BUCKET)
    c.put_object(Bucket=BUCKET, Key="existing", Body=b"original")
    return c


def sign(cluster, method: str, path: str, *, query: str = "", body: bytes = b"",
         headers: dict[str, str] | None = None, payload_hash: str | None = None,
         secret: str = SECRET_KEY) -> tuple[str, dict[str, str]]:
    """(target, headers) of a SigV4-signed request (tests/support/s3raw.py: botocore's signer)."""
    target = path + (f"?{query}" if query else "")
    return target, s3raw.sign_v4(s3raw.Creds(cluster.port, ACCESS_KEY, secret), method, target,
                                 body=body, headers=headers, payload_hash=payload_hash)


def send(cluster, method: str, target: str, headers: dict[str, str], body: bytes = b""
         ) -> tuple[int, dict[str, str], bytes]:
    return s3raw.send(s3raw.Creds(cluster.port, ACCESS_KEY, SECRET_KEY), method, target,
                      headers, body)


error = s3raw.error


def code(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    r = excinfo.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def assert_absent(s3, key: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=BUCKET, Key=key)
    assert code(e)[1] == 404
    assert key not in [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def assert_original(s3) -> None:
    assert s3.get_object(Bucket=BUCKET, Key="existing")["Body"].read() == b"original"


# ---------------------------------------------------------------------------- signatures

def test_wrong_secret_is_signature_does_not_match(cluster, s3):
    bad = cluster.client(secret_key="not-the-secret-key")
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket=BUCKET, Key="forged", Body=b"x")
    assert code(e) == ("SignatureDoesNotMatch", 403)
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket=BUCKET, Key="existing", Body=b"overwritten")
    assert code(e) == ("SignatureDoesNotMatch", 403)
    assert_absent(s3, "forged")
    assert_original(s3)


def test_unknown_access_key_and_anonymous_requests(cluster, s3):
    target, headers = sign(cluster, "PUT", f"/{BUCKET}/anon", body=b"x")
    headers["Authorization"] = headers["Authorization"].replace(ACCESS_KEY, "AKIDNOTKNOWN00000000")
    status, _, body = send(cluster, "PUT", target, headers, b"x")
    assert (status, error(body)["Code"]) == (403, "InvalidAccessKeyId")
    status, _, body = send(cluster, "PUT", f"/{BUCKET}/anon", {}, b"x")
    assert (status, error(body)["Code"]) == (403, "AccessDenied")
    status, _, body = send(cluster, "GET", f"/{BUCKET}", {})
    assert (status, error(body)["Code"]) == (403, "AccessDenied")
    assert_absent(s3, "anon")


@pytest.mark.parametrize("form", s3raw.AUTH_FORMS)
def test_access_key_not_utf8_is_invalid_access_key_id(cluster, s3, form):
    """Issue 24 D3: a 500 from the user lookup in the header forms before."""
    c = s3raw.Creds(cluster.port, ACCESS_KEY, SECRET_KEY)
    for key in (b"AKID\xff", b"\xc3(", b"\xe9t\xe9"):
        tgt, headers = s3raw.signed_as(c, form, key, "PUT", f"/{BUCKET}/not-utf8")
        status, _, body = send(cluster, "PUT", tgt, headers, b"x")
        assert (status, error(body)["Code"]) == (403, "InvalidAccessKeyId"), (key, body[:300])
    assert_absent(s3, "not-utf8")


def test_sigv2_url_expiring_after_year_9999_is_refused(cluster, s3):
    """Issue 24 D4: validly signed, such a URL was accepted (200) as if it never expired."""
    c = s3raw.Creds(cluster.port, ACCESS_KEY, SECRET_KEY)
    for expires_at in (253402300800, 10**15):
        tgt = s3raw.presign_v2_at(c, "GET", f"/{BUCKET}/existing", expires_at)
        status, _, body = send(cluster, "GET", tgt, {})
        assert (status, error(body)["Code"]) == (403, "AccessDenied"), body[:300]
    tgt = s3raw.presign_v2_at(c, "GET", f"/{BUCKET}/existing", int(time.time()) + 600)
    assert send(cluster, "GET", tgt, {})[::2] == (200, b"original")


def test_error_bodies_are_s3_xml_and_head_errors_have_none(cluster, s3):
    target, headers = sign(cluster, "GET", f"/{BUCKET}/no-such-key")
    status, hdrs, body = send(cluster, "GET", target, headers)
    assert status == 404
    assert "xml" in hdrs.get("content-type", "")
    err = error(body)
    assert err["Code"] == "NoSuchKey" and err["Message"] and err["RequestId"]
    assert b"Traceback" not in body
    target, headers = sign(cluster, "HEAD", f"/{BUCKET}/no-such-key")
    status, _, body = send(cluster, "HEAD", target, headers)
    assert status == 404 and body == b""


def test_payload_not_matching_its_signed_hash_stores_nothing(cluster, s3):
    signed_body = b"what was signed"
    target, headers = sign(cluster, "PUT", f"/{BUCKET}/tampered", body=signed_body)
    sent = b"what was sent!!"  # same length, different bytes
    headers["Content-Length"] = str(len(sent))
    status, _, body = send(cluster, "PUT", target, headers, sent)
    assert status == 400
    assert error(body)["Code"] in ("XAmzContentSHA256Mismatch", "BadDigest")
    assert_absent(s3, "tampered")


def test_skewed_clock_is_request_time_too_skewed(cluster, s3):
    skewed = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    with mock.patch("botocore.auth.get_current_datetime", return_value=skewed):
        target, headers = sign(cluster, "PUT", f"/{BUCKET}/skewed", body=b"x")
    status, _, body = send(cluster, "PUT", target, headers, b"x")
    assert (status, error(body)["Code"]) == (403, "RequestTimeTooSkewed")
    assert_absent(s3, "skewed")


@pytest.mark.parametrize("sigver", ["default", "s3v4"])  # botocore's default here is SigV2
def test_expired_presigned_url(cluster, s3, sigver):
    signer = s3 if sigver == "default" else cluster.client(signature_version="s3v4")
    url = signer.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "existing"},
                                        ExpiresIn=1)
    put = signer.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "late"},
                                        ExpiresIn=1)
    time.sleep(2.1)  # past ExpiresIn=1, whatever the second it was signed in (as elsewhere)
    u = urllib.parse.urlsplit(url)
    status, _, body = send(cluster, "GET", f"{u.path}?{u.query}", {})
    err = error(body)
    assert (status, err["Code"]) == (403, "AccessDenied")
    assert "expired" in err["Message"].lower()
    u = urllib.parse.urlsplit(put)
    status, _, body = send(cluster, "PUT", f"{u.path}?{u.query}", {}, b"too late")
    assert (status, error(body)["Code"]) == (403, "AccessDenied")
    assert_absent(s3, "late")
    # Moving the expiry breaks the signature, which covers it.
    q = urllib.parse.parse_qs(u.query)
    if "X-Amz-Expires" in q:
        q["X-Amz-Expires"] = ["3600"]
    else:
        q["Expires"] = [str(int(q["Expires"][0]) + 3600)]
    forged = urllib.parse.urlencode({k: v[0] for k, v in q.items()})
    status, _, body = send(cluster, "PUT", f"{u.path}?{forged}", {}, b"forged")
    assert (status, error(body)["Code"]) == (403, "SignatureDoesNotMatch")
    assert_absent(s3, "late")


# ------------------------------------------------------------------------------ payloads

def test_malformed_xml(cluster, s3):
    uid = s3.create_multipart_upload(Bucket=BUCKET, Key="xml-mp")["UploadId"]
    part = s3.upload_part(Bucket=BUCKET, Key="xml-mp", UploadId=uid, PartNumber=1, Body=b"p")
    bodies = [
        b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>",  # truncated
        b"this is not xml",
        b"<CompleteMultipartUpload></CompleteMultipartUpload>",  # no parts
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        b"<CompleteMultipartUpload>&b;</CompleteMultipartUpload>",  # entity expansion
    ]
    for xml in bodies:
        target, headers = sign(cluster, "POST", f"/{BUCKET}/xml-mp",
                               query=f"uploadId={urllib.parse.quote(uid)}", body=xml)
        status, _, body = send(cluster, "POST", target, headers, xml)
        assert status == 400, xml
        assert error(body)["Code"] == "MalformedXML", (xml, body)
    # The upload is untouched and can still complete.
    parts = s3.list_parts(Bucket=BUCKET, Key="xml-mp", UploadId=uid)["Parts"]
    assert [p["ETag"] for p in parts] == [part["ETag"]]
    assert_absent(s3, "xml-mp")
    # DeleteObjects with garbage deletes nothing.
    xml = b"<Delete><Object><Key>existing</Key></Object>"
    md5 = base64.b64encode(hashlib.md5(xml).digest()).decode()
    target, headers = sign(cluster, "POST", f"/{BUCKET}", query="delete=", body=xml,
                           headers={"Content-MD5": md5})
    status, _, body = send(cluster, "POST", target, headers, xml)
    assert (status, error(body)["Code"]) == (400, "MalformedXML")
    assert_original(s3)


def test_wrong_content_md5(cluster, s3):
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=BUCKET, Key="md5", Body=b"the body", ContentMD5=wrong)
    assert code(e) == ("BadDigest", 400)
    assert_absent(s3, "md5")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=BUCKET, Key="existing", Body=b"changed", ContentMD5=wrong)
    assert code(e) == ("BadDigest", 400)
    assert_original(s3)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=BUCKET, Key="md5", Body=b"the body", ContentMD5="not-an-md5!")
    assert code(e) == ("InvalidDigest", 400)
    assert_absent(s3, "md5")
    uid = s3.create_multipart_upload(Bucket=BUCKET, Key="md5-mp")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=BUCKET, Key="md5-mp", UploadId=uid, PartNumber=1,
                       Body=b"part body", ContentMD5=wrong)
    assert code(e) == ("BadDigest", 400)
    assert not s3.list_parts(Bucket=BUCKET, Key="md5-mp", UploadId=uid).get("Parts")
    s3.abort_multipart_upload(Bucket=BUCKET, Key="md5-mp", UploadId=uid)


def _send_cut_short(cluster, target: str, headers: dict[str, str], body: bytes, cut: int) -> None:
    """Send the headers and the first `cut` bytes of `body`, then close the connection."""
    lines = [f"PUT {target} HTTP/1.1", f"Host: 127.0.0.1:{cluster.port}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() != "host"]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=30) as sock:
        sock.sendall(head + body[:cut])
        time.sleep(0.3)
        sock.shutdown(socket.SHUT_WR)
        try:
            sock.recv(65536)  # whatever the server says (or nothing) before closing
        except OSError:
            pass


@pytest.mark.parametrize("signed", [True, False], ids=["signed-payload", "unsigned-payload"])
def test_bodies_cut_short_store_nothing(cluster, s3, signed):
    body = bytes(range(256)) * (2 * MiB // 256)
    for key in (f"short-{signed}", "existing"):
        target, headers = sign(cluster, "PUT", f"/{BUCKET}/{key}", body=body,
                               payload_hash=None if signed else "UNSIGNED-PAYLOAD")
        headers["Content-Length"] = str(len(body))
        _send_cut_short(cluster, target, headers, body, MiB + 17)
    # The gateway notices the short body when the connection closes: give it a moment.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            s3.head_object(Bucket=BUCKET, Key=f"short-{signed}")
        except ClientError:
            break
    assert_absent(s3, f"short-{signed}")
    assert_original(s3)
    # A multipart part cut short is not listed either.
    uid = s3.create_multipart_upload(Bucket=BUCKET, Key="short-mp")["UploadId"]
    target, headers = sign(cluster, "PUT", f"/{BUCKET}/short-mp",
                           query=f"partNumber=1&uploadId={urllib.parse.quote(uid)}", body=body,
                           payload_hash=None if signed else "UNSIGNED-PAYLOAD")
    headers["Content-Length"] = str(len(body))
    _send_cut_short(cluster, target, headers, body, MiB)
    time.sleep(1)
    assert not s3.list_parts(Bucket=BUCKET, Key="short-mp", UploadId=uid).get("Parts")
    s3.abort_multipart_upload(Bucket=BUCKET, Key="short-mp", UploadId=uid)


def test_aws_chunked_body_cut_short_stores_nothing(cluster, s3):
    chunk = b"c" * 65536
    full = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 4 + b"0\r\n\r\n"
    target, headers = sign(cluster, "PUT", f"/{BUCKET}/short-chunked",
                           payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                           headers={"Content-Encoding": "aws-chunked",
                                    "X-Amz-Decoded-Content-Length": str(4 * len(chunk))})
    headers["Content-Length"] = str(len(full))
    _send_cut_short(cluster, target, headers, full, len(full) // 2)
    time.sleep(1)
    assert_absent(s3, "short-chunked")


def test_too_long_keys_and_metadata(s3):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=BUCKET, Key="k" * 1025, Body=b"x")
    assert code(e) == ("KeyTooLongError", 400)
    s3.put_object(Bucket=BUCKET, Key="k" * 1024, Body=b"x")  # the limit itself is fine
    s3.delete_object(Bucket=BUCKET, Key="k" * 1024)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=BUCKET, Key="meta", Body=b"x", Metadata={"big": "v" * 2100})
    assert code(e) == ("MetadataTooLarge", 400)
    assert_absent(s3, "meta")


@pytest.mark.parametrize("name", ["UPPERCASE", "ab", "a..b", "192.168.5.4", "-dash",
                                  "under_score", "x" * 64, "xn--punycode"])
def test_invalid_bucket_names(cluster, s3, name):
    target, headers = sign(cluster, "PUT", f"/{name}")
    status, _, body = send(cluster, "PUT", target, headers)
    assert (status, error(body)["Code"]) == (400, "InvalidBucketName")
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_invalid_max_keys(cluster, s3):
    for value in ("-1", "lots"):
        target, headers = sign(cluster, "GET", f"/{BUCKET}", query=f"max-keys={value}")
        status, _, body = send(cluster, "GET", target, headers)
        assert (status, error(body)["Code"]) == (400, "InvalidArgument")


def test_unknown_upload_ids(s3):
    bogus = "no-such-upload-0123456789"
    calls = [
        lambda: s3.upload_part(Bucket=BUCKET, Key="u", UploadId=bogus, PartNumber=1, Body=b"x"),
        lambda: s3.list_parts(Bucket=BUCKET, Key="u", UploadId=bogus),
        lambda: s3.complete_multipart_upload(
            Bucket=BUCKET, Key="u", UploadId=bogus,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]}),
        lambda: s3.abort_multipart_upload(Bucket=BUCKET, Key="u", UploadId=bogus),
        lambda: s3.upload_part_copy(Bucket=BUCKET, Key="u", UploadId=bogus, PartNumber=1,
                                    CopySource={"Bucket": BUCKET, "Key": "existing"}),
    ]
    for call in calls:
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == ("NoSuchUpload", 404)
    # An upload id of another key is unknown for this one.
    uid = s3.create_multipart_upload(Bucket=BUCKET, Key="u-real")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=BUCKET, Key="u-other", UploadId=uid)
    assert code(e) == ("NoSuchUpload", 404)
    s3.abort_multipart_upload(Bucket=BUCKET, Key="u-real", UploadId=uid)
    assert_absent(s3, "u")


def test_no_such_bucket(s3):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="no-such-bucket-here", Key="k", Body=b"x")
    assert code(e) == ("NoSuchBucket", 404)
