"""Operations against a running cluster (6 real node processes, `zonegate serve` with two
workers, k=4 m=2, write quorum 5): after a known workload /metrics (read with Prometheus' own
text parser) agrees with it, whichever worker answers; a killed node shows as degraded reads;
readiness flips to 503 when the write quorum is lost and back when the nodes return."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from erasure.codec import Codec, Scheme
from tests.support.gwcluster import Gateway, signed_request

pytestmark = pytest.mark.timeout(600)

K, M = 4, 2
SEGMENT = 256 * 1024
SIZES = [0, 1, 100_000, SEGMENT, 3 * SEGMENT + 12_345, 2_000_000]
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str) -> tuple[int, bytes]:
    try:
        with _NO_PROXY.open(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Scrape:
    """One /metrics text, summed by sample name and label subset."""

    def __init__(self, text: str) -> None:
        self.samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
        self.names = {s.name for s in self.samples}

    def total(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples if s.name == name
                   and all(s.labels.get(k) == v for k, v in labels.items()))

    def by(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for s in self.samples:
            if s.name == name:
                out[s.labels.get(label, "")] += s.value
        return out


def scrape(url: str) -> Scrape:
    status, body = get(url + "/metrics")
    assert status == 200, body[:500]
    return Scrape(body.decode())


def node_records(g: Gateway, i: int) -> set[str]:
    """Record ids on node i (the signed listing API)."""
    from urllib.parse import urlencode
    q = {"prefix": "", "after": "", "limit": "1000"}
    req = urllib.request.Request(f"{g.nodes.urls[i]}/v1/records?{urlencode(q)}",
                                 headers=g.nodes.headers(i, "GET", "/v1/records", q))
    with _NO_PROXY.open(req, timeout=10) as resp:
        return {r["id"] for r in json.load(resp)["records"]}


def node_totals(g: Gateway, name: str) -> float:
    return sum(scrape(url).total(name) for i, url in enumerate(g.nodes.urls)
               if g.nodes.nodes[i].running)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("ops"), nodes=6, k=K, m=M, workers=2,
                segment_size=SEGMENT)
    g.start()
    try:
        yield g
    finally:
        g.stop()


def wait_until(pred, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return bool(pred())


def settled(url: str, pred, timeout: float = 15.0) -> tuple[int, dict]:
    """Wait until 4 answers in a row (both workers, whose node states are at most
    health.FRESH_FOR old) satisfy pred(status, doc); returns the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answers = []
        for _ in range(4):
            status, body = get(url)
            answers.append((status, json.loads(body)))
        if all(pred(st, doc) for st, doc in answers) or time.monotonic() > deadline:
            return answers[-1]
        time.sleep(0.2)


def test_health_endpoints_and_s3_paths_do_not_collide(cluster):
    g = cluster
    assert get(g.endpoint + "/health/live")[0] == 200
    status, body = get(g.endpoint + "/health/ready")
    assert status == 200, body
    assert json.loads(body)["status"] == "ready"
    status, body = get(g.endpoint + "/health/cluster")
    doc = json.loads(body)
    assert status == 200 and doc["write_quorum"] and doc["read_quorum"]
    assert doc["nodes_down"] == [] and doc["nodes_up"] == 6
    # signed, the same path is S3: a bucket called "metrics"
    status, _, body = signed_request(g, "GET", "/metrics")
    assert status == 404 and b"NoSuchBucket" in body
    status, _, _ = signed_request(g, "PUT", "/health")
    assert status == 200
    status, _, body = signed_request(g, "GET", "/health/live")
    assert status == 404 and b"NoSuchKey" in body


def test_metrics_agree_with_a_known_workload(cluster):
    g = cluster
    s3 = g.client()
    s3.create_bucket(Bucket="work")
    before = scrape(g.endpoint)
    user_before = node_totals(g, "zonegate_node_drive_user_written_bytes_total")
    device_before = node_totals(g, "zonegate_node_drive_device_written_bytes_total")

    bodies = {f"obj{i}": hashlib.shake_256(str(i).encode()).digest(n) if n else b""
              for i, n in enumerate(SIZES)}
    for key, body in bodies.items():
        s3.put_object(Bucket="work", Key=key, Body=body)
    got = 0
    for key in ("obj2", "obj4", "obj5"):
        data = s3.get_object(Bucket="work", Key=key)["Body"].read()
        assert data == bodies[key]
        got += len(data)
    for key in ("obj0", "obj1"):
        s3.head_object(Bucket="work", Key=key)
    assert s3.list_objects_v2(Bucket="work")["KeyCount"] == len(SIZES)
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="work", Key="missing")

    # several scrapes: whichever worker answers, the figures are the whole gateway's
    scrapes = [scrape(g.endpoint) for _ in range(4)]
    after = scrapes[-1]
    for sc in scrapes:
        assert sc.total("zonegate_gateway_requests_total") == \
            after.total("zonegate_gateway_requests_total")

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    req = "zonegate_gateway_requests_total"
    assert delta(req, operation="PutObject", status="200") == len(SIZES)
    assert delta(req, operation="GetObject", status="200") == 3
    assert delta(req, operation="GetObject", status="404") == 1
    assert delta(req, operation="HeadObject", status="200") == 2
    assert delta(req, operation="ListObjectsV2", status="200") == 1
    assert delta("zonegate_gateway_request_duration_seconds_count", operation="PutObject") == \
        len(SIZES)
    assert delta("zonegate_gateway_time_to_first_byte_seconds_count",
                 operation="GetObject") == 4
    assert delta("zonegate_gateway_parts_written_total") == len(SIZES)  # objects uploaded
    uploaded = sum(SIZES)
    received = delta("zonegate_gateway_received_bytes_total", operation="PutObject")
    # the wire carries the payload, plus aws-chunked framing when the client uses it
    assert uploaded <= received <= uploaded + 1024 * len(SIZES)
    assert delta("zonegate_gateway_sent_bytes_total", operation="GetObject") >= got
    assert delta("zonegate_gateway_erasure_bytes_total", operation="encode") == uploaded
    assert delta("zonegate_gateway_erasure_seconds_total", operation="encode") > 0
    assert delta("zonegate_gateway_erasure_bytes_total", operation="decode") >= got
    assert after.total("zonegate_gateway_requests_in_flight") == 0
    # the dashboard's write-quorum panel compares the nodes up with this, not with a constant
    assert after.total("zonegate_gateway_write_quorum") == K + 1  # the default, k+1
    node_puts = after.by("zonegate_gateway_node_requests_total", "node")
    assert set(node_puts) == set(g.nodes.ids)
    assert delta("zonegate_gateway_node_requests_total", operation="put", outcome="ok") == \
        (K + M) * len(SIZES)
    assert delta("zonegate_gateway_degraded_reads_total") == 0

    # the drives: k+m archives of every part, whose payload is the part * (k+m)/k plus the
    # coder's fragment headers and padding to whole segments; the device adds record headers
    # and block padding on top
    codec = Codec(Scheme(K, M, SEGMENT))
    archives = sum(codec.archive_length(n) for n in SIZES) * (K + M)
    user = node_totals(g, "zonegate_node_drive_user_written_bytes_total") - user_before
    device = node_totals(g, "zonegate_node_drive_device_written_bytes_total") - device_before
    assert user == archives
    ideal = uploaded * (K + M) / K
    assert ideal <= user <= ideal + (K + M) * len(SIZES) * 4096 + 0.01 * ideal
    # each archive is one record: header, metadata blob and padding to 4 KiB blocks
    assert user <= device <= user + (K + M) * len(SIZES) * 3 * 4096


