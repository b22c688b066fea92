"""A node that runs out of space refuses cleanly (507) and keeps its records; its background
reclaim resets the zones of deleted records and the space comes back."""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.nodeproc import NodeCluster, node_request
from zonestore.emulated import Geometry

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20
# 2 conventional + 8 sequential zones of 1 MiB (one is the zone log's reserve for reclaim).
TINY = Geometry(nr_zones=10, zone_size=MiB, zone_capacity=MiB, max_open_zones=4,
                max_active_zones=5)


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


async def put(session, c, rid, payload, stream="s"):
    return await node_request(session, c, 0, "PUT", f"/v1/records/{rid}", body=payload,
                              headers={"X-ZG-Length": str(len(payload)), "X-ZG-Stream": stream})


async def metric(session, c, name):
    _, _, body = await node_request(session, c, 0, "GET", "/metrics")
    return sum(s.value for f in text_string_to_metric_families(body.decode())
               for s in f.samples if s.name == name)


async def test_full_node_refuses_with_507_before_reading_and_keeps_its_records(tmp_path,
                                                                               session):
    with NodeCluster(tmp_path, 1, drives_per_node=1, geometry=TINY,
                     extra_args=["--reclaim-interval", "0"]) as c:
        keep = os.urandom(MiB // 2)
        assert (await put(session, c, "keep", keep))[0] == 201
        # Announce a record larger than the drive and send only the headers: the answer comes
        # before any body byte is read.
        path = "/v1/records/huge"
        headers = {**c.headers(0, "PUT", path), "X-ZG-Length": str(64 * MiB),
                   "Content-Length": str(64 * MiB)}
        reader, writer = await asyncio.open_connection("127.0.0.1", c.nodes[0].port)
        writer.write((f"PUT {path} HTTP/1.1\r\nHost: x\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        assert status_line.split()[1] == b"507", status_line
        # Filling the drive with real puts ends in 507 too, never a 500.
        statuses = []
        for i in range(20):
            status, _, body = await put(session, c, f"fill{i}", os.urandom(MiB // 2),
                                        stream=f"s{i}")
            statuses.append(status)
            if status != 201:
                assert status == 507, body
                answer = json.loads(body)
                assert answer["error"] == "no_space"
                assert 0 <= answer["writable_bytes"] < MiB // 2 + 4096
                break
        # 8 MiB of zones: most of it took data before the first refusal.
        assert len(statuses) - 1 >= 11, statuses
        assert statuses[-1] == 507
        status, _, body = await node_request(session, c, 0, "GET", "/v1/records/keep")
        assert status == 200 and body == keep
        assert (await node_request(session, c, 0, "HEAD", "/v1/records/huge"))[0] == 404


async def test_background_reclaim_frees_the_zones_of_deleted_records(tmp_path, session):
    with NodeCluster(tmp_path, 1, drives_per_node=1, geometry=TINY,
                     extra_args=["--reclaim-interval", "0.2"]) as c:
        ids = [f"ckpt.{i}" for i in range(5)]
        for rid in ids:
            assert (await put(session, c, rid, os.urandom(MiB - 64 * 1024), "ckpt"))[0] == 201
        full_before = await metric(session, c, "zonegate_node_drive_capacity_free_bytes")
        for rid in ids:
            assert (await node_request(session, c, 0, "DELETE", f"/v1/records/{rid}"))[0] == 204
        for _ in range(100):
            reclaimed = await metric(session, c, "zonegate_node_drive_reclaimed_zones_total")
            if reclaimed >= 3:
                break
            await asyncio.sleep(0.1)
        assert reclaimed >= 3
        assert await metric(session, c, "zonegate_node_drive_capacity_free_bytes") > full_before
        assert await metric(session, c, "zonegate_node_reclaim_runs_total") >= 1
        # The space is usable again: as much data as before fits.
        for rid in ids:
            assert (await put(session, c, rid + "b", os.urandom(MiB - 64 * 1024), "ckpt2"))[0] \
                == 201


async def test_a_streamed_put_refused_for_space_reads_507_not_a_broken_connection(tmp_path):
    # The node answers 507 before reading the body; the gateway's client is still sending it
    # (chunked, as erasure/nodeclient.py streams fragments). Closing at once made the client's
    # next write fail (EPIPE/RST) before it read the answer: a full node looked down.
    from erasure.config import NodeSpec
    from erasure.nodeclient import NodeClient, NodeError, NodeUnavailable, make_session

    async def body(n: int):
        for _ in range(n // 65536):
            yield b"j" * 65536

    with NodeCluster(tmp_path, 1, drives_per_node=1, geometry=TINY,
                     extra_args=["--reclaim-interval", "0"]) as c:
        spec = NodeSpec(c.ids[0], c.urls[0], "d0", tuple(str(d) for d in c.drive_paths(0)))
        session = make_session()
        client = NodeClient(spec, c.secret, session)
        try:
            stored = 0
            refusals: list[str] = []
            for i in range(60):
                size = 256 * 1024
                try:
                    await client.put(f"r{i:03d}", body(size), length=size, stream=f"s{i % 3}",
                                     meta=b"{}")
                    stored += 1
                except NodeUnavailable as e:
                    refusals.append(f"unavailable: {e}")
                except NodeError as e:
                    refusals.append(str(e.status))
            assert stored >= 16, stored  # 8 MiB of zones took data first
            assert refusals and set(refusals) == {"507"}, refusals
            assert client.full
        finally:
            await session.close()
