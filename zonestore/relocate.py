"""Reclaim's copy of a record (ZoneLog.relocate): only the evacuated zone's chunks move."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from zonestore.allocator import MIN_SPLIT, _PutCursor
from zonestore.errors import CorruptRecord
from zonestore.index import Entry
from zonestore.record import Extent, RecordType, crc32c, encode_header, header_size


class RecordRelocation:
    """Mixin of ZoneLog: reclaim's copies."""

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
