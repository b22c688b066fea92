"""Never pretend (issue 22): every request header, query parameter and XML element that changes
what S3 stores or protects is either honoured (its effect checked here) or refused with S3's
error, against a real `zonegate serve` and node processes.

HEADERS has a row for every header of gateway/s3/amzheaders.py's catalogue (a test below fails
when one is added there without a row here), and an unknown x-amz-* header on a write is
refused: a new storage-changing header cannot slip in unseen. The SSE rows check SSE-S3 and
SSE-C for real (gateway/s3/sse.py) and the KMS parameters refused (no KMS is configured)."""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gateway.access.identity import canonical_id
from gateway.s3 import amzheaders
from gateway.store.ssekeys import new_key_line
from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway, signed_request
from tests.support.s3raw import Creds, code_of, send, sign_v4

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("honest")
    (root / "master.keys").write_text(new_key_line("k1"))
    g = Gateway(root, gateway_options={"sse_master_key_file": str(root / "master.keys"),
                                       "sse_c_allow_http": True})
    g.start()
    yield g
    g.stop()


@pytest.fixture(scope="module")
def s3(gw):
    s3 = gw.client()
    s3.create_bucket(Bucket="hon")
    s3.create_bucket(Bucket="hon-acl", ObjectOwnership="ObjectWriter")
    s3.delete_public_access_block(Bucket="hon-acl")   # public ACLs allowed there
    s3.create_bucket(Bucket="hon-lock", ObjectLockEnabledForBucket=True)
    s3.put_object(Bucket="hon", Key="src", Body=b"source bytes", Tagging="t=src",
                  Metadata={"m": "src"})
    return s3


_n = iter(range(100_000))


@dataclass
class Ctx:
    gw: Gateway
    s3: Any
    key: str

    def put(self, headers: dict[str, str], bucket: str = "hon", body: bytes = b"data",
            query: str = "") -> tuple[int, dict[str, str], bytes]:
        return signed_request(self.gw, "PUT", f"/{bucket}/{self.key}", headers=headers,
                              body=body, query=query)

    def stored(self, bucket: str = "hon") -> bool:
        try:
            self.s3.head_object(Bucket=bucket, Key=self.key)
            return True
        except ClientError:
            return False


def _md5(b: bytes) -> str:
    return base64.b64encode(hashlib.md5(b).digest()).decode()


def _crc32(b: bytes) -> str:
    return base64.b64encode(zlib.crc32(b).to_bytes(4, "big")).decode()


def _ok(r: tuple[int, dict[str, str], bytes]) -> None:
    assert r[0] in (200, 204), r


