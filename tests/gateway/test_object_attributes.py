"""GetObjectAttributes through boto3 against a real `zonegate serve` and node processes: each
attribute only when asked, a multipart object's parts paginated with their checksums, a
single-part object without parts, versions by id, and S3's errors for bad requests."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import Gateway, signed_request

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("attrs"))
    g.start()
    yield g
    g.stop()


@pytest.fixture(scope="module")
def s3(gw):
    s3 = gw.client()
    s3.create_bucket(Bucket="attrs")
    s3.put_bucket_versioning(Bucket="attrs", VersioningConfiguration={"Status": "Enabled"})
    return s3


def test_single_part_object(s3):
    r = s3.put_object(Bucket="attrs", Key="one", Body=b"hello", ChecksumAlgorithm="SHA256")
    a = s3.get_object_attributes(Bucket="attrs", Key="one", ObjectAttributes=ALL)
    assert a["ETag"] == r["ETag"].strip('"')
    assert a["Checksum"]["ChecksumSHA256"] == r["ChecksumSHA256"]
    assert a["Checksum"]["ChecksumType"] == "FULL_OBJECT"
    assert (a["StorageClass"], a["ObjectSize"]) == ("STANDARD", 5)
    assert "ObjectParts" not in a
    assert a["VersionId"] == r["VersionId"] and "LastModified" in a
    only = s3.get_object_attributes(Bucket="attrs", Key="one", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 5 and "ETag" not in only and "Checksum" not in only


def test_multipart_parts_paginate(s3):
    up = s3.create_multipart_upload(Bucket="attrs", Key="mp", ChecksumAlgorithm="CRC32")
    parts = []
    for n in range(1, 4):
        body = bytes([n]) * (5 * MiB if n < 3 else 1000)
        p = s3.upload_part(Bucket="attrs", Key="mp", UploadId=up["UploadId"], PartNumber=n,
                           Body=body, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": n, "ETag": p["ETag"], "ChecksumCRC32": p["ChecksumCRC32"]})
    done = s3.complete_multipart_upload(Bucket="attrs", Key="mp", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts})
    a = s3.get_object_attributes(Bucket="attrs", Key="mp", ObjectAttributes=ALL, MaxParts=2)
    assert a["ETag"] == done["ETag"].strip('"') and a["ETag"].endswith("-3")
    assert a["Checksum"]["ChecksumCRC32"] == done["ChecksumCRC32"]
    assert a["ObjectSize"] == 10 * MiB + 1000
    op = a["ObjectParts"]
    assert (op["TotalPartsCount"], op["IsTruncated"], op["NextPartNumberMarker"]) == (3, True, 2)
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32"]) for p in op["Parts"]] == [
        (1, 5 * MiB, parts[0]["ChecksumCRC32"]), (2, 5 * MiB, parts[1]["ChecksumCRC32"])]
    rest = s3.get_object_attributes(Bucket="attrs", Key="mp", ObjectAttributes=["ObjectParts"],
                                    MaxParts=2, PartNumberMarker=2)["ObjectParts"]
    assert rest["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in rest["Parts"]] == [(3, 1000)]


def test_versions_and_delete_markers(s3):
    v1 = s3.put_object(Bucket="attrs", Key="v", Body=b"1")["VersionId"]
    s3.put_object(Bucket="attrs", Key="v", Body=b"22")
    a = s3.get_object_attributes(Bucket="attrs", Key="v", VersionId=v1,
                                 ObjectAttributes=["ObjectSize"])
    assert (a["ObjectSize"], a["VersionId"]) == (1, v1)
    s3.delete_object(Bucket="attrs", Key="v")
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket="attrs", Key="v", ObjectAttributes=["ETag"])
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"


def test_bad_requests(gw, s3):
    s3.put_object(Bucket="attrs", Key="b", Body=b"x")
    for headers in ({}, {"x-amz-object-attributes": "ETag,Colour"},
                    {"x-amz-object-attributes": "ObjectParts", "x-amz-max-parts": "many"}):
        status, _, body = signed_request(gw, "GET", "/attrs/b", query="attributes=",
                                         headers=headers)
        assert status == 400 and b"<Code>InvalidArgument</Code>" in body, (headers, body)
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket="attrs", Key="nothing", ObjectAttributes=["ETag"])
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
