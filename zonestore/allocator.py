"""Zone allocation for the zone log: which zone a put's or reclaim's bytes go to.

Zone states (empty, open writers, closed partly written "spares", full, bad) are kept here,
with the lifetime classes streams map onto. A class has an open zone of its own while the zone
budget allows and shares the open zone with the most room otherwise; a zone is finished only
when (nearly) full or when the device's limits leave no other choice, and then the one with
the least room left. A put that finds no zone waits for reclaim (zonestore/reclaim.py)."""

from __future__ import annotations

import asyncio
import time

from zonestore.device import ZoneCondition
from zonestore.errors import NoSpace
from zonestore.scheduler import ZoneWriter

MIN_SPLIT = 4096  # a chunk is split across zones only if at least this much still fits
FULL_SLACK = 2 * MIN_SPLIT  # a zone with less room than this left is finished
GC_CLASS = -1  # reclaim's copies and tombstones share one zone
STREAM_MEMORY = 4096  # stream hints remembered with their class


class _PutCursor:
    """The writer a put is appending to, and the chunk ends it left in earlier writers."""

    __slots__ = ("w", "used", "held")

    def __init__(self) -> None:
        self.w: ZoneWriter | None = None
        self.used: dict[ZoneWriter, int] = {}
        self.held = 0  # bytes of the log's reservation this put has not written yet

    def release(self) -> None:
        if self.w is not None:
            self.w.users -= 1
            self.w = None