def _later() -> str:
    return (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- effects of honoured headers (each sends the header and checks what it did) -------------

def acl_canned(c: Ctx) -> None:
    _ok(c.put({"x-amz-acl": "authenticated-read"}, "hon-acl"))
    grants = c.s3.get_object_acl(Bucket="hon-acl", Key=c.key)["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("AuthenticatedUsers") for g in grants)
    r = c.put({"x-amz-acl": "public-read"})   # ACLs disabled on a default bucket
    assert code_of(r[0], r[2]) == (400, "AccessControlListNotSupported")


def grant(c: Ctx) -> None:
    _ok(c.put({"x-amz-grant-read": f"id={canonical_id('bob')}"}, "hon-acl"))
    grants = c.s3.get_object_acl(Bucket="hon-acl", Key=c.key)["Grants"]
    assert {"ID": canonical_id("bob"), "Permission": "READ"} in [
        {"ID": g["Grantee"].get("ID"), "Permission": g["Permission"]} for g in grants]


def tagging(c: Ctx) -> None:
    _ok(c.put({"x-amz-tagging": "team=ml"}))
    assert c.s3.get_object_tagging(Bucket="hon", Key=c.key)["TagSet"] == [
        {"Key": "team", "Value": "ml"}]


def meta(c: Ctx) -> None:
    _ok(c.put({"x-amz-meta-run": "42"}))
    assert c.s3.head_object(Bucket="hon", Key=c.key)["Metadata"] == {"run": "42"}


def storage_class(c: Ctx) -> None:
    _ok(c.put({"x-amz-storage-class": "STANDARD"}))
    c.key += "-glacier"
    r = c.put({"x-amz-storage-class": "GLACIER"})
    assert code_of(r[0], r[2]) == (400, "InvalidStorageClass") and not c.stored()


def copy_source(c: Ctx) -> None:
    _ok(c.put({"x-amz-copy-source": "/hon/src"}, body=b""))
    assert c.s3.get_object(Bucket="hon", Key=c.key)["Body"].read() == b"source bytes"


def copy_if(c: Ctx) -> None:
    r = c.put({"x-amz-copy-source": "/hon/src", "x-amz-copy-source-if-match": '"nope"'},
              body=b"")
    assert code_of(r[0], r[2]) == (412, "PreconditionFailed") and not c.stored()


def metadata_directive(c: Ctx) -> None:
    _ok(c.put({"x-amz-copy-source": "/hon/src", "x-amz-metadata-directive": "REPLACE",
               "x-amz-meta-new": "1"}, body=b""))
    assert c.s3.head_object(Bucket="hon", Key=c.key)["Metadata"] == {"new": "1"}


def tagging_directive(c: Ctx) -> None:
    _ok(c.put({"x-amz-copy-source": "/hon/src", "x-amz-tagging-directive": "REPLACE",
               "x-amz-tagging": "n=2"}, body=b""))
    assert c.s3.get_object_tagging(Bucket="hon", Key=c.key)["TagSet"] == [
        {"Key": "n", "Value": "2"}]


def copy_range(c: Ctx) -> None:
    up = c.s3.create_multipart_upload(Bucket="hon", Key=c.key)["UploadId"]
    r = signed_request(c.gw, "PUT", f"/hon/{c.key}", query=f"partNumber=1&uploadId={up}",
                       headers={"x-amz-copy-source": "/hon/src",
                                "x-amz-copy-source-range": "bytes=0-5"})
    _ok(r)
    assert c.s3.list_parts(Bucket="hon", Key=c.key, UploadId=up)["Parts"][0]["Size"] == 6


def source_owner(c: Ctx) -> None:
    r = c.put({"x-amz-copy-source": "/hon/src",
               "x-amz-source-expected-bucket-owner": "111122223333"}, body=b"")
    assert code_of(r[0], r[2]) == (403, "AccessDenied") and not c.stored()


def expected_owner(c: Ctx) -> None:
    r = c.put({"x-amz-expected-bucket-owner": "111122223333"})
    assert code_of(r[0], r[2]) == (403, "AccessDenied") and not c.stored()
    _ok(c.put({"x-amz-expected-bucket-owner": "000000000000"}))


def ownership(c: Ctx) -> None:
    b = f"hon-own-{next(_n)}"
    _ok(signed_request(c.gw, "PUT", f"/{b}", headers={"x-amz-object-ownership":
                                                      "ObjectWriter"}))
    rules = c.s3.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "ObjectWriter"}]


def lock_enabled(c: Ctx) -> None:
    b = f"hon-lk-{next(_n)}"
    _ok(signed_request(c.gw, "PUT", f"/{b}",
                       headers={"x-amz-bucket-object-lock-enabled": "true"}))
    assert c.s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    assert c.s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"][
        "ObjectLockEnabled"] == "Enabled"


def lock_retention(c: Ctx) -> None:
    body = b"locked"
    _ok(c.put({"x-amz-object-lock-mode": "GOVERNANCE",
               "x-amz-object-lock-retain-until-date": _later(), "content-md5": _md5(body)},
              "hon-lock", body))
    vid = c.s3.head_object(Bucket="hon-lock", Key=c.key)["VersionId"]
    with pytest.raises(ClientError):
        c.s3.delete_object(Bucket="hon-lock", Key=c.key, VersionId=vid)
    r = c.put({"x-amz-object-lock-mode": "GOVERNANCE"}, body=body)  # on a bucket without lock
    assert code_of(r[0], r[2])[0] == 400


