"""A network partition between the gateway and some nodes: two of eight nodes run in network
namespaces of their own, reached over veth pairs; their links are set down (packets vanish,
nothing answers or resets), and writes and reads through the gateway still succeed (k=4, m=2,
write quorum 5: six nodes are enough). With the links up again the cluster is whole.

The namespaces, links and addresses are made by the test and removed afterwards; it needs
root and iproute2 (`ip`), and skips without them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from erasure.config import ClusterConfig, write_config
from tests.support.gwcluster import Gateway, wait_for
from tests.support.nodeproc import NodeCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONED = (0, 1)
NODE_TIMEOUT = 2.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


class Namespaces:
    """One network namespace per partitioned node, joined to ours by a veth pair with a /30."""

    def __init__(self, count: int) -> None:
        self.tag = secrets.token_hex(2)
        self.net = 10 + secrets.randbelow(200)  # 10.<net>.<i>.0/30 for namespace i
        self.names = [f"zgp{self.tag}{i}" for i in range(count)]
        self.made: list[str] = []

    def host_if(self, i: int) -> str:
        return f"zgp{self.tag}{i}h"

    def ns_if(self, i: int) -> str:
        return f"zgp{self.tag}{i}n"

    def address(self, i: int) -> str:
        return f"10.{self.net}.{i}.2"

    def create(self) -> None:
        for i, ns in enumerate(self.names):
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("link", "add", self.host_if(i), "type", "veth", "peer", "name", self.ns_if(i))
            _ip("link", "set", self.ns_if(i), "netns", ns)
            _ip("addr", "add", f"10.{self.net}.{i}.1/30", "dev", self.host_if(i))
            _ip("link", "set", self.host_if(i), "up")
            _ip("addr", "add", f"{self.address(i)}/30", "dev", self.ns_if(i), ns=ns)
            _ip("link", "set", self.ns_if(i), "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def link(self, i: int, up: bool) -> None:
        # The far end goes down: our side keeps its route, packets to the node just vanish.
        _ip("link", "set", self.ns_if(i), "up" if up else "down", ns=self.names[i])

    def remove(self) -> None:
        for i, ns in enumerate(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", self.host_if(i)], capture_output=True,
                           timeout=30)


class PartitionableNodes(NodeCluster):
    """tests/support/nodeproc's cluster, some of whose nodes run inside network namespaces."""

    def __init__(self, *args, namespaces: Namespaces, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for i, ns in zip(PARTITIONED, namespaces.names, strict=True):
            self.nodes[i].netns = ns
            self.nodes[i].host = namespaces.address(PARTITIONED.index(i))


def cluster_health(g: Gateway) -> dict:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/cluster", timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        return json.load(e)


@pytest.fixture
def namespaces():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    ns = Namespaces(len(PARTITIONED))
    try:
        ns.create()
    except subprocess.CalledProcessError as e:
        ns.remove()
        pytest.skip(f"cannot make network namespaces here: {e.stderr.decode().strip()}")
    yield ns
    ns.remove()


def test_writes_and_reads_survive_a_partition_of_two_nodes(tmp_path, namespaces):
    g = Gateway(tmp_path, nodes=8, workers=1)
    g.nodes = PartitionableNodes(g.root / "nodes", 8, drives_per_node=1, secret=g.nodes.secret,
                                 namespaces=namespaces)
    g.start()
    try:
        assert [g.nodes.nodes[i].host for i in PARTITIONED] == [
            namespaces.address(0), namespaces.address(1)]
        g.stop_gateway()
        cfg = ClusterConfig.load(g.config_path).to_dict()
        cfg["erasure"]["node_timeout"] = NODE_TIMEOUT
        write_config(g.config_path, cfg)
        g.start_gateway()
        s3 = g.client(read_timeout=30, connect_timeout=10)
        s3.create_bucket(Bucket="split")
        before = {f"before-{i}": os.urandom(30_000 + i * 41_000) for i in range(16)}
        for key, body in before.items():
            s3.put_object(Bucket="split", Key=key, Body=body)

        for i in range(len(PARTITIONED)):
            namespaces.link(i, up=False)
        during = {f"during-{i}": os.urandom(20_000 + i * 47_000) for i in range(16)}
        for key, body in during.items():
            s3.put_object(Bucket="split", Key=key, Body=body)
        for key, body in {**before, **during}.items():
            assert s3.get_object(Bucket="split", Key=key)["Body"].read() == body, key
        down = {g.nodes.ids[i] for i in PARTITIONED}
        assert wait_for(lambda: set(cluster_health(g)["nodes_down"]) == down, timeout=30)

        for i in range(len(PARTITIONED)):
            namespaces.link(i, up=True)
        assert wait_for(lambda: cluster_health(g)["nodes_down"] == [], timeout=40)
        health = cluster_health(g)
        assert health["write_quorum"] and health["read_quorum"], health
        for key, body in {**before, **during}.items():
            assert s3.get_object(Bucket="split", Key=key)["Body"].read() == body, key
        s3.put_object(Bucket="split", Key="after", Body=b"joined again")
        assert s3.get_object(Bucket="split", Key="after")["Body"].read() == b"joined again"
    finally:
        g.stop()
