"""Faults in the middle of data movement (issue 25, item 4), over real node processes: a source
node SIGKILLed mid-drain (its remaining fragments are rebuilt from parity instead), a target
node SIGKILLed mid-rebalance (its moves fail and are finished once it is back, its unrecorded
copies deleted), a target that fills up (507: its moves fail, nothing half-written). After
each: every object reads back byte-exact through its recorded layout, every fragment sits
where its record says and nowhere else, and the fragment audit is clean."""

from __future__ import annotations

import asyncio
from pathlib import Path

from erasure.clusterlayout import Change
from erasure.mover import Mover
from erasure.nodeclient import NodeClient, NodeError, make_session
from tests.support.moverrig import rig_on
from zonestore.emulated import Geometry

MiB = 1 << 20


def slow(m: Mover, rate: float) -> Mover:
    """A mover paced at `rate` bytes/s per node, with short leases (so a test does not wait
    minutes for a crashed mover's part to be taken over)."""
    m.throttle.per_node = rate
    m.run_lease = m.part_lease = 1.0
    m.retry_after = 0.0
    return m


async def until(pred, seconds: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not pred():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_source_that_dies_mid_drain_is_rebuilt_from_parity(tmp_path: Path) -> None:
    async with rig_on(tmp_path) as rig:
        nc = rig.nc
        assert nc is not None
        await rig.write(40, seed=11)
        await rig.mover().run_once()
        await rig.apply(Change("node drain", {"id": "node03"}))
        m = slow(rig.mover(), 100_000)
        run = asyncio.create_task(m.run_once())
        await until(lambda: m.stats["fragments_moved"] >= 3)
        nc.kill(3)  # the node being drained dies
        st = await run
        assert st is not None and st.phase == "done" and st.failed == 0, st
        assert st.rebuilt > 0 and st.moves > st.rebuilt  # some copied, the rest rebuilt
        recs = await rig.recorded()
        assert all("node03" not in lay.placement.values() for lay in recs.values())
        # it will not come back: removed; the copies its death left leased are tidied
        await rig.apply(Change("node remove", {"id": "node03"}))
        await asyncio.sleep(1.1)
        assert (await slow(rig.mover(), 0).run_once()).failed == 0
        per_node = await rig.check()
        assert "node03" not in per_node


async def test_a_target_killed_mid_move_leaves_no_copy_behind(tmp_path: Path) -> None:
    async with rig_on(tmp_path) as rig:
        nc = rig.nc
        assert nc is not None
        await rig.write(50, seed=12)
        await rig.mover().run_once()
        await rig.apply(Change("node add", {"id": "node07", "url": nc.urls[7],
                                            "drives": [str(d) for d in nc.drive_paths(7)]}))
        m = slow(rig.mover(), 100_000)
        run = asyncio.create_task(m.run_once())
        await until(lambda: m.stats["fragments_moved"] >= 3)
        nc.kill(7)  # the node receiving the fragments dies mid-copy
        st = await run
        assert st is not None and (st.failed > 0 or st.spread > 0.05), st  # left undone
        for uid, lay in (await rig.recorded()).items():  # nothing lost meanwhile
            assert len(set(lay.placement.values())) == 6, uid
        nc.restart(7)
        await rig.c.check_health()
        await asyncio.sleep(1.1)  # the dead copies' leases run out
        st = await slow(rig.mover(), 0).run_once()
        assert st is not None and st.phase == "done" and st.failed == 0 and st.stuck == 0, st
        assert st.spread <= 0.05
        per_node = await rig.check()  # the copies no record names are gone too
        assert per_node["node07"] > 0


async def test_a_target_that_fills_up(tmp_path: Path) -> None:
    tiny = Geometry(nr_zones=8, zone_size=2 * MiB, zone_capacity=2 * MiB, nr_conventional=2,
                    max_open_zones=4, max_active_zones=4)
    async with rig_on(tmp_path, geometry=tiny) as rig:
        nc = rig.nc
        assert nc is not None
        await rig.write(40, seed=13)
        await rig.mover().run_once()
        await rig.apply(Change("node add", {"id": "node07", "url": nc.urls[7],
                                            "drives": [str(d) for d in nc.drive_paths(7)]}))
        # node07 fills up with other data (another client: the mover learns it from the 507s)
        spec = rig.c.clients["node07"].spec
        session = make_session()
        junk = NodeClient(spec, rig.c.config.secret, session)
        n = 0
        for size in (256 * 1024, 16 * 1024, 4096):  # until it refuses even small records
            while True:
                try:
                    await junk.put(f"junk{n:04d}", _body(size), length=size, stream="junk",
                                   meta=b"{}")
                except NodeError:  # 507 (or the connection cut while it said so)
                    break
                n += 1
        assert junk.full and not rig.c.clients["node07"].full
        m = slow(rig.mover(), 0)
        st = await m.run_once()
        assert st is not None and st.phase == "done"
        assert m.stats["move_failures"] > 0 and rig.c.clients["node07"].full
        # the moves that hit the full node failed cleanly: nothing lost, nothing half-written
        for i in range(n):
            await junk.delete(f"junk{i:04d}")
        await session.close()
        await rig.check()


async def _body(n: int):
    yield b"j" * n
