"""Shared helpers for the zone log tests: small emulated drives and read-back helpers."""

from __future__ import annotations

import random
from pathlib import Path

from zonestore.emulated import EmulatedZonedDevice, Geometry, create_emulated_drive
from zonestore.zonelog import ZoneLog

MiB = 1024 * 1024
KiB = 1024


def make_drive(root: Path, *, zones: int = 24, zone_size: int = 1 * MiB, max_open: int = 6,
               max_active: int = 8, conventional: int = 2) -> Path:
    path = root / "drive"
    create_emulated_drive(path, Geometry(nr_zones=zones, zone_size=zone_size,
                                         zone_capacity=zone_size, nr_conventional=conventional,
                                         max_open_zones=max_open, max_active_zones=max_active))
    return path


async def open_log(path: Path, **tuning) -> ZoneLog:
    tuning.setdefault("background_reclaim", False)
    tuning.setdefault("chunk_size", 64 * KiB)
    tuning.setdefault("flush_size", 128 * KiB)
    return await ZoneLog.open_path(path, **tuning)


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


async def read_all(log, rid: str, offset: int = 0, length: int | None = None) -> bytes:
    return b"".join([c async for c in await log.get(rid, offset, length)])


async def agen(data: bytes, piece: int):
    for i in range(0, len(data), piece):
        yield data[i:i + piece]


def open_device(path: Path) -> EmulatedZonedDevice:
    return EmulatedZonedDevice(path)
