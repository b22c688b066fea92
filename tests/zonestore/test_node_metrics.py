"""/metrics is valid Prometheus text and reflects the node's workload."""

from __future__ import annotations

import os

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.nodeproc import NodeCluster, node_request

pytestmark = pytest.mark.timeout(300)


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def total(found: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in found.get(name, [])
               if all(s.labels.get(k) == v for k, v in labels.items()))


async def test_metrics_parse_and_reflect_the_workload(tmp_path):
    sizes = [0, 1, 70_000, 3_000_000]
    async with aiohttp.ClientSession() as session:
        with NodeCluster(tmp_path, 1, drives_per_node=2) as c:
            status, _, body = await node_request(session, c, 0, "GET", "/metrics")
            assert status == 200
            before = samples(body.decode())
            assert total(before, "zonegate_node_drive_user_written_bytes_total") == 0
            for i, n in enumerate(sizes):
                status, _, _ = await node_request(
                    session, c, 0, "PUT", f"/v1/records/m{i}", body=os.urandom(n) + b"meta",
                    headers={"X-ZG-Length": str(n)})
                assert status == 201
            for i in range(len(sizes)):
                status, _, _ = await node_request(session, c, 0, "GET", f"/v1/records/m{i}")
                assert status == 200
            assert (await node_request(session, c, 0, "GET", "/v1/records/nope"))[0] == 404
            assert (await node_request(session, c, 0, "GET", "/v1/stats", signed=False))[0] == 403

            status, headers, body = await node_request(session, c, 0, "GET", "/metrics")
            assert headers["Content-Type"].startswith("text/plain")
            found = samples(body.decode())

    assert total(found, "zonegate_node_drive_user_written_bytes_total") == sum(sizes)
    assert total(found, "zonegate_node_drive_records") == len(sizes)
    assert total(found, "zonegate_node_drive_live_bytes") >= sum(sizes)  # with record headers
    device = total(found, "zonegate_node_drive_device_written_bytes_total")
    assert device >= sum(sizes)  # headers and padding on top of the payload
    flushes = total(found, "zonegate_node_drive_flushes_total")
    assert flushes >= 1
    # Every device write lands in the flush-size histogram; each put waited for a durable
    # flush, so the latency histogram has at least one observation (group commit may share).
    assert total(found, "zonegate_node_drive_flush_size_bytes_count") == flushes
    assert total(found, "zonegate_node_drive_flush_size_bytes_sum") == device
    assert 1 <= total(found, "zonegate_node_drive_flush_seconds_count") <= flushes
    assert total(found, "zonegate_node_drive_flush_seconds_sum") > 0
    assert total(found, "zonegate_node_drive_flush_seconds_bucket", le="+Inf") == \
        total(found, "zonegate_node_drive_flush_seconds_count")
    assert total(found, "zonegate_node_drive_capacity_free_bytes") > 0
    assert total(found, "zonegate_node_drive_capacity_used_bytes") >= device
    assert {s.labels["drive"] for s in found["zonegate_node_drive_capacity_free_bytes"]} == \
        {"0", "1"}
    assert total(found, "zonegate_node_drive_zones") == 2 * c.geometry.nr_zones
    assert total(found, "zonegate_node_drive_max_open_zones") == 2 * c.geometry.max_open_zones
    wa = [s.value for s in found["zonegate_node_drive_write_amplification"] if s.value]
    assert wa and all(v >= 1.0 for v in wa)

    assert total(found, "zonegate_node_requests_total", method="PUT", route="record_put",
                 status="201") == len(sizes)
    assert total(found, "zonegate_node_requests_total", method="GET", route="record_get",
                 status="200") == len(sizes)
    assert total(found, "zonegate_node_requests_total", route="record_get", status="404") == 1
    assert total(found, "zonegate_node_requests_total", route="stats", status="403") == 1
    assert total(found, "zonegate_node_auth_failures_total") == 1
    assert total(found, "zonegate_node_request_duration_seconds_count", route="record_put") == \
        len(sizes)
    assert total(found, "zonegate_node_received_bytes_total") == sum(sizes) + 4 * len(sizes)
    assert total(found, "zonegate_node_sent_bytes_total") == sum(sizes)
    assert total(found, "zonegate_node_ready") == 1
    assert total(found, "zonegate_node_requests_inflight") == 1  # the scrape itself
    # The record ids never become label values (cardinality stays low).
    assert "m3" not in body.decode()
