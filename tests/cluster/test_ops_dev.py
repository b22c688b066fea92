"""Operations on the cluster `zonegate dev` starts (12 nodes, 8+2, the gateway with two
workers): the gateway is ready, its /metrics merges both workers after uploads, and
`zonegate status --json` sees every node and drive and the capacity written."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.devcluster import start_cluster

pytestmark = pytest.mark.timeout(600)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    yield from start_cluster(tmp_path_factory, "opsdev", workers=2)


def metric(text: str, name: str, **labels: str) -> float:
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_dev_cluster_metrics_health_and_status(dev):
    with _NO_PROXY.open(dev.endpoint + "/health/ready", timeout=30) as resp:
        assert resp.status == 200
    s3 = dev.client()
    s3.create_bucket(Bucket="ops")
    for i in range(6):
        s3.put_object(Bucket="ops", Key=f"k{i}", Body=b"z" * (100_000 * (i + 1)))
    texts = []
    for _ in range(4):  # the two workers take turns; each answer covers both
        with _NO_PROXY.open(dev.endpoint + "/metrics", timeout=30) as resp:
            texts.append(resp.read().decode())
    for text in texts:
        assert metric(text, "zonegate_gateway_requests_total", operation="PutObject",
                      status="200") == 6
        assert metric(text, "zonegate_gateway_parts_written_total") == 7  # six objects + the bucket marker
        assert metric(text, "zonegate_gateway_received_bytes_total",
                      operation="PutObject") >= 2_100_000

    res = subprocess.run([sys.executable, "-m", "gateway.cli", "status", "--config",
                          str(dev.config_path), "--json"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["nodes_up"] == 12 and doc["nodes_down"] == []
    assert doc["erasure"]["k"] == 8 and doc["erasure"]["m"] == 2
    assert doc["totals"]["drives"] == 24
    # 2.1 MB of objects went to the drives as 10 fragments of 1/8 each, plus headers
    assert doc["totals"]["user_bytes_written"] >= 2_100_000 * 10 / 8
    assert doc["parts_awaiting_repair"] == 0
