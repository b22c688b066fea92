"""A pool drive whose filesystem is really full (a tmpfs filled by another file): the write
ends in ENOSPC, which makes the drive full, not failed (zonestore/hostspace.py): the put
moves to the other drive (a streamed one raises HostFull, a 507 at the node), the drive's
records still read, it takes no puts while the filesystem is full, and takes them again once
it has room. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

import pytest

from tests.support.tmpfs import tmpfs
from tests.support.zonelog_helpers import KiB, agen, make_drive, open_log, payload, read_all
from zonestore.hostspace import ROOM_AGAIN, HostFull, is_out_of_space
from zonestore.pool import DrivePool


def fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (256 * KiB))
            f.flush()
    return filler


def test_which_errors_mean_out_of_space():
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device"))
    assert is_out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # as sqlite3 sets it
    assert is_out_of_space(full)
    assert not is_out_of_space(OSError(errno.EIO, "Input/output error"))
    assert not is_out_of_space(ValueError("x"))


async def test_a_drive_whose_filesystem_is_full_is_full_not_failed(tmp_path):
    with tmpfs(tmp_path / "small", "24m") as mnt:
        logs = [await open_log(make_drive(mnt, zones=24)),
                await open_log(make_drive(tmp_path, zones=24))]
        pool = DrivePool(logs, headroom=256 * KiB)
        try:
            kept = payload(1, 300 * KiB)
            await pool.put("kept", kept, stream="a")
            filler = fill(mnt)
            # A device without a filesystem to ask (a real zoned drive): only the failed
            # write tells; here the filesystem is asked too late, as under concurrent puts.
            pool.host.paths[0] = None
            pool._stream_drive["s"] = 0  # the stream's drive is the full one
            body = payload(2, 300 * KiB)
            info = await pool.put("moved", body, stream="s")  # ENOSPC on drive 0, then drive 1
            assert info.length == len(body) and pool.locate("moved") == 1
            assert 0 in pool.host_full() and "No space left" in pool.host_full()[0]
            assert pool.failed == {} and pool.writable(0) == 0
            assert await read_all(pool, "kept") == kept  # still read from the full drive
            assert pool.pick("s", 1000) == 1
            # a streamed body cannot be sent twice: HostFull (the node's 507)
            pool.host.full.clear()
            pool._stream_drive["t"] = 0
            with pytest.raises(HostFull):
                await pool.put("streamed", agen(payload(3, 200 * KiB), 64 * KiB), stream="t",
                               length=200 * KiB)
            assert 0 in pool.host_full()

            # room again: the drive takes puts again
            pool.host.paths[0] = mnt
            filler.unlink()
            st = os.statvfs(mnt)
            assert st.f_bavail * st.f_frsize >= ROOM_AGAIN
            pool.host._free.clear()  # its statvfs figure is cached for a second
            assert pool.host_full() == {}
            assert pool.writable(0) > 0
            pool._stream_drive["s"] = 0
            await pool.put("back", payload(4, 100 * KiB), stream="s")
            assert pool.locate("back") == 0
        finally:
            await pool.close()


