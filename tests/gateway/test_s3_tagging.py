"""Object and bucket tagging through boto3 and `aws s3api` against real processes: tags per
object and version, x-amz-tagging on PutObject / CreateMultipartUpload / CopyObject (with the
tagging directive), x-amz-tagging-count, bucket tag sets, and bad tag sets refused with S3's
codes, changing nothing."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import signed_request
from tests.support.lcsupport import aws_runner, code, start

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    yield from start(tmp_path_factory, "tagging")


@pytest.fixture(scope="module")
def s3(gw):
    c = gw.client()
    c.create_bucket(Bucket="tags")
    return c


@pytest.fixture(scope="module")
def s3api(gw, tmp_path_factory):
    return aws_runner(gw, tmp_path_factory.mktemp("awshome"))


def _tags(resp) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resp["TagSet"]}


def test_put_get_delete_object_tagging(s3):
    s3.put_object(Bucket="tags", Key="a", Body=b"x")
    assert s3.get_object_tagging(Bucket="tags", Key="a")["TagSet"] == []
    assert "x-amz-tagging-count" not in s3.head_object(Bucket="tags", Key="a")[
        "ResponseMetadata"]["HTTPHeaders"]
    tagset = [{"Key": "run", "Value": "r1"}, {"Key": "kind", "Value": "ckpt é"},
              {"Key": "empty", "Value": ""}]
    s3.put_object_tagging(Bucket="tags", Key="a", Tagging={"TagSet": tagset})
    got = s3.get_object_tagging(Bucket="tags", Key="a")["TagSet"]
    assert got == sorted(tagset, key=lambda t: t["Key"])
    head = s3.head_object(Bucket="tags", Key="a")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "3"
    assert s3.get_object(Bucket="tags", Key="a")["TagCount"] == 3
    s3.delete_object_tagging(Bucket="tags", Key="a")
    assert s3.get_object_tagging(Bucket="tags", Key="a")["TagSet"] == []
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket="tags", Key="missing")
    assert code(e) == "NoSuchKey"


def test_tagging_header_on_put_multipart_and_copy(s3):
    s3.put_object(Bucket="tags", Key="h", Body=b"x", Tagging="foo=bar&bar&sp=a+b")
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="h")) == \
        {"foo": "bar", "bar": "", "sp": "a b"}
    up = s3.create_multipart_upload(Bucket="tags", Key="mp", Tagging="step=100")
    etag = s3.upload_part(Bucket="tags", Key="mp", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"y" * 100)["ETag"]
    s3.complete_multipart_upload(Bucket="tags", Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="mp")) == {"step": "100"}
    head = s3.head_object(Bucket="tags", Key="mp")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "1"
    assert "x-zg-tagging" not in json.dumps(head["ResponseMetadata"]["HTTPHeaders"])
    # CopyObject: COPY keeps the source's tags, REPLACE takes the header's (or none)
    s3.copy_object(Bucket="tags", Key="c1", CopySource={"Bucket": "tags", "Key": "mp"})
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="c1")) == {"step": "100"}
    s3.copy_object(Bucket="tags", Key="c2", CopySource={"Bucket": "tags", "Key": "mp"},
                   TaggingDirective="REPLACE", Tagging="new=1")
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="c2")) == {"new": "1"}
    s3.copy_object(Bucket="tags", Key="c3", CopySource={"Bucket": "tags", "Key": "mp"},
                   TaggingDirective="REPLACE")
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="c3")) == {}


@pytest.mark.parametrize(("tagset", "want"), [
    ([{"Key": f"k{i}", "Value": "v"} for i in range(11)], "BadRequest"),
    ([{"Key": "k" * 129, "Value": "v"}], "InvalidTag"),
    ([{"Key": "k", "Value": "v" * 257}], "InvalidTag"),
    ([{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}], "InvalidTag"),
    ([{"Key": "aws:sys", "Value": "1"}], "InvalidTag"),
    ([{"Key": "a*b", "Value": "1"}], "InvalidTag"),
])
def test_bad_object_tag_sets_change_nothing(s3, tagset, want):
    s3.put_object(Bucket="tags", Key="bad", Body=b"x", Tagging="keep=me")
    with pytest.raises(ClientError) as e:
        s3.put_object_tagging(Bucket="tags", Key="bad", Tagging={"TagSet": tagset})
    assert code(e) == want
    assert _tags(s3.get_object_tagging(Bucket="tags", Key="bad")) == {"keep": "me"}


def test_bad_tagging_header_stores_nothing(s3):
    for header, want in (("a=1&a=2", "InvalidArgument"),
                         ("TagSet=[{Key=string,Value=string}]", "InvalidArgument"),
                         ("&".join(f"k{i}=v" for i in range(11)), "BadRequest"),
                         ("aws:x=1", "InvalidTag")):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="tags", Key="never", Body=b"x", Tagging=header)
        assert code(e) == want, header
        with pytest.raises(ClientError) as e:
            s3.create_multipart_upload(Bucket="tags", Key="never", Tagging=header)
        assert code(e) == want, header
    with pytest.raises(ClientError):
        s3.head_object(Bucket="tags", Key="never")
    assert not s3.list_multipart_uploads(Bucket="tags").get("Uploads")


def test_malformed_and_unsigned_bodies(gw, s3):
    s3.put_object(Bucket="tags", Key="m", Body=b"x")
    for body in (b"<Tagging><TagSet><Tag><Key>a</Key></Tag></TagSet></Tagging>",
                 b"<Tagging>", b"<Other/>"):
        import base64
        import hashlib
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        status, _, out = signed_request(gw, "PUT", "/tags/m", query="tagging", body=body,
                                        headers={"Content-MD5": md5})
        assert status == 400 and b"<Code>MalformedXML</Code>" in out, out
    # checksum-required: no Content-MD5 nor x-amz-checksum-*
    body = b"<Tagging><TagSet/></Tagging>"
    status, _, out = signed_request(gw, "PUT", "/tags/m", query="tagging", body=body)
    assert status == 400 and b"<Code>InvalidRequest</Code>" in out, out
    status, _, out = signed_request(gw, "PUT", "/tags/m", query="tagging", body=body,
                                    headers={"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="})
    assert status == 400 and b"<Code>BadDigest</Code>" in out, out


def test_bucket_tagging(s3):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket="tags")
    assert code(e) == "NoSuchTagSet"
    tagset = [{"Key": f"k{i:02d}", "Value": str(i)} for i in range(50)]
    s3.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": tagset})
    assert s3.get_bucket_tagging(Bucket="tags")["TagSet"] == tagset
    with pytest.raises(ClientError) as e:
        s3.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": tagset + [
            {"Key": "k50", "Value": "x"}]})
    assert code(e) == "InvalidTag"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": [{"Key": "aws:x",
                                                                  "Value": "1"}]})
    assert code(e) == "InvalidTag"
    assert s3.get_bucket_tagging(Bucket="tags")["TagSet"] == tagset
    s3.delete_bucket_tagging(Bucket="tags")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket="tags")
    assert code(e) == "NoSuchTagSet"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket="no-such-bucket-here")
    assert code(e) == "NoSuchBucket"


def test_other_users_bucket_is_denied(gw, s3):
    from tests.support.gwcluster import OTHER_ACCESS, OTHER_SECRET
    other = gw.client(OTHER_ACCESS, OTHER_SECRET)
    s3.put_object(Bucket="tags", Key="mine", Body=b"x", Tagging="a=1")
    with pytest.raises(ClientError) as e:
        other.get_object_tagging(Bucket="tags", Key="mine")
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        other.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": []})
    assert code(e) == "AccessDenied"


def test_aws_cli_tagging(s3api):
    s3api("put-object", "--bucket", "tags", "--key", "cli", "--tagging", "a=1&b=2")
    assert s3api("get-object-tagging", "--bucket", "tags", "--key", "cli")["TagSet"] == [
        {"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]
    s3api("put-object-tagging", "--bucket", "tags", "--key", "cli", "--tagging",
          '{"TagSet": [{"Key": "c", "Value": "3"}]}')
    assert s3api("get-object-tagging", "--bucket", "tags", "--key", "cli")["TagSet"] == [
        {"Key": "c", "Value": "3"}]
    p = s3api("put-object-tagging", "--bucket", "tags", "--key", "cli", "--tagging",
              '{"TagSet": [{"Key": "aws:c", "Value": "3"}]}', check=False)
    assert p.returncode != 0 and "InvalidTag" in p.stderr
    s3api("put-bucket-tagging", "--bucket", "tags", "--tagging",
          '{"TagSet": [{"Key": "team", "Value": "ml"}]}')
    assert s3api("get-bucket-tagging", "--bucket", "tags")["TagSet"] == [
        {"Key": "team", "Value": "ml"}]
    s3api("delete-bucket-tagging", "--bucket", "tags")
