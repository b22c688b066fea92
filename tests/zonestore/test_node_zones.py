"""The node's space view over real HTTP: `GET /v1/zones` (a zone map per drive, from the
logs' bookkeeping) and the honest space figures in `/v1/stats`, `/metrics`, 507 and
`/health/ready`."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from tests.support.nodeproc import NodeCluster, node_request
from zonestore.emulated import Geometry

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20
# 2 conventional + 8 sequential zones of 1 MiB.
TINY = Geometry(nr_zones=10, zone_size=MiB, zone_capacity=MiB, max_open_zones=4,
                max_active_zones=5)
CONDS = {"empty", "open", "closed", "full", "conventional", "offline"}


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


async def put(session, c, rid, payload, stream="s"):
    return await node_request(session, c, 0, "PUT", f"/v1/records/{rid}", body=payload,
                              headers={"X-ZG-Length": str(len(payload)), "X-ZG-Stream": stream})


async def test_zone_map_shows_every_zone_and_its_bytes(tmp_path, session):
    with NodeCluster(tmp_path, 1, drives_per_node=2, geometry=TINY,
                     extra_args=["--reclaim-interval", "0"]) as c:
        status, _, body = await node_request(session, c, 0, "GET", "/v1/zones")
        assert status == 200, body
        empty = json.loads(body)
        assert [d["drive"] for d in empty["drives"]] == [0, 1]
        for d in empty["drives"]:
            assert d["zone_size"] == MiB and d["zone_capacity"] == MiB
            assert d["max_open"] == 4 and d["max_active"] == 5
            assert [z["index"] for z in d["zones"]] == list(range(10))
            assert [z["cond"] for z in d["zones"][:2]] == ["conventional"] * 2
            assert all(z["cond"] == "empty" and z["written"] == 0 for z in d["zones"][2:])

        payload = os.urandom(300_000)
        assert (await put(session, c, "a", payload))[0] == 201
        assert (await put(session, c, "b", payload))[0] == 201
        assert (await node_request(session, c, 0, "DELETE", "/v1/records/b"))[0] == 204
        _, _, body = await node_request(session, c, 0, "GET", "/v1/zones")
        drives = json.loads(body)["drives"]
        zones = [z for d in drives for z in d["zones"]]
        assert {z["cond"] for z in zones} <= CONDS
        for z in zones:
            assert set(z) == {"index", "cond", "capacity", "written", "live", "garbage",
                              "reclaiming"}
            assert z["live"] + z["garbage"] <= max(z["written"], z["live"])
            assert z["written"] <= z["capacity"]
            assert z["reclaiming"] is False
        written = sum(z["written"] for z in zones)
        live = sum(z["live"] for z in zones)
        assert written >= 2 * len(payload)
        assert len(payload) <= live < 2 * len(payload)
        assert any(z["cond"] in ("open", "closed", "full") for z in zones)

        # Signed like every other node call.
        async with session.get(c.urls[0] + "/v1/zones") as resp:
            assert resp.status == 403
        status, _, _ = await node_request(session, c, 0, "POST", "/v1/zones")
        assert status == 405


async def test_space_figures_in_stats_metrics_507_and_ready(tmp_path, session):
    from prometheus_client.parser import text_string_to_metric_families

    fields = ("writable_bytes", "stranded_bytes", "garbage_bytes", "live_bytes", "empty_zones")
    with NodeCluster(tmp_path, 1, drives_per_node=2, geometry=TINY,
                     extra_args=["--reclaim-interval", "0"]) as c:
        for i in range(4):
            assert (await put(session, c, f"r{i}", os.urandom(400_000), f"s{i}"))[0] == 201
        assert (await node_request(session, c, 0, "DELETE", "/v1/records/r0"))[0] == 204
        _, _, body = await node_request(session, c, 0, "GET", "/v1/stats")
        stats = json.loads(body)
        cap = 8 * MiB
        for d in stats["drives"]:
            for f in fields:
                assert isinstance(d[f], int) and d[f] >= 0, f
            assert d["free_bytes"] == d["writable_bytes"]
            assert d["reclaiming_zone"] == -1
            total = (d["live_bytes"] + d["garbage_bytes"] + d["stranded_bytes"]
                     + d["writable_bytes"] + d["reserve_bytes"])
            assert abs(total - cap) <= 8 * 4096, d
        for f in fields:
            assert stats["totals"][f] == sum(d[f] for d in stats["drives"]), f
        assert "reclaiming_zone" not in stats["totals"]

        _, _, body = await node_request(session, c, 0, "GET", "/metrics")
        found = {s.name: s for f in text_string_to_metric_families(body.decode())
                 for s in f.samples if s.labels.get("drive") == "0"}
        for f in ("writable", "stranded", "garbage", "live"):
            assert found[f"zonegate_node_{f}_bytes"].value == stats["drives"][0][f"{f}_bytes"]
        assert "zonegate_node_drive_capacity_free_bytes" in found  # old names still there

        status, _, body = await node_request(session, c, 0, "GET", "/health/ready")
        assert status == 200 and json.loads(body)["writable_bytes"] == \
            stats["totals"]["writable_bytes"]

        # Fill until refused: the 507 says how much is writable, /health/ready stays 200.
        for i in range(40):
            status, _, body = await put(session, c, f"f{i}", os.urandom(600_000), f"t{i}")
            if status != 201:
                break
        assert status == 507, body
        answer = json.loads(body)
        assert answer["error"] == "no_space" and answer["writable_bytes"] < 600_000 * 2
        status, _, body = await node_request(session, c, 0, "GET", "/health/ready")
        assert status == 200 and json.loads(body)["writable_bytes"] == answer["writable_bytes"]
