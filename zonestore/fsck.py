"""Scanning zones: index recovery on open, full rebuild, and `zonegate drive fsck`.

`scan_zone` walks records from a point in a zone up to its write pointer, skipping the zero
fill after flushes and resynchronising on the record magic after damaged bytes. `recover`
brings an index up to date with the device: it scans each zone from the point the index
already knows (`indexed_wp`) to the write pointer, checks that every COMMIT's chunks exist,
and offers the results to the index in (seq, gen) order — from 0 for a missing index, which
makes a full rebuild the same code path. A rebuilt index must equal a live one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from zonestore.device import OutOfRangeError, ZoneCondition, ZonedDevice
from zonestore.errors import CorruptRecord
from zonestore.index import REC, TOMB, Entry, Index
from zonestore.record import (
    FIXED_SIZE,
    FLAG_INLINE,
    MAGIC,
    Extent,
    Header,
    RecordType,
    crc32c,
    decode_commit,
    decode_header,
    header_size,
    inline_data_offset,
)

WINDOW = 128 * 1024
MAX_HEADER = header_size(255)


@dataclass
class ScanStats:
    zones_scanned: int = 0
    bytes_scanned: int = 0
    records: int = 0
    applied: int = 0
    incomplete: int = 0  # COMMITs whose chunks are missing or damaged
    damaged: int = 0  # bytes regions that are neither records nor zero fill
    full_rebuild: bool = False
    readable_end: int = 0  # where the last scan found the end of readable data
    # The last scan stopped at a record cut by the write pointer (a write killed mid-way):
    # where it starts, and where its header says it ends.
    cut_at: int | None = None
    cut_end: int = 0
    # zone -> relative offset where appends may resume (past a cut record)
    resume: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _read_upto(device: ZonedDevice, pos: int, n: int) -> bytes:
    """Up to n bytes at pos: fewer where the device refuses to read further (the data end
    of a zone FINISHED before its capacity is not reported by the device)."""
    try:
        return device.read(pos, n)
    except OutOfRangeError:
        pass
    bs = device.info.physical_block_size
    out = bytearray()
    while len(out) < n:
        at = pos + len(out)
        try:
            out += device.read(at, min(bs - at % bs, n - len(out)))
        except OutOfRangeError:
            break
    return bytes(out)


def scan_zone(device: ZonedDevice, start: int, end: int, stats: ScanStats | None = None,
              *, verify_data: bool = False) -> Iterator[tuple[Header, int, bytes | None]]:
    """Yield (header, device offset, payload) for each valid record in [start, end). Payloads
    are read for COMMIT and TOMBSTONE records (CRC-checked); for DATA only with verify_data."""
    stats = stats or ScanStats()
    stats.cut_at = None
    pos = start
    buf = b""
    buf_off = start
    while pos < end:
        rel = pos - buf_off
        if rel < 0 or rel + MAX_HEADER > len(buf) and buf_off + len(buf) < end:
            buf_off = pos
            buf = _read_upto(device, pos, min(WINDOW, end - pos))
            rel = 0
            if buf_off + len(buf) < end and len(buf) < min(WINDOW, end - pos):
                end = buf_off + len(buf)  # nothing readable past here
        try:
            h = decode_header(buf, rel)
        except CorruptRecord:
            nxt = buf.find(MAGIC, rel + 1)
            stop = len(buf) if nxt < 0 else nxt
            if buf[rel:stop].strip(b"\0"):
                stats.damaged += 1
            if nxt >= 0:
                pos = buf_off + nxt
                continue
            if buf_off + len(buf) >= end:
                break
            pos = buf_off + max(rel + 1, len(buf) - len(MAGIC) + 1)
            buf = b""
            continue
        if h is None:
            break  # a header cut by the write pointer: a flush that never completed
        rec_end = pos + h.record_size
        if rec_end > end:
            stats.cut_at, stats.cut_end = pos, rec_end
            break
        payload = None
        if h.type is not RecordType.DATA or verify_data:
            p0 = pos + h.size - buf_off
            if rec_end - buf_off <= len(buf):
                payload = buf[p0:rec_end - buf_off]
            else:
                payload = device.read(pos + h.size, h.payload_len)
            if crc32c(payload) != h.payload_crc:
                stats.damaged += 1
                pos = rec_end
                continue
        stats.records += 1
        yield h, pos, payload
        pos = rec_end
    stats.bytes_scanned += end - start
    stats.readable_end = end


def _chunk_ok(device: ZonedDevice, chunks: dict[int, Header], h: Header, ext: Extent,
              logical: int, wps: dict[int, int]) -> bool:
    ch = chunks.get(ext.offset)
    if ch is None:
        hs = header_size(len(h.id.encode()))
        z = ext.offset // device.info.zone_size
        if ext.offset - hs < z * device.info.zone_size or ext.offset + ext.length > wps.get(z, 0):
            return False
        try:
            ch = decode_header(device.read(ext.offset - hs, hs))
        except (CorruptRecord, OSError):
            return False
        if ch is None:
            return False
    # A reclaim copy (gen g) keeps pointing at chunks of older generations it did not move.
    return (ch.type is RecordType.DATA and ch.id == h.id and ch.seq == h.seq
            and ch.gen <= h.gen and ch.arg == logical and ch.payload_len == ext.length
            and ch.payload_crc == ext.crc)


def commit_entry(device: ZonedDevice, h: Header, off: int, payload: bytes,
                 chunks: dict[int, Header], wps: dict[int, int]) -> Entry | None:
    """The index entry a COMMIT record stands for, or None if its chunks are not all there."""
    inline = bool(h.flags & FLAG_INLINE)
    try:
        c = decode_commit(payload, inline)
    except CorruptRecord:
        return None
    if c.length != h.arg:
        return None
    if inline:
        assert c.inline is not None
        if crc32c(c.inline) != c.crc:
            return None
        start = off + h.size + inline_data_offset(c.stream, len(c.meta))
        exts: tuple[Extent, ...] = (Extent(start, c.length, c.crc),)
        sizes: tuple[int, ...] = (0,)
    else:
        logical = 0
        for ext in c.extents:
            if not _chunk_ok(device, chunks, h, ext, logical, wps):
                return None
            logical += ext.length
        if logical != c.length:
            return None
        exts = c.extents
        hs = header_size(len(h.id.encode()))
        sizes = tuple(hs + e.length for e in exts)
    return Entry(h.id, REC, h.seq, h.gen, c.length, c.crc, c.stream, c.meta, exts, sizes, off,
                 h.record_size)


def recover(device: ZonedDevice, index: Index,
            progress: Callable[[int, int], None] | None = None) -> ScanStats:
    """Bring `index` up to date with the zones (see module docstring)."""
    stats = ScanStats()
    zones = [z for z in device.report_zones() if z.is_sequential]
    # Where each zone's data ends. A FULL zone reports its WP at the zone's end; if it was
    # sealed (finished by the log, which indexed it first) the index knows the real end.
    ends: dict[int, int] = {}
    for z in zones:
        if z.cond is ZoneCondition.FULL and z.index in index.sealed:
            ends[z.index] = index.indexed_wp.get(z.index, 0)
        else:
            ends[z.index] = z.written
    wps = {z.index: z.start + ends[z.index] for z in zones}
    # A zone behind the index was reset by reclaim after its records moved out; anything else
    # (a zone that lost data the index still points at) means the index cannot be trusted.
    behind: set[int] = set()
    for z in zones:
        iwp = index.indexed_wp.get(z.index, 0)
        if ends[z.index] < iwp:
            behind.add(z.index)
            if index.live.get(z.index, 0) > 0:
                stats.full_rebuild = True
                stats.notes.append(f"zone {z.index} is behind the index: rebuilding it")
    if stats.full_rebuild:
        index.wipe()
    else:
        # Reset by reclaim after its records moved out (the crash came before the index
        # heard of the reset): forget the zone and scan whatever it holds now from its start.
        with index.txn():
            for zi in behind:
                index.clear_zone(zi)
    commits: list[tuple[Header, int, bytes]] = []
    tombs: list[tuple[Header, int]] = []
    chunks: dict[int, Header] = {}
    max_seq = index.max_seq
    total = sum(max(0, ends[z.index] - index.indexed_wp.get(z.index, 0)) for z in zones)
    done = 0
    for z in zones:
        iwp = index.indexed_wp.get(z.index, 0)
        if ends[z.index] <= iwp:
            continue
        stats.zones_scanned += 1
        stats.readable_end = z.start + ends[z.index]
        for h, off, payload in scan_zone(device, z.start + iwp, z.start + ends[z.index], stats):
            max_seq = max(max_seq, h.seq)
            if h.type is RecordType.DATA:
                chunks[off + h.size] = h
            elif h.type is RecordType.COMMIT:
                assert payload is not None
                commits.append((h, off, payload))
            else:
                tombs.append((h, off))
        done += ends[z.index] - iwp
        if stats.cut_at is not None and z.cond is not ZoneCondition.FULL:
            # New records must not land inside the cut record's claimed length, or a scan
            # from the zone start would skip them; and the cut record must be seen by the
            # next recovery too, so the index stays known only up to its start.
            bs = device.info.physical_block_size
            stats.resume[z.index] = -(-(stats.cut_end - z.start) // bs) * bs
            ends[z.index] = stats.cut_at - z.start
        if z.cond is ZoneCondition.FULL:
            ends[z.index] = max(iwp, stats.readable_end - z.start)
            wps[z.index] = z.start + ends[z.index]
        if progress:
            progress(done, total)
    entries: list[Entry] = []
    for h, off, payload in commits:
        e = commit_entry(device, h, off, payload, chunks, wps)
        if e is None:
            stats.incomplete += 1
        else:
            entries.append(e)
    for h, off in tombs:
        entries.append(Entry(h.id, TOMB, h.seq, h.gen, 0, 0, "", b"", (), (), off, h.record_size))
    entries.sort(key=lambda e: (e.seq, e.gen))
    with index.txn():
        for e in entries:
            stats.applied += index.apply(e)
        for z in zones:
            index.set_indexed_wp(z.index, ends[z.index])
            if z.cond is ZoneCondition.FULL:
                index.seal(z.index)
        index.max_seq = max(index.max_seq, max_seq)
    return stats


# --------------------------------------------------------------------------- fsck


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            p.unlink()


def rebuild_index(device: ZonedDevice, path: str | Path,
                  progress: Callable[[int, int], None] | None = None) -> tuple[Index, ScanStats]:
    """A fresh index at `path` (replacing any file there) built from the zones alone."""
    path = Path(path)
    _remove_db(path)
    index = Index(path, zone_size=device.info.zone_size, nr_zones=device.info.nr_zones)
    return index, recover(device, index, progress)


def compare_indexes(live: Index, rebuilt: Index) -> list[str]:
    """Differences between two indexes of the same drive, one line each (empty = equal)."""
    diffs: list[str] = []
    a = {e.id: e for e in live.all_entries()}
    b = {e.id: e for e in rebuilt.all_entries()}
    for rid in sorted(a.keys() | b.keys()):
        x, y = a.get(rid), b.get(rid)
        kind = {REC: "record", TOMB: "tombstone"}
        if x is None:
            diffs.append(f"{rid}: missing from the live index (zones hold {kind[y.kind]} "
                         f"seq {y.seq})")
        elif y is None:
            diffs.append(f"{rid}: live index has {kind[x.kind]} seq {x.seq}, zones do not")
        elif x != y:
            fields = [f for f in Entry.__slots__ if getattr(x, f) != getattr(y, f)]
            diffs.append(f"{rid}: differs in {', '.join(fields)} (live seq {x.seq} gen {x.gen}, "
                         f"zones seq {y.seq} gen {y.gen})")
    for z in sorted(live.live.keys() | rebuilt.live.keys()):
        la, lb = live.live.get(z, 0), rebuilt.live.get(z, 0)
        if la != lb:
            diffs.append(f"zone {z}: live index counts {la} live bytes, zones say {lb}")
    return diffs


def fsck(device: ZonedDevice, index_path: str | Path, *, rebuild: bool = False,
         progress: Callable[[int, int], None] | None = None) -> tuple[list[str], ScanStats]:
    """Rebuild the index from the zones beside the live one and compare; with `rebuild`,
    replace the live index by the rebuilt one (keeping its counters)."""
    index_path = Path(index_path)
    tmp = Path(str(index_path) + ".fsck")
    rebuilt, stats = rebuild_index(device, tmp, progress)
    try:
        if index_path.exists():
            live = Index(index_path, zone_size=device.info.zone_size,
                         nr_zones=device.info.nr_zones)
            try:
                diffs = compare_indexes(live, rebuilt)
                counters = dict(live.counters)
            finally:
                live.close(flush=False)
        else:
            # A drive never opened has no index yet; that is only a difference if its zones
            # hold something the missing index would have to know.
            held = next(iter(rebuilt.all_entries()), None) is not None or any(rebuilt.live.values())
            diffs = [f"{index_path}: no live index"] if held else []
            counters = {}
        if rebuild:
            with rebuilt.txn():
                rebuilt.counters.update(counters)
    finally:
        rebuilt.close()
    if rebuild:
        _remove_db(index_path)
        os.replace(tmp, index_path)
    else:
        _remove_db(tmp)
    return diffs, stats


__all__ = ["scan_zone", "recover", "rebuild_index", "compare_indexes", "fsck", "ScanStats",
           "FIXED_SIZE"]
