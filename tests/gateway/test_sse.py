"""Server-side encryption end to end (boto3, the aws cli and s3fs against a real gateway and
node processes): SSE-S3 and SSE-C on PUT/GET/HEAD/ranges/partNumber/multipart/copies, S3's
errors for missing, wrong and malformed keys, the bytes on the nodes, bucket default
encryption, a policy denying unencrypted uploads, master key rotation, SSE-C over plain HTTP,
and recover-metadata of encrypted objects."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
import tomli_w
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from gateway.store.ssekeys import new_key_line
from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway, serving, signed_request

pytestmark = pytest.mark.timeout(600)
MiB = 1024 * 1024
B = "enc"
KEY1 = bytes(range(32))
KEY2 = hashlib.sha256(b"another key").digest()
MARK = b"PLAINTEXT-MARKER-0123456789abcdef"  # repeated: easy to spot in a fragment archive
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ssec(key: bytes, copy: bool = False) -> dict[str, str]:
    pre = "CopySource" if copy else ""
    return {f"{pre}SSECustomerAlgorithm": "AES256", f"{pre}SSECustomerKey": key}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("sse")
    keys = root / "master.keys"
    keys.write_text("# test keys\n" + new_key_line("k1"))
    with serving(Gateway(root, gateway_options={"sse_master_key_file": str(keys),
                                                "sse_c_allow_http": True})) as g:
        g.keys_path = keys
        yield g


@pytest.fixture(scope="module")
def s3(gw):
    s = gw.client()
    s.create_bucket(Bucket=B)
    return s


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def status(exc: pytest.ExceptionInfo) -> int:
    return exc.value.response["ResponseMetadata"]["HTTPStatusCode"]


def envelope(g: Gateway, bucket: str, key: str) -> dict | None:
    """The stored envelope of the current object, read from the gateway's SQLite store."""
    with sqlite3.connect(g.meta_path) as db:
        rows = db.execute("SELECT headers FROM objects WHERE bucket=? AND key=?",
                          (bucket, key.encode())).fetchall() or \
            db.execute("SELECT headers FROM objects WHERE bucket=? AND key=?",
                       (bucket, key)).fetchall()
    assert rows, (bucket, key)
    raw = json.loads(rows[0][0]).get("x-zonegate-sse")
    return json.loads(raw) if raw else None


def node_bytes(g: Gateway) -> bytes:
    """Every fragment archive on every node, concatenated (read through the node API)."""
    out = []
    for i, url in enumerate(g.nodes.urls):
        after = ""
        while True:
            q = {"prefix": "", "after": after, "limit": "1000"}
            from urllib.parse import urlencode
            req = urllib.request.Request(f"{url}/v1/records?{urlencode(q)}",
                                         headers=g.nodes.headers(i, "GET", "/v1/records", q))
            with _NO_PROXY.open(req, timeout=10) as resp:
                doc = json.load(resp)
            for r in doc["records"]:
                path = f"/v1/records/{r['id']}"
                rq = urllib.request.Request(url + path, headers=g.nodes.headers(i, "GET", path, {}))
                with _NO_PROXY.open(rq, timeout=30) as resp:
                    out.append(resp.read())
            if not doc.get("next"):
                break
            after = doc["next"]
    return b"".join(out)


