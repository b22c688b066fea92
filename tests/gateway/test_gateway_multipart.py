"""Multipart uploads and copies through the gateway with boto3: ETags, ordering and size rules,
pagination, part copies with ranges, composite and full-object checksums, aborts freeing data."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import zlib

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.support.gwcluster import Gateway, archive_ids, serving, wait_for

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with serving(Gateway(tmp_path_factory.mktemp("gwmp"), workers=1)) as g:
        yield g


@pytest.fixture(scope="module")
def s3(gw):
    s = gw.client()
    s.create_bucket(Bucket="mp-bucket")
    return s


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def test_upload_file_multipart_roundtrip_and_etag(s3):
    data = os.urandom(21 * MiB + 7)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)
    s3.upload_fileobj(io.BytesIO(data), "mp-bucket", "ckpt/model.pt", Config=cfg)
    parts = [data[i:i + 8 * MiB] for i in range(0, len(data), 8 * MiB)]
    want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    h = s3.head_object(Bucket="mp-bucket", Key="ckpt/model.pt", ChecksumMode="ENABLED")
    assert h["ETag"] == f'"{want}-3"' and h["ContentLength"] == len(data)
    # boto3 asked for CRC32: composite of the part CRCs, "-3".
    crcs = b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts)
    assert h["ChecksumCRC32"] == base64.b64encode(zlib.crc32(crcs).to_bytes(4, "big")).decode() + "-3"
    out = io.BytesIO()
    s3.download_fileobj("mp-bucket", "ckpt/model.pt", out, Config=cfg)
    assert out.getvalue() == data
    r = s3.get_object(Bucket="mp-bucket", Key="ckpt/model.pt", Range="bytes=8388600-8388620")
    assert r["Body"].read() == data[8388600:8388621]  # across a part boundary
    g = s3.get_object(Bucket="mp-bucket", Key="ckpt/model.pt", PartNumber=2)
    assert g["Body"].read() == parts[1] and g["PartsCount"] == 3


def test_complete_rules(s3):
    key = "rules"
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key=key)["UploadId"]
    p1 = s3.upload_part(Bucket="mp-bucket", Key=key, UploadId=uid, PartNumber=1,
                        Body=b"a" * (5 * MiB))["ETag"]
    p2 = s3.upload_part(Bucket="mp-bucket", Key=key, UploadId=uid, PartNumber=2,
                        Body=b"b" * 100)["ETag"]
    p3 = s3.upload_part(Bucket="mp-bucket", Key=key, UploadId=uid, PartNumber=3,
                        Body=b"c" * 10)["ETag"]

    def complete(parts):
        return s3.complete_multipart_upload(
            Bucket="mp-bucket", Key=key, UploadId=uid,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]})

    for parts, want in [([(2, p2), (1, p1)], "InvalidPartOrder"),
                        ([(1, p1), (1, p1)], "InvalidPartOrder"),
                        ([(1, p1), (2, '"00000000000000000000000000000000"')], "InvalidPart"),
                        ([(1, p1), (4, p3)], "InvalidPart"),
                        ([(1, p1), (2, p2), (3, p3)], "EntityTooSmall")]:
        with pytest.raises(ClientError) as e:
            complete(parts)
        assert code(e) == want, parts
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket="mp-bucket", Key=key, UploadId=uid,
                                     MultipartUpload={"Parts": []})
    assert code(e) == "MalformedXML"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket="mp-bucket", Key=key, UploadId=uid, PartNumber=10001, Body=b"x")
    assert code(e) == "InvalidArgument"
    # Parts may be skipped: 1 and 3 make the object.
    r = complete([(1, p1), (3, p3)])
    want = hashlib.md5(hashlib.md5(b"a" * (5 * MiB)).digest() +
                       hashlib.md5(b"c" * 10).digest()).hexdigest()
    assert r["ETag"] == f'"{want}-2"'
    assert s3.get_object(Bucket="mp-bucket", Key=key)["Body"].read() == \
        b"a" * (5 * MiB) + b"c" * 10
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket="mp-bucket", Key=key, UploadId=uid)
    assert code(e) == "NoSuchUpload"
    # A retried Complete (its answer was lost) gets the same result, as from S3; other parts
    # or, once the key holds another object, the same ones are NoSuchUpload.
    again = complete([(1, p1), (3, p3)])
    assert again["ETag"] == r["ETag"] and again["Key"] == key
    with pytest.raises(ClientError) as e:
        complete([(1, p1), (2, p2)])
    assert code(e) == "NoSuchUpload"
    s3.put_object(Bucket="mp-bucket", Key=key, Body=b"newer")
    with pytest.raises(ClientError) as e:
        complete([(1, p1), (3, p3)])
    assert code(e) == "NoSuchUpload"
    assert s3.get_object(Bucket="mp-bucket", Key=key)["Body"].read() == b"newer"


def test_unknown_upload_ids(s3):
    for call in [lambda: s3.upload_part(Bucket="mp-bucket", Key="k", UploadId="nope",
                                        PartNumber=1, Body=b"x"),
                 lambda: s3.list_parts(Bucket="mp-bucket", Key="k", UploadId="nope"),
                 lambda: s3.abort_multipart_upload(Bucket="mp-bucket", Key="k", UploadId="nope"),
                 lambda: s3.complete_multipart_upload(
                     Bucket="mp-bucket", Key="k", UploadId="nope",
                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]})]:
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == "NoSuchUpload"


def test_list_parts_and_uploads_paginate(s3):
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key="pages/a")["UploadId"]
    for n in range(1, 6):
        s3.upload_part(Bucket="mp-bucket", Key="pages/a", UploadId=uid, PartNumber=n,
                       Body=bytes([n]) * 10)
    pages = list(s3.get_paginator("list_parts").paginate(
        Bucket="mp-bucket", Key="pages/a", UploadId=uid, PaginationConfig={"PageSize": 2}))
    assert [p["PartNumber"] for pg in pages for p in pg["Parts"]] == [1, 2, 3, 4, 5]
    assert len(pages) == 3
    others = [s3.create_multipart_upload(Bucket="mp-bucket", Key=k)["UploadId"]
              for k in ["pages/b", "pages/b", "pages/c"]]
    pages = list(s3.get_paginator("list_multipart_uploads").paginate(
        Bucket="mp-bucket", Prefix="pages/", PaginationConfig={"PageSize": 2}))
    got = [(u["Key"], u["UploadId"]) for pg in pages for u in pg.get("Uploads", [])]
    assert sorted(got) == sorted(zip(["pages/a", "pages/b", "pages/b", "pages/c"],
                                     [uid, *others], strict=True))
    assert len(got) == 4 and len(pages) == 2
    for k, u in got:
        s3.abort_multipart_upload(Bucket="mp-bucket", Key=k, UploadId=u)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="mp-bucket", Prefix="pages/")


def test_abort_and_replaced_parts_free_fragments(gw, s3):
    s3.put_object(Bucket="mp-bucket", Key="seed", Body=b"s")
    base = archive_ids(gw)
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key="ab")["UploadId"]
    s3.upload_part(Bucket="mp-bucket", Key="ab", UploadId=uid, PartNumber=1, Body=b"1" * 100)
    first = archive_ids(gw) - base
    s3.upload_part(Bucket="mp-bucket", Key="ab", UploadId=uid, PartNumber=1, Body=b"2" * 100)
    assert wait_for(lambda: not (archive_ids(gw) & first))
    s3.abort_multipart_upload(Bucket="mp-bucket", Key="ab", UploadId=uid)
    assert wait_for(lambda: not (archive_ids(gw) - base))


def test_upload_part_copy_with_ranges(s3):
    src = os.urandom(6 * MiB + 5)
    s3.put_object(Bucket="mp-bucket", Key="src", Body=src)
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key="assembled")["UploadId"]
    a = s3.upload_part_copy(Bucket="mp-bucket", Key="assembled", UploadId=uid, PartNumber=1,
                            CopySource={"Bucket": "mp-bucket", "Key": "src"},
                            CopySourceRange=f"bytes=0-{5 * MiB - 1}")["CopyPartResult"]
    b = s3.upload_part_copy(Bucket="mp-bucket", Key="assembled", UploadId=uid, PartNumber=2,
                            CopySource="mp-bucket/src",
                            CopySourceRange=f"bytes={6 * MiB}-{6 * MiB + 4}")["CopyPartResult"]
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(Bucket="mp-bucket", Key="assembled", UploadId=uid, PartNumber=3,
                            CopySource="mp-bucket/src", CopySourceRange=f"bytes=0-{len(src)}")
    assert code(e) == "InvalidRange"
    s3.complete_multipart_upload(Bucket="mp-bucket", Key="assembled", UploadId=uid,
                                 MultipartUpload={"Parts": [
                                     {"PartNumber": 1, "ETag": a["ETag"]},
                                     {"PartNumber": 2, "ETag": b["ETag"]}]})
    got = s3.get_object(Bucket="mp-bucket", Key="assembled")["Body"].read()
    assert got == src[:5 * MiB] + src[6 * MiB:]


def test_full_object_crc_checksum(s3):
    parts = [os.urandom(5 * MiB), os.urandom(1000)]
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key="fo", ChecksumAlgorithm="CRC32",
                                     ChecksumType="FULL_OBJECT")["UploadId"]
    done = []
    for n, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket="mp-bucket", Key="fo", UploadId=uid, PartNumber=n, Body=p,
                           ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    r = s3.complete_multipart_upload(Bucket="mp-bucket", Key="fo", UploadId=uid,
                                     MultipartUpload={"Parts": done})
    whole = base64.b64encode(zlib.crc32(b"".join(parts)).to_bytes(4, "big")).decode()
    assert r["ChecksumCRC32"] == whole
    h = s3.head_object(Bucket="mp-bucket", Key="fo", ChecksumMode="ENABLED")
    assert h["ChecksumCRC32"] == whole and h["ChecksumType"] == "FULL_OBJECT"


def test_copy_object_directives_and_conditions(s3):
    s3.put_object(Bucket="mp-bucket", Key="orig", Body=b"payload", ContentType="text/x",
                  Metadata={"a": "1"})
    etag = s3.head_object(Bucket="mp-bucket", Key="orig")["ETag"]
    r = s3.copy_object(Bucket="mp-bucket", Key="copy 1", CopySource="mp-bucket/orig")
    assert r["CopyObjectResult"]["ETag"] == etag
    h = s3.head_object(Bucket="mp-bucket", Key="copy 1")
    assert h["Metadata"] == {"a": "1"} and h["ContentType"] == "text/x"
    s3.copy_object(Bucket="mp-bucket", Key="copy2", CopySource={"Bucket": "mp-bucket",
                                                                "Key": "copy 1"},
                   MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/y")
    h = s3.head_object(Bucket="mp-bucket", Key="copy2")
    assert h["Metadata"] == {"b": "2"} and h["ContentType"] == "text/y"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="mp-bucket", Key="orig", CopySource="mp-bucket/orig")
    assert code(e) == "InvalidRequest"
    s3.copy_object(Bucket="mp-bucket", Key="orig", CopySource="mp-bucket/orig",
                   MetadataDirective="REPLACE", Metadata={"c": "3"})
    assert s3.head_object(Bucket="mp-bucket", Key="orig")["Metadata"] == {"c": "3"}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="mp-bucket", Key="x", CopySource="mp-bucket/orig",
                       CopySourceIfMatch='"nope"')
    assert code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="mp-bucket", Key="x", CopySource="mp-bucket/orig",
                       CopySourceIfNoneMatch=etag)
    assert code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="mp-bucket", Key="x", CopySource="mp-bucket/missing")
    assert code(e) == "NoSuchKey"
    assert s3.get_object(Bucket="mp-bucket", Key="copy2")["Body"].read() == b"payload"


def test_conditional_complete(s3):
    s3.put_object(Bucket="mp-bucket", Key="cond", Body=b"existing")
    uid = s3.create_multipart_upload(Bucket="mp-bucket", Key="cond")["UploadId"]
    e1 = s3.upload_part(Bucket="mp-bucket", Key="cond", UploadId=uid, PartNumber=1,
                        Body=b"new")["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e1}]}
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket="mp-bucket", Key="cond", UploadId=uid,
                                     MultipartUpload=parts, IfNoneMatch="*")
    assert code(e) == "PreconditionFailed"
    assert s3.get_object(Bucket="mp-bucket", Key="cond")["Body"].read() == b"existing"
    etag = s3.head_object(Bucket="mp-bucket", Key="cond")["ETag"]
    s3.complete_multipart_upload(Bucket="mp-bucket", Key="cond", UploadId=uid,
                                 MultipartUpload=parts, IfMatch=etag)
    assert s3.get_object(Bucket="mp-bucket", Key="cond")["Body"].read() == b"new"
