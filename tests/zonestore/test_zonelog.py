"""The zone log stores, replaces, deletes, lists and reads records, on its device's terms."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.support.zonelog_helpers import KiB, MiB, agen, make_drive, open_log, payload, read_all
from zonestore.device import ZoneCondition
from zonestore.errors import CorruptRecord, InvalidRange, NoSpace, RecordNotFound
from zonestore.record import crc32c


@pytest.fixture
def drive(tmp_path):
    return make_drive(tmp_path)


async def test_put_get_head_of_many_sizes(drive):
    log = await open_log(drive)
    sizes = [0, 1, 4095, 4096, 64 * KiB, 64 * KiB + 1, 300 * KiB, 1 * MiB + 17, 2 * MiB + 5]
    for i, n in enumerate(sizes):
        info = await log.put(f"r{i}", payload(i, n), stream="s", meta=b"meta%d" % i)
        assert info.length == n and info.crc32c == crc32c(payload(i, n))
    for i, n in enumerate(sizes):
        assert await read_all(log, f"r{i}") == payload(i, n)
        h = await log.head(f"r{i}")
        assert (h.length, h.meta, h.stream) == (n, b"meta%d" % i, "s")
    await log.close()


async def test_records_spanning_zones_read_back_by_range(drive):
    log = await open_log(drive)
    data = payload(1, 3 * MiB + 12345)  # 1 MiB zones: spans at least four
    await log.put("big", agen(data, 10_000), stream="s", length=len(data))
    for off, ln in [(0, 1), (65535, 2), (MiB - 3, 10), (len(data) - 1, 1), (123, 2 * MiB),
                    (0, None), (len(data), 5), (5, 0)]:
        expect = data[off:] if ln is None else data[off:off + ln]
        assert await read_all(log, "big", off, ln) == expect
    with pytest.raises(InvalidRange):
        await log.get("big", len(data) + 1)
    with pytest.raises(InvalidRange):
        await log.get("big", -1)
    await log.close()


async def test_streamed_body_with_meta_computed_after_the_body(drive):
    log = await open_log(drive)
    data = payload(2, 200 * KiB)
    seen = []

    async def body():
        async for p in agen(data, 7000):
            seen.append(len(p))
            yield p

    info = await log.put("x", body(), stream="s", meta=lambda: b"n=%d" % sum(seen))
    assert info.meta == b"n=%d" % len(data)
    assert await read_all(log, "x") == data
    await log.close()


async def test_length_mismatch_commits_nothing(drive):
    log = await open_log(drive)
    for body in (agen(b"x" * 100_000, 1000), b"x" * 10):
        with pytest.raises(ValueError):
            await log.put("bad", body, stream="s", length=50_000)
    with pytest.raises(RecordNotFound):
        await log.head("bad")
    await log.put("good", b"ok", stream="s")
    assert await read_all(log, "good") == b"ok"
    await log.close()


async def test_bad_ids_and_meta_are_refused(drive):
    log = await open_log(drive)
    for bad in ("", ".hidden", "-x", "a/b", "x" * 201):
        with pytest.raises(ValueError):
            await log.put(bad, b"", stream="s")
    with pytest.raises(ValueError):
        await log.put("m", b"", stream="s", meta=bytes(64 * KiB + 1))
    assert log.scan() == []
    await log.close()


async def test_replace_and_delete(drive):
    log = await open_log(drive)
    await log.put("a", b"one", stream="s")
    await log.put("a", b"two!", stream="s")
    assert await read_all(log, "a") == b"two!"
    assert await log.delete("a") is True
    assert await log.delete("a") is False
    assert await log.delete("never") is False
    with pytest.raises(RecordNotFound):
        await log.head("a")
    with pytest.raises(RecordNotFound):
        await log.get("a")
    await log.put("a", b"three", stream="s")
    assert await read_all(log, "a") == b"three"
    assert log.stats().records == 1
    with pytest.raises(ValueError):
        await log.put("b", b"", stream="\x00tombstones")
    await log.close()


async def test_scan_pages_by_prefix_and_after(drive):
    log = await open_log(drive)
    names = [f"p{i:03d}" for i in range(30)] + ["q1", "o9"]
    for n in names:
        await log.put(n, n.encode(), stream="s")
    got = [r.id for r in log.scan("p", limit=1000)]
    assert got == sorted(n for n in names if n.startswith("p"))
    page1 = log.scan("p", limit=10)
    page2 = log.scan("p", after=page1[-1].id, limit=10)
    assert [r.id for r in page1 + page2] == got[:20]
    assert [r.id for r in log.scan(after="p029")] == ["q1"]
    await log.close()


async def test_everything_survives_reopen(drive):
    log = await open_log(drive)
    for i in range(20):
        await log.put(f"r{i}", payload(i, i * 9000), stream=f"s{i % 3}")
    await log.delete("r3")
    await log.close()
    log = await open_log(drive)
    assert [r.id for r in log.scan()] == sorted(f"r{i}" for i in range(20) if i != 3)
    for i in range(20):
        if i != 3:
            assert await read_all(log, f"r{i}") == payload(i, i * 9000)
    await log.put("after", b"x", stream="s")
    assert await read_all(log, "after") == b"x"
    await log.close()


async def test_flipped_byte_in_a_zone_file_is_detected(drive):
    log = await open_log(drive)
    data = payload(5, 200 * KiB)
    await log.put("victim", data, stream="s")
    await log.put("small", b"tiny record", stream="s")
    await log.close()
    zfiles = sorted(p for p in (drive / "zones").iterdir() if p.name.isdigit()
                    and p.stat().st_size)
    for zf in zfiles:
        raw = bytearray(zf.read_bytes())
        i = raw.find(data[100_000:100_016])
        if i >= 0:
            raw[i + 3] ^= 0x40
            zf.write_bytes(bytes(raw))
    log = await open_log(drive)
    with pytest.raises(CorruptRecord):
        await read_all(log, "victim")
    # A range that does not touch the damaged chunk still reads.
    assert await read_all(log, "victim", 0, 1000) == data[:1000]
    assert await read_all(log, "small") == b"tiny record"
    assert log.stats().crc_failures == 1
    await log.close()


async def test_concurrent_small_puts_share_flushes(drive):
    log = await open_log(drive)
    before = log.stats().flushes
    await asyncio.gather(*(log.put(f"k{i}", payload(i, 4096), stream="s") for i in range(200)))
    st = log.stats()
    assert st.records == 200
    assert st.flushes - before < 100  # group commit: far fewer flushes than puts
    for i in range(0, 200, 17):
        assert await read_all(log, f"k{i}") == payload(i, 4096)
    await log.close()


async def test_streams_get_their_own_zones(drive):
    log = await open_log(drive)
    await asyncio.gather(*(log.put(f"{s}-{i}", payload(i, 50 * KiB), stream=s)
                           for s in ("a", "b") for i in range(4)))
    zones = {s: {e.offset // log.zone_size for i in range(4)
                 for e in log.index.lookup(f"{s}-{i}").extents} for s in ("a", "b")}
    assert zones["a"].isdisjoint(zones["b"])
    await log.close()


async def test_open_and_active_limits_hold_with_many_streams(tmp_path):
    drive = make_drive(tmp_path, zones=40, max_open=3, max_active=4)
    log = await open_log(drive)
    await asyncio.gather(*(log.put(f"s{i}-{j}", payload(i, 30 * KiB), stream=f"s{i}")
                           for i in range(10) for j in range(3)))
    for i in range(10):
        for j in range(3):
            assert await read_all(log, f"s{i}-{j}") == payload(i, 30 * KiB)
    conds = [z.cond for z in log.device.report_zones()]
    assert sum(c.is_open for c in conds) <= 3
    assert sum(c.is_active for c in conds) <= 4
    await log.close()


async def test_stats_count_user_and_device_bytes(drive):
    log = await open_log(drive)
    await log.put("a", payload(1, 300 * KiB), stream="s")
    st = log.stats()
    assert st.user_bytes_written == 300 * KiB
    assert st.device_bytes_written >= st.user_bytes_written
    assert 1.0 <= st.write_amplification < 1.1
    assert st.live_bytes >= 300 * KiB and st.records == 1
    assert st.used_bytes == st.device_bytes_written
    assert st.zones_by_condition["empty"] >= 1 and st.max_open_zones == 6
    await log.close()


async def test_full_drive_says_no_space_and_keeps_what_it_had(tmp_path):
    drive = make_drive(tmp_path, zones=6, conventional=1)
    log = await open_log(drive)
    stored = []
    with pytest.raises(NoSpace):
        for i in range(100):
            await log.put(f"r{i}", payload(i, 200 * KiB), stream="s")
            stored.append(i)
    for i in stored:
        assert await read_all(log, f"r{i}") == payload(i, 200 * KiB)
    # Deleting frees whole zones again.
    for i in stored:
        await log.delete(f"r{i}")
    await log.reclaim()
    await log.put("again", payload(9, 200 * KiB), stream="s")
    await log.close()


async def test_device_sees_only_block_aligned_writes_at_the_write_pointer(drive):
    # The emulated device refuses anything else; this also checks zones are finished, not
    # left half-open, when a stream moves on.
    log = await open_log(drive)
    for i in range(12):
        await log.put(f"r{i}", os.urandom(150 * KiB + i), stream="s")
    zones = log.device.report_zones()
    assert all(z.wp % 4096 == 0 for z in zones)
    assert sum(z.cond is ZoneCondition.FULL for z in zones) >= 1
    await log.close()
