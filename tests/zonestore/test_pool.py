"""A drive pool spreads streams over drives, keeps a stream on one drive, and finds ids."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.zonelog_helpers import KiB, MiB, make_drive, open_log, payload, read_all
from zonestore.errors import RecordNotFound
from zonestore.pool import DrivePool


async def make_pool(tmp_path, n=3, zones=24):
    logs = []
    for i in range(n):
        d = tmp_path / f"d{i}"
        d.mkdir()
        logs.append(await open_log(make_drive(d, zones=zones)))
    return DrivePool(logs, headroom=256 * KiB)


async def test_concurrent_streams_spread_over_drives_and_stick(tmp_path):
    pool = await make_pool(tmp_path)

    async def writer(s):
        for j in range(4):
            await pool.put(f"{s}.{j}", payload(j, 40 * KiB), stream=s)

    await asyncio.gather(*(writer(f"s{i}") for i in range(6)))
    drives = {}
    for i in range(6):
        where = {pool.locate(f"s{i}.{j}") for j in range(4)}
        assert len(where) == 1  # a stream sticks to one drive
        drives[f"s{i}"] = where.pop()
    assert len(set(drives.values())) == 3  # and concurrent streams use every drive
    for i in range(6):
        for j in range(4):
            assert await read_all(pool, f"s{i}.{j}") == payload(j, 40 * KiB)
    await pool.close()


async def test_pool_head_delete_scan_and_replace_across_drives(tmp_path):
    pool = await make_pool(tmp_path, n=2)
    await pool.put("a", b"1", stream="x")
    first = pool.locate("a")
    # Fill the sticky drive's stream elsewhere: a put of "a" from another stream may land on
    # the other drive, and then the old copy must go.
    pool._stream_drive["y"] = 1 - first
    await pool.put("a", b"22", stream="y")
    assert pool.locate("a") == 1 - first
    assert not pool.logs[first].has("a")
    assert await read_all(pool, "a") == b"22"
    assert (await pool.head("a")).length == 2
    await pool.put("b", b"3", stream="x")
    assert [r.id for r in pool.scan()] == ["a", "b"]
    assert [r.id for r in pool.scan(after="a")] == ["b"]
    assert await pool.delete("a") is True
    with pytest.raises(RecordNotFound):
        await pool.head("a")
    st = pool.stats()
    assert st.records == 1 and st.user_bytes_written == 1 + 2 + 1
    # The drives' flush histograms add up to the pool's.
    assert st.flush_sizes.count == st.flushes == sum(d.flushes for d in pool.drive_stats())
    assert st.flush_sizes.sum == st.device_bytes_written
    await pool.close()


async def test_a_stream_moves_when_its_drive_fills(tmp_path):
    pool = await make_pool(tmp_path, n=2, zones=8)
    for j in range(20):
        await pool.put(f"r{j}", payload(j, 256 * KiB), stream="one")
    used = {pool.locate(f"r{j}") for j in range(20)}
    assert used == {0, 1}
    for j in range(20):
        assert await read_all(pool, f"r{j}") == payload(j, 256 * KiB)
    assert pool.stats().free_bytes < 8 * MiB
    await pool.close()


def test_histogram_snapshots_merge_and_refuse_other_buckets():
    from zonestore.histogram import FixedHistogram

    a, b = FixedHistogram((1.0, 2.0)), FixedHistogram((1.0, 2.0))
    for v in (0.5, 1.5, 3.0):
        a.observe(v)
    b.observe(1.5)
    merged = a.snapshot() + b.snapshot()
    assert merged.buckets == ((1.0, 1), (2.0, 3), (float("inf"), 4))
    assert merged.count == 4 and merged.sum == 6.5
    with pytest.raises(ValueError):
        _ = a.snapshot() + FixedHistogram((1.0,)).snapshot()


async def test_pool_fills_every_drive_and_sums_the_space_figures(tmp_path):
    from zonestore.errors import NoSpace

    pool = await make_pool(tmp_path, n=2, zones=12)
    stored = {}
    with pytest.raises(NoSpace):
        for i in range(200):
            data = payload(i, 200 * KiB)
            await pool.put(f"r{i}", data, stream=f"s{i % 50}")
            stored[f"r{i}"] = data
    per = pool.drive_stats()
    total = pool.stats()
    cap = sum(lg.zone_capacity * len(lg.seq_zones) for lg in pool.logs)
    # Placement by writable space: both drives took data until neither had room.
    assert all(st.live_bytes > 0.8 * lg.zone_capacity * len(lg.seq_zones)
               for st, lg in zip(per, pool.logs, strict=True))
    assert sum(map(len, stored.values())) > 0.85 * cap
    for f in ("writable_bytes", "stranded_bytes", "garbage_bytes", "live_bytes",
              "reserve_bytes", "empty_zones"):
        assert getattr(total, f) == sum(getattr(st, f) for st in per), f
    assert total.reclaiming_zone == -1 and total.free_bytes == total.writable_bytes
    for rid in list(stored)[::7]:
        assert await read_all(pool, rid) == stored[rid]
    await pool.close()


async def test_sticky_streams_with_random_deletes_keep_the_drives_evenly_full(tmp_path):
    """A few streams, one put at a time, random whole-object deletes holding the pool at
    60 % live: a stream leaves a drive that is much fuller than the roomiest one, so the
    drives' live bytes stay within about BALANCE of each other (a stream stuck to one drive
    would fill it alone)."""
    import random

    from zonestore.pool import BALANCE

    pool = await make_pool(tmp_path, n=2, zones=40)
    pool.headroom = 64 * KiB
    rnd = random.Random(5)
    cap = sum(log.zone_capacity * len(log.seq_zones) for log in pool.logs)
    live: dict[str, int] = {}
    for n in range(400):
        size = rnd.choice([64, 128, 256]) * KiB
        while sum(live.values()) + size > 0.6 * cap:
            rid = rnd.choice(sorted(live))
            await pool.delete(rid)
            del live[rid]
        await pool.put(f"r{n}", payload(n, size), stream=f"s{n // 25 % 3}")
        live[f"r{n}"] = size
    lives = [log.stats().live_bytes for log in pool.logs]
    each = cap / 2
    assert min(lives) >= BALANCE * max(lives) - 0.05 * each, lives
    await pool.close()
