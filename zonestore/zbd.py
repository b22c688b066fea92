"""A real Linux zoned block device (host-managed SMR, NVMe ZNS, null_blk) behind ZonedDevice.

Talks to the kernel through libzbd (`zonestore/pyzbd.py`). The device is opened
`O_RDWR | O_DIRECT | O_EXCL`: data never sits in the page cache, and a second store cannot
open the same drive by mistake. O_DIRECT needs aligned memory, so every write and read goes
through a page-aligned bounce buffer (an anonymous mmap, one per thread).

We refuse, with the same errors and the same rules as the emulated drive, every request the
kernel would refuse (off the write pointer, unaligned, past capacity, over the device's own
open/active limits, a second write in flight on a zone), so a bad request never reaches the
device. To do that without a report-zones ioctl per write, the zone table is cached; the device
stays the authority: every report_zones refreshes the cache, and any failed device call
re-reads the zone before the error is raised.

Reported zones are normalised: a conventional zone's write pointer is its start (the field means
nothing there, as on the emulated drive); a FULL zone's is the end of its capacity (the kernel says
start + size, which on a ZNS drive with capacity < size would put `Zone.written` past the last
readable byte).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from zonestore import pyzbd
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

MiB = 1024 * 1024
DEFAULT_CHUNK = 4 * MiB  # bounce buffer size: one write syscall per 4 MiB


class _Bounce(threading.local):
    """Per-thread page-aligned bounce buffer (O_DIRECT refuses unaligned user memory)."""

    buf: mmap.mmap | None = None

    def get(self, size: int) -> mmap.mmap:
        if self.buf is None or len(self.buf) < size:
            # The old buffer may still be exported by a memoryview; let GC unmap it.
            self.buf = mmap.mmap(-1, size)
        return self.buf


_bounce = _Bounce()


def _zone_from_report(index: int, z: pyzbd.ZbdZone) -> Zone:
    try:
        ztype = ZoneType(z.type)
    except ValueError:
        raise ZoneError(f"zone {index}: unknown zone type {z.type}") from None
    try:
        cond = ZoneCondition(z.cond)
    except ValueError:
        # A condition we do not know (e.g. a future one): treat the zone as unusable.
        cond = ZoneCondition.OFFLINE
    if ztype is ZoneType.CONVENTIONAL:
        return Zone(index, z.start, z.len, z.capacity, z.start, ztype, ZoneCondition.NOT_WP)
    wp = z.start + z.capacity if cond is ZoneCondition.FULL else z.wp
    return Zone(index, z.start, z.len, z.capacity, wp, ztype, cond)


class ZbdZonedDevice(ZonedDevice):
    """A zoned block device opened through libzbd (see the module docstring)."""

    def __init__(self, path: str | Path, *, chunk_size: int = DEFAULT_CHUNK) -> None:
        self.path = str(path)
        fd, zi = pyzbd.open_device(self.path, os.O_RDWR | os.O_DIRECT | os.O_EXCL)
        self._fd = fd
        try:
            if zi.model not in (pyzbd.DeviceModel.HOST_MANAGED, pyzbd.DeviceModel.HOST_AWARE):
                raise pyzbd.NotZonedError(self.path)
            self.zbd_info = zi
            self.info = DeviceInfo(
                path=self.path,
                backend="zbd",
                nr_zones=zi.nr_zones,
                zone_size=zi.zone_size,
                logical_block_size=zi.lblock_size,
                physical_block_size=zi.pblock_size,
                max_open_zones=zi.max_nr_open_zones,
                max_active_zones=zi.max_nr_active_zones,
            )
            pbs = zi.pblock_size
            self._chunk = max(pbs, chunk_size - chunk_size % pbs, mmap.PAGESIZE)
            self._lock = threading.Lock()
            self._busy: set[int] = set()
            self._dirty = False
            self._closed = False
            self._zones: list[Zone] = self._report(0, zi.nr_zones)
            if len(self._zones) != zi.nr_zones:
                raise ZoneError(
                    f"{self.path}: device reported {len(self._zones)} of {zi.nr_zones} zones"
                )
        except BaseException:
            pyzbd.close_device(fd)
            raise

    # ----------------------------------------------------------------- helpers

    def _report(self, first: int, count: int) -> list[Zone]:
        zs = self.info.zone_size
        raw = pyzbd.report_zones(self._fd, first * zs, count * zs, count)
        return [_zone_from_report(first + k, z) for k, z in enumerate(raw)]

    def _refresh_locked(self, index: int) -> Zone:
        z = self._report(index, 1)[0]
        self._zones[index] = z
        return z

    def _refresh_quietly(self, index: int) -> None:
        """Re-read a zone after a failed device call; the caller reports the original error."""
        try:
            self._refresh_locked(index)
        except OSError:
            pass

    def _check_usable(self) -> None:
        if self._closed:
            raise ZoneStateError("device is closed")

    def _counts(self) -> tuple[int, int]:
        opened = sum(1 for z in self._zones if z.cond.is_open)
        active = sum(1 for z in self._zones if z.cond.is_active)
        return opened, active

    def _set_cond(self, index: int, cond: ZoneCondition) -> None:
        z = self._zones[index]
        self._zones[index] = Zone(z.index, z.start, z.size, z.capacity, z.wp, z.type, cond)

    def _check_open_allowed(self, index: int) -> None:
        """Refuse what would take the device over its open or active limit."""
        self._check_open_limits(index, self._zones[index].cond, *self._counts())

    def _seq_zone(self, index: int, op: str) -> Zone:
        self._check_usable()
        self._check_zone_index(index)
        z = self._zones[index]
        if not z.is_sequential:
            raise ZoneStateError(f"cannot {op} conventional zone {index}")
        if z.cond is ZoneCondition.OFFLINE:
            raise ZoneStateError(f"zone {index} is offline")
        if index in self._busy:
            raise ZoneStateError(f"cannot {op} zone {index}: a write is in flight")
        return z

    def _zone_op_locked(self, index: int, op: pyzbd.ZoneOp) -> Zone:
        z = self._zones[index]
        try:
            pyzbd.zones_operation(self._fd, op, z.start, z.size)
        except OSError as e:
            self._refresh_quietly(index)
            raise ZoneError(f"zone {index}: {op.name.lower()} failed: {e.strerror}",
                            e.errno or errno.EIO) from e
        return self._refresh_locked(index)

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int:
        """The O_DIRECT descriptor of the block device."""
        return self._fd

    # --------------------------------------------------------------- interface

    def report_zones(self, first: int = 0, count: int | None = None) -> list[Zone]:
        n = self.info.nr_zones
        if first < 0 or first >= n:
            raise OutOfRangeError(f"zone {first} outside device")
        count = n - first if count is None else max(0, min(count, n - first))
        with self._lock:
            self._check_usable()
            zones = self._report(first, count)
            for z in zones:
                # A zone with a write in flight is updated by that write when it completes.
                if z.index not in self._busy:
                    self._zones[z.index] = z
            return zones

    def open_zone(self, index: int) -> None:
        with self._lock:
            z = self._seq_zone(index, "open")
            if z.cond is ZoneCondition.EXPLICIT_OPEN:
                return
            if z.cond not in (ZoneCondition.EMPTY, ZoneCondition.CLOSED,
                              ZoneCondition.IMPLICIT_OPEN):
                raise ZoneStateError(f"zone {index} is {z.cond.name} and cannot be opened")
            self._check_open_allowed(index)
            self._zone_op_locked(index, pyzbd.ZoneOp.OPEN)

    def close_zone(self, index: int) -> None:
        with self._lock:
            z = self._seq_zone(index, "close")
            if z.cond in (ZoneCondition.CLOSED, ZoneCondition.EMPTY, ZoneCondition.FULL):
                return  # nothing to do; some drives answer these with an error
            if not z.cond.is_open:
                raise ZoneStateError(f"zone {index} is {z.cond.name} and cannot be closed")
            self._zone_op_locked(index, pyzbd.ZoneOp.CLOSE)

    def finish_zone(self, index: int) -> None:
        with self._lock:
            z = self._seq_zone(index, "finish")
            if z.cond is ZoneCondition.FULL:
                return
            if z.cond is ZoneCondition.READONLY:
                raise ZoneStateError(f"zone {index} is read-only")
            if z.cond is ZoneCondition.EMPTY:
                # Finishing an empty zone makes it active for an instant: the limit applies.
                self._check_open_allowed(index)
            self._zone_op_locked(index, pyzbd.ZoneOp.FINISH)

    def reset_zone(self, index: int) -> None:
        with self._lock:
            z = self._seq_zone(index, "reset")
            if z.cond is ZoneCondition.READONLY:
                raise ZoneStateError(f"zone {index} is read-only")
            z = self._zone_op_locked(index, pyzbd.ZoneOp.RESET)
            if z.cond is ZoneCondition.OFFLINE:
                # A failing drive may take a zone offline on reset: the caller must know.
                raise ZoneStateError(f"zone {index} went offline on reset")

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        length = view.nbytes
        with self._lock:
            self._check_usable()
            if not 0 <= offset < self.info.size:
                raise OutOfRangeError(f"write at {offset} outside device")
            index = offset // self.info.zone_size
            self._check_write_alignment(offset, length)
            z = self._zones[index]
            if not z.is_sequential:
                if offset + length > z.start + z.capacity:
                    raise ZoneCapacityError(f"write crosses the end of conventional zone {index}")
            else:
                if z.cond in (ZoneCondition.OFFLINE, ZoneCondition.READONLY):
                    raise ZoneStateError(f"zone {index} is {z.cond.name}")
                if z.cond is ZoneCondition.FULL:
                    raise ZoneCapacityError(f"zone {index} is full")
                if index in self._busy:
                    raise ZoneStateError(f"zone {index} already has a write in flight")
                if offset != z.wp:
                    raise WritePointerError(
                        f"write at offset {offset} is not at zone {index}'s write pointer {z.wp}"
                    )
                end = z.start + z.capacity
                if offset + length > end:
                    raise ZoneCapacityError(
                        f"write of {length} bytes at zone {index}'s write pointer exceeds its "
                        f"capacity by {offset + length - end} bytes"
                    )
                self._check_open_allowed(index)
                if not z.cond.is_open:
                    self._set_cond(index, ZoneCondition.IMPLICIT_OPEN)
            self._busy.add(index)
            self._dirty = True
        done = 0
        try:
            buf = _bounce.get(min(self._chunk, length))
            bview = memoryview(buf)
            while done < length:
                n = min(len(buf), length - done)
                bview[:n] = view[done:done + n]
                # os.pwrite is looked up at call time on purpose: tests wrap it to prove
                # that every write issued is at the write pointer the device reports.
                w = os.pwrite(self._fd, bview[:n], offset + done)
                if w <= 0 or w % self.info.physical_block_size:
                    raise OSError(errno.EIO, f"short write of {w} bytes")
                done += w
        except OSError as e:
            with self._lock:
                self._busy.discard(index)
                self._refresh_quietly(index)
            raise ZoneError(
                f"zone {index}: write of {length} bytes at {offset} failed after {done} bytes: "
                f"{e.strerror}", e.errno or errno.EIO,
            ) from e
        except BaseException:
            with self._lock:
                self._busy.discard(index)
                self._refresh_quietly(index)
            raise
        with self._lock:
            self._busy.discard(index)
            if z.is_sequential:
                wp = offset + length
                cur = self._zones[index]
                if wp >= z.start + z.capacity:
                    self._zones[index] = Zone(index, z.start, z.size, z.capacity,
                                              z.start + z.capacity, z.type, ZoneCondition.FULL)
                else:
                    self._zones[index] = Zone(index, z.start, z.size, z.capacity, wp, z.type,
                                              cur.cond)

    def read(self, offset: int, length: int) -> bytes:
        if length < 0:
            raise OutOfRangeError("negative read length")
        if length == 0:
            return b""
        with self._lock:
            self._check_usable()
            if not 0 <= offset < self.info.size:
                raise OutOfRangeError(f"read at {offset} outside device")
            index = offset // self.info.zone_size
            z = self._zones[index]
            if not z.is_sequential:
                limit = z.start + z.capacity
            else:
                if z.cond is ZoneCondition.OFFLINE:
                    raise ZoneStateError(f"zone {index} is offline")
                limit = z.start + z.capacity if z.cond is ZoneCondition.FULL else z.wp
            if offset + length > limit:
                raise OutOfRangeError(
                    f"read of {length} bytes at {offset} goes past zone {index}'s written data"
                )
        # O_DIRECT reads need logical-block alignment; the write pointer is block aligned, so
        # the widened range never goes past it.
        lbs = self.info.logical_block_size
        a_start = offset - offset % lbs
        a_end = -(-(offset + length) // lbs) * lbs
        out = bytearray(length)
        buf = _bounce.get(min(self._chunk, a_end - a_start))
        bview = memoryview(buf)
        pos = a_start
        while pos < a_end:
            n = min(len(buf), a_end - pos)
            try:
                got = os.preadv(self._fd, [bview[:n]], pos)
            except OSError as e:
                raise ZoneError(f"zone {index}: read at {pos} failed: {e.strerror}",
                                e.errno or errno.EIO) from e
            if got <= 0 or got % lbs:
                raise ZoneError(f"zone {index}: short read at {pos} ({got} bytes)")
            lo = max(pos, offset)
            hi = min(pos + got, offset + length)
            out[lo - offset:hi - offset] = bview[lo - pos:hi - pos]
            pos += got
        return bytes(out)

    def sync(self, zones: Iterable[int] | None = None) -> None:
        # A block device has one flush for all zones: fdatasync flushes the drive's write cache.
        with self._lock:
            self._check_usable()
            if not self._dirty:
                return
            self._dirty = False
        try:
            os.fdatasync(self._fd)
        except BaseException:
            with self._lock:
                self._dirty = True
            raise

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            os.fdatasync(self._fd)
        finally:
            pyzbd.close_device(self._fd)
