"""Random record workloads that hold a zone log at a given fill (for the space tests): many
concurrent streams, mixed record sizes, overwrites and deletes, with a model of what must be
live, and the checks every run ends with."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from zonestore.errors import NoSpace
from zonestore.zonelog import ZoneLog

KiB = 1024
MiB = 1024 * KiB


def capacity(log: ZoneLog) -> int:
    return log.zone_capacity * len(log.seq_zones)


@dataclass
class Churn:
    """Puts, overwrites and deletes by `workers` concurrent tasks over `streams` stream
    hints until `user_bytes` have been put, never letting the bytes live or in flight pass
    `target` of the capacity (an overwrite counts both copies until it is done)."""

    target: float
    streams: int
    sizes: list[int]
    user_bytes: int
    workers: int = 32
    max_ops: int = 2500
    delete_share: float = 0.3
    seed: int = 0
    model: dict[str, bytes] = field(default_factory=dict)
    held: int = 0  # payload bytes live or in flight
    put_bytes: int = 0
    no_space: list[str] = field(default_factory=list)

    async def run(self, log: ZoneLog) -> None:
        rnd = random.Random(self.seed)
        limit = int(self.target * capacity(log))
        busy: set[str] = set()
        n = 0

        async def worker(wid: int) -> None:
            nonlocal n
            while self.put_bytes < self.user_bytes and n < self.max_ops and not self.no_space:
                size = rnd.choice(self.sizes)
                ids = [r for r in self.model if r not in busy]
                if self.held + size > limit or (ids and rnd.random() < self.delete_share):
                    if not ids:
                        await asyncio.sleep(0.001)
                        continue
                    rid = rnd.choice(ids)
                    if self.held + size <= limit and rnd.random() < 0.5:
                        n += 1
                        await self._put(log, rid, size, rnd, busy)  # overwrite
                    else:
                        busy.add(rid)
                        old = self.model.pop(rid)
                        n += 1
                        await log.delete(rid)
                        self.held -= len(old)
                        busy.discard(rid)
                    continue
                n += 1
                await self._put(log, f"r{wid}.{n}", size, rnd, busy)

        await asyncio.gather(*(worker(w) for w in range(self.workers)))

    async def _put(self, log: ZoneLog, rid: str, size: int, rnd: random.Random,
                   busy: set[str]) -> None:
        busy.add(rid)
        data = rnd.randbytes(size)
        self.held += size
        try:
            await log.put(rid, data, stream=f"s{rnd.randrange(self.streams)}")
        except NoSpace as exc:
            self.held -= size
            self.no_space.append(f"{exc} with {self.held / capacity(log):.3f} held")
            return
        finally:
            busy.discard(rid)
        old = self.model.get(rid)
        if old is not None:
            self.held -= len(old)
        self.model[rid] = data
        self.put_bytes += size


async def read_back(log: ZoneLog, model: dict[str, bytes]) -> None:
    for rid, data in model.items():
        got = b"".join([c async for c in await log.get(rid)])
        assert got == data, rid
    assert len(log.scan(limit=len(model) + 10)) == len(model)


def check_accounting(log: ZoneLog, model: dict[str, bytes]) -> None:
    """live + garbage + stranded + writable + reserve == capacity; live is what the model
    holds plus headers; little is stranded; free_bytes is the writable figure."""
    st = log.stats()
    cap = capacity(log)
    total = (st.live_bytes + st.garbage_bytes + st.stranded_bytes + st.writable_bytes
             + st.reserve_bytes)
    assert abs(total - cap) <= 4096 * len(log.seq_zones), (total, cap, st)
    user = sum(len(d) for d in model.values())
    assert user <= st.live_bytes <= user * 1.05 + 1024 * len(model) + 64 * KiB, (user, st)
    assert st.stranded_bytes <= 0.03 * cap, st
    assert st.free_bytes == st.writable_bytes == log.free_bytes()
    assert st.empty_zones == sum(z["cond"] == "empty" for z in log.zone_map())
