"""`zonegate recover-metadata` and Object Lock: the metadata store is lost, and every version
comes back from the nodes with its retention and legal hold as last set (at the write, or
later by PutObjectRetention / PutObjectLegalHold, recorded in the version's change archive),
the bucket with its lock configuration; the locked versions stay undeletable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from tests.gateway.test_recover_versions import (  # noqa: F401
    backend,
    lose_the_store,
    pg_server,
    zonegate,
)
from tests.support.gwcluster import Gateway

pytestmark = pytest.mark.timeout(300)


def locks(s3, bucket: str) -> dict:
    out = {}
    for v in s3.list_object_versions(Bucket=bucket).get("Versions", []):
        h = s3.head_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
        out[(v["Key"], v["VersionId"])] = (h.get("ObjectLockMode"),
                                           h.get("ObjectLockRetainUntilDate"),
                                           h.get("ObjectLockLegalHoldStatus"))
    return out


def test_recover_metadata_brings_back_retention_and_legal_holds(tmp_path, backend):  # noqa: F811
    opts = {} if backend is None else {"metadata": backend.new_database("lost"),
                                       "metadata_password_file": str(backend.password_file)}
    g = Gateway(tmp_path, gateway_options=opts)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="models", ObjectLockEnabledForBucket=True)
        s3.put_object_lock_configuration(Bucket="models", ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 2}}})
        soon = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
        v1 = s3.put_object(Bucket="models", Key="golden", Body=b"g", ObjectLockMode="COMPLIANCE",
                           ObjectLockRetainUntilDate=soon)["VersionId"]
        v2 = s3.put_object(Bucket="models", Key="golden", Body=b"h")["VersionId"]
        v3 = s3.put_object(Bucket="models", Key="scratch", Body=b"s")["VersionId"]
        # changed after the write: extended, held, retention removed with the bypass
        s3.put_object_retention(Bucket="models", Key="golden", VersionId=v1, Retention={
            "Mode": "COMPLIANCE", "RetainUntilDate": soon + timedelta(days=30)})
        s3.put_object_legal_hold(Bucket="models", Key="golden", VersionId=v2,
                                 LegalHold={"Status": "ON"})
        s3.put_object_retention(Bucket="models", Key="scratch", VersionId=v3, Retention={},
                                BypassGovernanceRetention=True)
        s3.put_object_tagging(Bucket="models", Key="golden", VersionId=v2,
                              Tagging={"TagSet": [{"Key": "stage", "Value": "release"}]})
        before = locks(s3, "models")
        assert before[("golden", v1)][0] == "COMPLIANCE"
        assert before[("golden", v2)][2] == "ON"
        assert before[("scratch", v3)] == (None, None, None)

        g.stop_gateway()
        lose_the_store(g, backend)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        s3 = g.client()
        assert locks(s3, "models") == before
        assert s3.get_object_tagging(Bucket="models", Key="golden", VersionId=v2)["TagSet"] == [
            {"Key": "stage", "Value": "release"}]
        conf = s3.get_object_lock_configuration(Bucket="models")["ObjectLockConfiguration"]
        assert conf["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 2}
        for vid in (v1, v2):
            with pytest.raises(ClientError) as e:
                s3.delete_object(Bucket="models", Key="golden", VersionId=vid,
                                 BypassGovernanceRetention=True)
            assert e.value.response["Error"]["Code"] == "AccessDenied"
        with pytest.raises(ClientError) as e:
            s3.put_bucket_versioning(Bucket="models",
                                     VersioningConfiguration={"Status": "Suspended"})
        assert e.value.response["Error"]["Code"] == "InvalidBucketState"
        s3.delete_object(Bucket="models", Key="scratch", VersionId=v3)
    finally:
        g.stop()
