"""Helper process for test_crash_safety: writes, replaces and deletes records on a drive until
it is killed, printing each operation before it starts and once it is acknowledged.

    python -m tests.support.crash_writer DRIVE ROUND

Lines (flushed one by one): READY | PUTTING id ver size | PUT id ver size | DELETING id |
DELETED id. Record content is `blob(id, ver, size)`, so a reader can check any record alone.
"""

from __future__ import annotations

import asyncio
import random
import sys

from zonestore.errors import NoSpace
from zonestore.zonelog import ZoneLog

KiB = 1024
SIZES = [0, 1, 100, 4000, 50 * KiB, 64 * KiB + 1, 200 * KiB, 700 * KiB, 1536 * KiB]
TUNING = dict(chunk_size=64 * KiB, flush_size=128 * KiB, background_reclaim=False)


def blob(rid: str, ver: int, size: int) -> bytes:
    head = f"{rid}:{ver}:{size}:".encode().ljust(48, b".")
    if size < 48:
        return head[:size]
    return head + random.Random(f"{rid}/{ver}").randbytes(size - 48)


def say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


async def writer(log: ZoneLog, rnd: random.Random, name: str) -> None:
    mine: dict[str, int] = {}
    n = 0
    while True:
        r = rnd.random()
        if mine and r < 0.2:
            rid = rnd.choice(list(mine))
            say("DELETING", rid)
            try:
                await log.delete(rid)
            except NoSpace:
                await asyncio.sleep(0.05)
                continue
            del mine[rid]
            say("DELETED", rid)
            continue
        if mine and r < 0.35:
            rid = rnd.choice(list(mine))
            ver = mine[rid] + 1
        else:
            n += 1
            rid, ver = f"{name}-{n}", 0
        size = rnd.choice(SIZES)
        say("PUTTING", rid, ver, size)
        try:
            await log.put(rid, blob(rid, ver, size), stream=f"s{rnd.randrange(3)}")
        except NoSpace:
            say("NOSPACE", rid)
            await asyncio.sleep(0.05)
            continue
        mine[rid] = ver
        say("PUT", rid, ver, size)


async def reclaimer(log: ZoneLog) -> None:
    while True:
        await log.reclaim(min_garbage=0.3)
        await asyncio.sleep(0.02)


async def main(drive: str, round_: int) -> None:
    log = await ZoneLog.open_path(drive, **TUNING)
    say("READY")
    rnd = random.Random(round_)
    tasks = [writer(log, random.Random(rnd.random()), f"c{round_}-{t}") for t in range(6)]
    await asyncio.gather(*tasks, reclaimer(log))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
