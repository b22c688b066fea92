"""Reads of records of several chunks run one device read ahead of the bytes being handed out
(zonestore/logread.py): the bytes, the CRC checks and an abandoned read stay as without it."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.zonelog_helpers import KiB, agen, make_drive, open_log, payload, read_all
from zonestore.errors import CorruptRecord


@pytest.fixture
def drive(tmp_path):
    return make_drive(tmp_path)


async def test_many_chunk_record_reads_whole_and_by_range(drive):
    log = await open_log(drive)  # 64 KiB chunks: 700 KiB is 11 device reads
    data = payload(7, 700 * KiB + 3)
    await log.put("r", agen(data, 50_000), stream="s", length=len(data))
    for off, ln in [(0, None), (1, 64 * KiB), (64 * KiB - 1, 3 * 64 * KiB + 2),
                    (500 * KiB, None), (len(data) - 5, 5)]:
        expect = data[off:] if ln is None else data[off:off + ln]
        assert await read_all(log, "r", off, ln) == expect
    await log.close()


async def test_abandoned_read_leaves_no_read_ahead_behind(drive):
    log = await open_log(drive)
    data = payload(8, 600 * KiB)
    await log.put("r", data, stream="s")
    it = await log.get("r")
    first = await anext(it)  # the second chunk's read is now under way
    assert first == data[:len(first)]
    await it.aclose()
    reads = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "to_thread"]
    assert reads == []
    assert await read_all(log, "r") == data  # and the log reads on as before
    await log.close()


async def test_corrupt_chunk_after_the_first_still_fails_the_read(drive):
    log = await open_log(drive)
    data = payload(9, 400 * KiB)
    await log.put("victim", data, stream="s")
    await log.close()
    for zf in sorted(p for p in (drive / "zones").iterdir() if p.name.isdigit()):
        raw = bytearray(zf.read_bytes())
        i = raw.find(data[300_000:300_016])
        if i >= 0:
            raw[i + 5] ^= 0x01
            zf.write_bytes(bytes(raw))
    log = await open_log(drive)
    got = bytearray()
    with pytest.raises(CorruptRecord):
        async for chunk in await log.get("victim"):
            got += chunk
    assert bytes(got) == data[:len(got)] and len(got) < 300_000
    await log.close()
