"""Space admission for the zone log: a put of known length reserves its room before it writes a
byte, and waits for reclaim (or for other puts to end) when the drive has not got it."""

from __future__ import annotations

import asyncio
import time

from zonestore import space
from zonestore.allocator import _PutCursor
from zonestore.errors import NoSpace


class SpaceAdmission:
    """Mixin of ZoneLog: the writable figure, reservations and waits for room."""

    def free_bytes(self) -> int:
        """Bytes puts can still write without reclaim: the writable figure (space.py)."""
        return space.writable_bytes(self)

    def obtainable_bytes(self) -> int:
        """What puts could write after reclaim: writable + garbage + stranded bytes."""
        sp = space.space(self)
        return sp["writable"] + sp["garbage"] + sp["stranded"]

    async def room_for(self, nbytes: int) -> int:
        """Make `nbytes` writable if reclaim can (waiting up to `space_wait`); returns the
        writable bytes then. Gives up at once when even reclaim could not make it fit."""
        free = self.free_bytes()
        if free >= nbytes or nbytes > self.obtainable_bytes():
            return free
        deadline = time.monotonic() + self.space_wait
        while self.free_bytes() < nbytes and await self._make_room(deadline):
            pass
        return self.free_bytes()

    async def _admit(self, cur: _PutCursor, length: int) -> None:
        """Reserve room for a put of known length before it writes a byte: puts in flight
        must never hold more room than the drive has (they would all wait for space their
        own uncommitted chunks take), so a put that does not fit waits here, holding
        nothing, for reclaim or for other puts to end; NoSpace when nothing can help."""
        need = length + length // 256 + 8192  # headers and the COMMIT
        # O(1) first: the empty zones beyond the reserve alone hold it (the common case).
        spare = self.zone_capacity * (len(self._empty) - self._put_keep()) - self._reserved
        if spare >= need or self.free_bytes() - self._reserved >= need:
            self._reserved += need
            cur.held = need
            return
        deadline = time.monotonic() + self.space_wait
        self.space_waiters += 1
        try:
            await self._admit_wait(need, length, deadline)
        finally:
            self.space_waiters -= 1
        self._reserved += need
        cur.held = need

    async def _admit_wait(self, need: int, length: int, deadline: float) -> None:
        while True:
            self._check_open()
            if self.free_bytes() - self._reserved >= need:
                break
            if self._reserved == 0 and need > self.obtainable_bytes():
                break  # cannot fit even after reclaim: let the put try and fail cleanly
            if time.monotonic() >= deadline:
                err = NoSpace(f"{self.device.info.path}: no room for a record of {length} "
                              "bytes (live data and puts in flight fill the drive)")
                err.writable_bytes = self.free_bytes()  # type: ignore[attr-defined]
                raise err
            if self.free_bytes() - self._reserved < need and not self._reclaim_lock.locked():
                from zonestore.reclaim import make_room

                got = await make_room(self, want=need + self._reserved)
                if got == "freed":
                    continue
                if got == "none" and self._reserved == 0:
                    break  # reclaim cannot help and no put will end: try, and fail cleanly
            self._space_changed.clear()
            try:
                await asyncio.wait_for(self._space_changed.wait(), 0.05)
            except TimeoutError:
                pass

    def _spend(self, cur: _PutCursor, n: int) -> None:
        if cur.held:
            n = min(n, cur.held)
            cur.held -= n
            self._reserved -= n