def test_sse_s3_put_get_range_and_nodes_hold_no_plaintext(gw, s3):
    data = MARK * (3 * MiB // len(MARK)) + b"tail"
    r = s3.put_object(Bucket=B, Key="s3/obj", Body=data, ServerSideEncryption="AES256")
    assert r["ServerSideEncryption"] == "AES256"
    assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'  # SSE-S3: the plaintext's MD5
    h = s3.head_object(Bucket=B, Key="s3/obj")
    assert h["ServerSideEncryption"] == "AES256" and h["ContentLength"] == len(data)
    g = s3.get_object(Bucket=B, Key="s3/obj")
    assert g["Body"].read() == data and g["ServerSideEncryption"] == "AES256"
    for a, b in ((0, 0), (65535, 65536), (100_000, 2 * MiB + 5), (len(data) - 3, len(data) - 1)):
        got = s3.get_object(Bucket=B, Key="s3/obj", Range=f"bytes={a}-{b}")["Body"].read()
        assert got == data[a:b + 1], (a, b)
    got = s3.get_object(Bucket=B, Key="s3/obj", Range="bytes=-70000")["Body"].read()
    assert got == data[-70000:]
    assert s3.get_object(Bucket=B, Key="s3/obj", PartNumber=1)["Body"].read() == data
    env = envelope(gw, B, "s3/obj")
    assert env["mode"] == "AES256" and env["key_id"] == "k1"
    # The same plaintext unencrypted is on the nodes as is (the check can fail) ...
    assert MARK * 8 not in node_bytes(gw)
    s3.put_object(Bucket=B, Key="s3/plain", Body=data)
    assert MARK * 8 in node_bytes(gw)
    assert "ServerSideEncryption" not in s3.head_object(Bucket=B, Key="s3/plain")
    s3.delete_object(Bucket=B, Key="s3/plain")


def test_sse_c_put_get_and_key_errors(gw, s3):
    data = os.urandom(200_000)
    r = s3.put_object(Bucket=B, Key="c/obj", Body=data, **ssec(KEY1))
    assert r["SSECustomerAlgorithm"] == "AES256"
    assert r["SSECustomerKeyMD5"] == base64.b64encode(hashlib.md5(KEY1).digest()).decode()
    assert r["ETag"] != f'"{hashlib.md5(data).hexdigest()}"'  # SSE-C: not the MD5
    assert s3.get_object(Bucket=B, Key="c/obj", **ssec(KEY1))["Body"].read() == data
    got = s3.get_object(Bucket=B, Key="c/obj", Range="bytes=70000-140000", **ssec(KEY1))
    assert got["Body"].read() == data[70000:140001]
    h = s3.head_object(Bucket=B, Key="c/obj", **ssec(KEY1))
    assert h["ContentLength"] == len(data) and h["ETag"] == r["ETag"]
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=B, Key="c/obj")
        assert status(e) == 400
        with pytest.raises(ClientError) as e:
            call(Bucket=B, Key="c/obj", **ssec(KEY2))
        assert status(e) == 403
    # GetObjectAttributes needs the key as GET does (raw: boto3 does not encode it there)
    def attrs(key: bytes | None) -> tuple[int, bytes]:
        h = {"x-amz-object-attributes": "ObjectSize"}
        if key is not None:
            h.update({"x-amz-server-side-encryption-customer-algorithm": "AES256",
                      "x-amz-server-side-encryption-customer-key": base64.b64encode(key).decode(),
                      "x-amz-server-side-encryption-customer-key-md5":
                          base64.b64encode(hashlib.md5(key).digest()).decode()})
        r = signed_request(gw, "GET", f"/{B}/c/obj", query="attributes=", headers=h)
        return r[0], r[2]
    assert attrs(None)[0] == 400 and attrs(KEY2)[0] == 403
    st, body = attrs(KEY1)
    assert st == 200 and f"<ObjectSize>{len(data)}</ObjectSize>".encode() in body, body
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="c/obj")
    assert code(e) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="c/obj", **ssec(KEY2))
    assert code(e) == "AccessDenied"
    # SSE-C headers for an object not stored with them
    s3.put_object(Bucket=B, Key="c/plain", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="c/plain", **ssec(KEY1))
    assert code(e) == "InvalidRequest"
    env = envelope(gw, B, "c/obj")
    assert env["mode"] == "SSE-C" and "key_id" not in env
    # empty objects: nothing sealed, the key still required
    s3.put_object(Bucket=B, Key="c/empty", Body=b"", **ssec(KEY1))
    s3.put_object(Bucket=B, Key="s3/empty", Body=b"", ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=B, Key="c/empty", **ssec(KEY1))["Body"].read() == b""
    assert s3.get_object(Bucket=B, Key="s3/empty")["Body"].read() == b""
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="c/empty", **ssec(KEY2))
    assert code(e) == "AccessDenied"
    # GET takes no x-amz-server-side-encryption header (S3: 400)
    st, _, body = signed_request(gw, "GET", f"/{B}/s3/empty",
                                 headers={"x-amz-server-side-encryption": "AES256"})
    assert st == 400 and b"<Code>InvalidArgument</Code>" in body
    # the key is nowhere in the store, in any encoding
    raw = gw.meta_path.read_bytes() + b"".join(
        p.read_bytes() for p in gw.meta_path.parent.glob("meta.sqlite-wal"))
    for form in (KEY1, base64.b64encode(KEY1), KEY1.hex().encode()):
        assert form not in raw


