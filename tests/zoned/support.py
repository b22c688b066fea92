"""Helpers for tests that run on real zoned block devices (inside the QEMU guest).

The harness names the devices in ZONEGATE_ZONED_DEVICES (space-separated paths). Outside the
guest the variable is unset and every device test skips with a reason saying how to run it.
`WriteAudit` wraps os.pwrite to prove that every write our code sends to a zoned device lands
at the write pointer the device itself reports just before the write.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import pytest

ENV_DEVICES = "ZONEGATE_ZONED_DEVICES"
SKIP_REASON = (
    f"no zoned block device ({ENV_DEVICES} is unset); `make test-zoned` runs these on real "
    "zoned devices inside QEMU"
)


def zoned_device_paths() -> list[str]:
    return [p for p in os.environ.get(ENV_DEVICES, "").split() if p]


def device_params() -> list:
    """pytest parameters: one per device, or a single skipped one when there is none."""
    paths = zoned_device_paths()
    if not paths:
        return [pytest.param(None, id="no-device", marks=pytest.mark.skip(reason=SKIP_REASON))]
    return [pytest.param(p, id=os.path.basename(p)) for p in paths]


def reset_all(dev) -> None:
    """Bring every sequential zone of `dev` back to EMPTY (tests share the devices)."""
    for z in dev.report_zones():
        if z.is_sequential and z.cond.name not in ("EMPTY", "OFFLINE", "READONLY"):
            dev.reset_zone(z.index)


def sysfs_queue(path: str, name: str) -> int:
    dev = os.path.basename(os.path.realpath(path))
    with open(f"/sys/block/{dev}/queue/{name}") as f:
        return int(f.read().split()[0])


@dataclass
class AuditedWrite:
    offset: int
    length: int
    zone_type: int  # libzbd numbering: 1 conventional
    device_wp: int  # as the device reported it immediately before the write


class WriteAudit:
    """Record every pwrite to the device at `path`, with the device's WP just before it."""

    def __init__(self, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
        from zonestore import pyzbd

        self._pyzbd = pyzbd
        self.rdev = os.stat(path).st_rdev
        # A second, non-exclusive descriptor only used to ask the kernel for the zone state.
        self.fd, self.info = pyzbd.open_device(path, os.O_RDONLY)
        self.writes: list[AuditedWrite] = []
        self._real = os.pwrite
        monkeypatch.setattr(os, "pwrite", self._pwrite)

    def _pwrite(self, fd: int, data, offset: int) -> int:
        st = os.fstat(fd)
        if stat.S_ISBLK(st.st_mode) and st.st_rdev == self.rdev:
            z = self._pyzbd.report_zones(self.fd, offset, 1, 1)[0]
            self.writes.append(AuditedWrite(offset, memoryview(data).nbytes, z.type, z.wp))
        return self._real(fd, data, offset)

    def off_wp(self) -> list[AuditedWrite]:
        """Writes to sequential zones that were not at the device's write pointer."""
        return [w for w in self.writes if w.zone_type != 1 and w.offset != w.device_wp]

    def close(self) -> None:
        self._pyzbd.close_device(self.fd)


class ZoneWindow:
    """The first `zones` zones of a real zoned device, as a device of that many zones: the
    same zones, limits and I/O path, so that a test can fill it in the guest's time and
    memory (a memory-backed null_blk of 1 GiB would not fit a 1 GiB guest). Everything else
    is the device's own."""

    def __init__(self, dev, zones: int) -> None:
        import dataclasses

        self.dev = dev
        self.nr = min(zones, dev.info.nr_zones)
        self.info = dataclasses.replace(dev.info, nr_zones=self.nr)

    def report_zones(self, first: int = 0, count: int | None = None):
        last = self.nr if count is None else min(self.nr, first + count)
        return self.dev.report_zones(first, max(0, last - first)) if first < last else []

    def zone(self, index: int):
        if not 0 <= index < self.nr:
            raise IndexError(index)
        return self.dev.zone(index)

    def zone_index(self, offset: int) -> int:
        return offset // self.info.zone_size

    def __getattr__(self, name: str):
        return getattr(self.dev, name)
