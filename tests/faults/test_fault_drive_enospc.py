"""A drive whose host filesystem fills up (issue 24, D1): one node's emulated drive lives on a
tmpfs that other data then fills, so the node's writes end in a real ENOSPC (its sparse zone
files promise more than the filesystem holds). That drive is full, not broken: the node
answers 507, the gateway hands the fragment to another node (every part keeps all k+m
fragments), the node's `/health/ready` says why and `/v1/stats` gives it no writable bytes
(no new fragments go there); once the other data is gone it takes writes again. Needs root
(mount); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from erasure.layout import parse_archive_id
from tests.support.gwcluster import Gateway, archive_ids, wait_for
from tests.support.tmpfs import tmpfs
from zonestore.emulated import Geometry, create_emulated_drive

pytestmark = [pytest.mark.timeout(400)]
VICTIM = 2
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
MiB = 1 << 20
GEOMETRY = Geometry(nr_zones=8, zone_size=32 * MiB, zone_capacity=32 * MiB)  # 256 MiB sparse


def fill(mnt: Path, leave: int) -> Path:
    """Fill the filesystem with another file, leaving about `leave` bytes free."""
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                f.write(b"\0" * MiB)
                f.flush()
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    os.truncate(filler, max(0, filler.stat().st_size - (leave - free)))
    return filler


def node_get(g: Gateway, i: int, path: str, query: dict[str, str] | None = None
             ) -> tuple[int, dict]:
    url = g.nodes.urls[i] + path + (f"?{urlencode(query)}" if query else "")
    req = urllib.request.Request(url, headers=g.nodes.headers(i, "GET", path, query))
    try:
        with _NO_PROXY.open(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def victim_records(g: Gateway) -> int:
    return len(node_get(g, VICTIM, "/v1/records", {"prefix": "", "limit": "1000"})[1]
               ["records"])


def widths(g: Gateway) -> Counter:
    """Fragments per part, over every node."""
    parts: Counter = Counter()
    for rid in archive_ids(g):
        parsed = parse_archive_id(rid)
        if parsed:
            parts[parsed[0]] += 1
    return parts


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Gateway, Path]]:
    with tmpfs(tmp_path / "small", "320m") as mnt:
        # seven nodes: a 4+2 part has a node left to hand a fragment to
        g = Gateway(tmp_path / "cluster", nodes=7, geometry=GEOMETRY)
        drive = g.nodes.drive_paths(VICTIM)[0]
        create_emulated_drive(mnt / "d0", GEOMETRY)
        drive.parent.mkdir(parents=True)
        drive.symlink_to(mnt / "d0")  # NodeCluster leaves an existing drive as it is
        g.start()
        try:
            yield g, mnt
        finally:
            g.stop()


def test_a_drive_whose_filesystem_fills_up_is_full_not_broken(cluster) -> None:
    g, mnt = cluster
    s3 = g.client()
    s3.create_bucket(Bucket="enospc")
    data = {f"before/{i:02d}": os.urandom(2 * MiB + i) for i in range(8)}  # 512 KiB fragments
    for key, body in data.items():
        s3.put_object(Bucket="enospc", Key=key, Body=body)
    before = victim_records(g)
    assert before > 0

    filler = fill(mnt, 2 * MiB)
    for i in range(24):
        key = f"filling/{i:02d}"
        data[key] = os.urandom(2 * MiB + i)
        s3.put_object(Bucket="enospc", Key=key, Body=data[key])  # no 5xx: any error raises
    # No part lost a fragment: each has all k+m, on seven nodes.
    counts = widths(g)
    assert len(counts) >= len(data) and set(counts.values()) == {g.k + g.m}, counts
    # The node is full, says why, and takes no new fragments.
    status, ready = node_get(g, VICTIM, "/health/ready")
    assert status == 200 and ready["status"] == "full" and ready["full_drives"] == [0], ready
    assert ready["writable_bytes"] == 0 and "filesystem" in " ".join(ready["reasons"]), ready
    status, stats = node_get(g, VICTIM, "/v1/stats")
    assert stats["drives"][0]["writable_bytes"] == 0 and stats["drives"][0]["host_full"], stats
    held = victim_records(g)
    for i in range(6):
        s3.put_object(Bucket="enospc", Key=f"while-full/{i}", Body=os.urandom(MiB))
    assert victim_records(g) == held
    for key, body in data.items():
        assert s3.get_object(Bucket="enospc", Key=key)["Body"].read() == body, key

    # Room again: the drive is writable again and takes fragments.
    filler.unlink()
    assert wait_for(lambda: node_get(g, VICTIM, "/health/ready")[1]["status"] == "ready",
                    timeout=60)
    n = iter(range(1000))
    assert wait_for(lambda: s3.put_object(Bucket="enospc", Key=f"again/{next(n)}",
                                          Body=os.urandom(MiB)) and victim_records(g) > held,
                    timeout=120)
    # every part at full width: the ones written while the node was full (6 nodes, 4+2: no
    # node to hand off to) are healed now that it has room; none stays degraded
    assert wait_for(lambda: set(widths(g).values()) == {g.k + g.m}, timeout=120), widths(g)
    log = g.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "internal error" not in log, g.log_tail(60)
    node_log = g.nodes.log_path(VICTIM).read_text(errors="replace")
    assert "internal error" not in node_log, node_log[-3000:]