@pytest.mark.parametrize("headers,want", [
    ({"x-amz-server-side-encryption": "aws:kms"}, (501, "NotImplemented")),
    ({"x-amz-server-side-encryption": "aws:kms:dsse"}, (501, "NotImplemented")),
    ({"x-amz-server-side-encryption": "AES128"}, (400, "InvalidArgument")),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256"}, (400, "InvalidArgument")),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES128",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY1).decode(),
      "x-amz-server-side-encryption-customer-key-MD5":
          base64.b64encode(hashlib.md5(KEY1).digest()).decode()},
     (400, "InvalidEncryptionAlgorithmError")),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY1).decode(),
      "x-amz-server-side-encryption-customer-key-MD5":
          base64.b64encode(hashlib.md5(KEY2).digest()).decode()}, (400, "InvalidArgument")),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(b"short").decode(),
      "x-amz-server-side-encryption-customer-key-MD5":
          base64.b64encode(hashlib.md5(b"short").digest()).decode()}, (400, "InvalidArgument")),
    ({"x-amz-server-side-encryption": "AES256",
      "x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY1).decode(),
      "x-amz-server-side-encryption-customer-key-MD5":
          base64.b64encode(hashlib.md5(KEY1).digest()).decode()}, (400, "InvalidArgument")),
])
def test_bad_sse_headers_store_nothing(gw, s3, headers, want):
    st, _, body = signed_request(gw, "PUT", f"/{B}/bad/obj", headers=headers, body=b"data")
    assert (st, body.split(b"<Code>")[1].split(b"</Code>")[0].decode()) == want, body
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=B, Key="bad/obj")
    assert status(e) == 404
    st, _, body = signed_request(gw, "POST", f"/{B}/bad/mp", headers=headers, query="uploads=")
    assert st == want[0], body


def test_multipart_sse_s3_and_sse_c(gw, s3):
    data = os.urandom(13 * MiB + 12345)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_fileobj(io.BytesIO(data), B, "mp/s3", Config=cfg,
                      ExtraArgs={"ServerSideEncryption": "AES256"})
    h = s3.head_object(Bucket=B, Key="mp/s3")
    assert h["ServerSideEncryption"] == "AES256" and h["ETag"].endswith('-3"')
    parts = [data[i:i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]
    want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert h["ETag"] == f'"{want}-3"'
    assert s3.get_object(Bucket=B, Key="mp/s3")["Body"].read() == data
    assert s3.get_object(Bucket=B, Key="mp/s3", PartNumber=2)["Body"].read() == parts[1]
    a, b = 5 * MiB - 100, 10 * MiB + 100  # across two part boundaries
    got = s3.get_object(Bucket=B, Key="mp/s3", Range=f"bytes={a}-{b}")["Body"].read()
    assert got == data[a:b + 1]

    up = s3.create_multipart_upload(Bucket=B, Key="mp/c", **ssec(KEY1))
    assert up["SSECustomerAlgorithm"] == "AES256"
    uid = up["UploadId"]
    with pytest.raises(ClientError) as e:  # the part needs the upload's key
        s3.upload_part(Bucket=B, Key="mp/c", UploadId=uid, PartNumber=1, Body=parts[0])
    assert code(e) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=B, Key="mp/c", UploadId=uid, PartNumber=1, Body=parts[0],
                       **ssec(KEY2))
    assert code(e) == "AccessDenied"
    etags = []
    for n, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=B, Key="mp/c", UploadId=uid, PartNumber=n, Body=p, **ssec(KEY1))
        etags.append(r["ETag"])
    # a part re-uploaded under the same number (fresh uid: no nonce reuse)
    r = s3.upload_part(Bucket=B, Key="mp/c", UploadId=uid, PartNumber=2, Body=parts[1],
                       **ssec(KEY1))
    etags[1] = r["ETag"]
    s3.complete_multipart_upload(Bucket=B, Key="mp/c", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
    assert s3.get_object(Bucket=B, Key="mp/c", **ssec(KEY1))["Body"].read() == data
    got = s3.get_object(Bucket=B, Key="mp/c", PartNumber=3, **ssec(KEY1))["Body"].read()
    assert got == parts[2]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="mp/c", **ssec(KEY2))
    assert code(e) == "AccessDenied"