def legal_hold(c: Ctx) -> None:
    body = b"held"
    _ok(c.put({"x-amz-object-lock-legal-hold": "ON", "content-md5": _md5(body)},
              "hon-lock", body))
    assert c.s3.head_object(Bucket="hon-lock", Key=c.key)["ObjectLockLegalHoldStatus"] == "ON"


def bypass(c: Ctx) -> None:
    vid = c.s3.put_object(Bucket="hon-lock", Key=c.key, Body=b"g", ObjectLockMode="GOVERNANCE",
                          ObjectLockRetainUntilDate=_later())["VersionId"]
    r = signed_request(c.gw, "DELETE", f"/hon-lock/{c.key}", query=f"versionId={vid}")
    assert code_of(r[0], r[2]) == (403, "AccessDenied")
    _ok(signed_request(c.gw, "DELETE", f"/hon-lock/{c.key}", query=f"versionId={vid}",
                       headers={"x-amz-bypass-governance-retention": "true"}))


def checksum_value(c: Ctx) -> None:
    r = c.put({"x-amz-checksum-crc32": _crc32(b"other")})
    assert code_of(r[0], r[2])[0] == 400 and not c.stored()
    _ok(c.put({"x-amz-checksum-crc32": _crc32(b"data")}))
    h = c.s3.head_object(Bucket="hon", Key=c.key, ChecksumMode="ENABLED")
    assert h["ChecksumCRC32"] == _crc32(b"data")


def sdk_checksum(c: Ctx) -> None:
    r = c.put({"x-amz-sdk-checksum-algorithm": "SHA256",
               "x-amz-checksum-crc32": _crc32(b"data")})
    assert code_of(r[0], r[2]) == (400, "InvalidRequest") and not c.stored()


def checksum_algorithm(c: Ctx) -> None:
    _ok(c.put({"x-amz-copy-source": "/hon/src", "x-amz-checksum-algorithm": "SHA256"},
              body=b""))
    h = c.s3.head_object(Bucket="hon", Key=c.key, ChecksumMode="ENABLED")
    assert h["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"source bytes").digest(
    )).decode()


def checksum_type(c: Ctx) -> None:
    r = signed_request(c.gw, "POST", f"/hon/{c.key}", query="uploads=",
                       headers={"x-amz-checksum-algorithm": "CRC32",
                                "x-amz-checksum-type": "FULL_OBJECT"})
    _ok(r)
    assert r[1].get("x-amz-checksum-type") == "FULL_OBJECT"


def checksum_mode(c: Ctx) -> None:
    c.s3.put_object(Bucket="hon", Key=c.key, Body=b"m", ChecksumAlgorithm="CRC32")
    assert "ChecksumCRC32" not in c.s3.head_object(Bucket="hon", Key=c.key)
    assert "ChecksumCRC32" in c.s3.head_object(Bucket="hon", Key=c.key, ChecksumMode="ENABLED")


def content_sha(c: Ctx) -> None:
    creds = Creds(c.gw.port, ACCESS_KEY, SECRET_KEY)
    target = f"/hon/{c.key}"
    h = sign_v4(creds, "PUT", target, body=b"data", payload_hash=hashlib.sha256(
        b"else").hexdigest())
    status, _, out = send(creds, "PUT", target, h, b"data")
    assert code_of(status, out) == (400, "XAmzContentSHA256Mismatch") and not c.stored()


