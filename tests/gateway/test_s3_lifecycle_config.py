"""Put/Get/DeleteBucketLifecycleConfiguration through boto3 and `aws s3api` on real processes:
rules read back as sent, bad configurations get S3's codes and change nothing, and GET, HEAD
and PUT (CopyObject, CompleteMultipartUpload) of an object a rule will expire carry
x-amz-expiration, and uploads an abort rule will abort carry x-amz-abort-date and x-amz-abort-rule-id."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import signed_request
from tests.support.lcsupport import aws_runner, code, start

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    # a long lifecycle interval: these tests look at configurations, not at the worker
    yield from start(tmp_path_factory, "lcconfig", lifecycle_interval_seconds=3600)


@pytest.fixture(scope="module")
def s3(gw):
    c = gw.client()
    c.create_bucket(Bucket="lcb")
    return c


RULES = [
    {"ID": "ckpt", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
     "Expiration": {"Days": 7},
     "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 5}},
    {"ID": "eval snapshots", "Filter": {"And": {"Prefix": "eval/", "Tags": [
        {"Key": "kind", "Value": "eval"}], "ObjectSizeGreaterThan": 10}},
     "Status": "Enabled", "Expiration": {"Days": 30}},
    {"ID": "uploads", "Filter": {}, "Status": "Enabled",
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
    {"ID": "markers", "Filter": {"Prefix": ""}, "Status": "Disabled",
     "Expiration": {"ExpiredObjectDeleteMarker": True}},
]


def test_put_get_delete(s3):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert code(e) == "NoSuchLifecycleConfiguration"
    s3.put_bucket_lifecycle_configuration(Bucket="lcb",
                                          LifecycleConfiguration={"Rules": RULES})
    got = s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"]
    assert got == RULES
    s3.delete_bucket_lifecycle(Bucket="lcb")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert code(e) == "NoSuchLifecycleConfiguration"
    s3.delete_bucket_lifecycle(Bucket="lcb")  # 204 without one too


BAD = [
    ([{"ID": "x" * 256, "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 1}}],
     "InvalidArgument"),
    ([{"ID": "a", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 1}},
      {"ID": "a", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 2}}],
     "InvalidArgument"),
    ([{"ID": "a", "Filter": {}, "Status": "enabled", "Expiration": {"Days": 1}}],
     "MalformedXML"),
    ([{"ID": "a", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 0}}],
     "InvalidArgument"),
    ([{"ID": "a", "Filter": {}, "Status": "Enabled"}], "InvalidRequest"),
    ([{"ID": "a", "Filter": {"Tag": {"Key": "k", "Value": "v"}}, "Status": "Enabled",
       "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}], "InvalidRequest"),
    ([{"ID": "a", "Filter": {}, "Status": "Enabled",
       "Expiration": {"Days": 1, "ExpiredObjectDeleteMarker": True}}], "MalformedXML"),
    ([{"ID": "a", "Filter": {}, "Status": "Enabled",
       "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]}], "NotImplemented"),
    ([{"ID": "a", "Filter": {"ObjectSizeLessThan": 0}, "Status": "Enabled",
       "Expiration": {"Days": 1}}], "InvalidRequest"),
]


@pytest.mark.parametrize(("rules", "want"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_configurations_change_nothing(s3, rules, want):
    s3.put_bucket_lifecycle_configuration(Bucket="lcb",
                                          LifecycleConfiguration={"Rules": RULES[:1]})
    with pytest.raises(ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="lcb",
                                              LifecycleConfiguration={"Rules": rules})
    assert code(e) == want
    assert s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"] == RULES[:1]


def _put_raw(gw, body: bytes, md5: bool = True):
    headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()} \
        if md5 else {}
    return signed_request(gw, "PUT", "/lcb", query="lifecycle", body=body, headers=headers)


def test_raw_bodies(gw, s3):
    ok = (b"<LifecycleConfiguration><Rule><ID>v1</ID><Prefix>logs/</Prefix><Status>Enabled"
          b"</Status><Expiration><Days>3</Days></Expiration></Rule></LifecycleConfiguration>")
    status, _, out = _put_raw(gw, ok, md5=False)
    assert status == 400 and b"<Code>InvalidRequest</Code>" in out
    for body, want in ((b"<LifecycleConfiguration>", b"MalformedXML"),
                       (b"<LifecycleConfiguration/>", b"MalformedXML"),
                       (ok.replace(b"<ID>v1</ID>", b""), None)):
        status, _, out = _put_raw(gw, body)
        if want is None:
            assert status == 200, out
        else:
            assert status == 400 and b"<Code>" + want + b"</Code>" in out, out
    rules = s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"]
    # a rule sent without an ID gets one; the rule-level Prefix reads back as sent
    assert len(rules) == 1 and len(rules[0]["ID"]) == 48 and rules[0]["Prefix"] == "logs/"


def test_expiration_header_on_put_get_head(s3):
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
        {"ID": "week", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "Expiration": {"Days": 7}},
        {"ID": "tagged", "Filter": {"Tag": {"Key": "tmp", "Value": "1"}}, "Status": "Enabled",
         "Expiration": {"Days": 1}}]})
    put = s3.put_object(Bucket="lcb", Key="ckpt/a", Body=b"x")
    pat = re.compile(r'expiry-date="(.+ 00:00:00 GMT)", rule-id="week"')
    assert pat.fullmatch(put["Expiration"]), put["Expiration"]
    assert pat.fullmatch(s3.head_object(Bucket="lcb", Key="ckpt/a")["Expiration"])
    assert pat.fullmatch(s3.get_object(Bucket="lcb", Key="ckpt/a")["Expiration"])
    s3.put_object(Bucket="lcb", Key="other", Body=b"x")
    assert "Expiration" not in s3.head_object(Bucket="lcb", Key="other")
    # tagged later: the tag rule (1 day) now applies
    s3.put_object_tagging(Bucket="lcb", Key="other",
                          Tagging={"TagSet": [{"Key": "tmp", "Value": "1"}]})
    assert 'rule-id="tagged"' in s3.head_object(Bucket="lcb", Key="other")["Expiration"]
    s3.delete_bucket_lifecycle(Bucket="lcb")
    assert "Expiration" not in s3.head_object(Bucket="lcb", Key="ckpt/a")


def test_aws_cli_lifecycle(gw, s3, tmp_path_factory):
    s3api = aws_runner(gw, tmp_path_factory.mktemp("awshome"))
    cfg = {"Rules": [{"ID": "cli", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled",
                      "Expiration": {"Days": 2}}]}
    s3api("put-bucket-lifecycle-configuration", "--bucket", "lcb", "--lifecycle-configuration",
          json.dumps(cfg))
    assert s3api("get-bucket-lifecycle-configuration", "--bucket", "lcb")["Rules"] == \
        cfg["Rules"]
    bad = {"Rules": [{"ID": "cli", "Filter": {}, "Status": "Enabled",
                      "Expiration": {"Date": "2030-01-01T10:00:00Z"}}]}
    p = s3api("put-bucket-lifecycle-configuration", "--bucket", "lcb",
              "--lifecycle-configuration", json.dumps(bad), check=False)
    assert p.returncode != 0 and "InvalidArgument" in p.stderr
    s3api("delete-bucket-lifecycle", "--bucket", "lcb")
    p = s3api("get-bucket-lifecycle-configuration", "--bucket", "lcb", check=False)
    assert p.returncode != 0 and "NoSuchLifecycleConfiguration" in p.stderr


def test_expiration_on_copy_and_complete_and_abort_date_on_uploads(s3):
    s3.create_bucket(Bucket="lcc")
    s3.put_bucket_lifecycle_configuration(Bucket="lcc", LifecycleConfiguration={"Rules": [
        {"ID": "week", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "Expiration": {"Days": 7}},
        {"ID": "crashed jobs", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}]})
    pat = re.compile(r'expiry-date="(.+ 00:00:00 GMT)", rule-id="week"')
    s3.put_object(Bucket="lcc", Key="src", Body=b"x")
    copied = s3.copy_object(Bucket="lcc", Key="ckpt/copy", CopySource={"Bucket": "lcc",
                                                                       "Key": "src"})
    assert pat.fullmatch(copied["Expiration"]), copied
    other = s3.copy_object(Bucket="lcc", Key="elsewhere", CopySource={"Bucket": "lcc",
                                                                      "Key": "src"})
    assert "Expiration" not in other
    # an upload under the abort rule's prefix: abort date and rule on Create and ListParts
    up = s3.create_multipart_upload(Bucket="lcc", Key="ckpt/shard")
    assert up["AbortRuleId"] == "crashed jobs"
    when = up["AbortDate"]
    assert (when.hour, when.minute, when.second) == (0, 0, 0)
    initiated = next(u["Initiated"] for u in s3.list_multipart_uploads(Bucket="lcc")["Uploads"]
                     if u["UploadId"] == up["UploadId"])
    assert 2 * 86400 <= (when - initiated).total_seconds() <= 3 * 86400
    part = s3.upload_part(Bucket="lcc", Key="ckpt/shard", UploadId=up["UploadId"],
                          PartNumber=1, Body=b"p" * 100)
    parts = s3.list_parts(Bucket="lcc", Key="ckpt/shard", UploadId=up["UploadId"])
    assert parts["AbortDate"] == when and parts["AbortRuleId"] == "crashed jobs"
    done = s3.complete_multipart_upload(
        Bucket="lcc", Key="ckpt/shard", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert pat.fullmatch(done["Expiration"]), done
    # outside the rules' prefix: none of these headers
    up = s3.create_multipart_upload(Bucket="lcc", Key="free/shard")
    assert "AbortDate" not in up and "AbortRuleId" not in up
    part = s3.upload_part(Bucket="lcc", Key="free/shard", UploadId=up["UploadId"],
                          PartNumber=1, Body=b"p")
    assert "AbortDate" not in s3.list_parts(Bucket="lcc", Key="free/shard",
                                            UploadId=up["UploadId"])
    done = s3.complete_multipart_upload(
        Bucket="lcc", Key="free/shard", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert "Expiration" not in done
