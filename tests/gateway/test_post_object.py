"""POST object (browser form uploads) against a real `zonegate serve` and node processes, with
forms made as boto3's `generate_presigned_post` makes them (SigV4, and SigV2 with signature
version "s3"): the policy's conditions and expiration, ${filename}, success_action_status and
_redirect, a file streamed in several internal parts, anonymous uploads where the bucket
allows them, and S3's errors for every bad form, with nothing stored after any refusal."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.exceptions import ClientError

from gateway.s3.auth import sigv4
from tests.support.gwcluster import SECRET_KEY, Gateway, archive_ids, wait_for
from tests.support.s3raw import code_of

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("post"), gateway_options={"pending_grace_seconds": 2})
    g.start()
    yield g
    g.stop()


@pytest.fixture(scope="module")
def s3(gw):
    s3 = gw.client(signature_version="s3v4")  # its presigned posts are SigV4 forms
    s3.create_bucket(Bucket="forms")
    return s3


def encode(fields: dict[str, str], file: bytes | None, filename: str = "photo.jpg",
           file_type: str = "image/jpeg") -> tuple[bytes, str]:
    """A multipart/form-data body as a browser sends it (the file last)."""
    b = "----zg" + uuid.uuid4().hex
    out = []
    for k, v in fields.items():
        out.append(f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    if file is not None:
        out.append(f'--{b}\r\nContent-Disposition: form-data; name="file"; '
                   f'filename="{filename}"\r\nContent-Type: {file_type}\r\n\r\n'.encode()
                   + file + b"\r\n")
    out.append(f"--{b}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={b}"


def post(gw, path: str, body: bytes, ctype: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": ctype})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def submit(gw, presigned: dict, file: bytes | None, **kw) -> tuple[int, dict[str, str], bytes]:
    body, ctype = encode(presigned["fields"], file, **kw)
    return post(gw, urlsplit(presigned["url"]).path, body, ctype)


def keys(s3, bucket: str = "forms") -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_sigv4_form_with_conditions_and_filename(gw, s3):
    p = s3.generate_presigned_post(
        "forms", "uploads/${filename}",
        Fields={"success_action_status": "201", "Content-Type": "image/jpeg",
                "x-amz-meta-camera": "x100"},
        Conditions=[{"success_action_status": "201"}, ["starts-with", "$Content-Type", "image/"],
                    {"x-amz-meta-camera": "x100"}, ["content-length-range", 1, 1000]],
        ExpiresIn=600)
    assert "x-amz-signature" in p["fields"]
    status, h, body = submit(gw, p, b"jpeg bytes")
    assert status == 201, body
    assert b"<Key>uploads/photo.jpg</Key>" in body and b"<Bucket>forms</Bucket>" in body
    got = s3.get_object(Bucket="forms", Key="uploads/photo.jpg")
    assert got["Body"].read() == b"jpeg bytes"
    assert got["ContentType"] == "image/jpeg" and got["Metadata"] == {"camera": "x100"}
    assert h["etag"] == got["ETag"] == '"' + hashlib.md5(b"jpeg bytes").hexdigest() + '"'


def test_sigv2_form_and_redirect(gw):
    v2 = gw.client(signature_version="s3")
    p = v2.generate_presigned_post(
        "forms", "v2/file.bin",
        Fields={"success_action_redirect": "https://app.example/done?x=1"},
        Conditions=[{"success_action_redirect": "https://app.example/done?x=1"}])
    assert "signature" in p["fields"] and "AWSAccessKeyId" in p["fields"]
    status, h, _ = submit(gw, p, b"v2 data")
    assert status == 303
    loc = urlsplit(h["location"])
    assert (loc.netloc, loc.path) == ("app.example", "/done")
    q = parse_qs(loc.query)
    assert (q["x"], q["bucket"], q["key"]) == (["1"], ["forms"], ["v2/file.bin"])
    assert q["etag"] == ['"' + hashlib.md5(b"v2 data").hexdigest() + '"']
    assert v2.get_object(Bucket="forms", Key="v2/file.bin")["Body"].read() == b"v2 data"


def test_large_file_streams_in_parts(gw, s3):
    data = bytes(range(256)) * (80 * 1024)   # 20 MiB: several internal parts
    p = s3.generate_presigned_post("forms", "big/blob", Conditions=[
        ["content-length-range", 0, 64 * MiB]])
    status, _, body = submit(gw, p, data)
    assert status == 204, body
    got = s3.get_object(Bucket="forms", Key="big/blob")
    assert got["ETag"] == '"' + hashlib.md5(data).hexdigest() + '"'
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(data).digest()


def _sign_v4(policy_b64: str, fields: dict[str, str]) -> dict[str, str]:
    date = time.strftime("%Y%m%d", time.gmtime())
    cred = fields["x-amz-credential"]
    key = sigv4.signing_key(SECRET_KEY, date, cred.split("/")[2])
    return {**fields, "policy": policy_b64, "x-amz-signature": sigv4.sign(key, policy_b64)}


@pytest.mark.parametrize("case, want", [
    ("expired", (403, "AccessDenied")),
    ("too-large", (400, "EntityTooLarge")),
    ("too-small", (400, "EntityTooSmall")),
    ("other-key", (403, "AccessDenied")),
    ("extra-field", (403, "AccessDenied")),
    ("bad-signature", (403, "SignatureDoesNotMatch")),
    ("unknown-key", (403, "InvalidAccessKeyId")),
    ("not-json-policy", (400, "InvalidPolicyDocument")),
    ("no-expiration", (400, "InvalidPolicyDocument")),
    ("no-file", (400, "InvalidArgument")),
    ("no-key", (400, "InvalidArgument")),
    ("sse-field", (501, "NotImplemented")),
    ("big-too-large", (400, "EntityTooLarge")),
])
def test_refused_forms_store_nothing(gw, s3, case, want):
    key = f"refused/{case}"
    p = s3.generate_presigned_post("forms", key, ExpiresIn=-60 if case == "expired" else 600,
                                   Conditions=[["content-length-range", 5, 10]])
    f = p["fields"]
    file: bytes | None = b"12345678"
    if case == "too-large":
        file = b"x" * 11
    elif case == "too-small":
        file = b"x"
    elif case == "big-too-large":
        p = s3.generate_presigned_post("forms", key, Conditions=[
            ["content-length-range", 0, 9 * MiB]])
        f, file = p["fields"], b"y" * (12 * MiB)
    elif case == "other-key":
        f = {**f, "key": "somewhere/else"}
    elif case == "extra-field":
        f = {**f, "x-amz-meta-sneaky": "1"}
    elif case == "bad-signature":
        f = {**f, "x-amz-signature": "0" * 64}
    elif case == "unknown-key":
        f = {**f, "x-amz-credential": "NOSUCHKEY/" + f["x-amz-credential"].split("/", 1)[1]}
    elif case == "not-json-policy":
        f = _sign_v4(base64.b64encode(b"{not json").decode(), f)
    elif case == "no-expiration":
        f = _sign_v4(base64.b64encode(json.dumps({"conditions": []}).encode()).decode(), f)
    elif case == "no-file":
        file = None
    elif case == "no-key":
        f = {k: v for k, v in f.items() if k != "key"}
    elif case == "sse-field":   # allowed by the policy, but not honoured here: refused
        f = s3.generate_presigned_post(
            "forms", key, Fields={"x-amz-server-side-encryption": "AES256"},
            Conditions=[{"x-amz-server-side-encryption": "AES256"}])["fields"]
    before = archive_ids(gw)
    body, ctype = encode(f, file)
    status, _, out = post(gw, "/forms", body, ctype)
    assert code_of(status, out) == want, out
    assert key not in keys(s3)
    # what a refused upload wrote to the nodes is freed
    assert wait_for(lambda: archive_ids(gw) <= before, timeout=60)


def test_malformed_forms(gw, s3):
    status, _, out = post(gw, "/forms", b"key=a&file=b", "application/x-www-form-urlencoded")
    assert code_of(status, out) == (412, "PreconditionFailed")
    body, ctype = encode({"key": "broken", "acl": "private"}, b"data")
    status, _, out = post(gw, "/forms", body[:70], ctype)   # the form breaks off in a field
    assert code_of(status, out) == (400, "MalformedPOSTRequest")
    status, _, out = post(gw, "/forms", body.replace(b"\r\n\r\n", b"\r\n", 1), ctype)
    assert code_of(status, out) == (400, "MalformedPOSTRequest")
    body, ctype = encode({"key": "big", "x-ignore-pad": "p" * 30000}, b"data")
    status, _, out = post(gw, "/forms", body, ctype)
    assert code_of(status, out) == (400, "MaxPostPreDataLengthExceeded")
    assert "broken" not in keys(s3) and "big" not in keys(s3)


def test_anonymous_form_only_where_the_bucket_allows(gw, s3):
    body, ctype = encode({"key": "anon/1"}, b"hi")
    status, _, out = post(gw, "/forms", body, ctype)
    assert code_of(status, out) == (403, "AccessDenied")
    s3.create_bucket(Bucket="dropbox")
    s3.delete_public_access_block(Bucket="dropbox")
    s3.put_bucket_policy(Bucket="dropbox", Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": "s3:PutObject",
            "Resource": "arn:aws:s3:::dropbox/anon/*"}]}))
    status, _, out = post(gw, "/dropbox", body, ctype)
    assert status == 204, out
    assert s3.get_object(Bucket="dropbox", Key="anon/1")["Body"].read() == b"hi"
    body, ctype = encode({"key": "elsewhere/1"}, b"hi")
    status, _, out = post(gw, "/dropbox", body, ctype)
    assert code_of(status, out) == (403, "AccessDenied")
    with pytest.raises(ClientError):
        s3.head_object(Bucket="dropbox", Key="elsewhere/1")
