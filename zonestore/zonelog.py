"""The zone log: a store of records (id -> bytes + metadata blob) on one zoned device.

Records are appended, self-describing (record.py), to the open zone of their stream's
lifetime class, so that data that dies together lives together; the write scheduler
(scheduler.py) turns appends into large block-aligned writes with group commit; the index
(index.py) maps ids to extents and is rebuilt or caught up from the zones on open (fsck.py);
reclaim (reclaim.py) resets dead zones and copies the live records out of zones with garbage
or stranded room; space.py says what every zone's bytes are (live, garbage, stranded,
writable, reserve). The parts of the log live in modules of their own: zone states and the
choice of writer (allocator.py), reservations of room (admission.py), reads (logread.py),
reclaim's copies (relocate.py), RecordInfo and LogStats (logtypes.py).

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
from collections.abc import AsyncIterable, Callable
from pathlib import Path
from typing import Any

from zonestore import space
from zonestore.admission import SpaceAdmission
from zonestore.allocator import MIN_SPLIT, ZoneAllocator, _PutCursor
from zonestore.device import ZoneCondition, ZonedDevice, count_conditions
from zonestore.errors import CorruptRecord, InvalidRange, NoSpace, RecordNotFound
from zonestore.histogram import (
    FLUSH_BYTES_BUCKETS,
    FLUSH_SECONDS_BUCKETS,
    FixedHistogram,
)
from zonestore.ids import validate_record_id
from zonestore.index import REC, TOMB, Entry, Index
from zonestore.logread import GROUP_SLACK, RecordReader
from zonestore.logtypes import LogStats, RecordInfo
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
from zonestore.relocate import RecordRelocation
from zonestore.scheduler import ZoneWriter

__all__ = ["ZoneLog", "RecordInfo", "LogStats", "RecordNotFound", "CorruptRecord", "NoSpace",
           "InvalidRange"]

MiB = 1024 * 1024
TOMBSTONE_STREAM = "\x00tombstones"  # the stream of tombstones (not a valid stream name)
INLINE_SLACK = 4096  # room beyond an inline COMMIT's body for its header and metadata


class ZoneLog(ZoneAllocator, SpaceAdmission, RecordReader, RecordRelocation):
    """See module docstring. Create with `await ZoneLog.open(device, index_path)`."""

    def __init__(self, device: ZonedDevice, index: Index, *, flush_size: int = 4 * MiB,
                 max_buffer: int = 16 * MiB, chunk_size: int = MAX_CHUNK, max_open: int = 16,
                 gc_reserve_zones: int = 1, background_reclaim: bool = True,
                 reclaim_interval: float = 5.0, reclaim_free_threshold: float = 0.2,
                 reclaim_rate: int = 64 * MiB, reclaim_min_garbage: float = 0.25,
                 index_commit_delay: float = 0.25, lifetime_classes: int = 0,
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
        self._class_busy = [0] * self.nclasses  # puts in flight per class
        self._stream_busy: dict[str, int] = {}  # puts in flight per stream
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
        k = self.enter_class(stream)
        try:
            if length is not None:
                await self._admit(cur, length)
            return await self._put(record_id, body, stream, meta, length, seq, cur)
        finally:
            self.leave_class(stream, k)
            cur.release()
            if cur.held:
                self._reserved -= cur.held
                cur.held = 0
                self._space_changed.set()

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
        k = self._stream_class.get(stream)  # a query: class_of would count a use
        w = self._classes.get(self.class_of(stream) if k is None else k)
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
            # A delete waits, as a put does, for a reclaim pass about to reset a zone;
            # reclaim's own copy of a tombstone (`gc`) must not wait for itself.
            w = await self._cursor_writer(cur, TOMBSTONE_STREAM, len(rec), gc=True,
                                          waits=not gc)
            off = w.append(rec)
        finally:
            cur.release()
        if gc:
            self.index.counters["gc_bytes_copied"] += len(rec)
        w.add_op(off + len(rec), Entry(rid, TOMB, seq, gen, 0, 0, "", b"", (), (), off,
                                       len(rec)))
        await w.wait_durable(off + len(rec))

    # ------------------------------------------------------------------ reads

    # ------------------------------------------------------------------ stats / reclaim

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
            seq_zones=len(self.seq_zones),
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
