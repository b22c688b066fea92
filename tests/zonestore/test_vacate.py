"""`reclaim.vacate`, what a node runs on a drive the cluster layout drains: while records
remain, only zones without live data are reset (open and partly written ones too) and every
live record still reads back; once the last record is gone every sequential zone ends EMPTY,
tombstones' zones included, and the log reopened from the device resurrects nothing."""

from __future__ import annotations

from tests.support.zonelog_helpers import KiB, make_drive, open_device, open_log, payload, read_all
from zonestore.device import ZoneCondition
from zonestore.reclaim import vacant, vacate


def conditions(log) -> dict[str, int]:
    out: dict[str, int] = {}
    for z in log.device.report_zones():
        if z.is_sequential:
            out[z.cond.name.lower()] = out.get(z.cond.name.lower(), 0) + 1
    return out


async def test_a_drained_drive_ends_with_every_zone_empty(tmp_path):
    drive = make_drive(tmp_path, zones=24)
    log = await open_log(drive)
    # full zones, an open one holding the last records, and (after the deletes) the
    # tombstones' zone
    for s in ("a", "b", "c"):
        for i in range(5):
            await log.put(f"{s}{i}", payload(ord(s) * 10 + i, 300 * KiB), stream=s)
    for i in range(5):  # stream a dies whole; b and c keep live records
        await log.delete(f"a{i}")
    await log.delete("b0")
    assert len(log._writers) >= 2 and log._full  # open zones are part of the case
    live_zones = {z for z, v in log.index.live.items() if v > 0}

    res = await vacate(log)
    assert res.zones_reset >= 1 and res.records_copied == 0
    assert not vacant(log)
    # what holds live data is still there; what does not was reset (open zones included)
    for z in live_zones:
        assert z not in log._empty
    for z in log.seq_zones:
        if log.index.live.get(z, 0) <= 0:
            assert z in log._empty, z
    for s, i in [("b", i) for i in range(1, 5)] + [("c", i) for i in range(5)]:
        assert await read_all(log, f"{s}{i}") == payload(ord(s) * 10 + i, 300 * KiB)

    for rid in [f"b{i}" for i in range(1, 5)] + [f"c{i}" for i in range(5)]:
        await log.delete(rid)
    assert log.index.record_count() == 0
    res = await vacate(log)
    assert vacant(log) and conditions(log) == {"empty": len(log.seq_zones)}
    st = log.stats()
    assert st.empty_zones == st.seq_zones == len(log.seq_zones) and st.live_bytes == 0
    await log.close()

    # reopened from the device: empty, nothing comes back
    dev = open_device(drive)
    assert all(z.cond is ZoneCondition.EMPTY for z in dev.report_zones() if z.is_sequential)
    dev.close()
    log = await open_log(drive)
    assert log.index.record_count() == 0 and log.scan() == []
    await log.close()
