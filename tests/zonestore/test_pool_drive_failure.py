"""A drive of a pool that starts giving EIO (zonestore/drivefail.py), in process: the fault is
injected by the test into the drive's device object, on read and on write; the pool marks
the drive failed, stops finding, listing and writing there, and puts go to the other drive.
(tests/faults/test_fault_drive_eio.py does it for real, with a kernel filesystem shut down.)"""

from __future__ import annotations

import errno

import pytest

from tests.support.zonelog_helpers import KiB, make_drive, open_log, payload
from zonestore.drivefail import DriveFailed, UnreadableRecord, is_drive_failure
from zonestore.errors import CorruptRecord, NoSpace
from zonestore.pool import DrivePool


async def _pool(tmp_path, n=2):
    logs = []
    for i in range(n):
        d = tmp_path / f"d{i}"
        d.mkdir()
        logs.append(await open_log(make_drive(d, zones=24)))
    return DrivePool(logs, headroom=256 * KiB)


def _eio(*_a, **_k):
    raise OSError(errno.EIO, "Input/output error")


async def _bytes(it) -> bytes:
    return b"".join([c async for c in it])


def test_which_errors_fail_a_drive():
    assert is_drive_failure(OSError(errno.EIO, "x"))
    assert is_drive_failure(OSError(errno.EROFS, "x"))
    assert not is_drive_failure(NoSpace("full"))
    assert not is_drive_failure(CorruptRecord("crc"))
    assert not is_drive_failure(OSError(errno.EINVAL, "x"))


async def test_a_read_error_fails_the_drive_and_its_records_go(tmp_path, monkeypatch):
    pool = await _pool(tmp_path)
    data = payload(1, 300 * KiB)
    await pool.put("a", data, stream="s")
    i = pool.locate("a")
    other = 1 - i
    monkeypatch.setattr(pool.logs[i].device, "read", _eio)
    _, read = pool.find("a")
    with pytest.raises(UnreadableRecord):
        await _bytes(read(0, None))
    assert list(pool.failed) == [i] and "Errno 5" in pool.failed[i]
    assert pool.find("a") is None and pool.locate("a") is None
    assert [r.id for r in pool.scan()] == []
    assert pool.writable_bytes() == pool.logs[other].free_bytes()
    await pool.put("b", data, stream="s")  # the stream's drive failed: another one takes it
    assert pool.locate("b") == other
    assert await _bytes(await pool.get("b")) == data
    assert await pool.delete("a") is False  # it went with its drive
    await pool.close()


async def test_a_write_error_fails_the_drive_and_the_put_moves(tmp_path, monkeypatch):
    pool = await _pool(tmp_path)
    await pool.put("x", b"1" * 1000, stream="s")
    i = pool.locate("x")
    other = 1 - i
    monkeypatch.setattr(pool.logs[i].device, "writev", _eio)
    data = payload(2, 200 * KiB)
    await pool.put("y", data, stream="s")  # a body in memory is put again on the other drive
    assert list(pool.failed) == [i] and pool.locate("y") == other
    assert await _bytes(await pool.get("y")) == data

    async def body():
        yield data

    monkeypatch.setattr(pool.logs[other].device, "writev", _eio)
    with pytest.raises(DriveFailed):  # a streamed body cannot be sent again: 507 drive_failed
        await pool.put("z", body(), stream="t", length=len(data))
    assert sorted(pool.failed) == [0, 1]
    with pytest.raises(DriveFailed):  # nothing left to write to
        await pool.put("w", data, stream="t")
    await pool.close()
