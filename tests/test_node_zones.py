"""The node's space view over real HTTP: `GET /v1/zones` (a zone map per drive, from the
logs' bookkeeping) and the honest space figures in `/v1/stats`, `/metrics`, 507 and
`/health/ready`."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from tests.nodeproc import NodeCluster, node_request
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
