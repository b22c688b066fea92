"""The zone log's index: record id -> extents, kept in SQLite (WAL) beside the drive.

The index is a cache of what the zones say: it can always be rebuilt by scanning every zone
up to its write pointer (see fsck.py). Per zone it keeps the live byte count (for reclaim and
stats) and the write pointer up to which the index is known (`indexed_wp`), so that after a
crash only the zones' tails need scanning.

Tombstones live in the same table as records (kind = TOMB): an id has at most one row, the
winner by (seq, gen) among every copy ever written. `dead` remembers which zones still hold
superseded copies of an id (records and tombstones); reclaim keeps a tombstone while such copies may exist
outside the tombstone's zone, so a delete can never be undone by a rebuild.

All methods are synchronous and meant for the event loop's thread (statements take µs).
"""

from __future__ import annotations

import sqlite3
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zonestore.record import Extent

SCHEMA_VERSION = 1
REC = 0
TOMB = 1
_EXT = struct.Struct("<QIII")  # payload offset, length, crc32c, device bytes the chunk occupies

META_EVERY = 1.0  # seconds between writes of the counters
COUNTERS = ("user_bytes_written", "device_bytes_written", "gc_bytes_copied", "flushes",
            "flush_bytes", "crc_failures", "read_errors")


@dataclass(frozen=True, slots=True)
class Entry:
    """One index row: a live record, or the tombstone that deleted an id."""

    id: str
    kind: int
    seq: int
    gen: int
    length: int
    crc: int
    stream: str
    meta: bytes
    extents: tuple[Extent, ...]
    ext_sizes: tuple[int, ...]  # device bytes of each chunk record (0 when inline)
    commit_off: int  # device offset of the COMMIT / TOMBSTONE record
    commit_size: int

    def zone_bytes(self, zone_size: int) -> dict[int, int]:
        """Device bytes this entry occupies per zone."""
        out: dict[int, int] = {}
        z = self.commit_off // zone_size
        out[z] = out.get(z, 0) + self.commit_size
        for e, size in zip(self.extents, self.ext_sizes, strict=True):
            if size:
                z = e.offset // zone_size
                out[z] = out.get(z, 0) + size
        return out


def pack_extents(extents: tuple[Extent, ...], sizes: tuple[int, ...]) -> bytes:
    return b"".join(_EXT.pack(e.offset, e.length, e.crc, s)
                    for e, s in zip(extents, sizes, strict=True))


def unpack_extents(blob: bytes) -> tuple[tuple[Extent, ...], tuple[int, ...]]:
    exts, sizes = [], []
    for off, ln, crc, size in _EXT.iter_unpack(blob):
        exts.append(Extent(off, ln, crc))
        sizes.append(size)
    return tuple(exts), tuple(sizes)


_COLS = "id, kind, seq, gen, length, crc, stream, meta, extents, commit_off, commit_size"


def _row_entry(row: tuple) -> Entry:
    exts, sizes = unpack_extents(row[8])
    return Entry(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], exts, sizes,
                 row[9], row[10])


class IndexMismatch(ValueError):
    """The index file belongs to a drive of another geometry."""


