"""Open a zoned device by path: an emulated drive directory or a real zoned block device."""

from __future__ import annotations

import stat
from pathlib import Path

from zonestore.device import ZonedDevice
from zonestore.emulated import EmulatedZonedDevice, is_emulated_drive


def open_device(path: str | Path) -> ZonedDevice:
    """Open `path` with the right backend, or fail with a one-line reason."""
    p = Path(path)
    if is_emulated_drive(p):
        return EmulatedZonedDevice(p)
    if p.exists() and stat.S_ISBLK(p.stat().st_mode):
        from zonestore.zbd import ZbdZonedDevice  # imported lazily: needs libzbd

        return ZbdZonedDevice(p)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such drive (create one with `zonegate drive create {p}`)")
    raise ValueError(f"{p}: neither an emulated zoned drive nor a zoned block device")
