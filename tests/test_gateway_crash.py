"""Data first, then metadata: a gateway that dies after writing an object's fragments but
before committing its metadata exposes nothing, and the fragments are swept after restart."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.gwcluster import Gateway, archive_ids, wait_for

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
        time.sleep(2.5)  # past the pending grace
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
