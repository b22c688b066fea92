"""`POST /v1/purge` deletes exactly the records one level under each prefix, durably, and
refuses bad documents with a clear 4xx that deletes nothing."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from tests.support.nodeproc import node_request
from tests.support.zonelog_helpers import KiB, make_drive, open_log
from zonestore.node import purge as purge_mod
from zonestore.pool import DrivePool

pytestmark = pytest.mark.timeout(300)


async def put(session, cluster, rid, stream="s1"):
    status, _, body = await node_request(
        session, cluster, 0, "PUT", f"/v1/records/{rid}", body=b"x" * 1000,
        headers={"X-ZG-Length": "1000", "X-ZG-Stream": stream})
    assert status == 201, body


async def purge(session, cluster, doc, *, body=None, sign_body=True):
    raw = json.dumps(doc).encode() if body is None else body
    return await node_request(session, cluster, 0, "POST", "/v1/purge", body=raw,
                              query={"nonce": secrets.token_hex(8)}, sign_body=sign_body,
                              headers={"Content-Type": "application/json"})


async def ids(session, cluster):
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records",
                                         query={"limit": "10000"})
    assert status == 200
    return {r["id"] for r in json.loads(body)["records"]}


async def test_purge_takes_each_prefix_one_level_down_and_nothing_else(cluster, session):
    mine = ["v.p1.f00", "v.p1.f03", "v.p1.f09"]
    others = ["v.p1.f1.f00", "v.p10.f00", "v.p2.f00", "w.p1.f00"]
    for i, rid in enumerate(mine + others):
        await put(session, cluster, rid, stream=f"s{i % 3}")  # on both drives
    status, _, body = await purge(session, cluster,
                                  {"prefixes": ["v.p1.f", "v.p2.f", "nothing.f"]})
    assert status == 200, body
    assert json.loads(body) == {"deleted": {"v.p1.f": 3, "v.p2.f": 1, "nothing.f": 0}}
    left = await ids(session, cluster)
    assert not left & set(mine) and "v.p2.f00" not in left
    assert {"v.p1.f1.f00", "v.p10.f00", "w.p1.f00"} <= left
    for rid in mine:
        status, _, _ = await node_request(session, cluster, 0, "GET", f"/v1/records/{rid}")
        assert status == 404
    # again: nothing left under them, still an answer
    status, _, body = await purge(session, cluster, {"prefixes": ["v.p1.f"]})
    assert status == 200 and json.loads(body) == {"deleted": {"v.p1.f": 0}}


@pytest.mark.parametrize("doc,body,sign_body,code", [
    (None, b"not json", True, 400),
    ({"prefixes": []}, None, True, 400),
    ({"prefixes": "keep."}, None, True, 400),
    ([], None, True, 400),
    ({"prefixes": ["ok.", "../bad"]}, None, True, 400),
    ({"prefixes": ["keep.f"] * 1001}, None, True, 400),
    ({"prefixes": ["keep.f"]}, None, False, 403),  # unsigned body
    (None, b"{" + b" " * (256 * 1024) + b"}", True, 413),
])
async def test_bad_purges_are_refused_and_delete_nothing(cluster, session, doc, body,
                                                         sign_body, code):
    await put(session, cluster, "keep.f00")
    status, _, answer = await purge(session, cluster, doc, body=body, sign_body=sign_body)
    assert status == code, answer
    assert "error" in json.loads(answer)
    assert "keep.f00" in await ids(session, cluster)


async def test_a_purge_signed_for_another_body_is_refused(cluster, session):
    await put(session, cluster, "keep2.f00")
    raw = json.dumps({"prefixes": ["keep2.f"]}).encode()
    h = cluster.headers(0, "POST", "/v1/purge", {"nonce": "n1"},
                        json.dumps({"prefixes": ["other."]}).encode())
    async with session.post(cluster.nodes[0].url + "/v1/purge?nonce=n1", data=raw,
                            headers=h) as resp:
        assert resp.status == 403
    assert "keep2.f00" in await ids(session, cluster)


async def test_a_purge_document_sent_in_pieces_is_read_whole(cluster, session):
    # aiohttp's read(n) returns what has arrived: one read took a first piece for the body
    await put(session, cluster, "slow.f00")
    raw = json.dumps({"prefixes": ["slow.f"] + [f"pad{i}.f" for i in range(300)]}).encode()
    query = {"nonce": secrets.token_hex(8)}
    h = cluster.headers(0, "POST", "/v1/purge", query, raw)

    async def pieces():
        for i in range(0, len(raw), 1000):
            yield raw[i:i + 1000]
            await asyncio.sleep(0.01)

    async with session.post(cluster.nodes[0].url + f"/v1/purge?nonce={query['nonce']}",
                            data=pieces(), headers=h) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["deleted"]["slow.f"] == 1


async def test_purge_pages_through_more_records_than_one_listing(tmp_path, monkeypatch):
    monkeypatch.setattr(purge_mod, "PAGE", 7)
    logs = []
    for i in range(2):
        d = tmp_path / f"d{i}"
        d.mkdir()
        logs.append(await open_log(make_drive(d, zones=24)))
    pool = DrivePool(logs, headroom=256 * KiB)
    try:
        for j in range(30):
            await pool.put(f"p.f{j:02d}", b"y" * 100, stream=f"s{j % 2}")
            await pool.put(f"p.f{j:02d}.x", b"z", stream="s")  # one level further down
        assert await purge_mod.purge(pool, "p.f") == 30
        assert [r.id for r in pool.scan("p.")] == [f"p.f{j:02d}.x" for j in range(30)]
    finally:
        await pool.close()