def test_the_running_gateway_exports_every_gateway_metric_of_the_dashboard(cluster):
    from tests.cluster.test_deploy_dashboard import dashboard_exprs, exported_names, queried_metrics
    wanted = {w for e in dashboard_exprs() for w in queried_metrics(e)
              if w.startswith("zonegate_gateway_")}
    status, body = get(cluster.endpoint + "/metrics")
    missing = sorted(wanted - exported_names(body.decode()))
    assert not missing, f"the dashboard queries what the gateway does not export: {missing}"


def test_a_killed_node_shows_as_degraded_reads(cluster):
    g = cluster
    s3 = g.client()
    body = hashlib.shake_256(b"degraded").digest(3 * SEGMENT)
    old = [node_records(g, i) for i in range(6)]
    s3.put_object(Bucket="work", Key="degraded", Body=body)
    # the node holding data fragment 0: every read needs it or a parity fragment instead
    victim = next(i for i in range(6) if any(r.endswith(".f00")
                                             for r in node_records(g, i) - old[i]))
    before = scrape(g.endpoint)
    g.nodes.kill(victim)
    try:
        for _ in range(4):  # reach both workers
            assert s3.get_object(Bucket="work", Key="degraded")["Body"].read() == body
        after = scrape(g.endpoint)
        # fragment 0..5 live on the 6 nodes, so every read misses node 0's fragment
        assert after.total("zonegate_gateway_degraded_reads_total") - \
            before.total("zonegate_gateway_degraded_reads_total") >= 4
        down_calls = after.total("zonegate_gateway_node_requests_total",
                                 node=g.nodes.ids[victim], outcome="unavailable")
        assert down_calls >= 1
        status, doc = settled(g.endpoint + "/health/cluster",
                              lambda st, d: d["nodes_down"] == [g.nodes.ids[victim]])
        assert status == 200 and doc["nodes_down"] == [g.nodes.ids[victim]]
        assert get(g.endpoint + "/health/ready")[0] == 200  # 5 up: the write quorum holds
    finally:
        g.nodes.restart(victim)


def test_readiness_flips_when_the_write_quorum_is_lost_and_back(cluster):
    g = cluster
    assert wait_until(lambda: get(g.endpoint + "/health/ready")[0] == 200)
    g.nodes.kill(1)
    g.nodes.kill(2)
    try:
        down = [g.nodes.ids[1], g.nodes.ids[2]]
        status, doc = settled(g.endpoint + "/health/ready",
                              lambda st, d: st == 503 and d["nodes_down"] == down)
        assert status == 503 and doc["nodes_down"] == down
        assert any("write quorum" in r for r in doc["reasons"]), doc
        status, body = get(g.endpoint + "/health/cluster")
        doc = json.loads(body)
        assert status == 503 and not doc["write_quorum"] and doc["read_quorum"]
        # and a write now fails, counted as a failed-quorum write
        before = scrape(g.endpoint).total("zonegate_gateway_failed_quorum_writes_total")
        status, _, _ = signed_request(g, "PUT", "/work/refused", body=b"x" * 1000)
        assert status == 503
        after = scrape(g.endpoint).total("zonegate_gateway_failed_quorum_writes_total")
        assert after == before + 1
    finally:
        g.nodes.restart(1)
        g.nodes.restart(2)
    # Ready again once the quorum is back, which may be before both restarted nodes are seen.
    status, doc = settled(g.endpoint + "/health/ready",
                          lambda st, d: st == 200 and d["nodes_down"] == [], timeout=60)
    assert status == 200 and doc["nodes_down"] == []
    status, body = get(g.endpoint + "/health/cluster")
    assert status == 200 and json.loads(body)["nodes_down"] == []
