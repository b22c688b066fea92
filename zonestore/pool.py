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
import logging
import sqlite3
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import fields

from zonestore.drivefail import DriveFailed, UnreadableRecord, is_drive_failure
from zonestore.errors import NoSpace, RecordNotFound
from zonestore.hostspace import HostFull, HostSpace, is_out_of_space
from zonestore.ids import validate_record_id
from zonestore.zonelog import LogStats, RecordInfo, ZoneLog

MiB = 1024 * 1024
log = logging.getLogger("zonestore.pool")
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
        self.failed: dict[int, str] = {}  # drive index -> the error that failed it
        # drives the cluster layout drains (or calls failed): no new records, reads go on
        self.no_new: set[int] = set()
        # drives whose filesystem ran out of space: full, not failed (zonestore/hostspace.py)
        self.host = HostSpace([getattr(lg.device, "root", None) for lg in self.logs])

    def fail(self, i: int, exc: BaseException) -> None:
        """Drive i gave a device error: no more puts, reads or listings from it (see
        zonestore/drivefail.py)."""
        if i not in self.failed:
            self.failed[i] = f"{type(exc).__name__}: {exc}"
            log.error("drive %d failed (%s): its records are no longer served", i,
                      self.failed[i])

    def working(self) -> list[int]:
        return [i for i in range(len(self.logs)) if i not in self.failed]

    def writable(self, i: int) -> int:
        """Bytes drive i can take without reclaim: its zones' writable figure, none while its
        filesystem is out of space, at most what that filesystem has free."""
        if i in self.failed:
            return 0
        return self.host.writable(i, self.logs[i].free_bytes())

    def writable_drives(self) -> list[int]:
        """The working drives that take puts (their filesystem not out of space)."""
        return [i for i in self.working() if not self.host.is_full(i)]

    def writable_bytes(self) -> int:
        return sum(self.writable(i) for i in self.working())

    def host_full(self) -> dict[int, str]:
        """Drive -> why it takes no puts for lack of space on its filesystem."""
        return self.host.reasons(self.working())

    # ------------------------------------------------------------------ placement

    def locate(self, record_id: str) -> int | None:
        """Index of the drive holding `record_id`, or None."""
        for i in self.working():
            if self.logs[i].has(record_id):
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

    def _room_moved(self, i: int, delta: int) -> None:
        """Keep the cached room of drive i current between refreshes (a burst of puts within
        ROOM_REFRESH would otherwise all see the room from before it)."""
        if i < len(self._rooms):
            self._rooms[i] += delta

    def pick(self, stream: str, length: int | None = None) -> int:
        need = max(self.headroom if length is None else length, 1)
        rooms = self.rooms()
        if not self.working():
            raise DriveFailed("every drive of this node has failed")
        live = [j for j in self.writable_drives() if j not in self.no_new]
        if not live:
            if all(j in self.no_new for j in self.working()):
                err = NoSpace("every drive of this node is draining")
                err.writable_bytes = 0  # type: ignore[attr-defined]
                raise err
            raise HostFull("; ".join(f"drive {j}: {why}" for j, why in self.host_full().items()))
        even = BALANCE * max(rooms[j] for j in live)  # a failed drive's room is no measure
        i = self._stream_drive.get(stream)
        if i is not None and i in live and self.writable(i) >= need and rooms[i] >= even:
            return i
        frees = [self.writable(j) if j in live else -1 for j in range(len(self.logs))]
        # A roomy drive short of writable space is worth its reclaim (the put waits for it):
        # cheaper than filling a fuller drive, whose reclaim copies more.
        host_ok = [j in live and (self.host.cap(j) is None or self.host.cap(j) >= need)
                   for j in range(len(self.logs))]  # reclaim gives the filesystem nothing
        ok = [j for j, f in enumerate(frees) if f >= need or (
            host_ok[j] and rooms[j] >= even and self.logs[j].obtainable_bytes() >= need)]
        if not ok:
            # No drive can take it as it is: one whose reclaim can make room (the put waits
            # for it), else any with some room left.
            obtainable = [self.logs[j].obtainable_bytes() if host_ok[j] else -1
                          for j in range(len(self.logs))]
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
                self._inflight[i] -= 1
                i = j
                self._inflight[i] += 1
                info = await self.logs[i].put(record_id, body, stream=stream, meta=meta,
                                              length=length)
            except (OSError, sqlite3.Error) as e:  # after NoSpace, an OSError too
                if is_out_of_space(e):
                    # The filesystem under the drive is full: a full drive, not a failed one.
                    self.host.mark(i, e)
                    self._stream_drive.pop(stream, None)
                    if not isinstance(body, bytes | bytearray | memoryview):
                        raise HostFull(f"drive {i}: {self.host.full[i][0]}") from e
                    j = self.pick(stream, length)  # HostFull when no other drive can
                    self._inflight[i] -= 1
                    i = j
                    self._inflight[i] += 1
                    info = await self.logs[i].put(record_id, body, stream=stream, meta=meta,
                                                  length=length)
                elif not isinstance(e, OSError) or not is_drive_failure(e):
                    raise
                else:
                    self.fail(i, e)
                    self._stream_drive.pop(stream, None)
                    if not isinstance(body, bytes | bytearray | memoryview) or \
                            not self.working():
                        raise DriveFailed(f"drive {i} failed during the put: {e}",
                                          self.writable_bytes()) from e
                    self._inflight[i] -= 1
                    i = self.pick(stream, length)
                    self._inflight[i] += 1
                    info = await self.logs[i].put(record_id, body, stream=stream, meta=meta,
                                                  length=length)
        finally:
            self._inflight[i] -= 1
        return await self._placed(i, record_id, info)

    async def _placed(self, i: int, record_id: str, info: RecordInfo) -> RecordInfo:
        """A put landed on drive i: count its room, drop older copies on other drives."""
        self._room_moved(i, -info.length)
        for j in self.working():
            if j != i and self.logs[j].has(record_id):
                await self._delete_on(j, record_id)
        return info

    async def _delete_on(self, i: int, record_id: str) -> bool:
        found = self.logs[i].find(record_id)
        try:
            gone = await self.logs[i].delete(record_id)
            if gone and found is not None:
                self._room_moved(i, found[0].length)
            if gone and i in self.no_new and self.logs[i].index.record_count() == 0:
                # a draining drive's last record went: its zones can all be reset now
                self.logs[i].reclaim_wanted.set()
            return gone
        except OSError as e:
            if not is_drive_failure(e):
                raise
            self.fail(i, e)  # the record went with its drive
            return False

    def _guard(self, i: int, read: Callable[..., AsyncIterator[bytes]]
               ) -> Callable[..., AsyncIterator[bytes]]:
        """`read` (its checks still raise at the call), with a device error failing drive i
        and ending the read as unreadable."""
        def guarded(offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
            return self._guarded(i, read(offset, length))
        return guarded

    async def _guarded(self, i: int, it: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in it:
                yield chunk
        except OSError as e:
            if not is_drive_failure(e):
                raise
            self.fail(i, e)
            raise UnreadableRecord(f"drive {i} failed: {e}") from e
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    def find(self, record_id: str) -> tuple[RecordInfo,
                                            Callable[[int, int | None], AsyncIterator[bytes]]
                                            ] | None:
        """`ZoneLog.find` on the drive holding the id (one index lookup per drive asked)."""
        validate_record_id(record_id)
        for i in self.working():
            found = self.logs[i].find(record_id)
            if found is not None:
                return found[0], self._guard(i, found[1])
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
        for i in self.working():
            if self.logs[i].has(record_id):
                found = await self._delete_on(i, record_id) or found
        return found

    def scan(self, prefix: str = "", after: str = "", limit: int = 1000) -> list[RecordInfo]:
        merged = heapq.merge(*(self.logs[i].scan(prefix, after, limit)
                               for i in self.working()), key=lambda r: r.id)
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
