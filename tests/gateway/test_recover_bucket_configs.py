"""Bucket configuration documents and ACLs survive the loss of the metadata store: saving one
(gateway/ops/bucketconfig.py) rewrites the bucket's marker on the nodes under the same uid,
and `zonegate recover-metadata` brings the documents back from it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from types import SimpleNamespace

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from gateway.metadata import store_from_config
from gateway.ops.bucketconfig import save_bucket_acl, save_bucket_config
from gateway.s3.errors import S3Error
from tests.gateway.test_recover_empty_buckets import lose_metadata_store, markers_of
from tests.support.gwcluster import Gateway, archive_ids

pytestmark = pytest.mark.timeout(180)

GRANTS = [{"grantee": {"type": "Group", "uri": "AllUsers"}, "permission": "READ"}]


async def _save(g: Gateway) -> None:
    config = ClusterConfig.load(g.config_path)
    store = store_from_config(config.gateway)
    cluster = ErasureCluster(config, health_interval=0, auto_repair=False)
    await store.start()
    await cluster.start()
    try:
        gw = SimpleNamespace(store=store, storage=SimpleNamespace(cluster=cluster))
        await save_bucket_config(gw, "conf", "lifecycle", '{"rules": [{"id": "r1"}]}')
        await save_bucket_config(gw, "conf", "cors", '{"rules": []}')
        await save_bucket_config(gw, "conf", "versioning", '"Enabled"')
        await save_bucket_config(gw, "conf", "cors", None)  # deleted again
        await save_bucket_acl(gw, "conf", GRANTS)
        with pytest.raises(S3Error) as e:
            await save_bucket_config(gw, "no-such-bucket", "cors", "{}")
        assert e.value.code == "NoSuchBucket"
    finally:
        await cluster.close()
        await store.close()


async def _configs(g: Gateway) -> tuple[dict[str, str], object]:
    store = store_from_config(ClusterConfig.load(g.config_path).gateway)
    await store.start()
    try:
        return await store.bucket_configs("conf"), (await store.get_bucket("conf")).acl
    finally:
        await store.close()


def test_bucket_configs_and_acl_come_back_from_the_marker(tmp_path) -> None:
    g = Gateway(tmp_path)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="conf")
        s3.create_bucket(Bucket="plain")
        s3.put_object(Bucket="conf", Key="k", Body=b"data")
        g.stop_gateway()
        asyncio.run(_save(g))
        want = ({"lifecycle": '{"rules": [{"id": "r1"}]}', "versioning": '"Enabled"'}, GRANTS)
        assert asyncio.run(_configs(g)) == want
        # rewritten in place: still one archive per node, no second marker
        assert len(markers_of(g, "conf", archive_ids(g))) == g.k + g.m

        lose_metadata_store(g)
        r = subprocess.run([sys.executable, "-m", "gateway.cli", "recover-metadata",
                            "--config", str(g.config_path)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert asyncio.run(_configs(g)) == want
        g.start_gateway()
        s3 = g.client()
        assert s3.get_object(Bucket="conf", Key="k")["Body"].read() == b"data"
        assert {b["Name"] for b in s3.list_buckets()["Buckets"]} == {"conf", "plain"}
    finally:
        g.stop()
