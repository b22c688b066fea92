"""Reads of the zone log: CRC-checked extents, grouped per zone into one I/O hand-off, that
follow a record moved by reclaim while being read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from zonestore.errors import CorruptRecord, InvalidRange, RecordNotFound
from zonestore.ids import validate_record_id
from zonestore.index import REC, Entry
from zonestore.logtypes import RecordInfo, _info
from zonestore.record import Extent, crc32c

GROUP_SLACK = 64 * 1024  # a read of one chunk may take extents of this much more along


class RecordReader:
    """Mixin of ZoneLog: head, get, find, scan."""

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
