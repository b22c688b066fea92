"""Zone reclaim (garbage collection) for the zone log.

A zone whose records are all dead is reset without copying — with lifetime grouping that is the
common case (a deleted checkpoint frees whole zones). Otherwise zones are evacuated when the
empty zones run down to a low-water mark (background_pass), or when a put finds no zone
(make_room): victims are FULL zones chosen by cost-benefit (garbage + stranded room against
the live bytes to copy, and age) or, for a waiting put, by the most space given back. Each
live record is copied to reclaim's zone as a new copy generation (same seq, gen + 1,
CRC-verified while read), a batch at a time so copies share flushes, and the zone is reset once
the copies are durable and indexed. Killed at any point it loses nothing: the old copy stays
valid until the index points at the new one, and the zone is reset only after that.
Tombstones are copied while older copies of their id may survive in other zones, and dropped
otherwise. Background copying is rate-limited (bytes/s) so that reclaim does not starve puts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zonestore.errors import CorruptRecord, NoSpace
from zonestore.fsck import ScanStats, scan_zone
from zonestore.index import REC, Entry

if TYPE_CHECKING:
    from zonestore.zonelog import ZoneLog

log_ = logging.getLogger(__name__)
COPY_BATCH = 64  # records copied at once (they share the reclaim zone's flushes)
COPY_BATCH_BYTES = 8 * 1024 * 1024


@dataclass
class ReclaimResult:
    zones_reset: int = 0  # zones reset with nothing to copy
    zones_evacuated: int = 0  # zones reset after copying their live records out
    records_copied: int = 0
    bytes_copied: int = 0  # payload bytes moved (only the evacuated zones' parts of records)
    tombstones_copied: int = 0
    tombstones_dropped: int = 0
    failed_zones: list[int] = field(default_factory=list)
    seconds: float = 0.0


async def reset_zone(log: ZoneLog, z: int, drops: list[Entry] | tuple = ()) -> None:
    """Reset a zone nothing live points into except the tombstones `drops`, which are
    forgotten with it. Checked and started without an await in between: a put cannot pin a
    FULL zone, so the check holds until the reset. The tombstones leave the index only after
    the reset: a crash in between makes the next open rebuild, never resurrect a record."""
    drops = [e for e in drops if log.index.lookup(e.id) == e]
    held = sum(e.commit_size for e in drops)
    if z not in log.full_zones or log.index.live.get(z, 0) - held > 0 or log.pinned.get(z):
        raise RuntimeError(f"zone {z} still holds live or pending records")
    # The index must point at the new copies durably before the old ones go.
    log.index.commit()
    # Readers holding old extents notice the epoch change and follow the record's new copy.
    log.zone_epoch[z] = log.zone_epoch.get(z, 0) + 1
    await asyncio.to_thread(log.device.reset_zone, z)
    with log.index.txn():
        for e in drops:
            if log.index.lookup(e.id) == e:
                log.index.drop_tombstone(e)
        log.index.clear_zone(z)
    # Durable before the zone takes new data: a committed index must never describe a zone's
    # previous life while the zone holds a new one.
    log.index.commit()
    log.zone_reset_done(z)


async def reset_dead_zones(log: ZoneLog) -> int:
    """Reset every FULL zone without live bytes; returns how many."""
    n = 0
    for z in sorted(log.full_zones):
        if z in log._reclaiming or log.index.live.get(z, 0) > 0 or log.pinned.get(z):
            continue
        log._reclaiming.add(z)
        try:
            if z in log.full_zones and log.index.live.get(z, 0) <= 0 and not log.pinned.get(z):
                await reset_zone(log, z)
                n += 1
        finally:
            log._reclaiming.discard(z)
    return n


def vacant(log: ZoneLog) -> bool:
    """Whether every sequential zone that can be written is empty (none open, none held)."""
    return not log._writers and len(log._empty) + len(log._bad) >= len(log.seq_zones)


async def _finish_idle(log: ZoneLog, everything: bool) -> None:
    """Finish the partly written zones (closed spares, idle writers) that hold no live bytes,
    or, with `everything`, all of them: a FULL zone is what a reset takes."""
    def dead(z: int) -> bool:
        return everything or log.index.live.get(z, 0) <= 0

    async with log._alloc_lock:
        for z in sorted(log._spares):
            if dead(z) and not log.pinned.get(z):
                await log.finish_spare(z)
        idle = [w for w in log._writers.values()
                if w.users == 0 and not w.closing and w.error is None
                and not log.pinned.get(w.zone) and dead(w.zone) and (everything or not w.gc)]
        for w in idle:
            w.retire()
        for w in idle:
            await w.finished.wait()


async def vacate(log: ZoneLog) -> ReclaimResult:
    """Empty the zones of a drive the cluster layout drains (it takes no new records):
    zones that hold no live bytes are reset now, open or partly written ones included,
    instead of waiting for the drive to run low on space. Once its last record is gone the
    zones left hold only tombstones, which shield nothing once the zones of the copies they
    deleted are reset: those zones are evacuated too (tombstones dropped; the few still
    needed are copied and dropped on the next round), so the drive ends with every zone
    empty."""
    t0 = time.monotonic()
    res = ReclaimResult()
    async with log._reclaim_lock:
        for _ in range(4):  # each round drops the tombstones the one before left needed
            if log._closed or vacant(log):
                break
            everything = log.index.record_count() == 0
            await _finish_idle(log, everything)
            res.zones_reset += await reset_dead_zones(log)
            if not everything:
                break  # records left: the drain is still under way
            lim = _Limiter(None)
            for z in sorted(log.full_zones):
                await _evacuate_one(log, z, lim, res)
        res.seconds = time.monotonic() - t0
    return res


class _Limiter:
    """Copy at most `rate` bytes/s, except while puts wait for the space (then reclaim is
    what they wait for: throttling it would only slow them down)."""

    def __init__(self, rate: int | None, log: ZoneLog | None = None) -> None:
        self.rate = rate
        self.log = log
        self.t0 = time.monotonic()
        self.done = 0

    async def take(self, n: int) -> None:
        self.done += n
        if self.log is not None and self.log.space_waiters:
            self.t0 = time.monotonic() - self.done / self.rate if self.rate else self.t0
            return
        if self.rate:
            delay = self.t0 + self.done / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)


async def _evacuate(log: ZoneLog, z: int, lim: _Limiter, res: ReclaimResult) -> bool:
    start = z * log.zone_size
    written = log._written.get(z, 0)
    found = await asyncio.to_thread(
        lambda: {h.id for h, _, _ in scan_zone(log.device, start, start + written, ScanStats())}
    )
    zs = log.zone_size
    drops: list[Entry] = []

    async def copy(e: Entry) -> None:
        if e.kind == REC:
            await log.relocate(e, z, lim.take)
            res.records_copied += 1
        elif log.index.tombstone_needed(e, z):
            await log.append_tombstone(e.id, e.seq, e.gen + 1, gc=True)
            res.tombstones_copied += 1
        else:
            drops.append(e)

    # Copies run a batch at a time, so that they share the reclaim zone's flushes (group
    # commit) instead of padding a block each.
    batch: list[Entry] = []
    size = 0
    ids = sorted(found)
    for i, rid in enumerate(ids):
        e = log.index.lookup(rid)
        if e is not None and z in e.zone_bytes(zs):
            batch.append(e)
            size += e.length
        if batch and (len(batch) >= COPY_BATCH or size >= COPY_BATCH_BYTES or i == len(ids) - 1):
            done = await asyncio.gather(*(copy(e) for e in batch), return_exceptions=True)
            batch, size = [], 0
            for r in done:
                if isinstance(r, BaseException):
                    raise r
    drops = [e for e in drops
             if log.index.lookup(e.id) == e and not log.index.tombstone_needed(e, z)]
    if log.index.live.get(z, 0) - sum(e.commit_size for e in drops) > 0 or log.pinned.get(z):
        # A put that was still running when the zone was scanned committed (or is about to):
        # keep the zone, a later pass moves that record too.
        return False
    await reset_zone(log, z, drops)
    res.tombstones_dropped += len(drops)
    return True


def reclaimable(log: ZoneLog, z: int) -> int:
    """Bytes a reset of FULL zone `z` gives back: its garbage and its stranded room."""
    return log.zone_capacity - max(0, log.index.live.get(z, 0))


def _candidates(log: ZoneLog, min_gain: int) -> list[int]:
    return [z for z in log.full_zones
            if z not in log._reclaiming and not log.pinned.get(z)
            and reclaimable(log, z) >= max(min_gain, 1)]


def cost_benefit(log: ZoneLog, z: int, now: float) -> float:
    """LFS's cost-benefit score: space freed times age over the cost of reading and
    rewriting the live bytes, (1 - u) * age / (1 + u), u = live / capacity. Old, mostly dead
    zones first; a zone of stranded room and little live data is nearly free to take."""
    u = 1 - reclaimable(log, z) / log.zone_capacity
    age = now - log.zone_mtime.get(z, log._opened_at) + 1.0
    return (1 - u) * age / (1 + u)


def pick_victims(log: ZoneLog, *, greedy: bool, min_gain: int) -> list[int]:
    """FULL zones worth evacuating, best first: by cost-benefit, or (when puts are waiting
    for space) by the most space given back."""
    cands = _candidates(log, min_gain)
    if greedy:
        cands.sort(key=lambda z: (-reclaimable(log, z), z))
    else:
        now = time.monotonic()
        cands.sort(key=lambda z: (-cost_benefit(log, z, now), z))
    return cands


def empty_low(log: ZoneLog) -> bool:
    """Whether the empty zones left beyond the reserve are at or below the low-water mark."""
    return len(log._empty) <= log._put_keep() + log.reclaim_low_zones


async def make_room(log: ZoneLog, want: int = 0) -> str:
    """For a put that found no zone: reset dead zones, else evacuate the zone that gives
    the most space back (unthrottled: puts are waiting). "freed" when a zone came free (or
    another pass freed one meanwhile), "busy" when candidates exist but cannot be taken now
    (pinned by puts in flight, zones being finished), "none" when nothing can be freed:
    live data fills the drive."""
    keep = log._put_keep()

    def enough() -> bool:
        return log.free_bytes() >= want if want else len(log._empty) > keep

    async with log._reclaim_lock:
        if enough():
            return "freed"
        if await reset_dead_zones(log):
            return "freed"
        min_gain = log.zone_capacity // 32
        res = ReclaimResult()
        lim = _Limiter(None)
        for z in pick_victims(log, greedy=True, min_gain=min_gain)[:2]:
            if await _evacuate_one(log, z, lim, res) and enough():
                return "freed"
        if enough():
            return "freed"
        if res.zones_reset or res.zones_evacuated:
            return "busy"  # freed one, reclaim's own copies took it: go on
        pending = any(w.closing for w in log._writers.values()) or any(
            reclaimable(log, z) >= min_gain for z in log.full_zones if log.pinned.get(z))
        return "busy" if pending else "none"


async def _evacuate_one(log: ZoneLog, z: int, lim: _Limiter, res: ReclaimResult) -> bool:
    if log._closed or z not in log.full_zones or z in log._reclaiming or log.pinned.get(z):
        return False  # reset meanwhile (and maybe reused) by a put that needed space
    live = max(0, log.index.live.get(z, 0))
    if live and log.gc_room() < live + live // 16 + 16 * 1024:
        # Copies cut short by a full drive would leave no room at all, not even for the
        # tombstones of deletes: take only a zone whose live bytes fit (headers, padding).
        return False
    log._reclaiming.add(z)
    try:
        before = res.records_copied + res.tombstones_copied
        if await _evacuate(log, z, lim, res):
            if res.records_copied + res.tombstones_copied > before:
                res.zones_evacuated += 1
            else:
                res.zones_reset += 1
            return True
        res.failed_zones.append(z)
    except (CorruptRecord, NoSpace, OSError) as exc:
        log_.warning("reclaim of zone %d stopped: %s", z, exc)
        res.failed_zones.append(z)
    finally:
        log._reclaiming.discard(z)
        res.bytes_copied = lim.done
    return False


async def reclaim_pass(log: ZoneLog, *, max_zones: int | None = None,
                       min_garbage: float | None = None, rate: int | None = None,
                       until_empty: int | None = None) -> ReclaimResult:
    """One reclaim pass: reset dead zones, then evacuate up to `max_zones` FULL zones that
    give back at least `min_garbage` of a zone (garbage + stranded room; default: the log's
    setting), best cost-benefit first, copying at most `rate` bytes/s (None: unlimited);
    with `until_empty`, stop once that many zones are empty."""
    t0 = time.monotonic()
    res = ReclaimResult()
    min_garbage = log.reclaim_min_garbage if min_garbage is None else min_garbage
    async with log._reclaim_lock:
        res.zones_reset += await reset_dead_zones(log)
        cands = pick_victims(log, greedy=False,
                             min_gain=int(min_garbage * log.zone_capacity))
        if max_zones is not None:
            cands = cands[:max_zones]
        lim = _Limiter(rate, log)
        for z in cands:
            if log._closed or (until_empty is not None and len(log._empty) >= until_empty):
                break
            await _evacuate_one(log, z, lim, res)
        res.bytes_copied = lim.done
    res.seconds = time.monotonic() - t0
    return res


async def background_pass(log: ZoneLog, *, max_zones: int = 4,
                          rate: int | None = None) -> list[ReclaimResult]:
    """What the background reclaim does each time: reset dead zones (cheap, no copying);
    when the empty zones run down to the low-water mark, evacuate up to `max_zones` zones by
    cost-benefit at `rate` bytes/s, until the mark is cleared (copying costs write
    amplification, so it waits until the space is needed)."""
    async with log._reclaim_lock:
        res = ReclaimResult(zones_reset=await reset_dead_zones(log))
    out = [res]
    if empty_low(log):
        target = log._put_keep() + log.reclaim_low_zones + 1
        # Any zone that gives space back qualifies once the drive runs low; the best ones
        # come first anyway.
        out.append(await reclaim_pass(log, max_zones=max_zones, min_garbage=1 / 32,
                                      rate=rate, until_empty=target))
    return out


async def background_loop(log: ZoneLog) -> None:
    """Run `background_pass` every `reclaim_interval`, or at once when a put saw the empty
    zones run low."""
    while not log._closed:
        try:
            await asyncio.wait_for(log.reclaim_wanted.wait(), log.reclaim_interval)
        except TimeoutError:
            pass
        log.reclaim_wanted.clear()
        try:
            await background_pass(log, rate=log.reclaim_rate)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a background task must not die silently
            log_.exception("background reclaim failed")
