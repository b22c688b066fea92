"""A read looks a record up once: `find` gives its info and a reader of that very put.

The node's GET answers with headers (length, CRC, seq) and bytes that must describe the same
put; `ZoneLog.find` / `DrivePool.find` bind the reader to the entry the headers came from, so
a replacement that lands between the lookup and the read cannot mix two records.
"""

from __future__ import annotations

import pytest

from tests.support.zonelog_helpers import KiB, MiB, make_drive, open_log, payload
from zonestore.errors import CorruptRecord, InvalidRange, RecordNotFound
from zonestore.pool import DrivePool
from zonestore.record import crc32c


async def _pool(tmp_path, n=2):
    logs = []
    for i in range(n):
        d = tmp_path / f"d{i}"
        d.mkdir()
        logs.append(await open_log(make_drive(d, zones=24)))
    return DrivePool(logs, headroom=256 * KiB)


async def _bytes(it) -> bytes:
    return b"".join([c async for c in it])


async def test_find_reads_the_put_it_looked_up_even_after_a_replace(tmp_path):
    pool = await _pool(tmp_path)
    old, new = payload(1, MiB + 5 * KiB), payload(2, 300 * KiB)
    await pool.put("rec", old, stream="s", meta=b"old")
    info, read = pool.find("rec")
    assert (info.length, info.crc32c, info.meta) == (len(old), crc32c(old), b"old")
    await pool.put("rec", new, stream="s", meta=b"new")  # replaced before the read starts
    assert await _bytes(read(0, None)) == old  # the bytes of the put the info describes
    assert await _bytes(read(MiB - 10, 20)) == old[MiB - 10:MiB + 10]
    info2, read2 = pool.find("rec")
    assert (info2.length, info2.meta, info2.seq > info.seq) == (len(new), b"new", True)
    assert await _bytes(read2(0, None)) == new
    await pool.close()


async def test_find_on_the_drive_that_holds_the_id_and_none_when_missing(tmp_path):
    pool = await _pool(tmp_path)
    pool._stream_drive["y"] = 1  # put it on the second drive: drive 0 is asked first
    await pool.put("b", b"x" * 70_000, stream="y")
    assert pool.locate("b") == 1
    info, read = pool.find("b")
    assert info.length == 70_000 and await _bytes(read(69_999, None)) == b"x"
    assert pool.find("missing") is None
    with pytest.raises(RecordNotFound):
        await pool.get("missing")
    with pytest.raises(RecordNotFound):
        await pool.head("missing")
    assert await pool.delete("b") is True
    assert pool.find("b") is None  # a tombstone is not a record
    with pytest.raises(ValueError):
        pool.find("../bad")
    await pool.close()


async def test_find_reader_checks_its_range_like_get(tmp_path):
    pool = await _pool(tmp_path, n=1)
    await pool.put("r", b"abc" * 30_000, stream="s")
    _, read = pool.find("r")
    with pytest.raises(InvalidRange):
        read(90_001, None)
    with pytest.raises(InvalidRange):
        read(0, -1)
    assert await _bytes(read(90_000, 5)) == b""  # offset == length: an empty read
    assert await _bytes(read(89_998, None)) == b"bc"
    with pytest.raises(InvalidRange):
        await pool.get("r", 90_001)
    await pool.close()


async def test_grouped_extent_reads_deliver_every_good_chunk_before_a_damaged_tail(tmp_path):
    """A chunk and the small tail after it are read in one I/O hand-off; the chunks still
    come out one by one, each checked, so a damaged tail fails only after the good bytes."""
    drive = make_drive(tmp_path, zone_size=4 * MiB)
    log = await open_log(drive)  # 64 KiB chunks
    data = payload(7, 3 * 64 * KiB + 640)
    await log.put("victim", data, stream="s")
    for offset, length in ((0, None), (1, 64 * KiB), (64 * KiB - 3, 64 * KiB + 6),
                           (3 * 64 * KiB - 5, None), (3 * 64 * KiB + 600, 40)):
        got = b"".join([c async for c in await log.get("victim", offset, length)])
        want = data[offset:] if length is None else data[offset:offset + length]
        assert got == want
    await log.close()
    tail = data[-600:-584]
    for zf in (drive / "zones").iterdir():
        if zf.name.isdigit() and zf.stat().st_size:
            raw = bytearray(zf.read_bytes())
            i = raw.find(tail)
            if i >= 0:
                raw[i + 1] ^= 0x10
                zf.write_bytes(bytes(raw))
    log = await open_log(drive)
    got = []
    with pytest.raises(CorruptRecord):
        async for c in await log.get("victim"):
            got.append(bytes(c))
    assert b"".join(got) == data[:3 * 64 * KiB]
    assert log.stats().crc_failures == 1
    await log.close()
