"""A zone-log writer to be killed: `python -m tests.zoned.crash_writer DEVICE INDEX PREFIX AUDIT`.

Opens the zoned block device through ZbdZonedDevice, then puts records from a few concurrent
writers until it is killed. Before each put it prints `BEGIN id size`, after the put returns
(durable) `ACK id`. Every pwrite to the device is logged to the file AUDIT with the write
pointer the kernel reports just before it (tests/zoned/procaudit.py). Payloads are
`payload(id, size)`, so the parent can verify them.
"""

from __future__ import annotations

import asyncio
import random
import sys
import zlib

from tests.zoned import procaudit
from zonestore.zbd import ZbdZonedDevice
from zonestore.zonelog import ZoneLog

SIZES = (100, 4096, 50_000, 300_000, 1_500_000)
TUNING = {"background_reclaim": False, "chunk_size": 256 * 1024, "flush_size": 256 * 1024}


def payload(rid: str, size: int) -> bytes:
    return random.Random(zlib.crc32(rid.encode())).randbytes(size)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(path: str, index: str, prefix: str, audit: str, workers: int = 4) -> None:
    procaudit.install(audit)
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
    asyncio.run(main(*sys.argv[1:5]))
