"""Through S3 (boto3, a real gateway and 7 node processes, 4+2): a node whose drive fills up is
*full*, not down. While it is full no new fragment goes there and writes keep their full width
(handed off to the seventh node, never degraded); `/health/cluster` and the
`zonegate_gateway_nodes_full` gauge say so; once it has room again it is back in placement."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, NodeError, make_session
from tests.support.gwcluster import Gateway, serving
from zonestore.emulated import Geometry

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20
SMALL = Geometry(nr_zones=16, zone_size=4 * MiB, zone_capacity=4 * MiB, max_open_zones=6,
                 max_active_zones=8)
VICTIM = 3
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with serving(Gateway(tmp_path_factory.mktemp("gwfull"), nodes=7, k=4, m=2, geometry=SMALL,
                node_args=["--reclaim-interval", "0.2"])) as g:
        yield g


def get_json(g: Gateway, path: str) -> tuple[int, dict]:
    try:
        with _NO_PROXY.open(g.endpoint + path, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(g: Gateway, name: str) -> float:
    with _NO_PROXY.open(g.endpoint + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


async def _node(g: Gateway, work) -> object:
    session = make_session()
    try:
        spec = NodeSpec(g.nodes.ids[VICTIM], g.nodes.urls[VICTIM], g.nodes.ids[VICTIM], ())
        return await work(NodeClient(spec, g.nodes.secret, session))
    finally:
        await session.close()


def fill_victim(g: Gateway) -> list[str]:
    """Junk records on the victim node until it answers 507, for ever smaller records (a
    node that refuses 1 MiB may still take a 256 KiB fragment: it is full only when not)."""
    async def work(client: NodeClient) -> list[str]:
        ids: list[str] = []
        for size in (MiB, 256 << 10, 64 << 10, 16 << 10, 4 << 10):
            async def body(size: int = size) -> AsyncIterator[bytes]:
                yield os.urandom(size)

            for _ in range(100):
                rid = f"junk{len(ids):03d}"
                try:
                    await client.put(rid, body(), length=size, stream="junk", meta=b"")
                except NodeError as e:
                    assert e.status == 507, e
                    break
                ids.append(rid)
            else:
                raise AssertionError("the node never filled up")
        return ids
    return asyncio.run(_node(g, work))


def delete_on_victim(g: Gateway, ids: list[str]) -> None:
    async def work(client: NodeClient) -> None:
        for rid in ids:
            await client.delete(rid)
    asyncio.run(_node(g, work))


def wait_full(g: Gateway, want: list[str], timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        _, doc = get_json(g, "/health/cluster")
        if doc.get("nodes_full") == want or time.monotonic() > deadline:
            return doc
        time.sleep(0.5)


def test_full_node_is_skipped_while_full_and_returns(gw: Gateway) -> None:
    s3 = gw.client()
    s3.create_bucket(Bucket="fill")
    victim = gw.nodes.ids[VICTIM]
    assert get_json(gw, "/health/cluster")[1]["nodes_full"] == []
    held = archive_ids_of(gw, VICTIM)  # the bucket's marker, maybe
    junk = fill_victim(gw)

    # Writes right away (the gateway may not know yet: a 507 tells it) and after it knows.
    bodies = {f"ckpt/step-{i}/shard.bin": os.urandom(MiB + i) for i in range(6)}
    big = os.urandom(10 * MiB)  # multipart: 2 parts of 5 MiB
    for key, data in bodies.items():
        s3.put_object(Bucket="fill", Key=key, Body=data)
    mp = s3.create_multipart_upload(Bucket="fill", Key="ckpt/step-9/model.bin")["UploadId"]
    parts = [{"PartNumber": n + 1, "ETag": s3.upload_part(
        Bucket="fill", Key="ckpt/step-9/model.bin", UploadId=mp, PartNumber=n + 1,
        Body=big[n * 5 * MiB:(n + 1) * 5 * MiB])["ETag"]} for n in range(2)]
    s3.complete_multipart_upload(Bucket="fill", Key="ckpt/step-9/model.bin", UploadId=mp,
                                 MultipartUpload={"Parts": parts})

    status, doc = get_json(gw, "/health/cluster")
    assert status == 200 and doc["nodes_full"] == [victim], doc  # full is not a failure
    assert doc["nodes_down"] == [] and doc["write_quorum"] and doc["read_quorum"]
    assert metric(gw, "zonegate_gateway_nodes_full") == 1.0
    assert metric(gw, "zonegate_gateway_degraded_writes_total") == 0.0  # full width, all
    on_victim = archive_ids_of(gw, VICTIM)
    assert on_victim == held | set(junk), on_victim - held - set(junk)  # nothing new
    for key, data in bodies.items():
        assert s3.get_object(Bucket="fill", Key=key)["Body"].read() == data
    assert s3.get_object(Bucket="fill", Key="ckpt/step-9/model.bin")["Body"].read() == big

    # Room again (junk deleted, its zones reclaimed): back in placement.
    delete_on_victim(gw, junk)
    doc = wait_full(gw, [])
    assert doc["nodes_full"] == [], doc
    assert metric(gw, "zonegate_gateway_nodes_full") == 0.0
    for i in range(6):
        s3.put_object(Bucket="fill", Key=f"later/{i}", Body=os.urandom(256 * 1024))
    assert archive_ids_of(gw, VICTIM), "the node got no fragment after it had room again"
    assert metric(gw, "zonegate_gateway_degraded_writes_total") == 0.0


def archive_ids_of(g: Gateway, index: int) -> set[str]:
    """Record ids on the victim node (through its listing API)."""
    assert index == VICTIM

    async def work(client: NodeClient) -> set[str]:
        return {r.id async for r in client.scan()}
    return asyncio.run(_node(g, work))
