"""An emulated host-managed zoned drive on any filesystem, enforcing the real device's rules.

Layout (a directory, like Linux zonefs): `zoned.json` holds the geometry; `zones/NNNNNN` is one
file per zone. For a sequential zone the file's size *is* the write pointer, so the write pointer
survives `kill -9` without any extra bookkeeping and can never run ahead of data that reached
the kernel; `sync` makes it durable with fdatasync. A zone finished before reaching its capacity
is marked by an empty `NNNNNN.full` file; an `NNNNNN.offline` file takes a zone offline (fault
injection). Open/closed conditions live in memory only: as after a drive's power cycle, a
partly written zone comes back CLOSED.

Writes go through the page cache and are dropped from it once durable (POSIX_FADV_DONTNEED),
so streamed data does not pile up there (see shared/notes/performance.md). A large write starts
its writeback at once (sync_file_range), as a real drive's O_DIRECT writes reach the device
when issued: the disk works while the next chunks are prepared, and a sync waits only for
the tail (RocksDB's bytes_per_sync does the same).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from zonestore.device import (
    DeviceInfo,
    OutOfRangeError,
    WritePointerError,
    Zone,
    ZoneCapacityError,
    ZoneCondition,
    ZonedDevice,
    ZoneError,
    ZoneStateError,
    ZoneType,
)

GEOMETRY_FILE = "zoned.json"
FORMAT_VERSION = 1
MiB = 1024 * 1024


@dataclass(frozen=True)
class Geometry:
    """Parameters of an emulated drive. Defaults: a scaled-down host-managed SMR drive."""

    nr_zones: int = 64
    zone_size: int = 256 * MiB
    zone_capacity: int = 256 * MiB
    nr_conventional: int = 2
    block_size: int = 4096
    max_open_zones: int = 12
    max_active_zones: int = 14
    version: int = FORMAT_VERSION

    def validate(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"invalid zoned drive geometry: {msg}")

        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            bad(f"block_size {self.block_size} is not a power of two")
        if self.block_size < 512:
            bad("block_size must be at least 512")
        if self.zone_size <= 0 or self.zone_size % self.block_size:
            bad(f"zone_size {self.zone_size} is not a multiple of block_size {self.block_size}")
        if not 0 < self.zone_capacity <= self.zone_size or self.zone_capacity % self.block_size:
            bad(f"zone_capacity {self.zone_capacity} must be a block multiple, 0 < cap <= zone_size")
        if self.nr_zones <= 0:
            bad("nr_zones must be positive")
        if not 0 <= self.nr_conventional < self.nr_zones:
            bad("nr_conventional must leave at least one sequential zone")
        if self.max_open_zones < 0 or self.max_active_zones < 0:
            bad("zone limits must be >= 0 (0 = unlimited)")
        if self.max_active_zones and self.max_open_zones > self.max_active_zones:
            bad("max_open_zones may not exceed max_active_zones")


def create_emulated_drive(path: str | Path, geometry: Geometry | None = None) -> Path:
    """Create an emulated drive at `path` (a new or empty directory). Nothing is allocated yet."""
    geometry = geometry or Geometry()
    geometry.validate()
    root = Path(path)
    if (root / GEOMETRY_FILE).exists():
        raise FileExistsError(f"{root} already holds a zoned drive")
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty")
    (root / "zones").mkdir(parents=True, exist_ok=True)
    for i in range(geometry.nr_zones):
        with open(root / "zones" / f"{i:06d}", "wb") as f:
            if i < geometry.nr_conventional:
                f.truncate(geometry.zone_size)  # sparse: random-write zone of full size
    tmp = root / (GEOMETRY_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(geometry), indent=2) + "\n")
    os.replace(tmp, root / GEOMETRY_FILE)
    _fsync_dir(root / "zones")
    _fsync_dir(root)
    return root


def is_emulated_drive(path: str | Path) -> bool:
    return (Path(path) / GEOMETRY_FILE).is_file()


WRITEBACK_MIN = 1 << 20  # writes at least this large start their writeback at once
_SYNC_FILE_RANGE_WRITE = 2
try:
    _sync_file_range = ctypes.CDLL(None, use_errno=True).sync_file_range
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
except (AttributeError, OSError):  # not Linux: the next sync writes everything back
    _sync_file_range = None


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to write these dirty pages out now, without waiting for them (a hint:
    its result is not needed, fdatasync still makes them durable)."""
    if _sync_file_range is not None and length >= WRITEBACK_MIN:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _pwritev_all(fd: int, views: list[memoryview], offset: int) -> None:
    """Gather-write every view at `offset`, retrying short writes (no joining copy)."""
    views = [v for v in views if v.nbytes]
    while views:
        batch = views[:_IOV_MAX]
        n = os.pwritev(fd, batch, offset)
        if n <= 0:
            raise ZoneError("short write")
        offset += n
        # Drop what was written; keep the unwritten tail of a partly written view.
        while n and views:
            if n >= views[0].nbytes:
                n -= views[0].nbytes
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EmulatedZonedDevice(ZonedDevice):
    """A zoned drive emulated by one file per zone in a directory (see module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path)
        gfile = self.root / GEOMETRY_FILE
        if not gfile.is_file():
            raise FileNotFoundError(f"{self.root} is not an emulated zoned drive (no {GEOMETRY_FILE})")
        raw = json.loads(gfile.read_text())
        if raw.get("version") != FORMAT_VERSION:
            raise ValueError(f"{gfile}: unsupported format version {raw.get('version')}")
        self.geometry = Geometry(**raw)
        self.geometry.validate()
        g = self.geometry
        self.info = DeviceInfo(
            path=str(self.root),
            backend="emulated",
            nr_zones=g.nr_zones,
            zone_size=g.zone_size,
            logical_block_size=g.block_size,
            physical_block_size=g.block_size,
            max_open_zones=g.max_open_zones,
            max_active_zones=g.max_active_zones,
        )
        self._lock = threading.Lock()
        self._fds: list[int] = []
        self._wp: list[int] = []  # relative to zone start
        self._cond: list[ZoneCondition] = []
        self._busy: set[int] = set()  # zones with a write in flight
        self._dirty: set[int] = set()
        self._closed = False
        zdir = self.root / "zones"
        for i in range(g.nr_zones):
            fd = os.open(zdir / f"{i:06d}", os.O_RDWR)
            self._fds.append(fd)
            if i < g.nr_conventional:
                self._wp.append(0)
                self._cond.append(ZoneCondition.NOT_WP)
                continue
            size = os.fstat(fd).st_size
            aligned = min(size - size % g.block_size, g.zone_capacity)
            if aligned != size:
                # A write killed mid-way left a partial block (never acknowledged): drop it.
                os.ftruncate(fd, aligned)
            self._wp.append(aligned)
            if self._marker(i, "offline").exists():
                cond = ZoneCondition.OFFLINE
            elif aligned >= g.zone_capacity or self._marker(i, "full").exists():
                cond = ZoneCondition.FULL
            elif aligned == 0:
                cond = ZoneCondition.EMPTY
            else:
                cond = ZoneCondition.CLOSED
            self._cond.append(cond)

    # ----------------------------------------------------------------- helpers

    def _marker(self, index: int, kind: str) -> Path:
        return self.root / "zones" / f"{index:06d}.{kind}"

    def _is_conventional(self, index: int) -> bool:
        return index < self.geometry.nr_conventional

    def _counts(self) -> tuple[int, int]:
        opened = sum(1 for c in self._cond if c.is_open)
        active = sum(1 for c in self._cond if c.is_active)
        return opened, active

    def _zone_locked(self, i: int) -> Zone:
        g = self.geometry
        start = i * g.zone_size
        if self._is_conventional(i):
            return Zone(i, start, g.zone_size, g.zone_size, start, ZoneType.CONVENTIONAL,
                        ZoneCondition.NOT_WP)
        cond = self._cond[i]
        wp = start + self._wp[i]
        if cond is ZoneCondition.FULL:
            wp = start + g.zone_size  # Linux reports the WP of a full zone as the zone's end
        return Zone(i, start, g.zone_size, g.zone_capacity, wp,
                    ZoneType.SEQUENTIAL_WRITE_REQUIRED, cond)

    def _check_usable(self) -> None:
        if self._closed:
            raise ZoneStateError("device is closed")

    def _open_locked(self, i: int, explicit: bool) -> None:
        """Transition zone i to an open condition, enforcing the open/active limits."""
        cond = self._cond[i]
        target = ZoneCondition.EXPLICIT_OPEN if explicit else ZoneCondition.IMPLICIT_OPEN
        if cond is ZoneCondition.EXPLICIT_OPEN or (cond is target):
            return
        if cond is ZoneCondition.IMPLICIT_OPEN:  # implicit -> explicit needs no new slot
            self._cond[i] = target
            return
        if cond not in (ZoneCondition.EMPTY, ZoneCondition.CLOSED):
            raise ZoneStateError(f"zone {i} is {cond.name} and cannot be opened")
        self._check_open_limits(i, cond, *self._counts())
        self._cond[i] = target

    def _seq_zone(self, index: int, op: str) -> None:
        self._check_zone_index(index)
        if self._is_conventional(index):
            raise ZoneStateError(f"cannot {op} conventional zone {index}")
        if self._cond[index] is ZoneCondition.OFFLINE:
            raise ZoneStateError(f"zone {index} is offline")
        if index in self._busy:
            raise ZoneStateError(f"cannot {op} zone {index}: a write is in flight")

    # --------------------------------------------------------------- interface

    def report_zones(self, first: int = 0, count: int | None = None) -> list[Zone]:
        with self._lock:
            self._check_usable()
            last = self.geometry.nr_zones if count is None else min(first + count,
                                                                    self.geometry.nr_zones)
            if first < 0 or first >= self.geometry.nr_zones:
                raise OutOfRangeError(f"zone {first} outside device")
            return [self._zone_locked(i) for i in range(first, last)]

    def open_zone(self, index: int) -> None:
        with self._lock:
            self._check_usable()
            self._seq_zone(index, "open")
            self._open_locked(index, explicit=True)

    def close_zone(self, index: int) -> None:
        with self._lock:
            self._check_usable()
            self._seq_zone(index, "close")
            cond = self._cond[index]
            if cond.is_open:
                self._cond[index] = ZoneCondition.CLOSED if self._wp[index] else ZoneCondition.EMPTY
            elif cond not in (ZoneCondition.CLOSED, ZoneCondition.EMPTY, ZoneCondition.FULL):
                raise ZoneStateError(f"zone {index} is {cond.name} and cannot be closed")

    def finish_zone(self, index: int) -> None:
        with self._lock:
            self._check_usable()
            self._seq_zone(index, "finish")
            cond = self._cond[index]
            if cond is ZoneCondition.FULL:
                return
            if cond is ZoneCondition.EMPTY:
                # Finishing an empty zone makes it active for an instant: the limit applies.
                self._open_locked(index, explicit=False)
            marker = self._marker(index, "full")
            marker.touch()
            _fsync_dir(marker.parent)
            self._cond[index] = ZoneCondition.FULL

    def reset_zone(self, index: int) -> None:
        with self._lock:
            self._check_usable()
            self._seq_zone(index, "reset")
            fd = self._fds[index]
            os.ftruncate(fd, 0)
            os.fsync(fd)
            # Truncate before dropping the marker: a crash in between leaves an empty FULL zone,
            # never a non-empty zone that looks writable.
            self._marker(index, "full").unlink(missing_ok=True)
            _fsync_dir(self.root / "zones")
            self._wp[index] = 0
            self._cond[index] = ZoneCondition.EMPTY
            self._dirty.discard(index)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self.writev(offset, [data])

    def writev(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        views = [memoryview(p).cast("B") for p in parts]
        length = sum(v.nbytes for v in views)
        g = self.geometry
        with self._lock:
            self._check_usable()
            if not 0 <= offset < g.nr_zones * g.zone_size:
                raise OutOfRangeError(f"write at {offset} outside device")
            index = offset // g.zone_size
            rel = offset - index * g.zone_size
            self._check_write_alignment(offset, length)
            if self._is_conventional(index):
                if rel + length > g.zone_size:
                    raise ZoneCapacityError(f"write crosses the end of conventional zone {index}")
            else:
                cond = self._cond[index]
                if cond in (ZoneCondition.OFFLINE, ZoneCondition.READONLY):
                    raise ZoneStateError(f"zone {index} is {cond.name}")
                if cond is ZoneCondition.FULL:
                    raise ZoneCapacityError(f"zone {index} is full")
                if index in self._busy:
                    raise ZoneStateError(f"zone {index} already has a write in flight")
                if rel != self._wp[index]:
                    raise WritePointerError(
                        f"write at offset {offset} is not at zone {index}'s write pointer "
                        f"{index * g.zone_size + self._wp[index]}"
                    )
                if rel + length > g.zone_capacity:
                    raise ZoneCapacityError(
                        f"write of {length} bytes at zone {index}'s write pointer exceeds its "
                        f"capacity by {rel + length - g.zone_capacity} bytes"
                    )
                self._open_locked(index, explicit=False)
            self._busy.add(index)
        try:
            fd = self._fds[index]
            _pwritev_all(fd, views, rel)
            _start_writeback(fd, rel, length)
        except BaseException:
            with self._lock:
                self._busy.discard(index)
                if not self._is_conventional(index):
                    # Keep the file (the WP) at a block boundary; anything after the old WP
                    # was never acknowledged.
                    os.ftruncate(fd, self._wp[index])
            raise
        with self._lock:
            self._busy.discard(index)
            self._dirty.add(index)
            if not self._is_conventional(index):
                self._wp[index] = rel + length
                if self._wp[index] >= g.zone_capacity:
                    self._cond[index] = ZoneCondition.FULL

    def read(self, offset: int, length: int) -> bytes:
        g = self.geometry
        if length < 0:
            raise OutOfRangeError("negative read length")
        if length == 0:
            return b""
        with self._lock:
            self._check_usable()
            if not 0 <= offset < g.nr_zones * g.zone_size:
                raise OutOfRangeError(f"read at {offset} outside device")
            index = offset // g.zone_size
            rel = offset - index * g.zone_size
            if self._is_conventional(index):
                limit = g.zone_size
            else:
                if self._cond[index] is ZoneCondition.OFFLINE:
                    raise ZoneStateError(f"zone {index} is offline")
                limit = self._wp[index]
            if rel + length > limit:
                raise OutOfRangeError(
                    f"read of {length} bytes at {offset} goes past zone {index}'s written data"
                )
            fd = self._fds[index]
        # pread fills a new bytes object directly: one copy (the kernel's), where reading into
        # a bytearray and converting it to bytes made two.
        data = os.pread(fd, length, rel)
        if len(data) == length:
            return data
        parts = [data]
        done = len(data)
        while done < length:
            more = os.pread(fd, length - done, rel + done)
            if not more:
                raise ZoneError(f"short read from zone {index}")
            parts.append(more)
            done += len(more)
        return b"".join(parts)

    def sync(self, zones: Iterable[int] | None = None) -> None:
        with self._lock:
            self._check_usable()
            todo = set(self._dirty) if zones is None else set(zones) & self._dirty
            self._dirty -= todo
        for i in todo:
            fd = self._fds[i]
            try:
                os.fdatasync(fd)
            except BaseException:
                with self._lock:
                    self._dirty.add(i)
                raise
            # Durable now: drop it from the page cache so streamed data does not pile up there.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    # ------------------------------------------------------------ fault injection

    def set_offline(self, index: int) -> None:
        """Take a zone offline, as a failing drive would (tests and drills)."""
        with self._lock:
            self._seq_zone(index, "take offline")
            self._marker(index, "offline").touch()
            self._cond[index] = ZoneCondition.OFFLINE
