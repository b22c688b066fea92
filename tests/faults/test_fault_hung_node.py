"""A hung node (SIGSTOP: its kernel still accepts connections, nothing answers) costs the
gateway one node timeout per request at worst: boto3 PUTs and GETs all complete (degraded
writes to the other nodes, degraded reads from the other fragments), no client waits beyond
its own timeout, and once the node runs again (SIGCONT) the cluster is whole.

The real gateway over 6 real nodes (k=4, m=2), with the node timeout shortened in the cluster
config so that the test is quick; the code paths are those of the default 30 s. The second
test keeps the default 30 s node timeout: a write hands a frozen node's fragment to another
node after `[erasure] write_stall` (issue 23), well before that timeout.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from erasure.config import ClusterConfig, write_config
from tests.support.gwcluster import (
    ACCESS_KEY,
    SECRET_KEY,
    Gateway,
    archives_by_node,
    wait_for,
)

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


def copies(g: Gateway) -> dict[str, list[str]]:
    """Archive id -> the nodes holding it."""
    out: dict[str, list[str]] = {}
    for node, ids in archives_by_node(g).items():
        for rid in ids:
            out.setdefault(rid, []).append(node)
    return out


def test_puts_hand_a_frozen_nodes_fragments_to_other_nodes(tmp_path):
    g = Gateway(tmp_path, nodes=7, workers=1)  # a node beyond k+m to hand off to
    g.start()
    stopped = None
    try:
        g.stop_gateway()
        with_node_timeout(g, 30.0)  # the default: what a PUT used to wait for a frozen node
        g.start_gateway()
        # One attempt (botocore's legacy max_attempts still retries once, and the retry
        # would find the node marked down by then), a read timeout of half the node
        # timeout: a PUT that waits for the frozen node's answer fails here.
        s3 = boto3.client("s3", endpoint_url=g.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}, read_timeout=15,
                                        connect_timeout=10,
                                        retries={"mode": "standard", "total_max_attempts": 1}))
        s3.create_bucket(Bucket="frozen")
        s3.put_object(Bucket="frozen", Key="warm", Body=b"x" * 100_000)
        stopped = g.nodes.pid(0)
        os.kill(stopped, signal.SIGSTOP)
        # several segments each: every node gets fragments of every object
        bodies = {f"k{i}": os.urandom(3 * 1024 * 1024 + i * 411_000) for i in range(5)}
        for key, body in bodies.items():
            s3.put_object(Bucket="frozen", Key=key, Body=body)
        for key, body in bodies.items():  # still frozen: read from the other nodes
            assert s3.get_object(Bucket="frozen", Key=key)["Body"].read() == body, key

        os.kill(stopped, signal.SIGCONT)
        stopped = None
        assert wait_for(lambda: cluster_health(g)["nodes_down"] == [], timeout=60)
        fresh = g.client(read_timeout=30)
        for key, body in bodies.items():
            assert fresh.get_object(Bucket="frozen", Key=key)["Body"].read() == body, key

        # Once the abandoned requests ended and the handoffs went home (no handoff record
        # left), every fragment is held once: a whole archive the frozen node committed
        # late is not left beside its handoff copy.
        handoffs = tmp_path / "erasure" / "handoff"

        def settled() -> bool:
            if handoffs.is_dir() and any(not p.name.startswith(".") for p in handoffs.iterdir()):
                return False
            return all(len(nodes) == 1 for nodes in copies(g).values())
        assert wait_for(settled, timeout=90), (
            {rid: nodes for rid, nodes in copies(g).items() if len(nodes) > 1},
            sorted(p.name for p in handoffs.iterdir()) if handoffs.is_dir() else None,
            g.log_tail(40))
        # every archive on the frozen node is owned (no orphan), and nothing to rebuild
        r = subprocess.run([sys.executable, "-m", "gateway.cli", "repair", "--audit",
                            "--config", str(g.config_path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        g.stop()
