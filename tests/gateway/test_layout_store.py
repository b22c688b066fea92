"""The cluster layout kept in the metadata store, on both backends (two store instances on one
target standing for two gateways), and in files: one truth, versions published by
compare-and-set (two racing applies: exactly one wins), staged changes shared, version 1
bootstrapped from the cluster file once."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

import pytest

from erasure.clusterlayout import Change, ClusterLayout, LayoutError, apply_changes
from erasure.config import ClusterConfig
from erasure.layoutstore import FileLayoutStore, LayoutStore, load_or_bootstrap
from gateway.store.layoutstore import StoreLayouts
from tests.support import storebackends

stores = storebackends.stores
pg_server = storebackends.pg_server


def config(n: int = 6) -> ClusterConfig:
    return ClusterConfig.from_dict({
        "secret": "layout-test-secret", "erasure": {"k": 4, "m": 2},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9100 + i}",
                   "drives": [f"d/n{i}/a", f"d/n{i}/b"]} for i in range(n)]})


async def _contract(one: LayoutStore, two: LayoutStore) -> None:
    assert await one.current() is None and await one.history() == []
    assert await one.version() == 0
    v1 = await load_or_bootstrap(one, config())
    assert v1.version == 1 and [n.id for n in v1.nodes] == [f"n{i}" for i in range(6)]
    # the other "gateway" sees the same version 1 and bootstrapping again changes nothing
    assert await load_or_bootstrap(two, config(7)) == v1
    assert (await two.current()) == v1
    # staged changes are shared, in order, and cleared once
    await one.stage(Change("node add", {"id": "n6", "url": "http://127.0.0.1:9106",
                                        "drives": ["d/n6/a"]}))
    await two.stage(Change("node drain", {"id": "n0"}))
    staged = await two.staged()
    assert [c.op for c in staged] == ["node add", "node drain"]
    v2 = apply_changes(v1, staged)
    # two applies of the same version race: exactly one wins
    other = apply_changes(v1, [Change("node weight", {"id": "n1", "weight": 2})])
    won = await asyncio.gather(one.publish(v2, 1), two.publish(other, 1))
    assert sorted(won) == [False, True]
    winner = v2 if won[0] else other
    assert await one.current() == winner and await two.current() == winner
    # a stale expected version, or a version that skips one, is refused
    assert not await two.publish(apply_changes(v1, []), 1)
    assert not await two.publish(apply_changes(apply_changes(winner, []), []), 2)
    assert await one.clear_staged() == 2 and await two.staged() == []
    # history, newest first; get by version
    v3 = apply_changes(winner, [], note="again")
    assert await two.publish(v3, 2)
    assert [x.version for x in await one.history()] == [3, 2, 1]
    assert await one.version() == await two.version() == 3
    assert [x.version for x in await one.history(2)] == [3, 2]
    assert await one.get(1) == v1 and await one.get(9) is None
    assert (await one.get(3)).note == "again"
    # drive identities: the first recorded per slot and generation wins, for everyone
    assert await one.drive_identity("n1", "d/n1/a", 1, "aaa") == "aaa"
    assert await two.drive_identity("n1", "d/n1/a", 1, "bbb") == "aaa"
    assert await two.drive_identity("n1", "d/n1/a", 2, "bbb") == "bbb"
    assert await one.drive_identity("n1", "d/n1/b", 1, "ccc") == "ccc"


async def test_layout_store_contract_on_both_backends(stores) -> None:
    target = stores.new_target()
    one, two = await stores.open(target), await stores.open(target)
    await _contract(StoreLayouts(one), StoreLayouts(two))


async def test_layout_file_store_contract(tmp_path: Path) -> None:
    await _contract(FileLayoutStore(tmp_path), FileLayoutStore(tmp_path))


async def test_many_racing_publishes_one_winner_each_version(stores) -> None:
    target = stores.new_target()
    gws = [StoreLayouts(await stores.open(target)) for _ in range(4)]
    base = await load_or_bootstrap(gws[0], config())
    for _ in range(3):
        cur = await gws[0].current()
        tries = [apply_changes(cur, [Change("node weight", {"id": "n1", "weight": w})])
                 for w in (1.5, 2, 3, 4)]
        won = await asyncio.gather(*(g.publish(t, cur.version) for g, t in zip(gws, tries,
                                                                                strict=True)))
        assert won.count(True) == 1
    assert (await gws[3].current()).version == base.version + 3


def _publish_in_process(state_dir: str, weight: float, q: multiprocessing.Queue) -> None:
    async def run() -> bool:
        s = FileLayoutStore(state_dir)
        cur = await s.current()
        assert cur is not None
        return await s.publish(apply_changes(cur, [Change("node weight",
                                                          {"id": "n2", "weight": weight})]),
                               cur.version)
    q.put(asyncio.run(run()))


async def test_file_store_cas_between_processes(tmp_path: Path) -> None:
    await load_or_bootstrap(FileLayoutStore(tmp_path), config())
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_publish_in_process, args=(str(tmp_path), w, q))
             for w in (2.0, 3.0, 4.0)]
    for p in procs:
        p.start()
    for p in procs:
        await asyncio.to_thread(p.join)
    results = [q.get() for _ in procs]
    # each published the version after the one it saw, or lost to one that did: the
    # versions are 1..N without a gap and every win is one of them
    versions = [x.version for x in await FileLayoutStore(tmp_path).history()]
    assert versions == list(range(1 + results.count(True), 0, -1))
    assert results.count(True) >= 1


def test_validate_refuses_what_would_lose_redundancy() -> None:
    v1 = ClusterLayout.bootstrap(config())
    with pytest.raises(LayoutError, match="4\\+2 needs 6 nodes"):
        apply_changes(v1, [Change("node drain", {"id": "n0"})])
    with pytest.raises(LayoutError, match="failure domains"):
        apply_changes(ClusterLayout.bootstrap(ClusterConfig.from_dict({
            "secret": "layout-test-secret", "erasure": {"k": 4, "m": 2},
            "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9100 + i}",
                       "domain": f"rack{i % 2}"} for i in range(6)]})), [])
