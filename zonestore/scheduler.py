"""The write scheduler: one `ZoneWriter` per open zone turns many small appends into large,
block-aligned writes at the write pointer, with group commit.

Appends go into an in-memory buffer that starts at the zone's write pointer. One flusher task
per zone writes it out — only ever one write in flight per zone. A flush driven by buffer size
writes whole blocks and keeps the tail; a flush for a waiter (a put that must be durable) pads
the last block with zeros and syncs the zone. Everything that arrives while a write+sync is in
flight shares the next one: many concurrent small puts pay for a single fdatasync. Index
updates for the records of a flush are applied, in one SQLite transaction, after the sync and
before the waiters wake, so a put that returned is both durable and visible. The next write
is started before that transaction runs, so the device and the index work at the same time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from zonestore.index import Entry

if TYPE_CHECKING:
    from zonestore.zonelog import ZoneLog


class ZoneWriter:
    def __init__(self, log: ZoneLog, zone: int, wp: int, end: int, *, gc: bool = False) -> None:
        self.log = log
        self.zone = zone
        self.gc = gc
        self.start = wp  # absolute device offset of buf[0] (= device WP once writes land)
        self.end = end  # absolute end of the zone's capacity
        # Buffered records as immutable pieces (bytes, or views of bytes): joined by the I/O
        # thread, which copies without the GIL, so the event loop does not pay for the copy.
        self._parts: list[bytes | memoryview] = []
        self._len = 0
        self.synced = wp
        self._published = wp
        self.users = 0  # puts currently appending here (an idle writer may be retired)
        self.closing = False
        self.finished = asyncio.Event()
        self.error: BaseException | None = None
        self._ops: list[tuple[int, Entry, Callable[[bool], None] | None]] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"zone-{zone}")

    # ------------------------------------------------------------------ appends

    @property
    def tail(self) -> int:
        return self.start + self._len

    @property
    def remaining(self) -> int:
        return 0 if self.closing else self.end - self.tail

    @property
    def fill(self) -> float:
        return (self.tail - self.zone * self.log.zone_size) / self.log.zone_capacity

    def append(self, *parts: bytes | bytearray | memoryview) -> int:
        """Append one record (header, payload...) and return its device offset. The caller
        checked `remaining`; nothing awaits between the check and this call."""
        if self.error is not None:
            raise self.error
        off = self.tail
        for p in parts:
            if not (isinstance(p, bytes)
                    or (isinstance(p, memoryview) and isinstance(p.obj, bytes))):
                p = bytes(p)  # the caller may reuse a mutable buffer once we return
            self._parts.append(p)
            self._len += len(p)
        if self.tail > self.end:
            raise AssertionError("append past the zone's capacity")
        if self._len >= self.log.flush_size:
            self._wake.set()
            if self._len >= self.log.max_buffer:
                self._room.clear()
        return off

    def add_op(self, end: int, entry: Entry, done: Callable[[bool], None] | None = None) -> None:
        """Apply `entry` to the index once the bytes up to `end` are durable."""
        self._ops.append((end, entry, done))

    async def wait_room(self) -> None:
        """Backpressure for streamed puts (bounded buffer per zone); also lets the flusher
        start writing a full buffer while the put goes on copying the next chunks."""
        if self._wake.is_set():
            await asyncio.sleep(0)
        await self._room.wait()

    async def wait_durable(self, end: int) -> None:
        if self.synced >= end:
            return  # synced and published happen together: its index update is done too
        if self.error is not None:
            raise self.error
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((end, fut))
        self._wake.set()
        await fut

    def retire(self) -> None:
        """Flush what is buffered, then FINISH the zone and free its slot."""
        self.closing = True
        self._wake.set()

    # ------------------------------------------------------------------ flusher

    def _launch(self) -> tuple[asyncio.Future, int, int, bool] | None:
        """Start the next write (+ sync) if there is one to do: (task, new end, bytes, sync)."""
        log = self.log
        bs = log.block_size
        # Waiters and index updates already covered by the last sync (publication pending)
        # do not ask for another one.
        synced = self.synced
        want_sync = (self.closing or any(e > synced for e, _ in self._waiters)
                     or any(e > synced for e, _, _ in self._ops))
        data: list[bytes | memoryview] | None = None
        nbytes = 0
        if want_sync and self._len:
            pad = -self._len % bs
            if pad:
                self._parts.append(bytes(pad))
            data, nbytes = self._parts, self._len + pad
            self._parts, self._len = [], 0
        elif self._len >= max(bs, log.flush_size):
            nbytes = self._len - self._len % bs
            data, rest, acc = [], [], 0
            for p in self._parts:
                if acc >= nbytes:
                    rest.append(p)
                elif acc + len(p) <= nbytes:
                    data.append(p)
                else:
                    k = nbytes - acc
                    mv = memoryview(p)
                    data.append(mv[:k])
                    rest.append(mv[k:])
                acc += len(p)
            self._parts, self._len = rest, self._len - nbytes
        self._room.set()
        off = self.start
        self.start += nbytes
        sync = want_sync and self.synced < self.start
        if data is None and not sync:
            return None
        # Submitted to the thread pool right away (to_thread would wait for a loop turn), so
        # the device writes while the put goes on copying its next chunks.
        task = asyncio.get_running_loop().run_in_executor(None, log.device_write, self.zone, off,
                                                          data, sync)
        return task, self.start, nbytes, sync

    async def _run(self) -> None:
        log = self.log
        io: tuple[asyncio.Future, int, int, bool] | None = None
        try:
            while True:
                if io is None:
                    self._wake.clear()
                    io = self._launch()
                    if io is None:
                        self._publish()
                        if self.closing and not self._len and not self._ops and not self._waiters:
                            await asyncio.to_thread(log.finish_zone, self.zone, self.synced)
                            break
                        await self._wake.wait()
                        continue
                task, new_start, nbytes, sync = io
                try:
                    seconds = await task
                except BaseException:
                    io = None
                    raise
                log.note_write(self.zone, new_start, nbytes, seconds)
                if sync:
                    self.synced = new_start
                # Start the next write before indexing this one: the device works while the
                # index transaction runs and the woken puts prepare the batch after that.
                io = self._launch()
                self._publish()
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear about it
            self.error = exc if isinstance(exc, Exception) else RuntimeError("writer stopped")
            self.closing = True
            for _, fut in self._waiters:
                if not fut.done():
                    fut.set_exception(self.error)
            self._waiters.clear()
            for _, _, done in self._ops:
                if done:
                    done(False)
            self._ops.clear()
            self._room.set()
            if io is not None:
                # The device call cannot be cancelled: let it end before the zone is given up.
                await asyncio.gather(io[0], return_exceptions=True)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.finished.set()
            self.log.writer_gone(self)

    def _publish(self) -> None:
        """Index what is durable now, then wake the puts waiting for it."""
        if self.synced <= self._published and not any(
                e <= self.synced for e, _ in self._waiters):
            return
        self._published = self.synced
        ready = [op for op in self._ops if op[0] <= self.synced]
        self._ops = [op for op in self._ops if op[0] > self.synced]
        results = self.log.index_flush(self.zone, self.synced, [e for _, e, _ in ready])
        for (_, _, done), won in zip(ready, results, strict=True):
            if done:
                done(won)
        waiting = []
        for end, fut in self._waiters:
            if end <= self.synced:
                if not fut.done():
                    fut.set_result(None)
            else:
                waiting.append((end, fut))
        self._waiters = waiting

    async def stop(self) -> None:
        """Flush and close (not finish) at log close."""
        self._wake.set()
        if self._waiters or self._ops or self._len:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append((self.tail, fut))
            self._wake.set()
            try:
                await fut
            except Exception:  # noqa: BLE001 - reported by the puts that failed
                pass
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
