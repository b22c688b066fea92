"""The drives of one storage node as a single record store: a `DrivePool` of zone logs.

A put goes to the drive chosen by load (puts in flight) and room (capacity less live bytes)
among the drives with writable space (zonestore/space.py; a drive whose reclaim can make room
when none has it writable), and a stream sticks to its drive while that drive has writable
room and is not much fuller than the roomiest drive (BALANCE), so that lifetime grouping still
works per drive and the drives fill evenly (a fuller drive costs more reclaim copying). Which
drive holds an id is asked of each log's index; a put that replaces an id living on another
drive deletes the old copy there once the new one is durable.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import fields

from zonestore.errors import NoSpace, RecordNotFound
from zonestore.ids import validate_record_id
from zonestore.zonelog import LogStats, RecordInfo, ZoneLog

MiB = 1024 * 1024
BALANCE = 0.85  # a drive whose room is below this share of the roomiest drive's takes no new streams
ROOM_REFRESH = 0.25  # seconds a drive's room figure is reused (it sums every zone's live bytes)


class DrivePool:
    def __init__(self, logs: list[ZoneLog], *, headroom: int = 64 * MiB) -> None:
        if not logs:
            raise ValueError("a drive pool needs at least one zone log")
        self.logs = list(logs)
        self.headroom = headroom  # a stream moves on when its drive has less free than this
        self._inflight = [0] * len(self.logs)
        self._stream_drive: dict[str, int] = {}
        self._rooms: list[int] = []
        self._rooms_at = -1.0

    # ------------------------------------------------------------------ placement

    def locate(self, record_id: str) -> int | None:
        """Index of the drive holding `record_id`, or None."""
        for i, log in enumerate(self.logs):
            if log.has(record_id):
                return i
        return None

    def rooms(self) -> list[int]:
        """Each drive's capacity less its live bytes (refreshed every ROOM_REFRESH s)."""
        now = time.monotonic()
        if now - self._rooms_at >= ROOM_REFRESH or len(self._rooms) != len(self.logs):
            self._rooms = [log.zone_capacity * len(log.seq_zones)
                           - sum(v for v in log.index.live.values() if v > 0)
                           for log in self.logs]
            self._rooms_at = now
        return self._rooms

    def pick(self, stream: str, length: int | None = None) -> int:
        need = max(self.headroom if length is None else length, 1)
        rooms = self.rooms()
        even = BALANCE * max(rooms)
        i = self._stream_drive.get(stream)
        if i is not None and self.logs[i].free_bytes() >= need and rooms[i] >= even:
            return i
        frees = [log.free_bytes() for log in self.logs]
        # A roomy drive short of writable space is worth its reclaim (the put waits for it):
        # cheaper than filling a fuller drive, whose reclaim copies more.
        ok = [j for j, f in enumerate(frees) if f >= need or (
            rooms[j] >= even and self.logs[j].obtainable_bytes() >= need)]
        if not ok:
            # No drive can take it as it is: one whose reclaim can make room (the put waits
            # for it), else any with some room left.
            obtainable = [log.obtainable_bytes() for log in self.logs]
            ok = [j for j, f in enumerate(obtainable) if f >= need] or [
                j for j, f in enumerate(frees) if f > 0]
        if not ok:
            err = NoSpace("every drive in the pool is full")
            err.writable_bytes = sum(frees)  # type: ignore[attr-defined]
            raise err
        # Spread concurrent streams: fewest puts in flight first, then the most room; the
        # drives much fuller than the roomiest take new streams only when no other can.
        ok = [j for j in ok if rooms[j] >= even] or ok
        j = min(ok, key=lambda j: (self._inflight[j], -rooms[j], -frees[j]))
        self._stream_drive[stream] = j
        return j

    # ------------------------------------------------------------------ records

    async def put(self, record_id: str, body: bytes | AsyncIterable[bytes], *, stream: str,
                  meta: bytes | Callable[[], bytes] = b"", length: int | None = None
                  ) -> RecordInfo:
        validate_record_id(record_id)
        if length is None and isinstance(body, bytes | bytearray | memoryview):
            length = len(body)
        i = self.pick(stream, length)
        self._inflight[i] += 1
        try:
            try:
                info = await self.logs[i].put(record_id, body, stream=stream, meta=meta,
                                              length=length)
            except NoSpace:
                self._stream_drive.pop(stream, None)
                if not isinstance(body, bytes | bytearray | memoryview):
                    raise  # a streamed body is consumed: the caller retries
                j = self.pick(stream, length)
                if j == i:
                    raise
                i = j
                info = await self.logs[i].put(record_id, body, stream=stream, meta=meta,
                                              length=length)
        finally:
            self._inflight[i] -= 1
        for j, log in enumerate(self.logs):
            if j != i and log.has(record_id):
                await log.delete(record_id)
        return info

    def find(self, record_id: str) -> tuple[RecordInfo,
                                            Callable[[int, int | None], AsyncIterator[bytes]]
                                            ] | None:
        """`ZoneLog.find` on the drive holding the id (one index lookup per drive asked)."""
        validate_record_id(record_id)
        for log in self.logs:
            found = log.find(record_id)
            if found is not None:
                return found
        return None

    async def get(self, record_id: str, offset: int = 0, length: int | None = None
                  ) -> AsyncIterator[bytes]:
        found = self.find(record_id)
        if found is None:
            raise RecordNotFound(record_id)
        return found[1](offset, length)

    async def head(self, record_id: str) -> RecordInfo:
        found = self.find(record_id)
        if found is None:
            raise RecordNotFound(record_id)
        return found[0]

    async def delete(self, record_id: str) -> bool:
        validate_record_id(record_id)
        found = False
        for log in self.logs:
            if log.has(record_id):
                found = await log.delete(record_id) or found
        return found

    def scan(self, prefix: str = "", after: str = "", limit: int = 1000) -> list[RecordInfo]:
        merged = heapq.merge(*(log.scan(prefix, after, limit) for log in self.logs),
                             key=lambda r: r.id)
        out: list[RecordInfo] = []
        for r in merged:
            if out and out[-1].id == r.id:
                continue
            out.append(r)
            if len(out) >= limit:
                break
        return out

    # ------------------------------------------------------------------ stats / lifecycle

    def drive_stats(self) -> list[LogStats]:
        return [log.stats() for log in self.logs]

    def stats(self) -> LogStats:
        """The pool's totals (write amplification recomputed from the sums)."""
        total = LogStats()
        for st in self.drive_stats():
            for f in fields(LogStats):
                v = getattr(st, f.name)
                if f.name == "zones_by_condition":
                    for k, n in v.items():
                        total.zones_by_condition[k] = total.zones_by_condition.get(k, 0) + n
                elif f.name == "reclaiming_zone":
                    continue  # per drive only
                elif f.name != "write_amplification" and v is not None:
                    have = getattr(total, f.name)
                    setattr(total, f.name, v if have is None else have + v)
        if total.user_bytes_written:
            total.write_amplification = total.device_bytes_written / total.user_bytes_written
        return total

    async def reclaim(self, **kwargs: object) -> list:
        return list(await asyncio.gather(*(log.reclaim(**kwargs) for log in self.logs)))

    async def close(self) -> None:
        await asyncio.gather(*(log.close() for log in self.logs))

    async def __aenter__(self) -> DrivePool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
