"""The zone log: a store of records (id -> bytes + metadata blob) on one zoned device.

Records are appended, self-describing (record.py), to the open zone of their stream's
lifetime class, so that data that dies together lives together; the write scheduler
(scheduler.py) turns appends into large block-aligned writes with group commit; the index
(index.py) maps ids to extents and is rebuilt or caught up from the zones on open (fsck.py);
reclaim (reclaim.py) resets dead zones and copies the live records out of zones with garbage
or stranded room; space.py says what every zone's bytes are (live, garbage, stranded,
writable, reserve).

Zone budget: at most min(max open, max active) - 2 zones take puts at once (reclaim's zone,
which tombstones share, and one in transition are held back); 0 = unlimited on the device
becomes `max_open` (default 16). Stream hints map onto a bounded number of lifetime classes,
each with an open zone; when no zone can be had, a class shares the open zone with the most
room. A zone is finished only when (nearly) full, or when the limits leave no other choice,
and then the one with the least room left. Puts of known length reserve their room first and
wait for reclaim rather than fail; NoSpace only when live data fills the drive. Partly
written zones found on open are resumed. Conventional zones are not used: the index lives in
SQLite beside the drive.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zonestore import space
from zonestore.device import ZoneCondition, ZonedDevice, count_conditions
from zonestore.errors import CorruptRecord, InvalidRange, NoSpace, RecordNotFound
from zonestore.histogram import (
    FLUSH_BYTES_BUCKETS,
    FLUSH_SECONDS_BUCKETS,
    FixedHistogram,
    HistogramSnapshot,
)
from zonestore.ids import validate_record_id
from zonestore.index import REC, TOMB, Entry, Index
from zonestore.record import (
    FLAG_INLINE,
    INLINE_MAX,
    MAX_CHUNK,
    MAX_META,
    Extent,
    RecordType,
    crc32c,
    crc32c_combine,
    encode_commit,
    encode_header,
    encode_record,
    header_size,
    inline_data_offset,
)
from zonestore.scheduler import ZoneWriter

__all__ = ["ZoneLog", "RecordInfo", "LogStats", "RecordNotFound", "CorruptRecord", "NoSpace",
           "InvalidRange"]

MiB = 1024 * 1024
TOMBSTONE_STREAM = "\x00tombstones"  # the stream of tombstones (not a valid stream name)
MIN_SPLIT = 4096  # a chunk is split across zones only if at least this much still fits
FULL_SLACK = 2 * MIN_SPLIT  # a zone with less room than this left is finished
INLINE_SLACK = 4096  # room beyond an inline COMMIT's body for its header and metadata
GC_CLASS = -1  # reclaim's copies and tombstones share one zone
STREAM_MEMORY = 4096  # stream hints remembered with their class
GROUP_SLACK = 64 * 1024  # a read of one chunk may take extents of this much more along


@dataclass(frozen=True)
class RecordInfo:
    id: str
    length: int
    meta: bytes
    stream: str
    seq: int
    crc32c: int


@dataclass
class LogStats:
    user_bytes_written: int = 0
    device_bytes_written: int = 0
    gc_bytes_copied: int = 0
    zones_by_condition: dict[str, int] = field(default_factory=dict)
    free_bytes: int = 0
    used_bytes: int = 0
    live_bytes: int = 0
    write_amplification: float = 0.0
    flushes: int = 0
    flush_bytes: int = 0
    flush_seconds: HistogramSnapshot | None = None  # latency of write + sync, per durable flush
    flush_sizes: HistogramSnapshot | None = None  # bytes per device write
    records: int = 0
    crc_failures: int = 0
    read_errors: int = 0
    open_zones: int = 0
    max_open_zones: int = 0
    max_active_zones: int = 0
    # Space accounting (space.py): live + garbage + stranded + writable + reserve = capacity.
    writable_bytes: int = 0  # what puts can still write (= free_bytes)
    stranded_bytes: int = 0  # unwritten room of finished zones, unusable until a reset
    garbage_bytes: int = 0  # written bytes no live record points at
    reserve_bytes: int = 0  # held back for reclaim and deletes
    empty_zones: int = 0
    reclaiming_zone: int = -1  # the zone reclaim is evacuating, -1 if none


def _info(e: Entry) -> RecordInfo:
    return RecordInfo(e.id, e.length, e.meta, e.stream, e.seq, e.crc)


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


class ZoneLog:
    """See module docstring. Create with `await ZoneLog.open(device, index_path)`."""

    def __init__(self, device: ZonedDevice, index: Index, *, flush_size: int = 4 * MiB,
                 max_buffer: int = 16 * MiB, chunk_size: int = MAX_CHUNK, max_open: int = 16,
                 gc_reserve_zones: int = 1, background_reclaim: bool = True,
                 reclaim_interval: float = 5.0, reclaim_free_threshold: float = 0.2,
                 reclaim_rate: int = 64 * MiB, reclaim_min_garbage: float = 0.25,
                 index_commit_delay: float = 0.02, lifetime_classes: int = 0,
                 reclaim_low_zones: int = 0, space_wait: float = 10.0) -> None:
        self.device = device
        self.index = index
        self.flush_seconds = FixedHistogram(FLUSH_SECONDS_BUCKETS)
        self.flush_sizes = FixedHistogram(FLUSH_BYTES_BUCKETS)
        info = device.info
        self.zone_size = info.zone_size
        self.block_size = info.physical_block_size
        self.flush_size = max(flush_size, self.block_size)
        self.max_buffer = max(max_buffer, 2 * self.flush_size)
        if not 0 < chunk_size <= 0xFFFFFFFF:
            raise ValueError("chunk_size out of range")
        self.chunk_size = chunk_size
        # Reads group a record's small extents with the one before them, within this bound.
        self._group_max = chunk_size + GROUP_SLACK
        self.gc_reserve_zones = gc_reserve_zones
        self.reclaim_interval = reclaim_interval
        self.reclaim_free_threshold = reclaim_free_threshold
        self.reclaim_rate = reclaim_rate
        self.reclaim_min_garbage = reclaim_min_garbage
        open_limit = info.max_open_zones or max_open
        self.open_limit = open_limit
        active_limit = info.max_active_zones or 1 << 30
        self.active_limit = active_limit
        # One zone is held back for reclaim (and tombstones), one for a zone in transition.
        self.slots = max(1, min(open_limit, active_limit) - 2)
        zones = device.report_zones()
        seq_zones = [z for z in zones if z.is_sequential]
        self.zone_capacity = seq_zones[0].capacity if seq_zones else 0
        self.seq_zones = [z.index for z in seq_zones]
        self._conventional = [(z.index, z.capacity) for z in zones if not z.is_sequential]
        self._written: dict[int, int] = {}
        self._empty: set[int] = set()
        self._full: set[int] = set()
        self._spares: set[int] = set()
        self._bad: set[int] = set()
        self._writers: dict[int, ZoneWriter] = {}
        # Lifetime classes: stream hints map onto a bounded number of classes, each with an
        # open zone (or a share of one); tombstones and reclaim's copies have their own.
        n_seq = len(self.seq_zones)
        self.nclasses = lifetime_classes or max(1, min(self.slots, n_seq // 6))
        self._classes: dict[int, ZoneWriter] = {}
        self._stream_class: OrderedDict[str, int] = OrderedDict()
        self._class_used = [0] * self.nclasses
        self._use_tick = 0
        # Reclaim starts evacuating when no more than this many empty zones are left beyond
        # what puts leave for reclaim and deletes.
        self.reclaim_low_zones = reclaim_low_zones or max(2, n_seq // 16)
        self.space_wait = space_wait  # how long a put waits for reclaim to free a zone
        self.reclaim_wanted = asyncio.Event()
        self._reserved = 0  # room promised to puts in flight (see _admit)
        self.space_waiters = 0  # puts waiting for room (reclaim then copies unthrottled)
        self._space_changed = asyncio.Event()
        self.zone_mtime: dict[int, float] = {}  # monotonic time of a zone's last write
        self._opened_at = time.monotonic()
        self._alloc_lock = asyncio.Lock()
        self._reclaim_lock = asyncio.Lock()
        self._reclaiming: set[int] = set()
        self.pinned: dict[int, int] = {}  # zone -> puts with uncommitted chunks there
        self._resume: dict[int, int] = {}
        self.zone_epoch: dict[int, int] = {}
        self._seq = index.max_seq
        self._closed = False
        self._background = background_reclaim
        self._bg_task: asyncio.Task | None = None
        self._load_zones(zones)
        # Index changes are visible at once (same connection) and committed to SQLite a few
        # ms later in one go: the COMMIT stays off the puts' path.
        self.index_commit_delay = index_commit_delay
        self._commit_timer: asyncio.TimerHandle | None = None
        index.lazy = index_commit_delay > 0

    # ------------------------------------------------------------------ open / close

    @classmethod
    async def open(cls, device: ZonedDevice, index_path: str | Path, **tuning: Any) -> ZoneLog:
        """Open the log on `device`, creating or catching up the index at `index_path` from
        the zones (the index may lag the device after a crash, or be missing)."""
        from zonestore.fsck import recover

        info = device.info
        index = Index(index_path, zone_size=info.zone_size, nr_zones=info.nr_zones)
        try:
            found = await asyncio.to_thread(recover, device, index)
            log = cls(device, index, **tuning)
            log._set_resume_points(found.resume)
        except BaseException:
            index.close()
            raise
        if log._background:
            log._bg_task = asyncio.get_running_loop().create_task(log._background_reclaim())
        return log

    @classmethod
    async def open_path(cls, path: str | Path, index_path: str | Path | None = None,
                        **tuning: Any) -> ZoneLog:
        """Open a drive by path (the log then owns the device and closes it); the index
        defaults to `<drive>/index.sqlite` for emulated drives."""
        from zonestore.opener import open_device

        device = await asyncio.to_thread(open_device, path)
        if index_path is None:
            if not Path(path).is_dir():
                device.close()
                raise ValueError(f"{path}: a block device needs an explicit index path")
            index_path = Path(path) / "index.sqlite"
        try:
            log = await cls.open(device, index_path, **tuning)
        except BaseException:
            device.close()
            raise
        log._owns_device = True
        return log

    _owns_device = False

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

    async def close(self) -> None:
        """Flush every buffer, close the open zones and the index. A device passed to `open`
        stays open (its owner closes it)."""
        if self._closed:
            return
        self._closed = True
        if self._bg_task is not None:
            self._bg_task.cancel()
            try:
                await self._bg_task
            except (asyncio.CancelledError, Exception):
                pass
        async with self._reclaim_lock:
            for w in list(self._writers.values()):
                await w.stop()
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        for z, w in list(self._writers.items()):
            if w.error is None and self._written.get(z, 0) and z not in self._full:
                try:
                    self.device.close_zone(z)
                except OSError:
                    pass
        self.index.close()
        if self._owns_device:
            await asyncio.to_thread(self.device.close)

    async def __aenter__(self) -> ZoneLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("zone log is closed")

    # ------------------------------------------------------------------ hooks for writers

    def device_write(self, zone: int, off: int, parts: list | None, sync: bool) -> float:
        """Runs in a worker thread: write the pieces (gathered, no joining copy where the
        device can), sync. Returns the seconds the write and sync took when it synced (the
        flush latency), else 0."""
        t0 = time.perf_counter()
        if parts:
            self.device.writev(off, parts)
        if sync:
            self.device.sync([zone])
            return time.perf_counter() - t0
        return 0.0

    def note_write(self, zone: int, new_start: int, nbytes: int, seconds: float = 0.0) -> None:
        self._written[zone] = new_start - zone * self.zone_size
        self.zone_mtime[zone] = time.monotonic()
        if nbytes:
            c = self.index.counters
            c["device_bytes_written"] += nbytes
            c["flushes"] += 1
            c["flush_bytes"] += nbytes
            self.flush_sizes.observe(nbytes)
        if seconds:
            self.flush_seconds.observe(seconds)

    def index_flush(self, zone: int, synced: int, entries: list[Entry]) -> list[bool]:
        with self.index.txn():
            results = [self.index.apply(e) for e in entries]
            self.index.set_indexed_wp(zone, synced - zone * self.zone_size)
        if self._commit_timer is None:
            self._commit_timer = asyncio.get_running_loop().call_later(
                self.index_commit_delay, self._commit_index)
        return results

    def _commit_index(self) -> None:
        self._commit_timer = None
        if not self._closed:
            self.index.commit()

    def finish_zone(self, zone: int, synced: int) -> None:
        if self.device.zone(zone).cond is not ZoneCondition.FULL:
            self.device.finish_zone(zone)

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
        the recently used ones; a new stream takes the class used least recently, so up to
        `nclasses` streams at a time each have a zone of their own and more share."""
        sc = self._stream_class
        k = sc.get(stream)
        now = self._use_tick = self._use_tick + 1
        if k is None:
            k = min(range(self.nclasses), key=self._class_used.__getitem__)
            sc[stream] = k
            if len(sc) > STREAM_MEMORY:
                sc.popitem(last=False)
        else:
            sc.move_to_end(stream)
        self._class_used[k] = now
        return k

    def _put_keep(self) -> int:
        return self.gc_reserve_zones

    def _take_zone(self, kind: str) -> int | None:
        """A zone for a new writer. Puts leave `gc_reserve_zones` empty zones; reclaim
        (whose zone takes the tombstones of deletes too) may take the last one: freeing
        space never needs space that puts could have taken."""
        if self._spares:
            z = min(self._spares, key=lambda i: self._written[i])
            self._spares.discard(z)
            return z
        keep = self._put_keep() if kind == "put" else 0
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

    async def _make_active_room(self) -> bool:
        """At the device's active limit: finish the partly written zone with the least room
        left (a closed spare, else an idle put writer). False if there is none to finish."""
        if self._spares:
            z = max(self._spares, key=lambda i: self._written[i])
            self._spares.discard(z)
            try:
                await asyncio.to_thread(self.device.finish_zone, z)
                self._full.add(z)
            except OSError:
                self._bad.add(z)
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

    async def writer_for(self, stream: str, *, gc: bool = False, need: int = 1) -> ZoneWriter:
        """A writer with at least `need` bytes of room for this stream's lifetime class:
        the class's own zone, else a new zone for it while the budget and the empty zones
        allow, else a share of another open zone. When no zone is left, a put waits (up to
        `space_wait` seconds) for reclaim to free one; NoSpace only when nothing can."""
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
            if gc:  # reclaim never waits for itself
                raise NoSpace(f"{self.device.info.path}: no free zone left for reclaim")
            if not deadline:
                deadline = time.monotonic() + self.space_wait
            self.space_waiters += 1
            try:
                ok = await self._make_room(deadline)
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
                if own.remaining < FULL_SLACK:
                    own.retire()  # (nearly) full: finish it, the class takes a new zone
                elif kind == "put":
                    # A record's COMMIT that does not fit the rest of the class's zone goes
                    # to another open zone; the class keeps its zone for what follows.
                    other = self._share(need)
                    if other is not None:
                        return other
            if len(self._writers) >= self.open_limit and await self._wait_closing():
                continue  # the device's open limit: let a zone being finished go first
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

    async def _make_room(self, deadline: float) -> bool:
        """Wait for reclaim to free a zone (running it here if it is not running); False
        once nothing can be freed or the deadline passed."""
        from zonestore.reclaim import make_room

        while True:
            self._check_open()
            got = await make_room(self)
            if got == "freed":
                return True
            if got == "none" or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)

    async def _free_dead_zones(self) -> bool:
        from zonestore.reclaim import reset_dead_zones

        return await reset_dead_zones(self) > 0

    async def _cursor_writer(self, cur: _PutCursor, stream: str, need: int, *,
                             gc: bool = False) -> ZoneWriter:
        """A writer for this put with at least `need` bytes of room."""
        while True:
            w = cur.w
            if w is not None and not w.closing and w.error is None and w.remaining >= need:
                return w
            if w is not None:
                cur.release()
                if not w.closing and w.error is None and w.remaining < FULL_SLACK:
                    w.retire()  # too little room left to be useful: finish the zone
            w = await self.writer_for(stream, gc=gc, need=need)
            if w.remaining < need:
                await asyncio.sleep(0)
                continue
            w.users += 1
            cur.w = w

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ------------------------------------------------------------------ put

    async def put(self, record_id: str, body: bytes | AsyncIterable[bytes], *, stream: str,
                  meta: bytes | Callable[[], bytes] = b"", length: int | None = None
                  ) -> RecordInfo:
        """Store `body` under `record_id` (replacing any older record); returns once durable."""
        validate_record_id(record_id)
        if not isinstance(stream, str) or len(stream.encode()) > 1024 or "\x00" in stream:
            raise ValueError("stream hint must be a str of at most 1024 bytes, without NUL")
        if length is not None and length < 0:
            raise ValueError("length must be >= 0")
        self._check_open()
        seq = self.next_seq()
        cur = _PutCursor()
        if length is None and isinstance(body, bytes | bytearray | memoryview):
            length = len(body)
        try:
            if length is not None:
                await self._admit(cur, length)
            return await self._put(record_id, body, stream, meta, length, seq, cur)
        finally:
            cur.release()
            if cur.held:
                self._reserved -= cur.held
                cur.held = 0
                self._space_changed.set()

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

    async def _put(self, rid: str, body: bytes | AsyncIterable[bytes], stream: str,
                   meta: bytes | Callable[[], bytes], length: int | None, seq: int,
                   cur: _PutCursor, gen: int = 0, gc: bool = False) -> RecordInfo:
        # Zones holding chunks of this put are pinned until its COMMIT is indexed: until then
        # nothing counts those chunks as live, and reclaim must not reset their zone.
        pins: set[int] = set()
        try:
            return await self._put_pinned(rid, body, stream, meta, length, seq, cur, gen, gc,
                                          pins)
        finally:
            for z in pins:
                self.pinned[z] -= 1
                if not self.pinned[z]:
                    del self.pinned[z]

    def _pin(self, pins: set[int], zone: int) -> None:
        if zone not in pins:
            pins.add(zone)
            self.pinned[zone] = self.pinned.get(zone, 0) + 1

    async def _put_pinned(self, rid: str, body: bytes | AsyncIterable[bytes], stream: str,
                          meta: bytes | Callable[[], bytes], length: int | None, seq: int,
                          cur: _PutCursor, gen: int, gc: bool, pins: set[int]) -> RecordInfo:
        if isinstance(body, bytes | bytearray | memoryview) and not callable(meta) \
                and len(body) <= INLINE_MAX and self._inline_fits(stream, len(body) + len(meta)):
            # Small body, known metadata: straight into an inline COMMIT.
            data = bytes(body)
            if length is not None and len(data) != length:
                raise ValueError(f"body is {len(data)} bytes, length says {length}")
            if not isinstance(meta, bytes | bytearray) or len(meta) > MAX_META:
                raise ValueError(f"meta must be bytes of at most {MAX_META}")
            blob = bytes(meta)
            whole = crc32c(data)
            await self._append_commit(rid, seq, gen, stream, blob, len(data), whole, [], [],
                                      data, cur, pins, gc)
            return RecordInfo(rid, len(data), blob, stream, seq, whole)
        hsize = header_size(len(rid))
        chunk = self.chunk_size
        extents: list[Extent] = []
        sizes: list[int] = []
        whole = 0
        total = 0
        emitted = 0

        async def emit(data: memoryview) -> None:
            nonlocal whole, emitted
            pos = 0
            while pos < len(data):
                left = len(data) - pos
                w = await self._cursor_writer(cur, stream, hsize + min(left, MIN_SPLIT), gc=gc)
                n = min(left, w.remaining - hsize)
                piece = data[pos:pos + n]
                c = crc32c(piece)
                logical = emitted
                hdr = encode_header(RecordType.DATA, rid, seq=seq, gen=gen, arg=logical,
                                    payload_len=n, payload_crc=c)
                off = w.append(hdr, piece)
                self._pin(pins, w.zone)
                extents.append(Extent(off + hsize, n, c))
                sizes.append(hsize + n)
                cur.used[w] = off + hsize + n
                self._spend(cur, hsize + n)
                whole = crc32c_combine(whole, c, n)
                emitted = logical + n
                pos += n
                await w.wait_room()

        emitted = 0
        pending = bytearray()
        held: memoryview | None = None
        if isinstance(body, bytes | bytearray | memoryview):
            mv = memoryview(body).cast("B")
            total = len(mv)
            if length is not None and total != length:
                raise ValueError(f"body is {total} bytes, length says {length}")
            if total > INLINE_MAX:
                end = total - total % chunk if total % chunk else total
                for p in range(0, end, chunk):
                    await emit(mv[p:p + chunk])
                pending = bytearray(mv[end:])
            else:
                pending = bytearray(mv)
        else:
            # A short piece of immutable bytes is held as it is: if the body ends there (the
            # last chunk of a streamed body) it is buffered without a copy.
            async for piece in body:
                pv = memoryview(piece).cast("B")
                total += len(pv)
                if length is not None and total > length:
                    raise ValueError(f"body is longer than length {length}")
                if held is not None:
                    pending += held
                    held = None
                if not pending and len(pv) >= chunk:
                    end = len(pv) - len(pv) % chunk
                    for p in range(0, end, chunk):
                        await emit(pv[p:p + chunk])
                    pv = pv[end:]
                if not pending and isinstance(pv.obj, bytes):
                    if len(pv):
                        held = pv
                    continue
                pending += pv
                while len(pending) >= chunk:
                    # One copy into immutable bytes, which the writer buffers as they are;
                    # deleting a bytearray's head is O(1).
                    data = bytes(memoryview(pending)[:chunk])
                    del pending[:chunk]
                    await emit(memoryview(data))
            if length is not None and total != length:
                raise ValueError(f"body is {total} bytes, length says {length}")
        blob = meta() if callable(meta) else meta
        if not isinstance(blob, bytes | bytearray):
            raise ValueError("meta must be bytes")
        blob = bytes(blob)
        if len(blob) > MAX_META:
            raise ValueError(f"metadata blob of {len(blob)} bytes exceeds {MAX_META}")

        inline = None
        inline_ok = not extents and total <= INLINE_MAX and (
            gc or self._inline_fits(stream, total + len(blob)))
        if held is not None:  # pending is empty
            if inline_ok:
                pending += held
            else:
                await emit(held)
        if inline_ok:
            inline = bytes(pending)
            whole = crc32c(inline)
        elif pending:
            await emit(memoryview(pending))
        await self._append_commit(rid, seq, gen, stream, blob, total, whole, extents, sizes,
                                  inline, cur, pins, gc)
        return RecordInfo(rid, total, blob, stream, seq, whole)

    def _inline_fits(self, stream: str, n: int) -> bool:
        """Whether a body stored inside its COMMIT (which cannot be split) fits the rest of
        its class's zone; if not, it is stored as chunks, which can, and the zone is filled
        to its end instead of being finished early."""
        w = self._classes.get(self.class_of(stream))
        return w is None or w.remaining >= n + INLINE_SLACK

    async def _append_commit(self, rid: str, seq: int, gen: int, stream: str, blob: bytes,
                             total: int, whole: int, extents: list[Extent], sizes: list[int],
                             inline: bytes | None, cur: _PutCursor, pins: set[int],
                             gc: bool) -> None:
        """Append the COMMIT that makes a record (its chunks already appended) visible, and
        wait until it is durable and indexed."""
        hsize = header_size(len(rid))
        if inline is not None:
            payload = encode_commit(length=total, crc=whole, stream=stream, meta=blob,
                                    extents=(), inline=inline)
        else:
            payload = encode_commit(length=total, crc=whole, stream=stream, meta=blob,
                                    extents=extents)
        hdr = encode_header(RecordType.COMMIT, rid, seq=seq, gen=gen, arg=total,
                            flags=FLAG_INLINE if inline is not None else 0,
                            payload_len=len(payload), payload_crc=crc32c(payload))
        size = len(hdr) + len(payload)
        if size > self.zone_capacity:
            raise ValueError("record has too many chunks for one COMMIT in a zone")
        while True:
            w = await self._cursor_writer(cur, stream, size, gc=gc)
            # Chunks in other zones must be durable before a COMMIT can point at them.
            waits = [(ow, end) for ow, end in cur.used.items() if ow is not w and ow.synced < end]
            if not waits:
                break
            for ow, end in waits:
                await ow.wait_durable(end)
        off = w.append(hdr, payload)
        self._pin(pins, w.zone)
        if inline is not None:
            extents = [Extent(off + hsize + inline_data_offset(stream, len(blob)), total, whole)]
            sizes = [0]
        entry = Entry(rid, REC, seq, gen, total, whole, stream, blob, tuple(extents),
                      tuple(sizes), off, size)
        c = self.index.counters
        if gc:
            c["gc_bytes_copied"] += size
        else:
            c["user_bytes_written"] += total
        w.add_op(off + size, entry)
        await w.wait_durable(off + size)

    async def relocate(self, e: Entry, zone: int, throttle: Callable[[int], Any]) -> None:
        """Reclaim's copy: rewrite the chunks of `e` that live in `zone` into the reclaim zone
        and append a COMMIT of the next copy generation that points at them and at the
        record's other chunks where they are. Only the evacuated zone's bytes move."""
        pins: set[int] = set()
        cur = _PutCursor()
        try:
            if not any(e.ext_sizes):  # inline: the body lives in the COMMIT itself
                body = self._read(e, 0, e.length)
                data = b"".join([c async for c in body])
                await throttle(len(data))
                await self._append_commit(e.id, e.seq, e.gen + 1, e.stream, e.meta, e.length,
                                          e.crc, [], [], data, cur, pins, True)
                return
            hsize = header_size(len(e.id))
            extents: list[Extent] = []
            sizes: list[int] = []
            logical = 0
            for ext, size in zip(e.extents, e.ext_sizes, strict=True):
                if ext.offset // self.zone_size != zone:
                    extents.append(ext)
                    sizes.append(size)
                    logical += ext.length
                    continue
                data = await asyncio.to_thread(self.device.read, ext.offset, ext.length)
                if crc32c(data) != ext.crc:
                    self.index.counters["crc_failures"] += 1
                    raise CorruptRecord(f"record {e.id!r}: CRC32C mismatch at device offset "
                                        f"{ext.offset} (found by reclaim)")
                await throttle(len(data))
                view = memoryview(data)
                pos = 0
                while pos < len(view):
                    left = len(view) - pos
                    w = await self._cursor_writer(cur, e.stream, hsize + min(left, MIN_SPLIT),
                                                  gc=True)
                    n = min(left, w.remaining - hsize)
                    piece = view[pos:pos + n]
                    c = ext.crc if n == len(view) else crc32c(piece)
                    hdr = encode_header(RecordType.DATA, e.id, seq=e.seq, gen=e.gen + 1,
                                        arg=logical, payload_len=n, payload_crc=c)
                    off = w.append(hdr, piece)
                    self._pin(pins, w.zone)
                    extents.append(Extent(off + hsize, n, c))
                    sizes.append(hsize + n)
                    cur.used[w] = off + hsize + n
                    self.index.counters["gc_bytes_copied"] += hsize + n
                    logical += n
                    pos += n
                    await w.wait_room()
            await self._append_commit(e.id, e.seq, e.gen + 1, e.stream, e.meta, e.length, e.crc,
                                      extents, sizes, None, cur, pins, True)
        finally:
            cur.release()
            for z in pins:
                self.pinned[z] -= 1
                if not self.pinned[z]:
                    del self.pinned[z]

    # ------------------------------------------------------------------ delete

    async def delete(self, record_id: str) -> bool:
        """Delete by appending a tombstone; False if there was no such record."""
        validate_record_id(record_id)
        self._check_open()
        e = self.index.lookup(record_id)
        if e is None or e.kind != REC:
            return False
        await self.append_tombstone(record_id, self.next_seq(), 0, gc=False)
        return True

    async def append_tombstone(self, rid: str, seq: int, gen: int, *, gc: bool) -> None:
        rec = encode_record(RecordType.TOMBSTONE, rid, seq=seq, gen=gen)
        cur = _PutCursor()
        try:
            # Tombstones share reclaim's zone: they live as long as the dead copies they
            # cover, and a delete must work on a full drive (it is how space comes back).
            w = await self._cursor_writer(cur, TOMBSTONE_STREAM, len(rec), gc=True)
            off = w.append(rec)
        finally:
            cur.release()
        if gc:
            self.index.counters["gc_bytes_copied"] += len(rec)
        w.add_op(off + len(rec), Entry(rid, TOMB, seq, gen, 0, 0, "", b"", (), (), off,
                                       len(rec)))
        await w.wait_durable(off + len(rec))

    # ------------------------------------------------------------------ reads

    def _live(self, record_id: str) -> Entry:
        validate_record_id(record_id)
        self._check_open()
        e = self.index.lookup(record_id)
        if e is None or e.kind != REC:
            raise RecordNotFound(record_id)
        return e

    async def head(self, record_id: str) -> RecordInfo:
        return _info(self._live(record_id))

    async def get(self, record_id: str, offset: int = 0, length: int | None = None
                  ) -> AsyncIterator[bytes]:
        """Bytes [offset, offset+length) of the record (to its end when length is None or runs
        past it), as an async iterator; every chunk is CRC-checked before it is yielded."""
        return self._read_entry(self._live(record_id), offset, length)

    def find(self, record_id: str) -> tuple[RecordInfo,
                                            Callable[[int, int | None], AsyncIterator[bytes]]
                                            ] | None:
        """One index lookup for a read: None if no live record has this id, else its info and
        a `read(offset, length)` of exactly that record (the `get` checks and iterator), so
        that headers and bytes describe the same put without a second lookup."""
        validate_record_id(record_id)
        self._check_open()
        e = self.index.lookup(record_id)
        if e is None or e.kind != REC:
            return None
        return _info(e), lambda offset=0, length=None: self._read_entry(e, offset, length)

    def _read_entry(self, e: Entry, offset: int, length: int | None) -> AsyncIterator[bytes]:
        if offset < 0 or offset > e.length or (length is not None and length < 0):
            raise InvalidRange(f"range {offset}+{length} outside record of {e.length} bytes")
        end = e.length if length is None else min(e.length, offset + length)
        return self._read(e, offset, end)

    def _read_extents(self, exts: list[Extent]) -> list[bytes | Exception]:
        """Worker thread: read extents in order; a failed read ends the list with its error
        (the caller handles it where a read of that extent alone would have raised)."""
        out: list[bytes | Exception] = []
        for ext in exts:
            try:
                out.append(self.device.read(ext.offset, ext.length))
            except Exception as exc:  # noqa: BLE001 - handed to the event loop in order
                out.append(exc)
                break
        return out

    async def _read(self, e: Entry, pos: int, end: int) -> AsyncIterator[bytes]:
        epochs = {z: self.zone_epoch.get(z) for z in e.zone_bytes(self.zone_size)}
        base = 0
        i = 0
        while pos < end:
            ext = e.extents[i]
            if base + ext.length <= pos:
                base += ext.length
                i += 1
                continue
            z = ext.offset // self.zone_size
            # The extents needed next in the same zone, up to about one chunk, are read in
            # one hand-off to the I/O thread: a record of a chunk and a small tail (an
            # erasure archive of 1 MiB + its headers) costs one thread round trip, not two.
            group = [ext]
            size = ext.length
            need = base + ext.length
            while need < end and i + len(group) < len(e.extents):
                nxt = e.extents[i + len(group)]
                if nxt.offset // self.zone_size != z or size + nxt.length > self._group_max:
                    break
                group.append(nxt)
                size += nxt.length
                need += nxt.length
            results = await asyncio.to_thread(self._read_extents, group)
            moved = False
            for ext, data in zip(group, results, strict=False):
                if isinstance(data, Exception):
                    if not isinstance(data, OSError):
                        raise data
                    if self.zone_epoch.get(z) == epochs.get(z):
                        self.index.counters["read_errors"] += 1
                        raise data
                    moved = True
                    break
                if self.zone_epoch.get(z) != epochs.get(z):
                    moved = True
                    break
                if crc32c(data) != ext.crc:
                    self.index.counters["crc_failures"] += 1
                    raise CorruptRecord(
                        f"record {e.id!r}: CRC32C mismatch in bytes {base}-"
                        f"{base + ext.length - 1} (device offset {ext.offset})"
                    )
                lo = pos - base
                hi = min(ext.length, end - base)
                yield data if (lo == 0 and hi == ext.length) else data[lo:hi]
                pos = base + hi
                base += ext.length
                i += 1
            if moved:
                # Reclaim moved the record and reset the zone under us: follow it.
                n = self.index.lookup(e.id)
                if n is None or n.kind != REC or n.seq != e.seq:
                    raise RecordNotFound(f"{e.id} was deleted while being read")
                e = n
                epochs = {z: self.zone_epoch.get(z) for z in e.zone_bytes(self.zone_size)}
                base = 0
                i = 0

    def scan(self, prefix: str = "", after: str = "", limit: int = 1000) -> list[RecordInfo]:
        self._check_open()
        return [_info(e) for e in self.index.scan(prefix, after, limit)]

    # ------------------------------------------------------------------ stats / reclaim

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

    def zone_map(self) -> list[dict[str, Any]]:
        """Every zone's state and bytes as the log sees it, no device I/O (space.zone_map)."""
        return space.zone_map(self)

    def has(self, record_id: str) -> bool:
        """Whether a live record with this id is here (no I/O)."""
        return self.index.is_live(record_id)

    def stats(self) -> LogStats:
        zones = self.device.report_zones()
        c = self.index.counters
        sp = space.space(self)
        used = sum(self._written[z] for z in self.seq_zones)
        live = sum(v for z, v in self.index.live.items() if v > 0)
        user = c["user_bytes_written"]
        return LogStats(
            user_bytes_written=user,
            device_bytes_written=c["device_bytes_written"],
            gc_bytes_copied=c["gc_bytes_copied"],
            zones_by_condition={k: v for k, v in count_conditions(zones).items() if v},
            free_bytes=sp["writable"],
            used_bytes=used,
            writable_bytes=sp["writable"],
            stranded_bytes=sp["stranded"],
            garbage_bytes=sp["garbage"],
            reserve_bytes=sp["reserve"],
            empty_zones=len(self._empty),
            reclaiming_zone=min(self._reclaiming) if self._reclaiming else -1,
            live_bytes=live,
            write_amplification=(c["device_bytes_written"] / user) if user else 0.0,
            flushes=c["flushes"],
            flush_bytes=c["flush_bytes"],
            flush_seconds=self.flush_seconds.snapshot(),
            flush_sizes=self.flush_sizes.snapshot(),
            records=self.index.record_count(),
            crc_failures=c["crc_failures"],
            read_errors=c["read_errors"],
            open_zones=sum(1 for z in zones if z.cond.is_open),
            max_open_zones=self.device.info.max_open_zones,
            max_active_zones=self.device.info.max_active_zones,
        )

    async def reclaim(self, **kwargs: Any) -> Any:
        """One reclaim pass (see reclaim.reclaim_pass for the knobs); returns ReclaimResult."""
        from zonestore.reclaim import reclaim_pass

        return await reclaim_pass(self, **kwargs)

    async def _background_reclaim(self) -> None:
        from zonestore.reclaim import background_loop

        await background_loop(self)

    # ------------------------------------------------------------------ for reclaim

    @property
    def full_zones(self) -> set[int]:
        return self._full

    def zone_reset_done(self, z: int) -> None:
        self._full.discard(z)
        self._spares.discard(z)
        self._written[z] = 0
        self._empty.add(z)
        self._space_changed.set()
