"""A zone-log writer to be killed: `python -m tests.zoned.crash_writer DEVICE INDEX PREFIX`.

Opens the zoned block device through ZbdZonedDevice, then puts records from a few concurrent
writers until it is killed. Before each put it prints `BEGIN id size`, after the put returns
(durable) `ACK id`. Every pwrite to the device is checked against the write pointer the kernel
reports just before it; a write elsewhere prints `OFFWP offset wp` (the parent test fails on it).
Payloads are `payload(id, size)`, so the parent can verify them.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat
import sys
import zlib

from zonestore import pyzbd
from zonestore.zbd import ZbdZonedDevice
from zonestore.zonelog import ZoneLog

SIZES = (100, 4096, 50_000, 300_000, 1_500_000)
TUNING = {"background_reclaim": False, "chunk_size": 256 * 1024, "flush_size": 256 * 1024}


def payload(rid: str, size: int) -> bytes:
    return random.Random(zlib.crc32(rid.encode())).randbytes(size)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def audit_writes(path: str) -> None:
    rdev = os.stat(path).st_rdev
    fd, _ = pyzbd.open_device(path, os.O_RDONLY)
    real = os.pwrite

    def pwrite(wfd: int, data, offset: int) -> int:
        st = os.fstat(wfd)
        if stat.S_ISBLK(st.st_mode) and st.st_rdev == rdev:
            z = pyzbd.report_zones(fd, offset, 1, 1)[0]
            if z.type != 1 and z.wp != offset:
                say(f"OFFWP {offset} {z.wp}")
        return real(wfd, data, offset)

    os.pwrite = pwrite


async def main(path: str, index: str, prefix: str, workers: int = 4) -> None:
    audit_writes(path)
    dev = ZbdZonedDevice(path)
    log = await ZoneLog.open(dev, index, **TUNING)
    say("READY")
    rng = random.Random(prefix)

    async def worker(w: int) -> None:
        i = 0
        while True:
            rid = f"{prefix}-{w}-{i}"
            size = rng.choice(SIZES)
            say(f"BEGIN {rid} {size}")
            await log.put(rid, payload(rid, size), stream=f"s{w % 2}")
            say(f"ACK {rid}")
            i += 1

    await asyncio.gather(*(worker(w) for w in range(workers)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