def chunked_trailer(c: Ctx) -> None:
    creds = Creds(c.gw.port, ACCESS_KEY, SECRET_KEY)
    target = f"/hon/{c.key}"
    data = b"trailer data"
    body = (f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n"
            + f"x-amz-checksum-crc32:{_crc32(data)}\r\n\r\n".encode())
    hdrs = {"content-encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32",
            "x-amz-decoded-content-length": str(len(data))}
    h = sign_v4(creds, "PUT", target, headers=hdrs,
                payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    status, _, out = send(creds, "PUT", target, h, body)
    assert status == 200, out
    got = c.s3.get_object(Bucket="hon", Key=c.key, ChecksumMode="ENABLED")
    assert got["Body"].read() == data and got["ChecksumCRC32"] == _crc32(data)
    bad = {**hdrs, "x-amz-decoded-content-length": str(len(data) + 5)}
    c.key += "-bad"
    h = sign_v4(creds, "PUT", target + "-bad", headers=bad,
                payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    status, _, out = send(creds, "PUT", target + "-bad", h, body)
    assert code_of(status, out)[0] == 400 and not c.stored()


def attributes(c: Ctx) -> None:
    c.s3.put_object(Bucket="hon", Key=c.key, Body=b"12345")
    r = signed_request(c.gw, "GET", f"/hon/{c.key}", query="attributes=",
                       headers={"x-amz-object-attributes": "ObjectSize",
                                "x-amz-max-parts": "5", "x-amz-part-number-marker": "0"})
    assert r[0] == 200 and b"<ObjectSize>5</ObjectSize>" in r[2]


def mp_object_size(c: Ctx) -> None:
    # CompleteMultipartUpload checks the object's expected size against its parts
    def complete(size: str) -> tuple[int, dict[str, str], bytes]:
        up = c.s3.create_multipart_upload(Bucket="hon", Key=c.key)["UploadId"]
        etag = c.s3.upload_part(Bucket="hon", Key=c.key, UploadId=up, PartNumber=1,
                                Body=b"12345")["ETag"]
        body = (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag>"
                f"</Part></CompleteMultipartUpload>").encode()
        return signed_request(c.gw, "POST", f"/hon/{c.key}", query=f"uploadId={up}",
                              body=body, headers={"x-amz-mp-object-size": size})
    for bad in ("6", "x"):
        r = complete(bad)
        assert r[0] == 400 and not c.stored(), r
    _ok(complete("5"))
    assert c.s3.get_object(Bucket="hon", Key=c.key)["Body"].read() == b"12345"


def harmless(c: Ctx, name: str) -> None:
    value = {"x-amz-date": None, "x-amz-mfa": "123456 654321",
             "x-amz-request-payer": "requester"}.get(name, "x")
    headers = {} if value is None else {name: value}
    _ok(c.put(headers))
    assert c.s3.get_object(Bucket="hon", Key=c.key)["Body"].read() == b"data"


def refused(c: Ctx, name: str) -> None:
    r = c.put({name: "1"})
    assert code_of(r[0], r[2]) == (501, "NotImplemented") and not c.stored(), r


SSEC_KEY = bytes(range(32))
SSEC = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": base64.b64encode(SSEC_KEY).decode(),
        "x-amz-server-side-encryption-customer-key-md5": _md5(SSEC_KEY)}


def sse_s3(c: Ctx) -> None:
    _ok(c.put({"x-amz-server-side-encryption": "AES256"}))
    assert c.s3.head_object(Bucket="hon", Key=c.key)["ServerSideEncryption"] == "AES256"
    r = c.put({"x-amz-server-side-encryption": "aws:kms"}, body=b"kms")
    assert code_of(r[0], r[2]) == (501, "NotImplemented"), r   # no KMS is configured
    assert c.s3.get_object(Bucket="hon", Key=c.key)["Body"].read() == b"data"


def sse_kms_only(c: Ctx, name: str) -> None:
    # KMS parameters: no KMS here, so refused with S3's error and nothing stored
    for headers in ({name: "x"}, {name: "x", "x-amz-server-side-encryption": "aws:kms"}):
        r = c.put(headers)
        assert r[0] >= 400 and code_of(r[0], r[2])[1] and not c.stored(), r


def sse_bucket_key(c: Ctx) -> None:
    # tunes KMS calls only: a boolean (else InvalidArgument), with aws:kms NotImplemented
    name = "x-amz-server-side-encryption-bucket-key-enabled"
    r = c.put({name: "maybe"})
    assert code_of(r[0], r[2]) == (400, "InvalidArgument") and not c.stored(), r
    r = c.put({name: "true", "x-amz-server-side-encryption": "aws:kms"})
    assert code_of(r[0], r[2]) == (501, "NotImplemented") and not c.stored(), r
    _ok(c.put({name: "true", "x-amz-server-side-encryption": "AES256"}))
    assert c.s3.head_object(Bucket="hon", Key=c.key)["ServerSideEncryption"] == "AES256"


def sse_c(c: Ctx, name: str) -> None:
    # alone, a part of the trio is refused; the whole trio stores with the key, which every
    # later read must carry
    r = c.put({name: SSEC[name]})
    assert code_of(r[0], r[2])[0] == 400 and not c.stored(), r
    _ok(c.put(SSEC))
    r = signed_request(c.gw, "GET", f"/hon/{c.key}")
    assert code_of(r[0], r[2])[0] == 400, r
    r = signed_request(c.gw, "GET", f"/hon/{c.key}", headers=SSEC)
    assert r[0] == 200 and r[2] == b"data", r


def sse_c_copy(c: Ctx, name: str) -> None:
    src = c.key + "-src"
    _ok(signed_request(c.gw, "PUT", f"/hon/{src}", headers=SSEC, body=b"secret"))
    copy = {"x-amz-copy-source": f"/hon/{src}"}
    r = c.put(copy)
    assert code_of(r[0], r[2])[0] == 400 and not c.stored(), r   # the source's key is missing
    trio = {k.replace("x-amz-", "x-amz-copy-source-"): v for k, v in SSEC.items()}
    r = c.put({**copy, name: trio[name]})
    assert code_of(r[0], r[2])[0] == 400 and not c.stored(), r   # a part of the trio alone
    _ok(c.put({**copy, **trio}))
    assert c.s3.get_object(Bucket="hon", Key=c.key)["Body"].read() == b"secret"


@dataclass(frozen=True)
class Row:
    header: str
    check: Callable[..., None]
    takes_name: bool = False


HEADERS = [
    Row("x-amz-acl", acl_canned), Row("x-amz-grant-read", grant),
    Row("x-amz-tagging", tagging), Row("x-amz-meta-run", meta),
    Row("x-amz-storage-class", storage_class), Row("x-amz-copy-source", copy_source),
    Row("x-amz-copy-source-if-match", copy_if), Row("x-amz-copy-source-range", copy_range),
    Row("x-amz-metadata-directive", metadata_directive),
    Row("x-amz-tagging-directive", tagging_directive),
    Row("x-amz-source-expected-bucket-owner", source_owner),
    Row("x-amz-expected-bucket-owner", expected_owner),
    Row("x-amz-object-ownership", ownership),
    Row("x-amz-bucket-object-lock-enabled", lock_enabled),
    Row("x-amz-object-lock-mode", lock_retention),
    Row("x-amz-object-lock-retain-until-date", lock_retention),
    Row("x-amz-object-lock-legal-hold", legal_hold),
    Row("x-amz-bypass-governance-retention", bypass),
    Row("x-amz-checksum-crc32", checksum_value),
    Row("x-amz-sdk-checksum-algorithm", sdk_checksum),
    Row("x-amz-checksum-algorithm", checksum_algorithm),
    Row("x-amz-checksum-type", checksum_type), Row("x-amz-checksum-mode", checksum_mode),
    Row("x-amz-content-sha256", content_sha), Row("x-amz-trailer", chunked_trailer),
    Row("x-amz-decoded-content-length", chunked_trailer),
    Row("x-amz-object-attributes", attributes), Row("x-amz-max-parts", attributes),
    Row("x-amz-part-number-marker", attributes),
    Row("x-amz-mp-object-size", mp_object_size),
    *[Row(h, harmless, True) for h in sorted(amzheaders.HARMLESS)],
    *[Row(h, refused, True) for h in sorted(amzheaders.REFUSED)],
    # server-side encryption (gateway/s3/sse.py)
    Row("x-amz-server-side-encryption", sse_s3),
    *[Row(h, sse_kms_only, True) for h in sorted(amzheaders.SSE_HEADERS)
      if h.endswith(("-aws-kms-key-id", "-context"))],
    Row("x-amz-server-side-encryption-bucket-key-enabled", sse_bucket_key),
    *[Row(h, sse_c, True) for h in sorted(SSEC)],
    *[Row(h, sse_c_copy, True) for h in sorted(amzheaders.SSE_HEADERS)
      if h.startswith("x-amz-copy-source-server-side-encryption-customer-")],
]


def test_every_catalogued_header_has_a_row():
    rows = {r.header for r in HEADERS}
    catalogue = (amzheaders.HONOURED | amzheaders.HARMLESS | set(amzheaders.REFUSED)
                 | amzheaders.SSE_HEADERS | amzheaders.OBJECT_LOCK)
    assert catalogue - rows == set(), "a header without a row in this table"
    for prefix in amzheaders.HONOURED_PREFIXES:
        assert any(r.startswith(prefix) for r in rows), prefix
    assert all(amzheaders.status(r) != "unknown" for r in rows)


@pytest.mark.parametrize("row", HEADERS, ids=lambda r: r.header)
def test_header_is_honoured_or_refused(gw, s3, row):
    c = Ctx(gw, s3, f"h/{row.header}/{next(_n)}")
    if row.takes_name:
        row.check(c, row.header)
    else:
        row.check(c)


def test_an_unknown_amz_header_on_a_write_is_refused(gw, s3):
    c = Ctx(gw, s3, "h/unknown")
    r = c.put({"x-amz-fancy-new-protection": "on"})
    assert code_of(r[0], r[2]) == (501, "NotImplemented") and not c.stored()
    assert b"<Header>x-amz-fancy-new-protection</Header>" in r[2]
    _ok(c.put({}))
    r = signed_request(gw, "GET", "/hon/h/unknown", headers={"x-amz-fancy-new-protection": "1"})
    assert r[0] == 200   # a read changes nothing: ignored, as S3 ignores it


# ---- query parameters: subresources that would change what is stored ------------------------

QUERY = [
    ("PUT", "", "accelerate"), ("PUT", "", "analytics"), ("PUT", "", "intelligent-tiering"),
    ("PUT", "", "inventory"), ("PUT", "", "logging"), ("PUT", "", "metrics"),
    ("PUT", "", "notification"), ("PUT", "", "replication"), ("PUT", "", "requestPayment"),
    ("PUT", "", "website"), ("POST", "src", "restore"), ("POST", "src", "select"),
    ("PUT", "src", "renameObject"),
]


@pytest.mark.parametrize("method, key, sub", QUERY, ids=[q[2] for q in QUERY])
def test_unimplemented_subresources_are_refused(gw, s3, method, key, sub):
    body = b"<Configuration/>"
    r = signed_request(gw, method, "/hon" + (f"/{key}" if key else ""), query=f"{sub}=",
                       body=body, headers={"content-md5": _md5(body)})
    assert code_of(r[0], r[2]) == (501, "NotImplemented"), r


def test_encryption_subresource_is_honoured(gw, s3):
    body = (b'<ServerSideEncryptionConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm>"
            b"</ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>")
    s3.create_bucket(Bucket="hon-enc")
    r = signed_request(gw, "PUT", "/hon-enc", query="encryption=", body=body,
                       headers={"content-md5": _md5(body)})
    assert r[0] == 200, r
    s3.put_object(Bucket="hon-enc", Key="k", Body=b"x")   # no SSE header: the default applies
    assert s3.head_object(Bucket="hon-enc", Key="k")["ServerSideEncryption"] == "AES256"


# ---- XML elements that would change what is stored --------------------------------------------

def test_xml_elements_honoured_or_refused(gw, s3):
    # lifecycle transitions (one storage class): NotImplemented
    with pytest.raises(ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="hon", LifecycleConfiguration={"Rules": [
            {"ID": "t", "Filter": {"Prefix": ""}, "Status": "Enabled",
             "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]})
    assert e.value.response["Error"]["Code"] == "NotImplemented"
    # MFA delete: NotImplemented
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket="hon", VersioningConfiguration={
            "Status": "Enabled", "MFADelete": "Enabled"}, MFA="dev 123456")
    assert e.value.response["Error"]["Code"] == "NotImplemented"
    # Object Lock's default retention: honoured (the new version is locked)
    s3.put_object_lock_configuration(Bucket="hon-lock", ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    s3.put_object(Bucket="hon-lock", Key="xml-default", Body=b"x")
    assert s3.head_object(Bucket="hon-lock", Key="xml-default")["ObjectLockMode"] == "GOVERNANCE"
