"""The zoned block device model both backends implement (Linux's model, as in blkzoned.h / libzbd).

A device is a row of fixed-size zones. Sequential-write-required zones are written only at
their write pointer, in whole physical blocks, up to their capacity; conventional zones take
random writes. Zones move between conditions (empty, implicitly/explicitly open, closed, full,
read-only, offline) and the device caps how many may be open and how many active (open + closed).

All offsets and lengths are in bytes, absolute on the device, as libzbd reports them.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Self


class ZoneType(IntEnum):
    """Zone types, numbered as in libzbd's `enum zbd_zone_type`."""

    CONVENTIONAL = 1
    SEQUENTIAL_WRITE_REQUIRED = 2
    SEQUENTIAL_WRITE_PREFERRED = 3


class ZoneCondition(IntEnum):
    """Zone conditions, numbered as in libzbd's `enum zbd_zone_condition`."""

    NOT_WP = 0x0
    EMPTY = 0x1
    IMPLICIT_OPEN = 0x2
    EXPLICIT_OPEN = 0x3
    CLOSED = 0x4
    READONLY = 0xD
    FULL = 0xE
    OFFLINE = 0xF

    @property
    def is_open(self) -> bool:
        return self in (ZoneCondition.IMPLICIT_OPEN, ZoneCondition.EXPLICIT_OPEN)

    @property
    def is_active(self) -> bool:
        return self.is_open or self is ZoneCondition.CLOSED


@dataclass(frozen=True, slots=True)
class Zone:
    """One zone as reported by the device."""

    index: int
    start: int
    size: int
    capacity: int
    wp: int
    type: ZoneType
    cond: ZoneCondition

    @property
    def is_sequential(self) -> bool:
        return self.type is not ZoneType.CONVENTIONAL

    @property
    def written(self) -> int:
        """Bytes between the zone start and the write pointer (capacity for conventional zones)."""
        if not self.is_sequential:
            return self.capacity
        if self.cond is ZoneCondition.FULL:
            return self.wp - self.start if self.wp > self.start else self.capacity
        return self.wp - self.start

    @property
    def remaining(self) -> int:
        """Bytes that can still be written at the write pointer."""
        if not self.is_sequential or self.cond in (
            ZoneCondition.FULL,
            ZoneCondition.READONLY,
            ZoneCondition.OFFLINE,
        ):
            return 0
        return self.start + self.capacity - self.wp


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Geometry and limits of a zoned device. A limit of 0 means "no limit", as in Linux."""

    path: str
    backend: str
    nr_zones: int
    zone_size: int
    logical_block_size: int
    physical_block_size: int
    max_open_zones: int
    max_active_zones: int

    @property
    def size(self) -> int:
        return self.nr_zones * self.zone_size


class ZoneError(OSError):
    """A request the zoned device refuses; a real device answers these with EIO."""

    def __init__(self, message: str, err: int = errno.EIO) -> None:
        super().__init__(err, message)

    def __str__(self) -> str:
        return str(self.strerror)


class UnalignedIOError(ZoneError):
    """Offset or length is not a whole number of (physical, for writes) blocks."""


class WritePointerError(ZoneError):
    """A write to a sequential zone that does not start at its write pointer."""


class ZoneCapacityError(ZoneError):
    """A write that would run past the zone's capacity, or into a full zone."""


class ZoneResourceError(ZoneError):
    """Opening the zone would exceed the device's max open or max active zones."""


class ZoneStateError(ZoneError):
    """The zone's condition forbids the request (offline, read-only, a write in flight...)."""


class OutOfRangeError(ZoneError):
    """An offset or zone index outside the device, or a read past the write pointer."""


class ZonedDevice(ABC):
    """A zoned block device. Methods block; async callers run them in a thread.

    Implementations are safe to call from several threads as long as each zone has at most one
    write in flight, which is the discipline the zone log keeps anyway.
    """

    info: DeviceInfo

    @abstractmethod
    def report_zones(self, first: int = 0, count: int | None = None) -> list[Zone]:
        """Zones `first` .. `first + count - 1` (all remaining when count is None)."""

    def zone(self, index: int) -> Zone:
        return self.report_zones(index, 1)[0]

    def zone_index(self, offset: int) -> int:
        """Index of the zone holding byte `offset`."""
        if not 0 <= offset < self.info.size:
            raise OutOfRangeError(f"offset {offset} outside device of {self.info.size} bytes")
        return offset // self.info.zone_size

    @abstractmethod
    def open_zone(self, index: int) -> None:
        """Explicitly open a zone (counts against both limits)."""

    @abstractmethod
    def close_zone(self, index: int) -> None:
        """Close an open zone: it stays active but no longer counts as open."""

    @abstractmethod
    def finish_zone(self, index: int) -> None:
        """Move a zone to FULL, freeing its open/active slot."""

    @abstractmethod
    def reset_zone(self, index: int) -> None:
        """Rewind the write pointer to the zone start; the zone's data is gone."""

    @abstractmethod
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write whole physical blocks at `offset`, which must be the zone's write pointer
        for a sequential zone. The write may not cross the zone's capacity."""

    def writev(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write the concatenation of `parts` as one write (same rules as `write`). Backends
        that can gather without a copy override this."""
        self.write(offset, parts[0] if len(parts) == 1 else b"".join(parts))

    @abstractmethod
    def read(self, offset: int, length: int) -> bytes:
        """Read bytes below the write pointer (any offset and length inside written data)."""

    @abstractmethod
    def sync(self, zones: Iterable[int] | None = None) -> None:
        """Make the given zones' (all, when None) completed writes durable."""

    @abstractmethod
    def close(self) -> None:
        """Release the device."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Shared rule checks, so that both backends refuse exactly the same requests.

    def _check_zone_index(self, index: int) -> None:
        if not 0 <= index < self.info.nr_zones:
            raise OutOfRangeError(f"zone {index} outside device of {self.info.nr_zones} zones")

    def _check_open_limits(
        self, index: int, cond: ZoneCondition, opened: int, active: int
    ) -> None:
        """Refuse opening zone `index` (now in `cond`) when `opened` open and `active` active
        zones already fill the device's limits. Only EMPTY and CLOSED zones need a new slot."""
        if cond not in (ZoneCondition.EMPTY, ZoneCondition.CLOSED):
            return
        max_open, max_active = self.info.max_open_zones, self.info.max_active_zones
        if max_open and opened >= max_open:
            raise ZoneResourceError(
                f"opening zone {index} would exceed max open zones ({max_open} already open)"
            )
        if cond is ZoneCondition.EMPTY and max_active and active >= max_active:
            raise ZoneResourceError(
                f"opening zone {index} would exceed max active zones ({max_active} already active)"
            )

    def _check_write_alignment(self, offset: int, length: int) -> None:
        pbs = self.info.physical_block_size
        if offset % pbs or length % pbs:
            raise UnalignedIOError(
                f"write of {length} bytes at {offset} is not whole {pbs}-byte physical blocks"
            )
        if length == 0:
            raise UnalignedIOError("empty write")


def count_conditions(zones: Iterable[Zone]) -> dict[str, int]:
    """Number of zones in each condition, keyed by lower-case condition name (for metrics)."""
    counts = {c.name.lower(): 0 for c in ZoneCondition}
    for z in zones:
        counts[z.cond.name.lower()] += 1
    return counts
