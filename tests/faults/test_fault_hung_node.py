"""A hung node (SIGSTOP: its kernel still accepts connections, nothing answers) costs the
gateway one node timeout per request at worst: boto3 PUTs and GETs all complete (degraded
writes to the other nodes, degraded reads from the other fragments), no client waits beyond
its own timeout, and once the node runs again (SIGCONT) the cluster is whole.

The real gateway over 6 real nodes (k=4, m=2), with the node timeout shortened in the cluster
config so that the test is quick; the code paths are those of the default 30 s.
"""

from __future__ import annotations

import io
import json
import os
import signal
import urllib.error
import urllib.request

import pytest
from boto3.s3.transfer import TransferConfig

from erasure.config import ClusterConfig, write_config
from tests.support.gwcluster import Gateway, wait_for

pytestmark = pytest.mark.timeout(240)

NODE_TIMEOUT = 2.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cluster_health(g: Gateway) -> dict:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/cluster", timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        return json.load(e)


def with_node_timeout(g: Gateway, seconds: float) -> None:
    cfg = ClusterConfig.load(g.config_path).to_dict()
    cfg["erasure"]["node_timeout"] = seconds
    write_config(g.config_path, cfg)


def test_a_frozen_node_does_not_stall_clients(tmp_path):
    g = Gateway(tmp_path, workers=2)
    g.start()
    stopped = None
    try:
        g.stop_gateway()
        with_node_timeout(g, NODE_TIMEOUT)
        g.start_gateway()
        # A stuck client would fail here instead of hanging the test: no retries, a read
        # timeout far beyond the node timeout.
        s3 = g.client(read_timeout=30, connect_timeout=10)
        s3.create_bucket(Bucket="hung")
        before = {f"before-{i}": os.urandom(50_000 + i * 37_000) for i in range(12)}
        for key, body in before.items():
            s3.put_object(Bucket="hung", Key=key, Body=body)

        stopped = g.nodes.pid(0)
        os.kill(stopped, signal.SIGSTOP)
        during = {f"during-{i}": os.urandom(40_000 + i * 53_000) for i in range(12)}
        for key, body in during.items():
            s3.put_object(Bucket="hung", Key=key, Body=body)
        for key, body in {**before, **during}.items():
            assert s3.get_object(Bucket="hung", Key=key)["Body"].read() == body, key
        big = os.urandom(5 * 1024 * 1024 + 3)  # several segments, multipart through boto3
        s3.upload_fileobj(io.BytesIO(big), "hung", "big",
                          Config=TransferConfig(multipart_threshold=2 * 1024 * 1024,
                                                multipart_chunksize=2 * 1024 * 1024))
        assert s3.get_object(Bucket="hung", Key="big")["Body"].read() == big
        assert wait_for(lambda: g.nodes.ids[0] in cluster_health(g)["nodes_down"], timeout=30)

        os.kill(stopped, signal.SIGCONT)
        stopped = None
        assert wait_for(lambda: cluster_health(g)["nodes_down"] == [], timeout=30)
        fresh = g.client(read_timeout=30)
        for key, body in {**before, **during}.items():
            assert fresh.get_object(Bucket="hung", Key=key)["Body"].read() == body, key
        fresh.put_object(Bucket="hung", Key="after", Body=b"whole again")
        assert fresh.get_object(Bucket="hung", Key="after")["Body"].read() == b"whole again"
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        g.stop()
