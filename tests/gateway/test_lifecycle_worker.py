"""The lifecycle worker on a real cluster with a one-second lifecycle day
(`lifecycle_day_seconds = 1`, as Ceph's rgw_lc_debug_interval): expiration by prefix, by tag
and by size, incomplete uploads aborted, NewerNoncurrentVersions on a versioned bucket, and
the expired objects' fragments really deleted from the nodes."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import archive_ids, wait_for
from tests.support.lcsupport import start

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    yield from start(tmp_path_factory, "lcworker", lifecycle_day_seconds=1,
                     lifecycle_interval_seconds=0.3)


@pytest.fixture(scope="module")
def s3(gw):
    return gw.client()


def _keys(s3, bucket: str) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}


def _rules(s3, bucket: str, *rules) -> None:
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket,
                                          LifecycleConfiguration={"Rules": list(rules)})


def _put_all(gw, s3, bucket: str, objs: dict[str, tuple[bytes, str]]) -> dict[str, set[str]]:
    """Put each object; returns the archive ids each one added on the nodes."""
    added = {}
    for key, (body, tagging) in objs.items():
        before = archive_ids(gw)
        s3.put_object(Bucket=bucket, Key=key, Body=body, Tagging=tagging)
        added[key] = archive_ids(gw) - before
        assert added[key], key
    return added


def _expect(gw, s3, bucket: str, added: dict[str, set[str]], survivors: set[str]) -> None:
    assert wait_for(lambda: _keys(s3, bucket) == survivors, timeout=60), _keys(s3, bucket)
    gone = set().union(*(ids for k, ids in added.items() if k not in survivors))
    kept = set().union(*(ids for k, ids in added.items() if k in survivors))
    # the sweeper deletes the expired objects' fragments; the survivors' stay
    assert wait_for(lambda: not (archive_ids(gw) & gone), timeout=60)
    assert kept <= archive_ids(gw)


def test_expiration_by_prefix(gw, s3):
    _rules(s3, "by-prefix", {"ID": "old", "Filter": {"Prefix": "old/"}, "Status": "Enabled",
                             "Expiration": {"Days": 1}})
    added = _put_all(gw, s3, "by-prefix", {"old/a": (b"a" * 1000, ""),
                                           "old/b/c": (b"b" * 10, ""),
                                           "keep/c": (b"c", ""), "oldx": (b"d", "")})
    _expect(gw, s3, "by-prefix", added, {"keep/c", "oldx"})


def test_expiration_by_tag_and_disabled_rules(gw, s3):
    _rules(s3, "by-tag",
           {"ID": "tmp", "Filter": {"Tag": {"Key": "tmp", "Value": "1"}}, "Status": "Enabled",
            "Expiration": {"Days": 1}},
           {"ID": "off", "Filter": {}, "Status": "Disabled", "Expiration": {"Days": 1}})
    added = _put_all(gw, s3, "by-tag", {"t1": (b"x", "tmp=1"), "t2": (b"x", "tmp=1&other=2"),
                                        "t3": (b"x", "tmp=2"), "t4": (b"x", "")})
    _expect(gw, s3, "by-tag", added, {"t3", "t4"})


def test_expiration_by_size(gw, s3):
    _rules(s3, "by-size", {"ID": "big", "Filter": {"And": {
        "Prefix": "", "ObjectSizeGreaterThan": 100, "ObjectSizeLessThan": 10000}},
        "Status": "Enabled", "Expiration": {"Days": 1}})
    added = _put_all(gw, s3, "by-size", {"small": (b"x" * 100, ""), "mid": (b"x" * 101, ""),
                                         "large": (b"x" * 10000, "")})
    _expect(gw, s3, "by-size", added, {"small", "large"})


def test_incomplete_uploads_are_aborted_and_their_parts_freed(gw, s3):
    _rules(s3, "uploads", {"ID": "abort", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
                           "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})
    before = archive_ids(gw)
    crashed = s3.create_multipart_upload(Bucket="uploads", Key="ckpt/step-1/model.pt")
    s3.upload_part(Bucket="uploads", Key="ckpt/step-1/model.pt", UploadId=crashed["UploadId"],
                   PartNumber=1, Body=b"p" * 5000)
    parts = archive_ids(gw) - before
    assert parts
    other = s3.create_multipart_upload(Bucket="uploads", Key="scratch/x")
    assert wait_for(lambda: [u["Key"] for u in s3.list_multipart_uploads(
        Bucket="uploads").get("Uploads", [])] == ["scratch/x"], timeout=60)
    assert wait_for(lambda: not (archive_ids(gw) & parts), timeout=60)
    with pytest.raises(ClientError):
        s3.list_parts(Bucket="uploads", Key="ckpt/step-1/model.pt",
                      UploadId=crashed["UploadId"])
    s3.abort_multipart_upload(Bucket="uploads", Key="scratch/x", UploadId=other["UploadId"])


def test_newer_noncurrent_versions_keeps_the_newest(gw, s3):
    _rules(s3, "versions", {"ID": "keep2", "Filter": {"Prefix": "ckpt/"},
                            "Status": "Enabled", "NoncurrentVersionExpiration": {
                                "NoncurrentDays": 1, "NewerNoncurrentVersions": 2}})
    s3.put_bucket_versioning(Bucket="versions",
                             VersioningConfiguration={"Status": "Enabled"})
    ids, added = [], {}
    for i in range(6):
        before = archive_ids(gw)
        ids.append(s3.put_object(Bucket="versions", Key="ckpt/latest.pt",
                                 Body=b"v%d" % i)["VersionId"])
        added[ids[-1]] = archive_ids(gw) - before
    s3.put_object(Bucket="versions", Key="other", Body=b"x")
    s3.put_object(Bucket="versions", Key="other", Body=b"y")

    def versions(key):
        return [v["VersionId"] for v in s3.list_object_versions(
            Bucket="versions", Prefix=key).get("Versions", [])]

    # 1 current + 2 noncurrent kept, newest first; "other" is outside the rule's prefix
    assert wait_for(lambda: versions("ckpt/") == ids[::-1][:3], timeout=60), versions("ckpt/")
    assert len(versions("other")) == 2
    gone = set().union(*(added[v] for v in ids[:3]))
    assert wait_for(lambda: not (archive_ids(gw) & gone), timeout=60)
    body = s3.get_object(Bucket="versions", Key="ckpt/latest.pt")["Body"].read()
    assert body == b"v5"
