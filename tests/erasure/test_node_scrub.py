"""The node's scrubber on real node processes: bytes flipped in an emulated drive's zone file
are found by the scrubber (`GET /v1/damage`, metrics), rebuilt by repair - by `zonegate
repair` and by the gateway cluster's own background check - and reads stay correct."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.repair import repair
from tests.support.nodeproc import NodeCluster

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = [pytest.mark.timeout(300)]
SECRET = "scrub-test-secret"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("scrub"), 6, drives_per_node=1, secret=SECRET,
                     extra_args=["--reclaim-interval", "0", "--scrub-rate", "200000000",
                                 "--scrub-interval", "0.2"]) as nc:
        yield nc


def config(nodes: NodeCluster, tmp_path: Path) -> ClusterConfig:
    return ClusterConfig.from_dict({
        "secret": SECRET,
        "erasure": {"k": 4, "m": 2, "state_dir": str(tmp_path / "state"), "node_timeout": 20},
        "nodes": [{"id": nid, "url": url} for nid, url in zip(nodes.ids, nodes.urls, strict=True)],
    }, source="test")


async def one(data: bytes):
    yield data


def corrupt(nodes: NodeCluster, sample: bytes) -> int:
    """Flip a byte of the zone file holding `sample` (a data fragment's bytes); returns the
    index of the node whose drive it was."""
    for i in range(len(nodes.nodes)):
        for d in nodes.drive_paths(i):
            for zf in sorted((d / "zones").iterdir()):
                blob = zf.read_bytes()
                at = blob.find(sample)
                if at >= 0:
                    with open(zf, "r+b") as f:
                        f.seek(at + 10)
                        f.write(bytes([blob[at + 10] ^ 0xFF]))
                    return i
    raise AssertionError("sample not found on any drive")


def metric(nodes: NodeCluster, i: int, name: str) -> float:
    with _NO_PROXY.open(nodes.urls[i] + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


async def wait_damage(c: ErasureCluster, node: str, want: bool) -> list[dict]:
    for _ in range(300):
        found = await c.clients[node].damage()
        if bool(found) == want:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"damage list of {node} never became {'non-' if want else ''}empty")


async def test_scrubber_finds_flipped_bytes_and_repair_rebuilds(nodes, tmp_path) -> None:
    data = os.urandom(400_000)
    async with ErasureCluster(config(nodes, tmp_path), auto_repair=False,
                              health_interval=0) as c:
        layout = await c.write_part("scrub001.p1", one(data), length=len(data), stream="t",
                                    meta=lambda r: {})
        bad = nodes.ids[corrupt(nodes, data[5000:5064])]
        [d] = await wait_damage(c, bad, True)
        index = int(d["id"].rsplit(".f", 1)[1])
        assert d["id"] == layout.archive_id(index) and "Corrupt" in d["error"]
        assert layout.placement[index] == bad
        assert metric(nodes, nodes.ids.index(bad), "zonegate_node_scrub_errors_total") >= 1
        assert metric(nodes, nodes.ids.index(bad), "zonegate_node_scrub_bytes_total") > 0
        report = await repair(c)  # no --deep needed: the scrubber told it
        assert report.fixed == [("scrub001.p1", {index: bad})], report
        await wait_damage(c, bad, False)  # written again: no longer listed
        assert b"".join([b async for b in c.read_part(layout)]) == data
        # with the other data fragments' nodes gone the rebuilt one must decode
        others = [n for i, n in layout.placement.items() if i != index][:2]
        for n in others:
            nodes.kill(nodes.ids.index(n))
        try:
            await c.check_health()
            assert b"".join([b async for b in c.read_part(layout)]) == data
        finally:
            for n in others:
                nodes.restart(nodes.ids.index(n))


async def test_cluster_heals_what_the_scrubber_found_by_itself(nodes, tmp_path) -> None:
    data = os.urandom(300_000)
    async with ErasureCluster(config(nodes, tmp_path), health_interval=0.2) as c:
        c.scrub_check_interval = 0.5
        layout = await c.write_part("scrub002.p1", one(data), length=len(data), stream="t",
                                    meta=lambda r: {})
        bad = nodes.ids[corrupt(nodes, data[7000:7064])]
        await wait_damage(c, bad, True)
        for _ in range(300):
            if c.stats["healed_parts"]:
                break
            await asyncio.sleep(0.1)
        assert c.stats["healed_parts"] == 1, c.stats
        await wait_damage(c, bad, False)
        assert (await c.repair_queue.records()) == []
        assert b"".join([b async for b in c.read_part(layout)]) == data
