"""Soak (`make soak`): concurrent writes and reads on 12 node processes while nodes are
SIGKILLed and restarted at random (never more than m = 2 down at once). Every read must return
the right bytes (parts written without a fragment may be unavailable while 2 nodes are down,
until the background healer rebuilds them), every write must succeed; afterwards `repair` makes
every part whole again and every part reads.

ZG_SOAK_SECONDS sets the duration (default 120).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from erasure.errors import PartUnavailable
from erasure.layout import PartLayout
from erasure.repair import repair
from tests.erasure.test_cluster_erasure import body, data, read_all
from tests.support.nodeproc import NodeCluster

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = [pytest.mark.soak, pytest.mark.timeout(3600)]
MiB = 1 << 20


async def test_chaos_soak(tmp_path: Path) -> None:
    duration = float(os.environ.get("ZG_SOAK_SECONDS", "120"))
    rnd = random.Random(20261129)
    with NodeCluster(tmp_path / "nodes", 12, drives_per_node=2,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        cfg = ClusterConfig.from_dict({
            "secret": nc.secret,
            "erasure": {"state_dir": str(tmp_path / "state"), "node_timeout": 10},
            "nodes": [{"id": i, "url": u} for i, u in zip(nc.ids, nc.urls, strict=True)]})
        written: list[tuple[PartLayout, int, int]] = []
        counts = {"writes": 0, "reads": 0, "kills": 0, "unavailable": 0}
        stop = time.monotonic() + duration
        down: set[int] = set()

        async with ErasureCluster(cfg, health_interval=1.0) as cluster:
            async def writer(w: int) -> None:
                n = 0
                while time.monotonic() < stop:
                    size = rnd.choice([0, 1, MiB, 3 * MiB + 7, rnd.randrange(8 * MiB)])
                    seed = w * 100_000 + n
                    layout = await cluster.write_part(
                        f"soak{w}x{n:05d}.p1", body(size, seed), length=size, stream=f"w{w}",
                        meta=lambda r: {})
                    written.append((layout, size, seed))
                    counts["writes"] += 1
                    n += 1

            async def reader() -> None:
                while time.monotonic() < stop:
                    if not written:
                        await asyncio.sleep(0.05)
                        continue
                    layout, size, seed = rnd.choice(written)
                    off = rnd.randrange(size + 1)
                    ln = rnd.choice([None, 4096, rnd.randrange(2 * MiB)])
                    want = data(size, seed)[off:None if ln is None else off + ln]
                    try:
                        assert await read_all(cluster, layout, off, ln) == want, layout.part_uid
                    except PartUnavailable:
                        # a part written without a fragment survives one failure less until
                        # it is healed; a whole part must always read with 2 nodes down
                        assert layout.missing, layout.part_uid
                        counts["unavailable"] += 1
                        continue
                    counts["reads"] += 1

            async def chaos() -> None:
                while time.monotonic() < stop:
                    await asyncio.sleep(rnd.uniform(0.5, 3))
                    if len(down) < 2 and rnd.random() < 0.6:
                        i = rnd.choice([i for i in range(12) if i not in down])
                        nc.kill(i)
                        down.add(i)
                        counts["kills"] += 1
                    elif down:
                        i = rnd.choice(sorted(down))
                        await asyncio.to_thread(nc.restart, i)
                        down.discard(i)

            await asyncio.gather(writer(0), writer(1), reader(), reader(), chaos())
            for i in sorted(down):
                await asyncio.to_thread(nc.restart, i)
            await cluster.check_health()
            report = await repair(cluster, "soak")
            assert not report.failed and not report.unrecoverable, report
            for p in await cluster.scan("soak"):
                assert sorted(p.fragments) == list(range(10)), p.part_uid
            for layout, size, seed in written:
                assert await read_all(cluster, layout) == data(size, seed)
            print(f"soak: {counts}, healed {cluster.stats['healed_parts']} in the background, "
                  f"repaired {len(report.fixed)} after")
        assert counts["kills"] > 0 and counts["writes"] > 0 and counts["reads"] > 0
