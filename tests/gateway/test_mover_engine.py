"""The data mover (erasure/mover.py) over real node processes and the gateway's metadata store
(gateway/store/moves.py): a node added → rebalanced within 5 %; a node drained → empty; a node
gone for good → its fragments rebuilt elsewhere; a replaced drive → what it held rebuilt onto
it; a mover that dies mid-move → the next one tidies and finishes. After each: every object
reads back byte-exact through its *recorded* layout, every recorded fragment is where the
record says and nowhere else (no copy left behind), k+m fragments per part on distinct
nodes, and the fragment audit is clean."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from pathlib import Path

import pytest

from erasure.clusterlayout import Change
from erasure.moveplan import Fill
from gateway.store.moves import StoreMoveLeases
from tests.support import storebackends
from tests.support.moverrig import Rig, rig_on
from tests.support.nodeproc import create_emulated_drive

pg_server = storebackends.pg_server


@pytest.fixture
async def rig(tmp_path: Path):
    async with rig_on(tmp_path) as r:
        yield r


def spread(rig: Rig, per_node: Counter[str]) -> float:
    return Fill(rig.c.layout, {n: v * 1000 for n, v in per_node.items()}).spread()


async def test_a_new_node_is_filled_to_within_5_percent(rig: Rig) -> None:
    await rig.write(70, seed=1)
    before = await rig.check()
    # a balanced cluster plans nothing, even when asked
    await rig.mover().request()
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done"
    nc = rig.nc
    assert nc is not None
    await rig.apply(Change("node add", {"id": "node07", "url": nc.urls[7],
                                        "drives": [str(d) for d in nc.drive_paths(7)]}))
    dry = await rig.mover().dry_run()
    assert dry.fragments > 0 and dry.spread_after <= 0.05 and dry.stuck == 0
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done" and st.failed == 0
    after = await rig.check()
    assert spread(rig, after) <= 0.05, after
    # as few moves as possible: about node07's share, no reshuffle of the others
    assert st.moves == after["node07"] <= 1.1 * sum(before.values()) / 8 + 2
    assert sum(after.values()) == sum(before.values())
    # the same version again: nothing left to do, nothing moves
    again = await rig.mover().run_once()
    assert again is not None and again.moves == st.moves


async def test_a_drained_node_ends_empty_and_a_gone_one_is_rebuilt(rig: Rig) -> None:
    await rig.write(40, seed=2)
    await rig.apply(Change("node drain", {"id": "node01"}))
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done" and st.rebuilt == 0, st
    per_node = await rig.check()
    assert per_node["node01"] == 0
    recs, _ = await rig.c.clients["node01"].list("", "", 10)
    assert recs == []  # no record left: it can be removed
    await rig.apply(Change("node remove", {"id": "node01"}))
    # node03 dies for good: removed (node07 joins so that 6 nodes take writes), its
    # fragments rebuilt from parity elsewhere
    nc = rig.nc
    assert nc is not None
    nc.kill(3)
    await rig.apply(Change("node remove", {"id": "node03"}),
                    Change("node add", {"id": "node07", "url": nc.urls[7],
                                        "drives": [str(d) for d in nc.drive_paths(7)]}))
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done" and st.failed == 0
    assert st.rebuilt > 0
    per_node = await rig.check()
    assert not {"node01", "node03"} & set(per_node)


async def test_a_replaced_drive_gets_back_what_it_held(rig: Rig) -> None:
    nc = rig.nc
    assert nc is not None
    await rig.write(40, seed=3)
    assert (await rig.mover().run_once()).moves == 0  # v1: nothing to do
    held = {r.id for r in [r async for r in rig.c.clients["node02"].scan("w")]}
    drives = (await rig.c.clients["node02"].stats())["drives"]
    full = max(range(len(drives)), key=lambda j: drives[j]["records"])
    assert 0 < drives[full]["records"]
    nc.terminate(2)
    d1 = nc.drive_paths(2)[full]
    shutil.rmtree(d1)
    create_emulated_drive(d1, nc.geometry)
    nc.restart(2, degraded=True)
    left = {r.id for r in [r async for r in rig.c.clients["node02"].scan("w")]}
    assert len(left) < len(held)
    await rig.apply(Change("drive replace", {"node": "node02", "path": str(d1)}))
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done" and st.failed == 0
    assert st.rebuilt == len(held - left)
    now = {r.id for r in [r async for r in rig.c.clients["node02"].scan("w")]}
    assert now == held  # rebuilt onto the same node: placement unchanged
    await rig.check()


async def test_a_mover_killed_mid_move_is_finished_by_the_next(rig: Rig) -> None:
    await rig.write(40, seed=4)
    await rig.apply(Change("node drain", {"id": "node05"}))
    dead = rig.mover("gw-dead")
    dead.run_lease = dead.part_lease = 0.5  # its leases run out soon after it dies
    task = asyncio.create_task(dead.run_once())
    while dead.stats["fragments_moved"] < 5:
        await asyncio.sleep(0.01)
    task.cancel()  # dies between any two awaits: mid-copy, mid-commit or mid-delete
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.6)
    st = await rig.mover("gw-next").run_once()
    assert st is not None and st.phase == "done" and st.failed == 0
    per_node = await rig.check()
    assert per_node["node05"] == 0
    assert await StoreMoveLeases(rig.store).leftovers("batch:") == []


async def test_two_movers_on_postgres_move_each_fragment_once(
        tmp_path: Path, pg_server) -> None:  # noqa: F811 - the fixture
    """Two gateways' movers on one PostgreSQL store at once: one run, each fragment moved
    once, the records follow."""
    async with rig_on(tmp_path, target=pg_server.new_database(),
                      password_file=str(pg_server.password_file)) as rig:
        await rig.write(40, seed=5)
        await rig.mover().run_once()
        await rig.apply(Change("node drain", {"id": "node04"}))
        a, b = rig.mover("gw-a"), rig.mover("gw-b")
        got = await asyncio.gather(a.run_once(), b.run_once())
        done = [st for st in got if st is not None]
        assert done and all(st.phase == "done" for st in done)
        moved = a.stats["fragments_moved"] + b.stats["fragments_moved"]
        per_node = await rig.check()
        assert per_node["node04"] == 0
        assert moved == max(st.moves for st in done)  # none moved twice


async def test_a_drained_drive_ends_empty_on_a_node_that_keeps_its_fragments(rig: Rig) -> None:
    await rig.write(40, seed=6)
    await rig.mover().run_once()
    client = rig.c.clients["node02"]
    held = {r.id for r in [r async for r in client.scan("w")]}
    drives = (await client.stats())["drives"]
    full = max(range(len(drives)), key=lambda j: drives[j]["records"])
    assert drives[full]["records"] > 0
    path = drives[full]["path"]
    await rig.apply(Change("drive drain", {"node": "node02", "path": path}))
    st = await rig.mover().run_once()
    assert st is not None and st.phase == "done" and st.failed == 0
    assert st.drive_records >= drives[full]["records"] - 1  # (a bucket marker has no .fNN)
    after = (await client.stats())["drives"]
    assert after[full]["records"] == 0, after[full]
    assert {r.id for r in [r async for r in client.scan("w")]} == held  # still on node02
    assert st.moves == 0  # no part record changed
    # the node resets every zone of the drained drive (open, closed, tombstones' zones too),
    # without waiting for space to run low
    drive = await wait_drive_empty(client, full)
    assert drive["empty_zones"] == drive["seq_zones"] > 0, drive
    assert drive["live_bytes"] == 0 and drive["used_bytes"] == 0, drive
    other = (await client.stats())["drives"][1 - full]
    assert other["empty_zones"] < other["seq_zones"]  # the drive that took its records
    await rig.check()


async def wait_drive_empty(client, i: int, seconds: float = 30.0) -> dict:
    """Drive i's stats once every sequential zone of it is EMPTY on the device and in the zone
    log's own count (polled: a reset shows on the device a moment before the log counts it)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        d = (await client.stats())["drives"][i]
        conds = {k: n for k, n in d["zones_by_condition"].items() if n}
        if set(conds) <= {"empty", "not_wp"} and d["empty_zones"] == d["seq_zones"]:
            return d
        assert asyncio.get_running_loop().time() < deadline, f"zones left: {conds}"
        await asyncio.sleep(0.2)