def test_copies_between_encryptions(gw, s3):
    data = os.urandom(6 * MiB + 3)
    s3.put_object(Bucket=B, Key="cp/src-c", Body=data, **ssec(KEY1))
    # SSE-C -> SSE-S3 (the source key as copy-source headers)
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=B, Key="cp/s3", CopySource=f"{B}/cp/src-c")
    assert code(e) == "InvalidRequest"
    r = s3.copy_object(Bucket=B, Key="cp/s3", CopySource=f"{B}/cp/src-c",
                       ServerSideEncryption="AES256", **ssec(KEY1, copy=True))
    assert r["ServerSideEncryption"] == "AES256"
    assert r["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert s3.get_object(Bucket=B, Key="cp/s3")["Body"].read() == data
    # change of key, in place (allowed: the encryption changes)
    s3.copy_object(Bucket=B, Key="cp/src-c", CopySource=f"{B}/cp/src-c",
                   **ssec(KEY1, copy=True), **ssec(KEY2))
    assert s3.get_object(Bucket=B, Key="cp/src-c", **ssec(KEY2))["Body"].read() == data
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="cp/src-c", **ssec(KEY1))
    assert code(e) == "AccessDenied"
    # SSE-S3 -> plaintext; the copy never inherits the source's envelope
    s3.copy_object(Bucket=B, Key="cp/plain", CopySource=f"{B}/cp/s3")
    assert "ServerSideEncryption" not in s3.head_object(Bucket=B, Key="cp/plain")
    assert envelope(gw, B, "cp/plain") is None
    assert s3.get_object(Bucket=B, Key="cp/plain")["Body"].read() == data
    # UploadPartCopy: ranges of an SSE-C source into an SSE-S3 upload
    uid = s3.create_multipart_upload(Bucket=B, Key="cp/mp", ServerSideEncryption="AES256")[
        "UploadId"]
    p1 = s3.upload_part_copy(Bucket=B, Key="cp/mp", UploadId=uid, PartNumber=1,
                             CopySource=f"{B}/cp/src-c", CopySourceRange=f"bytes=0-{5 * MiB - 1}",
                             **ssec(KEY2, copy=True))
    p2 = s3.upload_part_copy(Bucket=B, Key="cp/mp", UploadId=uid, PartNumber=2,
                             CopySource=f"{B}/cp/src-c",
                             CopySourceRange=f"bytes={5 * MiB}-{len(data) - 1}",
                             **ssec(KEY2, copy=True))
    s3.complete_multipart_upload(Bucket=B, Key="cp/mp", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]},
                  {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=B, Key="cp/mp")["Body"].read() == data


