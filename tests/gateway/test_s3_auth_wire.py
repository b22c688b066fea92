"""Authentication and body verification over real sockets: boto3 (SigV4 over HTTP and HTTPS,
SigV2), presigned URLs via urllib, against a tiny starlette app served by uvicorn that uses
only the gateway's auth, checksum and error modules (objects kept in a dict).

This proves the contract with what a web server really hands over (ASGI raw_path and
query_string, Host with port, Expect: 100-continue, chunked transfer of aws-chunked bodies).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import socket
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import boto3
import pytest
import uvicorn
from botocore.config import Config
from botocore.exceptions import ClientError
from starlette.requests import Request
from starlette.responses import Response

from gateway.s3.auth import RequestBody, StaticCredentials, authenticate, parse_query
from gateway.s3.errors import S3Error, error_xml
from gateway.server.tls import ensure_self_signed

AK, SK = "AKIDWIRETEST", "wire/secret+key"
CREDS = StaticCredentials([("alice", AK, SK)])


def make_app(store: dict[bytes, bytes]):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            auth = authenticate(request.method, scope["raw_path"],
                                parse_query(scope["query_string"]), request.headers, CREDS)
            if request.method == "PUT":
                body = RequestBody(auth, request.headers, request.stream())
                data = bytearray()
                async for chunk in body:
                    data += chunk
                store[scope["raw_path"]] = bytes(data)  # only after a clean end
                headers = {"ETag": body.etag or ""}
                if body.checksum_algorithm:
                    headers[f"x-amz-checksum-{body.checksum_algorithm.lower()}"] = body.checksum
                response = Response(b"", headers=headers)
            elif request.method in ("GET", "HEAD"):
                if scope["raw_path"] not in store:
                    raise S3Error("NoSuchKey", resource=scope["path"])
                data = store[scope["raw_path"]]
                response = Response(data if request.method == "GET" else b"", headers={
                    "ETag": '"' + hashlib.md5(data).hexdigest() + '"',
                    "Content-Length": str(len(data))})
            else:
                raise S3Error("NotImplemented")
        except S3Error as e:
            response = Response(b"" if request.method == "HEAD" else error_xml(e, "rid"),
                                status_code=e.status, media_type="application/xml")
        await response(scope, receive, send)

    return app


class Server:
    """uvicorn in a background thread on a free loopback port."""

    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.store: dict[bytes, bytes] = {}
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        kw = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
        config = uvicorn.Config(make_app(self.store), log_level="warning", lifespan="off", **kw)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server failed to start")
            threading.Event().wait(0.02)

    def close(self) -> None:
        self.server.should_exit = True
        self.server.force_exit = True  # boto3's idle keep-alive connections: don't wait on them
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def http_server():
    s = Server()
    yield s
    s.close()


@pytest.fixture(scope="module")
def https_server(tmp_path_factory):
    cert, key = ensure_self_signed(tmp_path_factory.mktemp("tls"))
    s = Server((str(cert), str(key)))
    s.cert = str(cert)
    yield s
    s.close()


def client(server: Server, scheme: str = "http", secret: str = SK, sigver: str = "s3v4"):
    return boto3.client(
        "s3", endpoint_url=f"{scheme}://127.0.0.1:{server.port}", region_name="us-east-1",
        aws_access_key_id=AK, aws_secret_access_key=secret,
        verify=getattr(server, "cert", None) if scheme == "https" else None,
        config=Config(signature_version=sigver, s3={"addressing_style": "path"},
                      retries={"max_attempts": 1}))


KEY = "dir/ä b+c~!%.bin"


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
def test_boto3_put_get_with_each_checksum(http_server, https_server, scheme, algo):
    server = http_server if scheme == "http" else https_server
    c = client(server, scheme)
    data = bytes(range(256)) * 4096 * 3 + b"end"  # 3 MiB: several aws-chunks over HTTPS
    r = c.put_object(Bucket="b", Key=f"{KEY}.{algo}", Body=data, ChecksumAlgorithm=algo)
    assert r["ETag"] == '"' + hashlib.md5(data).hexdigest() + '"'
    assert r[f"Checksum{algo}"]  # echoed, and botocore accepted it
    got = c.get_object(Bucket="b", Key=f"{KEY}.{algo}")["Body"].read()
    assert got == data


def test_https_upload_is_aws_chunked_and_content_md5_is_checked(https_server):
    c = client(https_server, "https")
    data = b"z" * 100_000
    good = base64.b64encode(hashlib.md5(data).digest()).decode()
    c.put_object(Bucket="b", Key="md5", Body=data, ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="b", Key="md5-bad", Body=data, ContentMD5=bad)
    assert e.value.response["Error"]["Code"] == "BadDigest"
    assert b"/md5-bad" not in https_server.store


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_wrong_secret_is_refused_and_stores_nothing(http_server, https_server, scheme):
    server = http_server if scheme == "http" else https_server
    with pytest.raises(ClientError) as e:
        client(server, scheme, secret="wrong").put_object(Bucket="b", Key="nope", Body=b"x")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert b"/b/nope" not in server.store


def test_sigv2_client_put_and_get(http_server):
    c = client(http_server, sigver="s3")
    c.put_object(Bucket="b", Key=KEY + ".v2", Body=b"v2 data")
    assert c.get_object(Bucket="b", Key=KEY + ".v2")["Body"].read() == b"v2 data"


@pytest.mark.parametrize("sigver", ["s3v4", "s3"])
def test_presigned_put_and_get_with_urllib(http_server, sigver):
    c = client(http_server, sigver=sigver)
    put_url = c.generate_presigned_url("put_object", Params={"Bucket": "b", "Key": KEY + sigver},
                                       ExpiresIn=300)
    # http.client, not urllib: urllib adds a form Content-Type, which SigV2 would (rightly)
    # count as a change to the signed request.
    split = urlsplit(put_url)
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=10)
    conn.request("PUT", f"{split.path}?{split.query}", body=b"presigned body")
    assert conn.getresponse().status == 200
    conn.close()
    get_url = c.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": KEY + sigver},
                                       ExpiresIn=300)
    with urllib.request.urlopen(get_url, timeout=10) as resp:
        assert resp.read() == b"presigned body"
    tampered = get_url.replace("/b/", "/c/")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered, timeout=10)
    assert e.value.code == 403 and b"<Code>SignatureDoesNotMatch</Code>" in e.value.read()


def test_anonymous_request_is_access_denied(http_server):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{http_server.port}/b/k", timeout=10)
    assert e.value.code == 403 and b"<Code>AccessDenied</Code>" in e.value.read()