class Index:
    def __init__(self, path: str | Path, *, zone_size: int, nr_zones: int) -> None:
        self.path = Path(path)
        self.zone_size = zone_size
        self.created = not self.path.exists()
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._depth = 0
        self._open = False  # a transaction is open (lazy mode keeps one open between units)
        self.lazy = False
        self._meta_at = 0.0
        self._force_meta = False
        self._records = 0  # live records, counted at open and kept up to date
        self._dirty: set[int] = set()
        self.max_seq = 0
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.indexed_wp: dict[int, int] = {}
        self.live: dict[int, int] = {}
        self.sealed: set[int] = set()  # FULL zones whose data ends exactly at indexed_wp
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);
            CREATE TABLE IF NOT EXISTS records(
                id TEXT PRIMARY KEY, kind INT, seq INT, gen INT, length INT, crc INT,
                stream TEXT, meta BLOB, extents BLOB, commit_off INT, commit_size INT);
            CREATE TABLE IF NOT EXISTS dead(zone INT, id TEXT, seq INT, gen INT,
                PRIMARY KEY(zone, id, seq, gen)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS dead_by_id ON dead(id);
            CREATE TABLE IF NOT EXISTS zones(zone INT PRIMARY KEY, indexed_wp INT, live INT,
                                             sealed INT);
            """
        )
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        want = {"schema": SCHEMA_VERSION, "zone_size": zone_size, "nr_zones": nr_zones}
        if meta:
            for k, v in want.items():
                if meta.get(k) != v:
                    raise IndexMismatch(
                        f"{self.path}: index {k} is {meta.get(k)}, the drive has {v}; "
                        "rebuild it with `zonegate drive fsck --rebuild`"
                    )
        else:
            with self.txn():
                self.db.executemany("INSERT INTO meta VALUES (?, ?)", list(want.items()))
        self._reload_state()

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def txn(self) -> Iterator[None]:
        """One unit of index changes; in-memory zone state and counters are written at its end.
        With `lazy` set, units are savepoints inside a longer transaction that `commit()` ends
        (the zone log commits a few ms later, off the puts' path): the index may then lag the
        device after a crash, which recovery handles anyway."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        if not self._open:
            self.db.execute("BEGIN")
            self._open = True
        self.db.execute("SAVEPOINT unit")
        self._depth = 1
        try:
            yield
            self._write_state()
            self.db.execute("RELEASE unit")
        except BaseException:
            self.db.execute("ROLLBACK TO unit")
            self.db.execute("RELEASE unit")
            self._reload_state()
            raise
        finally:
            self._depth = 0
        if not self.lazy:
            self.commit()

    def commit(self) -> None:
        """Make the changes so far durable in SQLite (WAL)."""
        if self._open and not self._depth:
            self.db.execute("COMMIT")
            self._open = False

    def _write_state(self) -> None:
        if self._dirty:
            self.db.executemany(
                "INSERT OR REPLACE INTO zones VALUES (?, ?, ?, ?)",
                [(z, self.indexed_wp.get(z, 0), self.live.get(z, 0), int(z in self.sealed))
                 for z in self._dirty],
            )
            self._dirty.clear()
        # Counters and the seq high-water mark change with every transaction but only matter
        # for metrics (a crash may lose a second of counts) and as a floor for seq (open takes
        # the max with the records and the zone tails): written at most once a second.
        now = time.monotonic()
        if self._force_meta or now - self._meta_at >= META_EVERY:
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [("max_seq", self.max_seq), *self.counters.items()])
            self._meta_at = now
            self._force_meta = False

    def flush_meta(self) -> None:
        """Write the counters now (close, tools)."""
        self._force_meta = True
        with self.txn():
            pass

    def _reload_state(self) -> None:
        self._records = self.db.execute(
            "SELECT COUNT(*) FROM records WHERE kind = 0").fetchone()[0]
        self._dirty.clear()
        self.indexed_wp.clear()
        self.live.clear()
        self.sealed.clear()
        for z, iwp, live, sealed in self.db.execute("SELECT * FROM zones"):
            self.indexed_wp[z] = iwp
            self.live[z] = live
            if sealed:
                self.sealed.add(z)
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        top = self.db.execute("SELECT MAX(seq) FROM records").fetchone()[0] or 0
        self.max_seq = max(int(meta.get("max_seq", 0)), top)
        self.counters = {k: int(meta.get(k, 0)) for k in COUNTERS}

    def close(self, *, flush: bool = True) -> None:
        """Close; `flush=False` for a reader (fsck) that must not write to a live index."""
        try:
            self.lazy = False
            if flush:
                self.flush_meta()
            self.commit()
        finally:
            self.db.close()

    def wipe(self) -> None:
        """Forget everything (before a full rebuild from the zones); counters are kept."""
        with self.txn():
            self.db.execute("DELETE FROM records")
            self.db.execute("DELETE FROM dead")
            self.db.execute("DELETE FROM zones")
            self._records = 0
            self.indexed_wp.clear()
            self.live.clear()
            self.sealed.clear()
            self._dirty.clear()

    # ------------------------------------------------------------------ zone state

    def set_indexed_wp(self, zone: int, wp: int) -> None:
        if self.indexed_wp.get(zone) != wp:
            self.indexed_wp[zone] = wp
            self._dirty.add(zone)

    def seal(self, zone: int) -> None:
        """The zone was FINISHED with its data ending at indexed_wp: no need to scan past it."""
        self.sealed.add(zone)
        self._dirty.add(zone)

    def _add_live(self, zone_bytes: dict[int, int], sign: int) -> None:
        for z, n in zone_bytes.items():
            self.live[z] = self.live.get(z, 0) + sign * n
            self._dirty.add(z)

    def clear_zone(self, zone: int) -> None:
        """Forget everything about a zone that was reset (nothing live may point into it)."""
        self.db.execute("DELETE FROM dead WHERE zone = ?", (zone,))
        self.live[zone] = 0
        self.indexed_wp[zone] = 0
        self.sealed.discard(zone)
        self._dirty.add(zone)

    # ------------------------------------------------------------------ records

    def lookup(self, record_id: str) -> Entry | None:
        row = self.db.execute(f"SELECT {_COLS} FROM records WHERE id = ?", (record_id,)).fetchone()
        return _row_entry(row) if row else None

    def is_live(self, record_id: str) -> bool:
        """Whether the id's row is a live record (not a tombstone), without decoding it."""
        row = self.db.execute("SELECT kind FROM records WHERE id = ?", (record_id,)).fetchone()
        return row is not None and row[0] == REC

    def _mark_dead(self, e: Entry) -> None:
        # Superseded tombstones count too: a tombstone's reclaim copy must outlive the
        # original wherever that one survives (an evacuation that stopped half way).
        self.db.executemany(
            "INSERT OR IGNORE INTO dead VALUES (?, ?, ?, ?)",
            [(z, e.id, e.seq, e.gen) for z in e.zone_bytes(self.zone_size)],
        )

    def apply(self, e: Entry) -> bool:
        """Offer a committed record or tombstone; it becomes the id's row if it is newer than
        the current one by (seq, gen). Returns whether it won. Idempotent."""
        self.max_seq = max(self.max_seq, e.seq)
        row = (e.id, e.kind, e.seq, e.gen, e.length, e.crc, e.stream, e.meta,
               pack_extents(e.extents, e.ext_sizes), e.commit_off, e.commit_size)
        # The common case, a new id, in one statement.
        if self.db.execute("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                           "ON CONFLICT(id) DO NOTHING", row).rowcount == 1:
            self._add_live(e.zone_bytes(self.zone_size), +1)
            self._records += e.kind == REC
            return True
        cur = self.lookup(e.id)
        if cur is not None:
            if (cur.seq, cur.gen) >= (e.seq, e.gen):
                if (cur.seq, cur.gen, cur.commit_off) != (e.seq, e.gen, e.commit_off):
                    self._mark_dead(e)
                return False
            self._add_live(cur.zone_bytes(self.zone_size), -1)
            self._mark_dead(cur)
            self._records -= cur.kind == REC
        self.db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        row)
        self._add_live(e.zone_bytes(self.zone_size), +1)
        self._records += e.kind == REC
        return True

    def drop_tombstone(self, e: Entry) -> None:
        """Remove a tombstone that no longer shields anything (reclaim)."""
        self.db.execute("DELETE FROM records WHERE id = ? AND kind = ? AND seq = ? AND gen = ?",
                        (e.id, TOMB, e.seq, e.gen))
        self._add_live(e.zone_bytes(self.zone_size), -1)

    def tombstone_needed(self, e: Entry, zone: int) -> bool:
        """Whether older copies of e.id (records, or this tombstone's own earlier copies) may
        exist outside `zone`."""
        row = self.db.execute(
            "SELECT 1 FROM dead WHERE id = ? AND (seq < ? OR (seq = ? AND gen < ?)) "
            "AND zone != ? LIMIT 1",
            (e.id, e.seq, e.seq, e.gen, zone),
        ).fetchone()
        return row is not None

    def scan(self, prefix: str = "", after: str = "", limit: int = 1000) -> list[Entry]:
        lo = max(prefix, after)
        op = ">" if after and after >= prefix else ">="
        sql = f"SELECT {_COLS} FROM records WHERE kind = 0 AND id {op} ?"
        args: list = [lo]
        if prefix:
            sql += " AND id < ?"
            args.append(prefix + "\U0010ffff")
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        return [_row_entry(r) for r in self.db.execute(sql, args)]

    def all_entries(self) -> Iterator[Entry]:
        for row in self.db.execute(f"SELECT {_COLS} FROM records ORDER BY id"):
            yield _row_entry(row)

    def record_count(self) -> int:
        return self._records

