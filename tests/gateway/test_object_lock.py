"""S3 Object Lock through boto3 and the aws cli against real node processes and a real
`zonegate serve`, on both metadata backends: buckets created with lock (versioning on for
good), default retention, retention and legal hold set with the write or after it, GOVERNANCE
bypass for those allowed, COMPLIANCE never shortened, deletes of locked versions refused
(DeleteObject, DeleteObjects, lifecycle) while a DELETE without version id still adds a delete
marker, and S3's errors for bad input with nothing stored."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import (
    OTHER_ACCESS,
    OTHER_SECRET,
    Gateway,
    archive_ids,
    signed_request,
    wait_for,
)
from tests.support.lcsupport import aws_runner
from tests.support.pgserver import PgServer, skip_reason

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def gw(request, tmp_path_factory):
    opts: dict = {"pending_grace_seconds": 2, "lifecycle_day_seconds": 1,
                  "lifecycle_interval_seconds": 0.3}
    server = None
    if request.param == "postgres":
        if skip_reason() is not None:
            pytest.skip(skip_reason() or "")
        server = PgServer()
        server.start()
        opts.update(metadata=server.new_database("lock"),
                    metadata_password_file=str(server.password_file))
    g = Gateway(tmp_path_factory.mktemp(f"lock-{request.param}"), gateway_options=opts)
    g.start()
    yield g
    g.stop()
    if server is not None:
        server.destroy()


@pytest.fixture(scope="module")
def s3(gw):
    return gw.client()


_n = iter(range(10_000))


def later(**kw) -> datetime:
    return datetime.now(UTC) + timedelta(**kw)


def code(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


def locked_bucket(s3, **rule) -> str:
    name = f"lock-{next(_n)}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    if rule:
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": rule}})
    return name


def test_bucket_created_with_lock_is_versioned_for_good(s3):
    b = locked_bucket(s3)
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    assert s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled"}
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert code(e) == "InvalidBucketState"
    s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Years": 2}}})
    got = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    assert got["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Years": 2}
    # a plain bucket has none, and gets one only once versioned
    plain = f"plain-{next(_n)}"
    s3.create_bucket(Bucket=plain)
    with pytest.raises(ClientError) as e:
        s3.get_object_lock_configuration(Bucket=plain)
    assert code(e) == "ObjectLockConfigurationNotFoundError"
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=plain, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled"})
    assert code(e) == "InvalidBucketState"


def test_compliance_version_cannot_be_deleted_or_shortened(s3):
    b = locked_bucket(s3)
    until = later(days=3).replace(microsecond=0)
    vid = s3.put_object(Bucket=b, Key="golden.ckpt", Body=b"weights",
                        ObjectLockMode="COMPLIANCE",
                        ObjectLockRetainUntilDate=until)["VersionId"]
    h = s3.head_object(Bucket=b, Key="golden.ckpt")
    assert h["ObjectLockMode"] == "COMPLIANCE"
    assert h["ObjectLockRetainUntilDate"] == until
    r = s3.get_object_retention(Bucket=b, Key="golden.ckpt", VersionId=vid)["Retention"]
    assert r == {"Mode": "COMPLIANCE", "RetainUntilDate": until}
    for bypass in (False, True):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=b, Key="golden.ckpt", VersionId=vid,
                             BypassGovernanceRetention=bypass)
        assert code(e) == "AccessDenied"
    res = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "golden.ckpt",
                                                           "VersionId": vid}]})
    assert [x["Code"] for x in res["Errors"]] == ["AccessDenied"]
    # shorter, weaker or removed: refused, even with the bypass
    for ret in ({"Mode": "COMPLIANCE", "RetainUntilDate": later(days=1)},
                {"Mode": "GOVERNANCE", "RetainUntilDate": later(days=5)}, {}):
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=b, Key="golden.ckpt", VersionId=vid,
                                    Retention=ret, BypassGovernanceRetention=True)
        assert code(e) == "AccessDenied", ret
    longer = later(days=10).replace(microsecond=0)
    s3.put_object_retention(Bucket=b, Key="golden.ckpt", VersionId=vid,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": longer})
    assert s3.get_object_retention(Bucket=b, Key="golden.ckpt")["Retention"][
        "RetainUntilDate"] == longer
    # a DELETE without version id adds a delete marker, as AWS; the version stays
    d = s3.delete_object(Bucket=b, Key="golden.ckpt")
    assert d["DeleteMarker"] is True
    assert s3.get_object(Bucket=b, Key="golden.ckpt", VersionId=vid)["Body"].read() == b"weights"


def test_governance_bypass_only_for_those_allowed(gw, s3):
    b = locked_bucket(s3, Mode="GOVERNANCE", Days=1)
    vid = s3.put_object(Bucket=b, Key="k", Body=b"x")["VersionId"]
    h = s3.head_object(Bucket=b, Key="k", VersionId=vid)
    assert h["ObjectLockMode"] == "GOVERNANCE"   # the bucket's default retention
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="k", VersionId=vid)
    assert code(e) == "AccessDenied"
    # bob may delete versions but not bypass governance retention
    s3.put_bucket_policy(Bucket=b, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"},
         "Action": ["s3:DeleteObjectVersion", "s3:PutObjectRetention"],
         "Resource": f"arn:aws:s3:::{b}/*"}]}))
    bob = gw.client(OTHER_ACCESS, OTHER_SECRET)
    with pytest.raises(ClientError) as e:
        bob.delete_object(Bucket=b, Key="k", VersionId=vid, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        bob.put_object_retention(Bucket=b, Key="k", VersionId=vid, Retention={},
                                 BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    # extending needs no bypass
    bob.put_object_retention(Bucket=b, Key="k", VersionId=vid, Retention={
        "Mode": "GOVERNANCE", "RetainUntilDate": later(days=2)})
    # the owner may: DeleteObjects with the bypass header removes it
    res = s3.delete_objects(Bucket=b, BypassGovernanceRetention=True, Delete={
        "Objects": [{"Key": "k", "VersionId": vid}]})
    assert [x["VersionId"] for x in res["Deleted"]] == [vid]


def test_legal_hold_with_boto3_and_the_aws_cli(gw, s3, tmp_path):
    b = locked_bucket(s3)
    vid = s3.put_object(Bucket=b, Key="held", Body=b"x", ObjectLockLegalHoldStatus="ON",
                        ChecksumAlgorithm="CRC32")["VersionId"]
    assert s3.get_object_legal_hold(Bucket=b, Key="held")["LegalHold"] == {"Status": "ON"}
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="held", VersionId=vid, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    s3api = aws_runner(gw, tmp_path / "aws")
    s3api("put-object-legal-hold", "--bucket", b, "--key", "held", "--version-id", vid,
          "--legal-hold", "Status=OFF")
    assert s3api("get-object-legal-hold", "--bucket", b, "--key", "held")["LegalHold"] == {
        "Status": "OFF"}
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=b, Key="held")
    assert code(e) == "NoSuchObjectLockConfiguration"
    s3.delete_object(Bucket=b, Key="held", VersionId=vid)
    assert "Versions" not in s3.list_object_versions(Bucket=b, Prefix="held")


def test_multipart_and_copy_get_their_own_lock(s3):
    b = locked_bucket(s3, Mode="GOVERNANCE", Days=1)
    until = later(days=4).replace(microsecond=0)
    up = s3.create_multipart_upload(Bucket=b, Key="mp", ObjectLockMode="COMPLIANCE",
                                    ObjectLockRetainUntilDate=until)["UploadId"]
    etag = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
    vid = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag}]})["VersionId"]
    h = s3.head_object(Bucket=b, Key="mp", VersionId=vid)
    assert (h["ObjectLockMode"], h["ObjectLockRetainUntilDate"]) == ("COMPLIANCE", until)
    # a copy does not inherit the source's lock: it gets the bucket default
    s3.copy_object(Bucket=b, Key="cp", CopySource={"Bucket": b, "Key": "mp"})
    assert s3.head_object(Bucket=b, Key="cp")["ObjectLockMode"] == "GOVERNANCE"
    up = s3.create_multipart_upload(Bucket=b, Key="mp2")["UploadId"]
    etag = s3.upload_part(Bucket=b, Key="mp2", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(Bucket=b, Key="mp2", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.head_object(Bucket=b, Key="mp2")["ObjectLockMode"] == "GOVERNANCE"


def test_lock_requests_on_a_bucket_without_lock_are_refused(s3):
    b = f"nolock-{next(_n)}"
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=b, Key="j", Body=b"x", ObjectLockLegalHoldStatus="ON")
    assert code(e) == "InvalidRequest"
    for call in (lambda: s3.put_object_retention(Bucket=b, Key="k", Retention={
                     "Mode": "GOVERNANCE", "RetainUntilDate": later(days=1)}),
                 lambda: s3.get_object_retention(Bucket=b, Key="k"),
                 lambda: s3.put_object_legal_hold(Bucket=b, Key="k",
                                                  LegalHold={"Status": "ON"}),
                 lambda: s3.get_object_legal_hold(Bucket=b, Key="k")):
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == "InvalidRequest"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]] == ["k"]


def _md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


@pytest.mark.parametrize("headers, want", [
    ({"x-amz-object-lock-mode": "GOVERNANCE",
      "x-amz-object-lock-retain-until-date": "not-a-date"}, "InvalidArgument"),
    ({"x-amz-object-lock-mode": "FOREVER",
      "x-amz-object-lock-retain-until-date": "2099-01-01T00:00:00Z"}, "InvalidArgument"),
    ({"x-amz-object-lock-mode": "COMPLIANCE",
      "x-amz-object-lock-retain-until-date": "2001-01-01T00:00:00Z"}, "InvalidArgument"),
    ({"x-amz-object-lock-mode": "COMPLIANCE"}, "InvalidArgument"),
    ({"x-amz-object-lock-legal-hold": "MAYBE"}, "InvalidArgument"),
    # an upload to lock needs an integrity check, as S3 wants
    ({"x-amz-object-lock-legal-hold": "ON", "content-md5": None}, "InvalidRequest"),
])
def test_bad_lock_headers_store_nothing(gw, s3, headers, want):
    b = locked_bucket(s3)
    body = b"data"
    h = {"content-md5": _md5(body), **headers}
    h = {k: v for k, v in h.items() if v is not None}
    status, _, out = signed_request(gw, "PUT", f"/{b}/bad", headers=h, body=body)
    assert status == 400 and f"<Code>{want}</Code>".encode() in out, out
    assert "Versions" not in s3.list_object_versions(Bucket=b)


@pytest.mark.parametrize("doc, want", [
    ("<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>"
     "<DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days><Years>1</Years>"
     "</DefaultRetention></Rule></ObjectLockConfiguration>", "MalformedXML"),
    ("<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>"
     "<DefaultRetention><Mode>GOVERNANCE</Mode><Days>0</Days></DefaultRetention></Rule>"
     "</ObjectLockConfiguration>", "InvalidArgument"),
    ("<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>"
     "<DefaultRetention><Mode>SOMETIMES</Mode><Days>3</Days></DefaultRetention></Rule>"
     "</ObjectLockConfiguration>", "MalformedXML"),
    ("<ObjectLockConfiguration><ObjectLockEnabled>Disabled</ObjectLockEnabled>"
     "</ObjectLockConfiguration>", "MalformedXML"),
    ("<ObjectLockConfiguration><ObjectLockEnabled>Enabled", "MalformedXML"),
    (None, "InvalidRequest"),  # no Content-MD5 nor checksum
])
def test_bad_lock_configurations_change_nothing(gw, s3, doc, want):
    b = locked_bucket(s3, Mode="COMPLIANCE", Days=3)
    body = (doc or "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>"
            "</ObjectLockConfiguration>").encode()
    headers = {"content-md5": _md5(body)} if doc is not None else {}
    status, _, out = signed_request(gw, "PUT", f"/{b}", query="object-lock=",
                                    headers=headers, body=body)
    assert status == 400 and f"<Code>{want}</Code>".encode() in out, out
    got = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    assert got["Rule"]["DefaultRetention"] == {"Mode": "COMPLIANCE", "Days": 3}


def test_bad_retention_documents_change_nothing(gw, s3):
    b = locked_bucket(s3)
    vid = s3.put_object(Bucket=b, Key="k", Body=b"x", ChecksumAlgorithm="CRC32")["VersionId"]
    for doc in ("<Retention><Mode>GOVERNANCE</Mode></Retention>",
                "<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>soon</RetainUntilDate>"
                "</Retention>",
                "<Retention><Mode>LATER</Mode><RetainUntilDate>2099-01-01T00:00:00Z"
                "</RetainUntilDate></Retention>",
                "<LegalHold><Status>ON</Status></LegalHold>"):
        body = doc.encode()
        status, _, out = signed_request(gw, "PUT", f"/{b}/k", query=f"retention=&versionId={vid}",
                                        headers={"content-md5": _md5(body)}, body=body)
        assert status == 400 and b"<Code>MalformedXML</Code>" in out, (doc, out)
    body = b"<LegalHold><Status>YES</Status></LegalHold>"
    status, _, out = signed_request(gw, "PUT", f"/{b}/k", query="legal-hold=",
                                    headers={"content-md5": _md5(body)}, body=body)
    assert status == 400 and b"<Code>MalformedXML</Code>" in out, out
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=b, Key="k", Retention={
            "Mode": "GOVERNANCE", "RetainUntilDate": datetime(2001, 1, 1, tzinfo=UTC)})
    assert code(e) == "InvalidArgument"
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=b, Key="k")
    assert code(e) == "NoSuchObjectLockConfiguration"
    s3.delete_object(Bucket=b, Key="k", VersionId=vid)  # never locked


def test_lifecycle_never_expires_a_locked_checkpoint(gw, s3):
    b = locked_bucket(s3)
    golden = s3.put_object(Bucket=b, Key="ckpt/golden", Body=b"g" * 5000,
                           ObjectLockMode="GOVERNANCE",
                           ObjectLockRetainUntilDate=later(days=30))["VersionId"]
    held = s3.put_object(Bucket=b, Key="ckpt/held", Body=b"h" * 5000,
                         ObjectLockLegalHoldStatus="ON",
                         ChecksumAlgorithm="CRC32")["VersionId"]
    before = archive_ids(gw)
    scratch = s3.put_object(Bucket=b, Key="ckpt/scratch", Body=b"s" * 5000)["VersionId"]
    scratch_ids = archive_ids(gw) - before
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
        {"ID": "all", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "Expiration": {"Days": 1}, "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})

    def versions() -> dict:
        out = s3.list_object_versions(Bucket=b)
        return {(v["Key"], v["VersionId"]) for v in out.get("Versions", [])}

    # the unlocked one goes entirely (marker, then its version), fragments and all ...
    assert wait_for(lambda: ("ckpt/scratch", scratch) not in versions(), timeout=90)
    assert wait_for(lambda: not (archive_ids(gw) & scratch_ids), timeout=60)
    # ... the locked ones got delete markers but their versions and bytes stay
    assert {("ckpt/golden", golden), ("ckpt/held", held)} <= versions()
    markers = s3.list_object_versions(Bucket=b).get("DeleteMarkers", [])
    assert {m["Key"] for m in markers} >= {"ckpt/golden", "ckpt/held"}
    assert s3.get_object(Bucket=b, Key="ckpt/golden",
                         VersionId=golden)["Body"].read() == b"g" * 5000
    assert s3.get_object(Bucket=b, Key="ckpt/held", VersionId=held)["Body"].read() == b"h" * 5000
