"""S3 versioning through boto3 and the aws cli against real node processes and a real
`zonegate serve`, on both metadata backends: versions on overwrite, GET/HEAD/DELETE by version
id, delete markers, the suspended state's null version, ListObjectVersions paging,
DeleteObjects with versions, copies from a version, and the fragments of a deleted version
really leaving the nodes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import (
    ACCESS_KEY,
    SECRET_KEY,
    Gateway,
    archive_ids,
    signed_request,
    wait_for,
)
from tests.support.pgserver import PgServer, skip_reason
from tests.support.s3versions import boto_versions, raw_versions, versions_of

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024
AWS = str(Path(sys.executable).with_name("aws"))
ENABLED = b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def cluster(request, tmp_path_factory):
    opts: dict = {"pending_grace_seconds": 2}
    server = None
    if request.param == "postgres":
        if skip_reason() is not None:
            pytest.skip(skip_reason() or "")
        server = PgServer()
        server.start()
        opts.update(metadata=server.new_database("vers"),
                    metadata_password_file=str(server.password_file))
    g = Gateway(tmp_path_factory.mktemp(f"vers-{request.param}"), gateway_options=opts)
    g.backend = request.param
    g.start()
    yield g
    g.stop()
    if server is not None:
        server.destroy()


_n = iter(range(10_000))


@pytest.fixture
def s3(cluster):
    return cluster.client()


@pytest.fixture
def bucket(s3):
    """A fresh bucket with versioning enabled."""
    name = f"vers-{next(_n)}-{os.getpid()}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def code_of(e: ClientError) -> str:
    return e.response["Error"]["Code"]


def test_versioning_state_round_trip_and_bad_documents_change_nothing(cluster, s3):
    s3.create_bucket(Bucket="vstate")
    assert "Status" not in s3.get_bucket_versioning(Bucket="vstate")
    for body, code in [(b"<VersioningConfiguration><Status>On</Status></VersioningConfiguration>",
                        "MalformedXML"),
                       (b"<VersioningConfiguration><Status>Enabled</Status>",
                        "MalformedXML"),
                       (b"<Other><Status>Enabled</Status></Other>", "MalformedXML"),
                       (b"<VersioningConfiguration/>", "IllegalVersioningConfigurationException"),
                       (b"<VersioningConfiguration><Status>Enabled</Status><MfaDelete>Maybe"
                        b"</MfaDelete></VersioningConfiguration>", "MalformedXML")]:
        status, _, resp = signed_request(cluster, "PUT", "/vstate", query="versioning",
                                         body=body)
        assert status == 400 and f"<Code>{code}</Code>".encode() in resp, (body, resp)
        assert "Status" not in s3.get_bucket_versioning(Bucket="vstate")
    s3.put_bucket_versioning(Bucket="vstate", VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket="vstate")["Status"] == "Enabled"
    s3.put_bucket_versioning(Bucket="vstate", VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket="vstate")["Status"] == "Suspended"
    # There is no way back to "never enabled": only Enabled and Suspended are states.
    status, _, resp = signed_request(cluster, "PUT", "/vstate", query="versioning",
                                     body=b"<VersioningConfiguration><Status>Disabled</Status>"
                                          b"</VersioningConfiguration>")
    assert status == 400 and b"MalformedXML" in resp
    assert s3.get_bucket_versioning(Bucket="vstate")["Status"] == "Suspended"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket="no-such-bucket-v",
                                 VersioningConfiguration={"Status": "Enabled"})
    assert code_of(e.value) == "NoSuchBucket"


def test_unversioned_bucket_answers_no_version_ids(s3):
    s3.create_bucket(Bucket="plainv")
    r = s3.put_object(Bucket="plainv", Key="k", Body=b"one")
    assert "VersionId" not in r
    assert "VersionId" not in s3.get_object(Bucket="plainv", Key="k")
    assert s3.get_object(Bucket="plainv", Key="k", VersionId="null")["Body"].read() == b"one"
    vs = s3.list_object_versions(Bucket="plainv")["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in vs] == [("k", "null", True)]
    d = s3.delete_object(Bucket="plainv", Key="k")
    assert "DeleteMarker" not in d
    assert "Versions" not in s3.list_object_versions(Bucket="plainv")


def test_the_null_version_is_named_once_versioning_is_enabled(s3):
    s3.create_bucket(Bucket="laterv")
    s3.put_object(Bucket="laterv", Key="before", Body=b"b")
    assert "VersionId" not in s3.head_object(Bucket="laterv", Key="before")
    s3.put_bucket_versioning(Bucket="laterv", VersioningConfiguration={"Status": "Enabled"})
    # the object written before is the "null" version, and GET / HEAD say so, as S3 does
    assert s3.head_object(Bucket="laterv", Key="before")["VersionId"] == "null"
    assert s3.get_object(Bucket="laterv", Key="before")["VersionId"] == "null"


def test_overwrites_keep_every_version_readable_by_id(cluster, s3, bucket):
    bodies = [os.urandom(1000 + i) for i in range(3)]
    ids = [s3.put_object(Bucket=bucket, Key="ckpt/model.pt", Body=b)["VersionId"]
           for b in bodies]
    assert len(set(ids)) == 3 and "null" not in ids
    for vid, body in zip(ids, bodies, strict=True):
        got = s3.get_object(Bucket=bucket, Key="ckpt/model.pt", VersionId=vid)
        assert got["Body"].read() == body and got["VersionId"] == vid
        assert s3.head_object(Bucket=bucket, Key="ckpt/model.pt",
                              VersionId=vid)["ContentLength"] == len(body)
    cur = s3.get_object(Bucket=bucket, Key="ckpt/model.pt")
    assert cur["Body"].read() == bodies[-1] and cur["VersionId"] == ids[-1]
    assert versions_of(cluster, bucket) == [("ckpt/model.pt", v, v == ids[-1], False)
                                       for v in reversed(ids)]
    # ListObjects sees the current version only.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["ckpt/model.pt"]


def test_delete_marker_hides_the_key_and_deleting_it_brings_the_object_back(cluster, s3, bucket):
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"data")["VersionId"]
    d = s3.delete_object(Bucket=bucket, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] not in (v1, "null")
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert code_of(e.value) == "NoSuchKey"
    h = e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert h["x-amz-delete-marker"] == "true" and h["x-amz-version-id"] == marker
    # The marker named by its id: 405, for GET and HEAD.
    status, headers, _ = signed_request(cluster, "GET", f"/{bucket}/k",
                                        query=f"versionId={marker}")
    assert status == 405 and headers["x-amz-delete-marker"] == "true"
    status, headers, _ = signed_request(cluster, "HEAD", f"/{bucket}/k",
                                        query=f"versionId={marker}")
    assert status == 405 and headers["x-amz-delete-marker"] == "true"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    assert versions_of(cluster, bucket) == [("k", marker, True, True), ("k", v1, False, False)]
    # The marker is on the nodes too (for recover-metadata).
    assert any(a.startswith(f"dm:{marker}.") for a in archive_ids(cluster))
    d = s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert d["DeleteMarker"] is True and d["VersionId"] == marker
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"
    assert wait_for(lambda: not any(a.startswith(f"dm:{marker}.") for a in archive_ids(cluster)))


def test_deleting_a_version_frees_its_fragments_and_promotes_the_previous(cluster, s3, bucket):
    v1 = s3.put_object(Bucket=bucket, Key="d/k", Body=os.urandom(300_000))["VersionId"]
    before = archive_ids(cluster)
    body2 = os.urandom(200_000)
    v2 = s3.put_object(Bucket=bucket, Key="d/k", Body=body2)["VersionId"]
    mine = archive_ids(cluster) - before
    assert len(mine) == cluster.k + cluster.m
    v3 = s3.put_object(Bucket=bucket, Key="d/k", Body=b"newest")["VersionId"]
    # A noncurrent version goes: nothing else changes.
    d = s3.delete_object(Bucket=bucket, Key="d/k", VersionId=v2)
    assert d["VersionId"] == v2 and "DeleteMarker" not in d
    assert wait_for(lambda: not (mine & archive_ids(cluster)))
    assert s3.get_object(Bucket=bucket, Key="d/k")["VersionId"] == v3
    # The current version goes: the previous one is current again.
    s3.delete_object(Bucket=bucket, Key="d/k", VersionId=v3)
    got = s3.get_object(Bucket=bucket, Key="d/k")
    assert got["VersionId"] == v1 and len(got["Body"].read()) == 300_000
    assert versions_of(cluster, bucket) == [("d/k", v1, True, False)]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="d/k", VersionId=v2)
    assert code_of(e.value) == "NoSuchVersion"


def test_bad_and_unknown_version_ids(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for bad in ("nope", "0" * 31, "G" * 32, "%20"):
        status, _, body = signed_request(cluster, "GET", f"/{bucket}/k",
                                         query=f"versionId={bad}")
        assert status == 400 and b"<Code>InvalidArgument</Code>" in body, (bad, body)
        status, _, body = signed_request(cluster, "DELETE", f"/{bucket}/k",
                                         query=f"versionId={bad}")
        assert status == 400 and b"<Code>InvalidArgument</Code>" in body, (bad, body)
    unknown = "0123456789abcdef0123456789abcdef"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId=unknown)
    assert code_of(e.value) == "NoSuchVersion"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k", VersionId=unknown)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # Deleting a version that does not exist is a success that names it (as S3 answers).
    assert s3.delete_object(Bucket=bucket, Key="k", VersionId=unknown)["VersionId"] == unknown
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"
    status, _, body = signed_request(cluster, "GET", f"/{bucket}",
                                     query="versions&key-marker=k&version-id-marker=bad")
    assert status == 400 and b"InvalidArgument" in body


def test_suspended_bucket_writes_the_null_version_in_place(cluster, s3, bucket):
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"enabled-1")["VersionId"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    before = archive_ids(cluster)
    r = s3.put_object(Bucket=bucket, Key="k", Body=b"null-1" * 1000)
    assert "VersionId" not in r  # AWS sends no x-amz-version-id for the null version
    first_null = archive_ids(cluster) - before
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="k", Body=b"null-2")
    # The second null version replaced the first: its fragments go, the enabled one stays.
    assert wait_for(lambda: not (first_null & archive_ids(cluster)))
    assert versions_of(cluster, bucket) == [("k", "null", True, False), ("k", v1, False, False)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"null-2"
    # GET and HEAD of the current null version answer its id, as S3 does on a versioned bucket
    assert s3.get_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    # A delete on a suspended bucket: a null delete marker, replacing the null version.
    d = s3.delete_object(Bucket=bucket, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    assert versions_of(cluster, bucket) == [("k", "null", True, True), ("k", v1, False, False)]
    # Enabled again: new ids on top, the null marker stays where it was.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v3 = s3.put_object(Bucket=bucket, Key="k", Body=b"enabled-2")["VersionId"]
    assert versions_of(cluster, bucket) == [("k", v3, True, False), ("k", "null", False, True),
                                       ("k", v1, False, False)]


def test_delete_objects_with_versions_and_markers(s3, bucket):
    ids = {k: [s3.put_object(Bucket=bucket, Key=k, Body=k.encode() * (i + 1))["VersionId"]
               for i in range(2)] for k in ("a", "b", "c")}
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "VersionId": ids["a"][1]},           # the newest version of a: gone
        {"Key": "b"},                                     # a marker on top of b
        {"Key": "c", "VersionId": "0123456789abcdef0123456789abcdef"},  # none such: ignored
        {"Key": "c", "VersionId": "not-a-version"},
    ]})
    deleted = {(d["Key"], d.get("VersionId")): d for d in r["Deleted"]}
    assert ("a", ids["a"][1]) in deleted and "DeleteMarker" not in deleted[("a", ids["a"][1])]
    mb = deleted[("b", None)]
    assert mb["DeleteMarker"] is True and mb["DeleteMarkerVersionId"] not in ids["b"]
    assert ("c", "0123456789abcdef0123456789abcdef") in deleted
    assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("c", "NoSuchVersion")]
    assert s3.get_object(Bucket=bucket, Key="a")["VersionId"] == ids["a"][0]
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="b")
    # Removing the marker by id through DeleteObjects says it was a marker.
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "b", "VersionId": mb["DeleteMarkerVersionId"]}]})
    d = r["Deleted"][0]
    assert d["DeleteMarker"] is True and d["DeleteMarkerVersionId"] == mb["DeleteMarkerVersionId"]
    assert s3.get_object(Bucket=bucket, Key="b")["VersionId"] == ids["b"][1]


@pytest.mark.slow
def test_delete_objects_of_1000_keys_in_one_request(cluster, s3, bucket):
    if cluster.backend != "sqlite":
        pytest.skip("one backend is enough for the figure")
    from concurrent.futures import ThreadPoolExecutor
    keys = [f"many/{i:04d}" for i in range(1000)]
    with ThreadPoolExecutor(8) as ex:  # a tenth of them hold an object under the marker
        list(ex.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"x"), keys[::10]))
    t = time.monotonic()
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys],
                                                 "Quiet": True})
    markers_s = time.monotonic() - t
    assert not r.get("Errors")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="many/")
    left = versions_of(cluster, bucket, prefix="many/")
    assert len(left) == 1100 and sum(m for *_, m in left) == 1000
    t = time.monotonic()
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": k, "VersionId": v} for k, v, _, marker in left if marker]})
    versions_s = time.monotonic() - t
    assert len(r["Deleted"]) == 1000 and not r.get("Errors")
    assert all(d["DeleteMarker"] for d in r["Deleted"])
    assert len(s3.list_objects_v2(Bucket=bucket, Prefix="many/")["Contents"]) == 100
    assert not any(m for *_, m in versions_of(cluster, bucket, prefix="many/"))
    print(f"\nDeleteObjects of 1000 keys: {markers_s:.2f} s adding delete markers "
          f"(written to the nodes), {versions_s:.2f} s deleting 1000 versions by id")


def test_copy_from_a_version_and_restore_it_in_place(cluster, s3, bucket):
    v1 = s3.put_object(Bucket=bucket, Key="src", Body=b"old bytes")["VersionId"]
    s3.put_object(Bucket=bucket, Key="src", Body=b"new bytes")
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src",
                                                             "VersionId": v1})
    assert r["CopySourceVersionId"] == v1 and r["VersionId"] not in (v1, "null")
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"old bytes"
    # Restoring an old version onto its own key is a copy S3 allows.
    r = s3.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src",
                                                             "VersionId": v1})
    assert s3.get_object(Bucket=bucket, Key="src")["Body"].read() == b"old bytes"
    assert len(versions_of(cluster, bucket, prefix="src")) == 3
    d = s3.delete_object(Bucket=bucket, Key="gone")["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "gone",
                                                           "VersionId": d})
    assert code_of(e.value) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "gone"})
    assert code_of(e.value) == "NoSuchKey"
    # UploadPartCopy from a version.
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    r = s3.upload_part_copy(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1,
                            CopySource={"Bucket": bucket, "Key": "src", "VersionId": v1})
    assert r["CopySourceVersionId"] == v1
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["CopyPartResult"]["ETag"]}]})
    assert done["VersionId"] not in ("null", v1)
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["Body"].read() == b"old bytes" and got["VersionId"] == done["VersionId"]


def test_multipart_complete_makes_a_new_version(s3, bucket):
    old = s3.put_object(Bucket=bucket, Key="big", Body=b"small")["VersionId"]
    up = s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    parts = []
    blobs = [os.urandom(5 * MiB), os.urandom(1000)]
    for i, b in enumerate(blobs, 1):
        parts.append({"PartNumber": i, "ETag": s3.upload_part(
            Bucket=bucket, Key="big", UploadId=up, PartNumber=i, Body=b)["ETag"]})
    done = s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=up,
                                        MultipartUpload={"Parts": parts})
    new = done["VersionId"]
    assert new not in (old, "null")
    got = s3.get_object(Bucket=bucket, Key="big", VersionId=new)
    assert hashlib.md5(got["Body"].read()).digest() == hashlib.md5(b"".join(blobs)).digest()
    assert s3.get_object(Bucket=bucket, Key="big", VersionId=old)["Body"].read() == b"small"


def test_list_versions_pages_markers_prefixes_and_url_encoding(cluster, s3, bucket):
    expect = []
    for key in ("a/1", "a/2", "b", "c d", "é"):
        vids = [s3.put_object(Bucket=bucket, Key=key, Body=b"v")["VersionId"] for _ in range(3)]
        expect += [(key, v, v == vids[-1], False) for v in reversed(vids)]
    dm = s3.delete_object(Bucket=bucket, Key="b")["VersionId"]
    i = next(n for n, e in enumerate(expect) if e[0] == "b")
    expect[i:i + 1] = [("b", dm, True, True), ("b", expect[i][1], False, False)]
    expect = [(k, v, latest and not (k == "b" and not marker), marker)
              for k, v, latest, marker in expect]
    # Every page size walks the same list (markers between versions of one key included).
    assert versions_of(cluster, bucket) == expect
    for size in (1, 2, 5):
        assert versions_of(cluster, bucket, max_keys=size) == expect
        assert boto_versions(s3, bucket, PaginationConfig={"PageSize": size}) == set(expect)
    page = s3.list_object_versions(Bucket=bucket, MaxKeys=4)
    assert page["IsTruncated"] and page["NextKeyMarker"] == "a/2"
    assert page["NextVersionIdMarker"] == expect[3][1]
    roll = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in roll["CommonPrefixes"]] == ["a/"]
    assert {v["Key"] for v in roll["Versions"]} == {"b", "c d", "é"}
    body = raw_versions(cluster, bucket, "versions&encoding-type=url&prefix=c")
    assert b"<Key>c%20d</Key>" in body and b"<EncodingType>url</EncodingType>" in body
    assert s3.list_object_versions(Bucket=bucket, Prefix="é")["Versions"][0]["Key"] == "é"


def test_aws_cli_s3api_versioning(cluster, tmp_path):
    if cluster.backend != "sqlite":
        pytest.skip("the cli's requests are the same on both backends")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "NO_PROXY": "*"}

    def s3api(*args: str) -> dict:
        p = subprocess.run([AWS, "--endpoint-url", cluster.endpoint, "s3api", *args,
                            "--output", "json"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout) if p.stdout.strip() else {}

    s3api("create-bucket", "--bucket", "cliv")
    s3api("put-bucket-versioning", "--bucket", "cliv",
          "--versioning-configuration", "Status=Enabled")
    f = tmp_path / "f"
    f.write_bytes(b"one")
    v1 = s3api("put-object", "--bucket", "cliv", "--key", "k", "--body", str(f))["VersionId"]
    f.write_bytes(b"two")
    v2 = s3api("put-object", "--bucket", "cliv", "--key", "k", "--body", str(f))["VersionId"]
    out = s3api("list-object-versions", "--bucket", "cliv")
    assert [(v["VersionId"], v["IsLatest"]) for v in out["Versions"]] == [(v2, True),
                                                                          (v1, False)]
    s3api("get-object", "--bucket", "cliv", "--key", "k", "--version-id", v1,
          str(tmp_path / "out"))
    assert (tmp_path / "out").read_bytes() == b"one"
    dm = s3api("delete-object", "--bucket", "cliv", "--key", "k")
    assert dm["DeleteMarker"] is True
    out = s3api("list-object-versions", "--bucket", "cliv")
    assert out["DeleteMarkers"][0]["VersionId"] == dm["VersionId"]
    assert out["DeleteMarkers"][0]["IsLatest"] is True