class ZoneAllocator:
    """Mixin of ZoneLog: zone states, lifetime classes and the choice of writer."""

    def _load_zones(self, zones: list) -> None:
        for z in zones:
            if not z.is_sequential:
                continue
            self._written[z.index] = z.written
            self.zone_epoch[z.index] = 0
            if z.cond in (ZoneCondition.OFFLINE, ZoneCondition.READONLY):
                self._bad.add(z.index)
            elif z.cond is ZoneCondition.FULL:
                # A FULL zone reports its WP at the zone's end: the index knows where data ends.
                self._written[z.index] = self.index.indexed_wp.get(z.index, z.written)
                self._full.add(z.index)
            elif z.wp == z.start:
                self._empty.add(z.index)
            else:
                self._spares.add(z.index)
        # Resume partly written zones, but never more than the budget allows.
        extra = sorted(self._spares, key=lambda i: self._written[i], reverse=True)
        for i in extra[: max(0, len(self._spares) - self.slots)]:
            self.device.finish_zone(i)
            self._spares.discard(i)
            self._full.add(i)

    def _set_resume_points(self, resume: dict[int, int]) -> None:
        """Zones whose tail holds a record cut by a crash resume past its claimed end."""
        for z, at in resume.items():
            if z not in self._spares or at <= self._written[z]:
                continue
            if at >= self.zone_capacity:
                self.device.finish_zone(z)
                self._spares.discard(z)
                self._full.add(z)
            else:
                self._resume[z] = at

    def writer_gone(self, w: ZoneWriter) -> None:
        if self._writers.get(w.zone) is w:
            del self._writers[w.zone]
        for k, kw in list(self._classes.items()):
            if kw is w:
                del self._classes[k]
        if self._closed:
            return
        try:
            z = self.device.zone(w.zone)
        except OSError:
            self._bad.add(w.zone)
            return
        if z.cond is ZoneCondition.FULL:
            self._full.add(w.zone)
            if w.error is None and not w._ops:
                with self.index.txn():
                    self.index.set_indexed_wp(w.zone, w.synced - w.zone * self.zone_size)
                    self.index.seal(w.zone)
            return
        self._written[w.zone] = z.written
        if w.error is not None and z.wp != z.start and z.cond is not ZoneCondition.FULL:
            # A failed write may have left a cut record: never append after it.
            try:
                self.device.finish_zone(w.zone)
                self._full.add(w.zone)
            except OSError:
                self._bad.add(w.zone)
            return
        if z.cond in (ZoneCondition.OFFLINE, ZoneCondition.READONLY):
            self._bad.add(w.zone)
        elif z.wp == z.start:
            self._empty.add(w.zone)
        else:
            self._spares.add(w.zone)

    # ------------------------------------------------------------------ zone allocation

    def class_of(self, stream: str) -> int:
        """The lifetime class of a stream hint: a stream keeps its class while it is among
        the recently used ones. A new stream takes the idle class (no put in flight) used
        most recently - streams written one after the other (checkpoint after checkpoint)
        continue one zone, so a zone holds the data of neighbours in time, which die close
        together - else the class used least recently, so up to `nclasses` streams written
        at once each have a zone of their own and more share."""
        sc = self._stream_class
        k = sc.get(stream)
        now = self._use_tick = self._use_tick + 1
        if k is None:
            used, busy = self._class_used, self._class_busy
            idle = [c for c in range(self.nclasses) if not busy[c]]
            k = (max(idle, key=used.__getitem__) if idle
                 else min(range(self.nclasses), key=used.__getitem__))
            sc[stream] = k
            if len(sc) > STREAM_MEMORY:
                sc.popitem(last=False)
        else:
            sc.move_to_end(stream)
        self._class_used[k] = now
        return k

    def enter_class(self, stream: str) -> int:
        """A put of `stream` starts: its class, counted busy until `leave_class`. A known
        stream whose class is busy with other streams only moves to an idle class (the one
        used most recently), so that streams written at once keep zones of their own."""
        k = self._stream_class.get(stream)
        busy = self._class_busy
        if k is not None and busy[k] and not self._stream_busy.get(stream):
            idle = [c for c in range(self.nclasses) if not busy[c]]
            if idle:
                k = max(idle, key=self._class_used.__getitem__)
                self._stream_class[stream] = k
        k = self.class_of(stream)
        busy[k] += 1
        self._stream_busy[stream] = self._stream_busy.get(stream, 0) + 1
        return k

    def leave_class(self, stream: str, k: int) -> None:
        self._class_busy[k] -= 1
        n = self._stream_busy[stream] - 1
        if n:
            self._stream_busy[stream] = n
        else:
            del self._stream_busy[stream]

    def _put_keep(self) -> int:
        return self.gc_reserve_zones

    def _take_zone(self, kind: str) -> int | None:
        """A zone for a new writer. Puts leave `gc_reserve_zones` empty zones; reclaim
        (whose zone takes the tombstones of deletes too) may take the last one: freeing
        space never needs space that puts could have taken."""
        keep = self._put_keep() if kind == "put" else 0
        # A partly written zone left from before a restart counts towards the reserve: it
        # may be reclaim's zone of a pass that a crash cut short, the last room on the drive.
        if self._spares and len(self._empty) + len(self._spares) > keep:
            z = min(self._spares, key=lambda i: self._written[i])
            self._spares.discard(z)
            return z
        if len(self._empty) <= keep:
            if kind == "put":
                self.reclaim_wanted.set()
            return None
        if len(self._writers) + len(self._spares) + 1 > self.active_limit:
            return None
        z = min(self._empty)
        self._empty.discard(z)
        if len(self._empty) <= self._put_keep() + self.reclaim_low_zones:
            self.reclaim_wanted.set()
        return z

    async def finish_spare(self, z: int) -> None:
        """Finish the closed, partly written zone `z`: FULL (what reclaim can reset), or bad
        if the device refuses."""
        self._spares.discard(z)
        try:
            await asyncio.to_thread(self.device.finish_zone, z)
            self._full.add(z)
        except OSError:
            self._bad.add(z)

    async def _make_active_room(self) -> bool:
        """At the device's active limit: finish the partly written zone with the least room
        left (a closed spare, else an idle put writer). False if there is none to finish."""
        if self._spares:
            await self.finish_spare(max(self._spares, key=lambda i: self._written[i]))
            return True
        idle = [w for w in self._writers.values()
                if not w.gc and not w.closing and w.users == 0 and w.error is None]
        if not idle:
            return False
        victim = min(idle, key=lambda w: w.remaining)
        victim.retire()
        await victim.finished.wait()
        return True

    def _new_writer(self, z: int, gc: bool) -> ZoneWriter:
        start = z * self.zone_size
        w = ZoneWriter(self, z, start + self._written[z], start + self.zone_capacity, gc=gc)
        at = self._resume.pop(z, 0)
        if at > self._written[z]:
            w.append(bytes(at - self._written[z]))  # zero fill over a cut record's claim
        self._writers[z] = w
        return w

    @staticmethod
    def _usable(w: ZoneWriter | None, need: int) -> bool:
        return w is not None and not w.closing and w.error is None and w.remaining >= need

    def _share(self, need: int) -> ZoneWriter | None:
        """The open put writer with the most room (at least `need`), to share."""
        best = None
        for w in self._writers.values():
            if w.gc or not self._usable(w, need):
                continue
            if best is None or w.remaining > best.remaining:
                best = w
        return best

    async def writer_for(self, stream: str, *, gc: bool = False, need: int = 1,
                         waits: bool | None = None) -> ZoneWriter:
        """A writer with at least `need` bytes of room for this stream's lifetime class:
        the class's own zone, else a new zone for it while the budget and the empty zones
        allow, else a share of another open zone. When no zone is left, a put waits (up to
        `space_wait` seconds) for reclaim to free one; NoSpace only when nothing can.
        `waits` (default: not `gc`) lets a delete's tombstone, which writes to reclaim's
        zone, wait too: only reclaim's own copies must never wait for reclaim."""
        if waits is None:
            waits = not gc
        key = GC_CLASS if gc else self.class_of(stream)
        w = self._classes.get(key)
        if self._usable(w, need):
            return w  # the common case, without the allocation lock
        deadline = 0.0
        while True:
            async with self._alloc_lock:
                w = await self._writer_locked(key, need)
            if w is not None:
                return w
            # No zone: make room outside the allocation lock (reclaim's own writer needs it).
            if gc and await self._free_dead_zones():
                continue  # resetting a dead zone needs no room
            if not waits:  # reclaim never waits for itself
                raise NoSpace(f"{self.device.info.path}: no free zone left for reclaim")
            if not deadline:
                deadline = time.monotonic() + self.space_wait
            self.space_waiters += 1
            try:
                # A tombstone may take the zone a put must leave in reserve: it retries the
                # allocation after each of reclaim's passes, not only once puts could.
                ok = await self._make_room(deadline, once=gc)
            finally:
                self.space_waiters -= 1
            if not ok or time.monotonic() > deadline:
                err = NoSpace(f"{self.device.info.path}: no free zone left (live data fills "
                              "the drive)")
                err.writable_bytes = self.free_bytes()  # type: ignore[attr-defined]
                raise err

    async def _writer_locked(self, key: int, need: int) -> ZoneWriter | None:
        while True:
            self._check_open()
            gc = key == GC_CLASS
            kind = "gc" if gc else "put"
            own = self._classes.get(key)
            if self._usable(own, need):
                return own
            if own is not None and not own.closing and own.error is None:
                if own.remaining < FULL_SLACK or gc:
                    # (Nearly) full, or reclaim's zone (nothing else writes to it, so left
                    # open it would hold an open slot for ever): finish it, the class takes
                    # a new zone; reclaim counts the rest as stranded.
                    own.retire()
                elif kind == "put":
                    # A record's COMMIT that does not fit the rest of the class's zone goes
                    # to another open zone; the class keeps its zone for what follows.
                    other = self._share(need)
                    if other is not None:
                        return other
            if len(self._writers) >= self.open_limit and await self._wait_closing():
                continue  # the device's open limit: let a zone being finished go first
            if kind == "put":
                idle = self._idle_zone(key, need)
                if idle is not None:
                    self._classes[key] = idle
                    return idle
            if kind != "put" or self._put_writers() < self.slots:
                z = self._take_zone(kind)
                if z is None and len(self._writers) + len(self._spares) >= self.active_limit \
                        and len(self._empty) > (self._put_keep() if kind == "put" else 0):
                    if await self._make_active_room():
                        continue
                if z is not None:
                    w = self._new_writer(z, gc)
                    self._classes[key] = w
                    return w
            if kind == "put":
                other = self._share(need)
                if other is not None:
                    self._classes[key] = other
                    return other
                if self._put_writers() >= self.slots:
                    # Every zone the budget allows is open and none has room for this piece
                    # (a COMMIT larger than any zone's rest): finish the one with the least
                    # room left, so the class can take a new zone.
                    open_ = [w for w in self._writers.values() if not w.gc]
                    live = [w for w in open_ if not w.closing]
                    victim = min(live or open_, key=lambda w: w.remaining)
                    victim.retire()
                    await victim.finished.wait()
                    continue
            if not gc and await self._free_dead_zones():
                continue
            return None

    def _idle_zone(self, key: int, need: int) -> ZoneWriter | None:
        """The open zone of an idle class (no put in flight) with the least room left (at
        least `need`), for a class that needs a new zone: filling the rest of zones nobody
        writes to before opening empty ones keeps the room held in open zones to about one
        zone per busy class (on a drive near full, that room is what reclaim lacks)."""
        owners: dict[ZoneWriter, list[int]] = {}
        for k, w in self._classes.items():
            if k != key and k >= 0:
                owners.setdefault(w, []).append(k)
        best = None
        for w, ks in owners.items():
            if w.gc or not self._usable(w, need) or any(self._class_busy[k] for k in ks):
                continue
            if best is None or w.remaining < best.remaining:
                best = w
        return best

    async def _wait_closing(self) -> bool:
        """Wait until one of the zones being finished is done; False if none is."""
        closing = [w for w in self._writers.values() if w.closing]
        if not closing:
            return False
        waits = [asyncio.ensure_future(w.finished.wait()) for w in closing]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in waits:
                t.cancel()
        return True

    def _put_writers(self) -> int:
        return sum(1 for w in self._writers.values() if not w.gc)

    async def _make_room(self, deadline: float, once: bool = False) -> bool:
        """Wait for reclaim to free a zone (running it here if it is not running); False
        once nothing can be freed or the deadline passed. `once`: return after one pass
        that did not find the drive full."""
        from zonestore.reclaim import make_room

        while True:
            self._check_open()
            got = await make_room(self)
            if got == "freed":
                return True
            if got == "none" or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
            if once:
                return True

    async def _free_dead_zones(self) -> bool:
        from zonestore.reclaim import reset_dead_zones

        return await reset_dead_zones(self) > 0

    async def _cursor_writer(self, cur: _PutCursor, stream: str, need: int, *,
                             gc: bool = False, waits: bool | None = None) -> ZoneWriter:
        """A writer for this put with at least `need` bytes of room."""
        while True:
            w = cur.w
            if w is not None and not w.closing and w.error is None and w.remaining >= need:
                return w
            if w is not None:
                cur.release()
                if not w.closing and w.error is None and w.remaining < FULL_SLACK:
                    w.retire()  # too little room left to be useful: finish the zone
            w = await self.writer_for(stream, gc=gc, need=need, waits=waits)
            if w.remaining < need:
                await asyncio.sleep(0)
                continue
            w.users += 1
            cur.w = w

    def gc_room(self) -> int:
        """Bytes reclaim could still write: its open zone's rest, the partly written spares
        and the empty zones."""
        w = self._classes.get(GC_CLASS)
        room = w.remaining if self._usable(w, 1) else 0
        room += sum(self.zone_capacity - self._written[z] for z in self._spares)
        return room + len(self._empty) * self.zone_capacity

    @property
    def full_zones(self) -> set[int]:
        return self._full

    def zone_reset_done(self, z: int) -> None:
        self._full.discard(z)
        self._spares.discard(z)
        self._written[z] = 0
        self._empty.add(z)
        self._space_changed.set()
