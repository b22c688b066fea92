"""A storage-node daemon started on real zoned block devices serves puts and gets (in QEMU).

One `python -m zonestore.node` process with the guest's NVMe ZNS namespace and null_blk device
as its two drives (indexes in --index-dir): signed PUT/GET/ranged GET/HEAD/DELETE/list over
real HTTP, then SIGKILL and restart, after which everything acknowledged is still served. Every
write the node process sends to the devices is audited against the kernel's write pointer.
Skipped without zoned devices.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import aiohttp
import crc32c
import pytest

from tests.support.nodeproc import NodeCluster, node_request
from tests.zoned import procaudit
from tests.zoned.support import SKIP_REASON, reset_all, zoned_device_paths

pytestmark = [
    pytest.mark.zoned,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not zoned_device_paths(), reason=SKIP_REASON),
]


def reset_devices() -> None:
    from zonestore.zbd import ZbdZonedDevice

    for p in zoned_device_paths():
        with ZbdZonedDevice(p) as d:
            reset_all(d)


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path):
    reset_devices()
    (tmp_path / "idx").mkdir()
    # The node process logs each device write with the kernel's write pointer just before it.
    audit_env = {"PYTHONPATH": f"{REPO / 'tests/zoned/wpaudit'}{os.pathsep}{REPO}",
                 "ZONEGATE_WP_AUDIT": str(tmp_path / "wp-audit.log")}
    c = NodeCluster(tmp_path, 1, drives_per_node=1, start_timeout=240, env=audit_env,
                    extra_args=["--index-dir", str(tmp_path / "idx"), "--reclaim-interval", "0"])
    c.nodes[0].drives = [Path(p) for p in zoned_device_paths()]
    with c:
        yield c
    reset_devices()


async def put(session, cluster, rid, data, meta=b"", stream="s"):
    return await node_request(session, cluster, 0, "PUT", f"/v1/records/{rid}",
                              body=data + meta, headers={"X-ZG-Length": str(len(data)),
                                                         "X-ZG-Stream": stream})


async def test_node_on_zoned_block_devices_serves_puts_and_gets(cluster):
    records = {f"part{i}.f{i:02d}": os.urandom(n)
               for i, n in enumerate([1, 4096, 300_000, 3_000_001, 77])}
    async with aiohttp.ClientSession() as s:
        for i, (rid, data) in enumerate(records.items()):
            status, _, body = await put(s, cluster, rid, data, meta=b'{"m":%d}' % i,
                                        stream=f"b{i % 2}")
            assert status == 201, body
            assert json.loads(body)["crc32c"] == crc32c.crc32c(data)
        for rid, data in records.items():
            status, headers, body = await node_request(s, cluster, 0, "GET", f"/v1/records/{rid}")
            assert status == 200 and body == data, rid
            assert int(headers["X-ZG-Crc32c"]) == crc32c.crc32c(data)
        big = "part3.f03"
        status, _, body = await node_request(s, cluster, 0, "GET", f"/v1/records/{big}",
                                             headers={"Range": "bytes=2999990-3000010"})
        assert status == 206 and body == records[big][2999990:3000011]
        status, _, body = await node_request(s, cluster, 0, "GET", "/v1/records",
                                             query={"prefix": "part"})
        assert status == 200
        assert [r["id"] for r in json.loads(body)["records"]] == sorted(records)
        status, _, _ = await node_request(s, cluster, 0, "DELETE", "/v1/records/part0.f00")
        assert status == 204
        del records["part0.f00"]
        status, _, body = await node_request(s, cluster, 0, "GET", "/v1/stats")
        assert status == 200
        stats = json.loads(body)
        assert len(stats["drives"]) == 2

    cluster.kill(0)  # a crash: nothing flushed or closed
    cluster.restart(0)
    async with aiohttp.ClientSession() as s:
        for rid, data in records.items():
            status, _, body = await node_request(s, cluster, 0, "GET", f"/v1/records/{rid}")
            assert status == 200 and body == data, rid
        status, _, _ = await node_request(s, cluster, 0, "HEAD", "/v1/records/part0.f00")
        assert status == 404
        status, _, body = await put(s, cluster, "after.f00", b"z" * 10_000)
        assert status == 201, body

    writes = procaudit.read(cluster.root / "wp-audit.log")
    assert len(writes) >= 5, "the audit saw no node writes"
    assert [w for w in writes if w.zone_type != 1 and w.offset != w.device_wp] == []
    assert [w for w in writes if w.zone_type == 1] == [], "the node wrote a conventional zone"