def test_bucket_default_encryption(gw, s3):
    s3.create_bucket(Bucket="dflt")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_encryption(Bucket="dflt")
    assert code(e) == "ServerSideEncryptionConfigurationNotFoundError" and status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.put_bucket_encryption(Bucket="dflt", ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]})
    assert code(e) == "NotImplemented"

    def put_raw(body: bytes, md5: bool = True) -> tuple[int, bytes]:
        h = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()} if md5 else {}
        st, _, out = signed_request(gw, "PUT", "/dflt", query="encryption=", body=body,
                                    headers=h)
        return st, out

    ok = (b'<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>'
          b'<SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>'
          b'</ServerSideEncryptionConfiguration>')
    for body, want in ((b"<ServerSideEncryptionConfiguration", b"MalformedXML"),
                       (ok.replace(b"AES256", b"AES128"), b"MalformedXML"),
                       (b"<ServerSideEncryptionConfiguration/>", b"MalformedXML"),
                       (ok.replace(b"<Rule>", b"<Other>").replace(b"</Rule>", b"</Other>"),
                        b"MalformedXML")):
        st, out = put_raw(body)
        assert st == 400 and b"<Code>" + want + b"</Code>" in out, out
    st, out = put_raw(ok, md5=False)
    assert st == 400 and b"<Code>InvalidRequest</Code>" in out, out
    with pytest.raises(ClientError) as e:  # nothing was stored by the refused ones
        s3.get_bucket_encryption(Bucket="dflt")
    assert code(e) == "ServerSideEncryptionConfigurationNotFoundError"
    s3.put_bucket_encryption(Bucket="dflt", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    got = s3.get_bucket_encryption(Bucket="dflt")["ServerSideEncryptionConfiguration"]
    assert got["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    r = s3.put_object(Bucket="dflt", Key="k", Body=b"hello")
    assert r["ServerSideEncryption"] == "AES256"
    assert envelope(gw, "dflt", "k")["mode"] == "AES256"
    # an SSE-C request still gets SSE-C
    s3.put_object(Bucket="dflt", Key="c", Body=b"hello", **ssec(KEY1))
    assert envelope(gw, "dflt", "c")["mode"] == "SSE-C"
    s3.delete_bucket_encryption(Bucket="dflt")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_encryption(Bucket="dflt")
    assert code(e) == "ServerSideEncryptionConfigurationNotFoundError"
    assert "ServerSideEncryption" not in s3.put_object(Bucket="dflt", Key="p", Body=b"x")


def test_policy_denies_unencrypted_uploads(gw, s3):
    s3.create_bucket(Bucket="must-encrypt")
    s3.put_bucket_policy(Bucket="must-encrypt", Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Sid": "DenyPlain", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
             "Resource": "arn:aws:s3:::must-encrypt/*",
             "Condition": {"Null": {"s3:x-amz-server-side-encryption": "true"}}},
            {"Sid": "OnlyAES", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
             "Resource": "arn:aws:s3:::must-encrypt/*",
             "Condition": {"StringNotEqualsIfExists":
                           {"s3:x-amz-server-side-encryption": "AES256"}}}]}))
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="must-encrypt", Key="plain", Body=b"x")
    assert code(e) == "AccessDenied"
    s3.put_object(Bucket="must-encrypt", Key="enc", Body=b"x", ServerSideEncryption="AES256")
    assert s3.head_object(Bucket="must-encrypt", Key="enc")["ServerSideEncryption"] == "AES256"


def aws_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "config"
    cfg.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_CONFIG_FILE=str(cfg), AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
               AWS_EC2_METADATA_DISABLED="true", NO_PROXY="*", no_proxy="*")
    return env


