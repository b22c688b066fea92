"""Reclaim frees dead zones for free, moves live records without losing them, and keeps
deletes deleted."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.zonelog_helpers import KiB, make_drive, open_device, open_log, payload, read_all
from zonestore.errors import NoSpace, RecordNotFound
from zonestore.fsck import fsck


def blob(rid: str, seed: int, size: int) -> bytes:
    """Self-describing content: a reader can check it without knowing which version it got."""
    head = f"{rid}:{seed}:{size}:".encode().ljust(48, b".")
    return (head + random.Random(f"{rid}/{seed}").randbytes(size))[:size] if size >= 48 else \
        head[:size]


def check_blob(rid: str, data: bytes) -> None:
    if len(data) < 48:
        return
    r, seed, size, _ = data[:48].split(b":", 3)
    assert r.decode() == rid and int(size) == len(data)
    assert data == blob(rid, int(seed), len(data))


async def test_dead_zones_are_reset_without_copying(tmp_path):
    drive = make_drive(tmp_path, zones=24)
    log = await open_log(drive)
    for ck in ("ck1", "ck2"):
        for i in range(6):
            await log.put(f"{ck}.{i}", blob(f"{ck}.{i}", i, 512 * KiB), stream=ck)
    for i in range(6):
        await log.delete(f"ck1.{i}")
    before = log.stats()
    res = await log.reclaim()
    after = log.stats()
    assert res.zones_reset >= 2 and res.records_copied == 0
    assert after.gc_bytes_copied == before.gc_bytes_copied == 0
    assert after.free_bytes > before.free_bytes
    for i in range(6):
        check_blob(f"ck2.{i}", await read_all(log, f"ck2.{i}"))
    await log.close()


async def test_evacuation_moves_live_records_and_frees_the_zone(tmp_path):
    drive = make_drive(tmp_path, zones=24)
    log = await open_log(drive)
    for i in range(16):
        await log.put(f"r{i}", blob(f"r{i}", i, 200 * KiB), stream="mixed")
    for i in range(0, 16, 2):
        await log.delete(f"r{i}")
    res = await log.reclaim(min_garbage=0.2)
    assert res.zones_evacuated >= 1 and res.records_copied >= 1
    assert log.stats().gc_bytes_copied > 0
    for i in range(1, 16, 2):
        check_blob(f"r{i}", await read_all(log, f"r{i}"))
    await log.close()
    with open_device(drive) as dev:
        assert fsck(dev, drive / "index.sqlite")[0] == []


async def test_tombstones_keep_killing_older_copies_through_reclaim_and_rebuild(tmp_path):
    drive = make_drive(tmp_path, zones=80, zone_size=64 * KiB)
    log = await open_log(drive, chunk_size=16 * KiB, flush_size=16 * KiB)
    await log.put("x", blob("x", 1, 100), stream="a")
    ids = [f"t{i}" for i in range(1500)]
    # A put of stream a stays in flight meanwhile, so that b never fills the rest of a's zone
    # (an idle class's zone is shared): x's old copy stays in a's open zone, not a victim.
    gate = asyncio.Event()

    async def held():
        await gate.wait()
        yield blob("held", 0, 8 * KiB)

    holding = asyncio.create_task(log.put("held", held(), stream="a", length=8 * KiB))
    await asyncio.sleep(0)
    await asyncio.gather(*(log.put(f"keep{i}", blob(f"keep{i}", i, 8 * KiB), stream="a")
                           for i in range(5)),
                         *(log.put(t, b"t" * 20, stream="b") for t in ids))
    gate.set()
    await holding
    await asyncio.gather(*(log.delete(t) for t in ["x", *ids]))
    res = await log.reclaim(min_garbage=0.0)
    # x's old copy still sits in stream a's zone: its tombstone must survive the reclaim;
    # the t* copies died with their zones: their tombstones can go.
    assert res.tombstones_copied >= 1
    assert res.tombstones_dropped >= 1000
    with pytest.raises(RecordNotFound):
        await log.head("x")
    await log.close()
    with open_device(drive) as dev:
        assert fsck(dev, drive / "index.sqlite")[0] == []
    for p in drive.glob("index.sqlite*"):
        p.unlink()
    log = await open_log(drive)  # rebuilt from the zones alone
    with pytest.raises(RecordNotFound):
        await log.head("x")
    assert sorted(r.id for r in log.scan()) == ["held", *(f"keep{i}" for i in range(5))]
    await log.close()


async def test_reclaim_under_concurrent_puts_and_gets_loses_nothing(tmp_path):
    drive = make_drive(tmp_path, zones=48, zone_size=512 * KiB)
    log = await open_log(drive)
    model: dict[str, bytes] = {}
    stop = asyncio.Event()
    rnd = random.Random(7)
    errors: list[BaseException] = []
    reclaimed = []

    async def writer(w: int) -> None:
        for n in range(120):
            rid = f"w{w}-{rnd.randrange(15)}"
            if rnd.random() < 0.25:
                await log.delete(rid)
                model.pop(rid, None)
            else:
                data = blob(rid, n, rnd.choice([100, 3000, 40 * KiB, 150 * KiB]))
                await log.put(rid, data, stream=f"s{w % 2}")
                model[rid] = data

    async def reader() -> None:
        while not stop.is_set():
            if not model:
                await asyncio.sleep(0.001)
                continue
            rid = rnd.choice(list(model))
            try:
                check_blob(rid, await read_all(log, rid))
            except RecordNotFound:
                pass  # deleted concurrently
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    async def reclaimer() -> None:
        while not stop.is_set():
            reclaimed.append(await log.reclaim(min_garbage=0.1))
            await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(reader()) for _ in range(3)]
    tasks.append(asyncio.create_task(reclaimer()))
    await asyncio.gather(*(writer(w) for w in range(4)))
    stop.set()
    await asyncio.gather(*tasks)
    assert not errors, errors
    assert sum(r.zones_evacuated + r.zones_reset for r in reclaimed) >= 3
    assert sorted(r.id for r in log.scan()) == sorted(model)
    for rid, data in model.items():
        assert await read_all(log, rid) == data
    await log.close()
    with open_device(drive) as dev:
        assert fsck(dev, drive / "index.sqlite")[0] == []
    log = await open_log(drive)
    for rid, data in model.items():
        assert await read_all(log, rid) == data
    await log.close()


async def test_background_reclaim_frees_dead_zones(tmp_path):
    drive = make_drive(tmp_path, zones=16)
    log = await open_log(drive, background_reclaim=True, reclaim_interval=0.05)
    for i in range(6):
        await log.put(f"a{i}", blob(f"a{i}", i, 400 * KiB), stream="a")
    await log.put("b", b"other", stream="b")
    empty_before = log.stats().zones_by_condition.get("empty", 0)
    for i in range(6):
        await log.delete(f"a{i}")
    for _ in range(200):
        await asyncio.sleep(0.02)
        if log.stats().zones_by_condition.get("empty", 0) > empty_before:
            break
    assert log.stats().zones_by_condition.get("empty", 0) > empty_before
    assert await read_all(log, "b") == b"other"
    await log.close()


async def test_reclaim_leaves_zones_of_a_put_in_progress_alone(tmp_path):
    # A streamed put's chunks fill a whole zone before its COMMIT exists: nothing counts them
    # as live yet, but reclaim must not reset that zone under the put.
    drive = make_drive(tmp_path, zones=16)
    log = await open_log(drive)
    data = blob("big", 1, 2 * 1024 * KiB + 5000)  # spans three 1 MiB zones
    half = asyncio.Event()
    go = asyncio.Event()

    async def body():
        for i in range(0, len(data), 64 * KiB):
            if i >= 1536 * KiB and not half.is_set():
                half.set()
                await go.wait()
            yield data[i:i + 64 * KiB]

    put = asyncio.create_task(log.put("big", body(), stream="s", length=len(data)))
    await half.wait()
    for _ in range(500):  # the retired zone is finished by its flusher, in the background
        if log.full_zones:
            break
        await asyncio.sleep(0.01)
    assert log.full_zones, "the first zone should be full of uncommitted chunks"
    res = await log.reclaim(min_garbage=0.0)
    assert res.zones_reset == 0 and res.zones_evacuated == 0
    go.set()
    await put
    assert await read_all(log, "big") == data
    await log.close()


async def test_reclaim_keeps_at_most_one_open_zone_of_its_own(tmp_path):
    """A copy that does not fit the rest of reclaim's zone finishes that zone before reclaim
    opens another: a replaced reclaim zone left open held an open slot nobody wrote to, until
    the device refused to open a zone at its open limit."""
    drive = make_drive(tmp_path, zones=48, zone_size=512 * KiB)
    log = await open_log(drive)
    rnd = random.Random(3)
    most = 0
    for n in range(600):
        rid = f"r{rnd.randrange(40)}"
        await log.put(rid, payload(n, rnd.choice([40 * KiB, 150 * KiB, 200 * KiB])),
                      stream=f"s{n % 3}")
        if n % 10 == 9:
            await log.reclaim(min_garbage=0.1)
        most = max(most, sum(1 for w in log._writers.values() if w.gc and not w.closing))
    assert most <= 1
    await log.close()


async def test_a_full_drive_reopened_with_reclaims_zone_half_written_frees_its_garbage(tmp_path):
    # Puts leave one empty zone for reclaim; the deletes' tombstones open it, and a restart
    # turns it into a partly written spare. Puts must not take that last room: they then wait
    # for reclaim, which copies into it, and the deleted half of the drive comes back.
    drive = make_drive(tmp_path, zones=12)
    log = await open_log(drive)
    n = 0
    with pytest.raises(NoSpace):
        while True:
            await log.put(f"r{n}", blob(f"r{n}", n, 200 * KiB), stream="s")
            n += 1
    for i in range(0, n, 2):
        assert await log.delete(f"r{i}")
    await log.close()

    log = await open_log(drive, space_wait=2.0)
    m = 0
    with pytest.raises(NoSpace):
        while True:
            await log.put(f"x{m}", blob(f"x{m}", m, 200 * KiB), stream="s")
            m += 1
    assert m >= n // 2 - 4, f"only {m} puts fit after deleting {n // 2} of {n}"
    assert await log.delete("r1")  # a delete still works on the full drive
    for i in range(3, n, 2):
        check_blob(f"r{i}", await read_all(log, f"r{i}"))
    for i in range(m):
        check_blob(f"x{i}", await read_all(log, f"x{i}"))
    await log.close()
    with open_device(drive) as dev:
        assert fsck(dev, drive / "index.sqlite")[0] == []


async def test_a_delete_waits_for_a_reset_under_way_instead_of_failing(tmp_path):
    """A delete's tombstone goes to reclaim's zone. When that zone is full and the only
    zone coming free is being reset by a reclaim pass, the delete waits for the reset, as a
    put does, instead of failing with NoSpace (a delete is how space comes back)."""
    import threading

    from zonestore.allocator import GC_CLASS
    from zonestore.reclaim import make_room

    # (The fill's last put waits `space_wait` for its own pinned zone before its NoSpace.)
    log = await open_log(make_drive(tmp_path, zones=6), space_wait=0.2)
    gate = threading.Event()
    try:
        stored: dict[str, bytes] = {}
        for n in range(1000):
            rid, data = f"r{n}", payload(n, 256 * KiB)
            try:
                await log.put(rid, data, stream="s")
            except NoSpace:
                break
            stored[rid] = data
        zs = log.zone_size
        z0 = min(log.full_zones)
        for rid in [r for r in stored if z0 in log.index.lookup(r).zone_bytes(zs)]:
            assert await log.delete(rid)  # the tombstones take the zone puts left in reserve
            del stored[rid]
        assert not log._empty and log.index.live.get(z0, 0) <= 0
        gc = log._classes[GC_CLASS]
        gc.retire()  # reclaim's zone full, as its copies leave it
        await gc.finished.wait()

        log.space_wait = 10.0
        real_reset = log.device.reset_zone
        log.device.reset_zone = lambda z: (gate.wait(10), real_reset(z))[1]  # a slow drive
        reclaim_pass = asyncio.create_task(make_room(log))
        for _ in range(200):
            if z0 in log._reclaiming:
                break
            await asyncio.sleep(0.01)
        assert z0 in log._reclaiming, "the reclaim pass did not start resetting the zone"

        victim = next(iter(stored))
        delete = asyncio.create_task(log.delete(victim))
        await asyncio.sleep(0.3)
        assert not delete.done(), f"the delete ended while the reset was under way: {delete}"
        gate.set()
        assert await delete is True
        del stored[victim]
        await reclaim_pass
        with pytest.raises(RecordNotFound):
            await read_all(log, victim)
        for rid, data in stored.items():
            assert await read_all(log, rid) == data
    finally:
        gate.set()
        await log.close()
