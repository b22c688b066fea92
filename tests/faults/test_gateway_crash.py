"""Data first, then metadata: a gateway that dies after writing an object's fragments but
before committing its metadata exposes nothing, and the fragments are swept after restart."""

from __future__ import annotations

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.support.gwcluster import Gateway, archive_ids, wait_for

pytestmark = pytest.mark.timeout(300)


def test_crash_between_data_and_metadata_leaves_nothing(tmp_path):
    g = Gateway(tmp_path, gateway_options={"pending_grace_seconds": 2})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="crash")
        s3.put_object(Bucket="crash", Key="survivor", Body=b"kept")
        g.stop_gateway()
        g.start_gateway(env={"ZONEGATE_TEST_CRASH_BEFORE_COMMIT": "boom"})
        base = archive_ids(g)
        with pytest.raises((BotoCoreError, ClientError)):
            g.client().put_object(Bucket="crash", Key="boom", Body=b"x" * 300_000)
        assert g.proc.wait(10) == 70  # died right after the data write
        orphans = archive_ids(g) - base
        assert len(orphans) == g.k + g.m  # the fragments reached the nodes
        # restarted at once: its sweeper takes the orphans once their pending grace is past
        g.start_gateway()
        s3 = g.client()
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="crash", Key="boom")
        assert e.value.response["Error"]["Code"] == "404"
        assert wait_for(lambda: not (archive_ids(g) & orphans), timeout=30)
        assert s3.get_object(Bucket="crash", Key="survivor")["Body"].read() == b"kept"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="crash")["Contents"]] == ["survivor"]
    finally:
        g.stop()


def test_abandoned_uploads_are_swept(tmp_path):
    g = Gateway(tmp_path, gateway_options={"abandoned_upload_seconds": 1})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="stale")
        s3.put_object(Bucket="stale", Key="seed", Body=b"s")
        base = archive_ids(g)
        uid = s3.create_multipart_upload(Bucket="stale", Key="big")["UploadId"]
        s3.upload_part(Bucket="stale", Key="big", UploadId=uid, PartNumber=1, Body=b"p" * 1000)
        assert len(archive_ids(g) - base) == g.k + g.m
        # Nothing else happens: the sweeper must find the stale upload on its own.
        assert wait_for(lambda: "Uploads" not in s3.list_multipart_uploads(Bucket="stale"))
        assert wait_for(lambda: archive_ids(g) == base)
        with pytest.raises(ClientError) as e:
            s3.upload_part(Bucket="stale", Key="big", UploadId=uid, PartNumber=2, Body=b"x")
        assert e.value.response["Error"]["Code"] == "NoSuchUpload"
    finally:
        g.stop()


def test_lost_nodes_degraded_reads_then_503(tmp_path):
    g = Gateway(tmp_path)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="degraded")
        body = bytes(range(256)) * 10_000
        s3.put_object(Bucket="degraded", Key="k", Body=body)
        g.nodes.kill(0)
        g.nodes.kill(1)  # m = 2 lost: still readable
        assert s3.get_object(Bucket="degraded", Key="k")["Body"].read() == body
        g.nodes.kill(2)  # fewer than k left: a clean S3 error, not a broken 200
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="degraded", Key="k")
        assert e.value.response["Error"]["Code"] == "ServiceUnavailable"
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="degraded", Key="new", Body=b"x" * 1000)
        assert e.value.response["Error"]["Code"] == "ServiceUnavailable"
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="degraded", Key="new")
        assert e.value.response["Error"]["Code"] == "404"  # nothing half-stored
    finally:
        g.stop()