def test_aws_cli_and_s3fs(gw, s3, tmp_path):
    aws = str(Path(sys.executable).with_name("aws"))
    env = aws_env(tmp_path / "aws")
    src = tmp_path / "f.bin"
    data = os.urandom(9 * MiB + 1)  # the cli's multipart threshold is 8 MiB
    src.write_bytes(data)
    keyf = tmp_path / "key.bin"
    keyf.write_bytes(KEY2)
    for args, key in ((["--sse", "AES256"], "cli/s3"),
                      (["--sse-c", "AES256", "--sse-c-key", f"fileb://{keyf}"], "cli/c")):
        p = subprocess.run([aws, "--endpoint-url", gw.endpoint, "s3", "cp", str(src),
                            f"s3://{B}/{key}", *args], env=env, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, p.stderr
        out = tmp_path / (key.replace("/", "_") + ".out")
        p = subprocess.run([aws, "--endpoint-url", gw.endpoint, "s3", "cp", f"s3://{B}/{key}",
                            str(out), *args], env=env, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, p.stderr
        assert out.read_bytes() == data
    assert s3.head_object(Bucket=B, Key="cli/s3")["ServerSideEncryption"] == "AES256"
    s3.create_bucket(Bucket="cli-dflt")
    cfg = json.dumps({"Rules": [{"ApplyServerSideEncryptionByDefault":
                                 {"SSEAlgorithm": "AES256"}}]})
    for args in (["put-bucket-encryption", "--bucket", "cli-dflt",
                  "--server-side-encryption-configuration", cfg],
                 ["get-bucket-encryption", "--bucket", "cli-dflt"]):
        p = subprocess.run([aws, "--endpoint-url", gw.endpoint, "s3api", *args, "--output",
                            "json"], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ServerSideEncryptionConfiguration"]["Rules"][0][
        "ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.get_object(Bucket=B, Key="cli/c", **ssec(KEY2))["Body"].read() == data

    import s3fs
    fs = s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY,
                           client_kwargs={"endpoint_url": gw.endpoint, "region_name": "us-east-1"},
                           s3_additional_kwargs={"SSECustomerAlgorithm": "AES256",
                                                 "SSECustomerKey": KEY1})
    blob = os.urandom(7 * MiB + 5)  # s3fs writes 5 MiB blocks: a multipart upload
    with fs.open(f"{B}/s3fs/shard.bin", "wb", block_size=5 * MiB) as f:
        f.write(blob)
    assert s3.get_object(Bucket=B, Key="s3fs/shard.bin", **ssec(KEY1))["Body"].read() == blob
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="s3fs/shard.bin")
    assert code(e) == "InvalidRequest"


def _rewrite_gateway_config(g: Gateway, **changes: object) -> None:
    cfg = tomllib.loads(g.config_path.read_text())
    cfg["gateway"].update(changes)
    g.config_path.write_text(tomli_w.dumps(cfg))


def test_rotation_http_refusal_and_recover_metadata(gw, s3):
    old = os.urandom(300_000)
    s3.put_object(Bucket=B, Key="rot/old", Body=old, ServerSideEncryption="AES256")
    c_data = os.urandom(100_000)
    s3.put_object(Bucket=B, Key="rot/c", Body=c_data, **ssec(KEY1))
    mp = os.urandom(11 * MiB)
    s3.upload_fileobj(io.BytesIO(mp), B, "rot/mp", ExtraArgs=ssec(KEY2), Config=TransferConfig(
        multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    s3.create_bucket(Bucket="rot-dflt")
    s3.put_bucket_encryption(Bucket="rot-dflt", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    with gw.keys_path.open("a") as f:
        f.write(new_key_line("k2"))
    _rewrite_gateway_config(gw, sse_c_allow_http=False)
    gw.stop_gateway()
    gw.start_gateway()
    s3 = gw.client()
    s3.put_object(Bucket=B, Key="rot/new", Body=b"new", ServerSideEncryption="AES256")
    assert envelope(gw, B, "rot/new")["key_id"] == "k2"
    assert envelope(gw, B, "rot/old")["key_id"] == "k1"
    assert s3.get_object(Bucket=B, Key="rot/old")["Body"].read() == old
    # SSE-C over plain HTTP, now that the config does not allow it
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="rot/c", **ssec(KEY1))
    assert code(e) == "InvalidRequest" and status(e) == 400
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=B, Key="rot/c2", Body=b"x", **ssec(KEY1))
    assert code(e) == "InvalidRequest"

    # recover-metadata: the envelopes come back from the nodes, the objects open again
    _rewrite_gateway_config(gw, sse_c_allow_http=True)
    gw.stop_gateway()
    for suffix in ("", "-wal", "-shm"):
        p = gw.meta_path.with_name(gw.meta_path.name + suffix)
        if p.exists():
            p.unlink()
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "recover-metadata", "--config",
                        str(gw.config_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    gw.start_gateway()
    s3 = gw.client()
    assert s3.get_object(Bucket=B, Key="rot/old")["Body"].read() == old
    assert s3.get_object(Bucket=B, Key="rot/c", **ssec(KEY1))["Body"].read() == c_data
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=B, Key="rot/c", **ssec(KEY2))
    assert code(e) == "AccessDenied"
    got = s3.get_object(Bucket=B, Key="rot/mp", Range="bytes=5242000-5243000", **ssec(KEY2))
    assert got["Body"].read() == mp[5242000:5243001]
    # the bucket default came back with the bucket's marker
    got = s3.get_bucket_encryption(Bucket="rot-dflt")
    assert got["ServerSideEncryptionConfiguration"]["Rules"][0][
        "ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    # the master keys never reached the store or the logs
    keys = [line.split()[1].encode() for line in gw.keys_path.read_text().splitlines()
            if line and not line.startswith("#")]
    raw = gw.meta_path.read_bytes() + gw.log_path.read_bytes()
    assert not any(k in raw for k in keys)


def test_streamed_put_without_length_is_encrypted(gw, s3):
    # curl -T - from a pipe: chunked, no length; stored in internal 8 MiB parts, each sealed
    mark = b"STREAMED-PUT-MARKER-9876543210"  # not MARK: that one's plaintext copy was deleted
    piped = mark * ((19 * MiB) // len(mark))  # but may still wait for the sweeper
    r = subprocess.run(
        ["curl", "-sS", "--fail", "--noproxy", "*", "--user", f"{ACCESS_KEY}:{SECRET_KEY}",
         "--aws-sigv4", "aws:amz:us-east-1:s3", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
         "-H", "x-amz-server-side-encryption: AES256", "-T", "-",
         f"{gw.endpoint}/{B}/piped/enc.bin"], input=piped, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    h = s3.head_object(Bucket=B, Key="piped/enc.bin")
    assert h["ServerSideEncryption"] == "AES256" and h["ContentLength"] == len(piped)
    assert h["ETag"] == f'"{hashlib.md5(piped).hexdigest()}"'
    assert s3.get_object(Bucket=B, Key="piped/enc.bin")["Body"].read() == piped
    a, b = 8 * MiB - 10, 16 * MiB + 10  # across both internal part boundaries
    got = s3.get_object(Bucket=B, Key="piped/enc.bin", Range=f"bytes={a}-{b}")["Body"].read()
    assert got == piped[a:b + 1]
    assert mark * 8 not in node_bytes(gw)


def test_versions_keep_their_own_keys(gw, s3):
    s3.create_bucket(Bucket="enc-versions")
    s3.put_bucket_versioning(Bucket="enc-versions", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="enc-versions", Key="k", Body=b"one", **ssec(KEY1))["VersionId"]
    v2 = s3.put_object(Bucket="enc-versions", Key="k", Body=b"two",
                       ServerSideEncryption="AES256")["VersionId"]
    v3 = s3.put_object(Bucket="enc-versions", Key="k", Body=b"three", **ssec(KEY2))["VersionId"]
    get = s3.get_object
    assert get(Bucket="enc-versions", Key="k", VersionId=v1, **ssec(KEY1))["Body"].read() == b"one"
    assert get(Bucket="enc-versions", Key="k", VersionId=v2)["Body"].read() == b"two"
    assert get(Bucket="enc-versions", Key="k", **ssec(KEY2))["Body"].read() == b"three"
    with pytest.raises(ClientError) as e:
        get(Bucket="enc-versions", Key="k", VersionId=v1, **ssec(KEY2))
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        get(Bucket="enc-versions", Key="k", VersionId=v3)
    assert code(e) == "InvalidRequest"
