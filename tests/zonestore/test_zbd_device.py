"""The libzbd backend (pyzbd + ZbdZonedDevice) on real Linux zoned block devices.

The tests marked `zoned` need a zoned device (ZONEGATE_ZONED_DEVICES); `make test-zoned` boots
QEMU with an NVMe ZNS namespace and a null_blk SMR-like device and runs them there. Elsewhere
they skip; the binding tests that need no device (struct layout against the real header, the
one-line errors) run everywhere libzbd is installed.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import subprocess
import sys

import pytest

from tests.zoned.support import (
    WriteAudit,
    reset_all,
    sysfs_queue,
    zoned_device_paths,
)
from zonestore import pyzbd
from zonestore.device import (
    OutOfRangeError,
    UnalignedIOError,
    WritePointerError,
    ZoneCapacityError,
    ZoneCondition,
    ZoneResourceError,
    ZoneStateError,
    ZoneType,
)

needs_libzbd = pytest.mark.skipif(not pyzbd.available(), reason=pyzbd.INSTALL_HINT)


# ----------------------------------------------------------------- no device needed


def test_missing_libzbd_is_a_one_line_install_hint():
    with pytest.raises(pyzbd.ZbdUnavailable) as ei:
        pyzbd.load("libzbd-that-does-not-exist.so.2")
    assert str(ei.value) == "libzbd not found: apt-get install libzbd2"


@needs_libzbd
@pytest.mark.skipif(not (shutil.which("cc") and os.path.exists("/usr/include/libzbd/zbd.h")),
                    reason="needs a C compiler and libzbd-dev to read the real header")
def test_struct_layouts_match_the_libzbd_header(tmp_path):
    fields = {
        "zbd_info": ["vendor_id", "nr_sectors", "nr_lblocks", "nr_pblocks", "zone_size",
                     "zone_sectors", "lblock_size", "pblock_size", "nr_zones",
                     "max_nr_open_zones", "max_nr_active_zones", "model", "reserved"],
        "zbd_zone": ["start", "len", "capacity", "wp", "flags", "type", "cond", "reserved"],
    }
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include <libzbd/zbd.h>',
             'int main(void) {']
    for st, names in fields.items():
        lines.append(f'printf("{st} size %zu\\n", sizeof(struct {st}));')
        for n in names:
            lines.append(f'printf("{st} {n} %zu\\n", offsetof(struct {st}, {n}));')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    subprocess.run(["cc", "-o", str(tmp_path / "layout"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    expected = []
    for st, cls in (("zbd_info", pyzbd.ZbdInfoStruct), ("zbd_zone", pyzbd.ZbdZoneStruct)):
        expected.append(f"{st} size {ctypes.sizeof(cls)}")
        expected += [f"{st} {n} {getattr(cls, n).offset}" for n in fields[st]]
    assert [line for line in out if line] == expected


@needs_libzbd
def test_a_regular_file_is_not_a_zoned_device(tmp_path):
    from zonestore.zbd import ZbdZonedDevice

    f = tmp_path / "plain"
    f.write_bytes(b"\0" * 4096)
    assert not pyzbd.device_is_zoned(f)
    with pytest.raises(pyzbd.NotZonedError) as ei:
        ZbdZonedDevice(f)
    assert str(ei.value) == f"{f}: not a zoned block device"
    with pytest.raises(pyzbd.NotZonedError):
        ZbdZonedDevice("/dev/null")
    with pytest.raises(FileNotFoundError):
        ZbdZonedDevice(tmp_path / "missing")


# ----------------------------------------------------------------- on a real zoned device

zoned = pytest.mark.zoned


def seq_zones(dev):
    return [z for z in dev.report_zones() if z.is_sequential]


def block(dev, fill: int, n: int = 1) -> bytes:
    return bytes([fill]) * (dev.info.physical_block_size * n)


@zoned
def test_geometry_and_limits_are_read_from_the_device(zbd_dev, zbd_path):
    from zonestore.opener import open_device

    info = zbd_dev.info
    assert info.backend == "zbd"
    assert info.zone_size == sysfs_queue(zbd_path, "chunk_sectors") * 512
    assert info.nr_zones == sysfs_queue(zbd_path, "nr_zones")
    assert info.physical_block_size == sysfs_queue(zbd_path, "physical_block_size")
    assert info.logical_block_size == sysfs_queue(zbd_path, "logical_block_size")
    assert info.max_open_zones == sysfs_queue(zbd_path, "max_open_zones")
    assert info.max_active_zones == sysfs_queue(zbd_path, "max_active_zones")
    if os.environ.get("ZONEGATE_IN_GUEST"):
        assert info.max_open_zones > 0, "the harness gives every device an open limit"
    zones = zbd_dev.report_zones()
    assert [z.index for z in zones] == list(range(info.nr_zones))
    assert all(z.start == z.index * info.zone_size and z.size == info.zone_size for z in zones)
    # Conventional zones, if any, come first, like an SMR drive's.
    types = [z.type for z in zones]
    n_conv = types.count(ZoneType.CONVENTIONAL)
    assert types[n_conv:] == [ZoneType.SEQUENTIAL_WRITE_REQUIRED] * (len(types) - n_conv)
    for z in zones[n_conv:]:
        assert z.cond is ZoneCondition.EMPTY and z.wp == z.start
        assert 0 < z.capacity <= z.size
    assert zbd_dev.report_zones(3, 2) == zones[3:5]
    # opener.open_device picks this backend for a block device (O_EXCL: close ours first).
    zbd_dev.close()
    with open_device(zbd_path) as d2:
        assert type(d2).__name__ == "ZbdZonedDevice" and d2.info == info


@zoned
def test_write_at_the_write_pointer_then_read_any_range(zbd_dev):
    z = seq_zones(zbd_dev)[0]
    data = os.urandom(3 * zbd_dev.info.physical_block_size)
    zbd_dev.write(z.start, data)
    now = zbd_dev.zone(z.index)
    assert now.wp == z.start + len(data)
    assert now.cond is ZoneCondition.IMPLICIT_OPEN
    assert zbd_dev.read(z.start, len(data)) == data
    for off, n in ((1, 10), (511, 4097), (4095, 2), (len(data) - 7, 7)):
        assert zbd_dev.read(z.start + off, n) == data[off:off + n]
    with pytest.raises(OutOfRangeError):
        zbd_dev.read(z.start + len(data) - 1, 2)  # past the write pointer
    zbd_dev.write(now.wp, data)  # appends at the new write pointer
    assert zbd_dev.read(z.start, 2 * len(data)) == data + data


@zoned
def test_illegal_writes_are_refused_by_us_before_the_kernel(zbd_dev, zbd_path, monkeypatch):
    pbs = zbd_dev.info.physical_block_size
    z = seq_zones(zbd_dev)[1]
    audit = WriteAudit(zbd_path, monkeypatch)
    try:
        zbd_dev.write(z.start, block(zbd_dev, 1))
        with pytest.raises(WritePointerError):
            zbd_dev.write(z.start + 2 * pbs, block(zbd_dev, 2))  # ahead of the WP
        with pytest.raises(WritePointerError):
            zbd_dev.write(z.start, block(zbd_dev, 2))  # behind it
        with pytest.raises(UnalignedIOError):
            zbd_dev.write(z.start + pbs, b"x" * (pbs - 512))  # not whole physical blocks
        with pytest.raises(UnalignedIOError):
            zbd_dev.write(z.start + pbs + 512, block(zbd_dev, 2))
        with pytest.raises(ZoneCapacityError):
            zbd_dev.write(z.start + pbs, b"\0" * z.capacity)  # past the zone's capacity
        with pytest.raises(OutOfRangeError):
            zbd_dev.write(zbd_dev.info.size, block(zbd_dev, 2))
        assert len(audit.writes) == 1, "a refused request reached the device"
        zbd_dev.write(z.start + pbs, b"\0" * (z.capacity - pbs))  # exactly to capacity
        assert zbd_dev.zone(z.index).cond is ZoneCondition.FULL
        with pytest.raises(ZoneCapacityError):
            zbd_dev.write(z.start + z.capacity - pbs, block(zbd_dev, 3))  # into the FULL zone
        assert audit.writes and audit.off_wp() == []
        assert all(w.offset % pbs == 0 and w.length % pbs == 0 for w in audit.writes)
    finally:
        audit.close()


@zoned
def test_the_kernel_itself_refuses_an_off_wp_write(zbd_dev, zbd_path):
    """What our checks protect against is real: a raw write off the WP fails with an error."""
    import mmap

    pbs = zbd_dev.info.physical_block_size
    z = seq_zones(zbd_dev)[2]
    zbd_dev.write(z.start, block(zbd_dev, 1))
    buf = mmap.mmap(-1, pbs)
    fd = os.open(zbd_path, os.O_WRONLY | os.O_DIRECT)
    try:
        with pytest.raises(OSError) as ei:
            os.pwrite(fd, buf, z.start + 3 * pbs)
        assert ei.value.errno in (errno.EIO, errno.EINVAL)
    finally:
        os.close(fd)
    assert zbd_dev.zone(z.index).wp == z.start + pbs


@zoned
def test_open_close_finish_reset(zbd_dev):
    z = seq_zones(zbd_dev)[3]
    zbd_dev.open_zone(z.index)
    assert zbd_dev.zone(z.index).cond is ZoneCondition.EXPLICIT_OPEN
    zbd_dev.close_zone(z.index)
    # Closing an opened zone with nothing written: null_blk makes it EMPTY, QEMU's ZNS CLOSED.
    assert zbd_dev.zone(z.index).cond in (ZoneCondition.EMPTY, ZoneCondition.CLOSED)
    zbd_dev.write(z.start, block(zbd_dev, 7, 2))
    zbd_dev.close_zone(z.index)
    assert zbd_dev.zone(z.index).cond is ZoneCondition.CLOSED
    zbd_dev.close_zone(z.index)  # closing a closed zone is a no-op, as on the emulated drive
    zbd_dev.write(z.start + 2 * zbd_dev.info.physical_block_size, block(zbd_dev, 8))  # reopens implicitly
    assert zbd_dev.zone(z.index).cond is ZoneCondition.IMPLICIT_OPEN
    zbd_dev.finish_zone(z.index)
    full = zbd_dev.zone(z.index)
    assert full.cond is ZoneCondition.FULL and full.remaining == 0
    assert zbd_dev.read(z.start, 3 * zbd_dev.info.physical_block_size) == block(zbd_dev, 7, 2) + block(zbd_dev, 8)
    with pytest.raises(ZoneCapacityError):
        zbd_dev.write(full.start + 3 * zbd_dev.info.physical_block_size, block(zbd_dev, 9))
    zbd_dev.reset_zone(z.index)
    again = zbd_dev.zone(z.index)
    assert again.cond is ZoneCondition.EMPTY and again.wp == z.start
    with pytest.raises(OutOfRangeError):
        zbd_dev.read(z.start, 1)
    conv = [zz for zz in zbd_dev.report_zones() if not zz.is_sequential]
    if conv:
        for op in (zbd_dev.reset_zone, zbd_dev.finish_zone, zbd_dev.open_zone, zbd_dev.close_zone):
            with pytest.raises(ZoneStateError):
                op(conv[0].index)


@zoned
def test_open_and_active_limits_are_the_devices_own(zbd_dev, zbd_path, monkeypatch):
    info = zbd_dev.info
    max_open, max_active = info.max_open_zones, info.max_active_zones
    if not max_open:
        pytest.skip(f"{info.path} has no open-zone limit")
    zones = seq_zones(zbd_dev)
    audit = WriteAudit(zbd_path, monkeypatch)
    try:
        for z in zones[:max_open]:
            zbd_dev.write(z.start, block(zbd_dev, 1))
        n = len(audit.writes)
        with pytest.raises(ZoneResourceError):
            zbd_dev.write(zones[max_open].start, block(zbd_dev, 1))
        with pytest.raises(ZoneResourceError):
            zbd_dev.open_zone(zones[max_open].index)
        assert len(audit.writes) == n, "a write over the open limit reached the device"
        conds = [z.cond for z in zbd_dev.report_zones()]
        assert sum(c.is_open for c in conds) == max_open
        if max_active:
            # Close zones to make room for new open ones until the active limit is reached.
            for z in zones[: max_active - max_open]:
                zbd_dev.close_zone(z.index)
            for z in zones[max_open:max_active]:
                zbd_dev.write(z.start, block(zbd_dev, 2))
            zbd_dev.close_zone(zones[max_open].index)
            with pytest.raises(ZoneResourceError):
                zbd_dev.write(zones[max_active].start, block(zbd_dev, 3))  # a new active zone
            with pytest.raises(ZoneResourceError):
                zbd_dev.finish_zone(zones[max_active].index)  # finishing an EMPTY one too
            # A CLOSED zone is already active: writing to it again is fine.
            zbd_dev.write(zbd_dev.zone(zones[max_open].index).wp, block(zbd_dev, 4))
            freed, new = zones[max_open], zones[max_active]
        else:
            freed, new = zones[0], zones[max_open]
        zbd_dev.finish_zone(freed.index)  # FINISH frees the open (and active) slot
        zbd_dev.write(new.start, block(zbd_dev, 5))
        conds = [z.cond for z in zbd_dev.report_zones()]
        assert sum(c.is_open for c in conds) <= max_open
        if max_active:
            assert sum(c.is_active for c in conds) <= max_active
        assert audit.off_wp() == []
    finally:
        audit.close()


@zoned
def test_conventional_zones_take_random_aligned_writes(zbd_dev):
    conv = [z for z in zbd_dev.report_zones() if not z.is_sequential]
    if not conv:
        pytest.skip(f"{zbd_dev.info.path} has no conventional zones")
    pbs = zbd_dev.info.physical_block_size
    z = conv[-1]
    zbd_dev.write(z.start + 5 * pbs, block(zbd_dev, 1))
    zbd_dev.write(z.start + 2 * pbs, block(zbd_dev, 2))
    zbd_dev.write(z.start + 5 * pbs, block(zbd_dev, 3))  # overwrite
    assert zbd_dev.read(z.start + 5 * pbs, pbs) == block(zbd_dev, 3)
    assert zbd_dev.read(z.start + 2 * pbs, pbs) == block(zbd_dev, 2)
    with pytest.raises(ZoneCapacityError):
        zbd_dev.write(z.start + z.size - pbs, block(zbd_dev, 1, 2))
    with pytest.raises(UnalignedIOError):
        zbd_dev.write(z.start + 512, block(zbd_dev, 1))


@zoned
def test_direct_io_with_unaligned_user_buffers_and_small_bounce_chunks(zbd_path):
    from zonestore.zbd import ZbdZonedDevice

    with ZbdZonedDevice(zbd_path, chunk_size=8192) as zbd_dev:
        reset_all(zbd_dev)
        assert fcntl.fcntl(zbd_dev.fileno(), fcntl.F_GETFL) & os.O_DIRECT
        pbs = zbd_dev.info.physical_block_size
        z = seq_zones(zbd_dev)[4]
        raw = bytearray(os.urandom(7 * pbs + 1))
        data = memoryview(raw)[1:]  # deliberately not page aligned
        zbd_dev.write(z.start, data)
        assert zbd_dev.zone(z.index).wp == z.start + 7 * pbs
        assert zbd_dev.read(z.start, 7 * pbs) == bytes(data)
        assert zbd_dev.read(z.start + 3, 5 * pbs) == bytes(data[3:3 + 5 * pbs])
        reset_all(zbd_dev)


@zoned
def test_data_and_write_pointers_survive_close_and_reopen(zbd_path):
    from zonestore.zbd import ZbdZonedDevice

    with ZbdZonedDevice(zbd_path) as zbd_dev:
        reset_all(zbd_dev)
        z = seq_zones(zbd_dev)[5]
        data = os.urandom(2 * zbd_dev.info.physical_block_size)
        zbd_dev.write(z.start, data)
        zbd_dev.sync()
    with ZbdZonedDevice(zbd_path) as zbd_dev:
        back = zbd_dev.zone(z.index)
        assert back.wp == z.start + len(data)
        assert back.cond in (ZoneCondition.IMPLICIT_OPEN, ZoneCondition.CLOSED)
        assert zbd_dev.read(z.start, len(data)) == data
        with pytest.raises(WritePointerError):
            zbd_dev.write(z.start, data)
        reset_all(zbd_dev)


@zoned
def test_second_exclusive_open_is_refused(zbd_dev, zbd_path):
    from zonestore.zbd import ZbdZonedDevice

    with pytest.raises(OSError) as ei:
        ZbdZonedDevice(zbd_path)
    assert ei.value.errno == errno.EBUSY


@zoned
@pytest.mark.skipif(not os.environ.get("ZONEGATE_PLAIN_DEVICE"),
                    reason="no plain (not zoned) block device; `make test-zoned` provides one")
def test_a_plain_block_device_is_refused_in_one_line():
    from zonestore.zbd import ZbdZonedDevice

    plain = os.environ["ZONEGATE_PLAIN_DEVICE"]
    with pytest.raises(pyzbd.NotZonedError) as ei:
        ZbdZonedDevice(plain)
    assert str(ei.value) == f"{plain}: not a zoned block device"
    res = subprocess.run([sys.executable, "-m", "gateway.cli", "drive", "info", plain],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert res.stderr.strip() == f"zonegate: error: {plain}: not a zoned block device"
    # A zoned device on a machine without libzbd: the install hint, in one line.
    zoned_dev = zoned_device_paths()[0]
    res = subprocess.run([sys.executable, "-m", "gateway.cli", "drive", "info", zoned_dev],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ZONEGATE_LIBZBD": "libzbd-missing.so.2"})
    assert res.returncode != 0
    assert res.stderr.strip() == "zonegate: error: libzbd not found: apt-get install libzbd2"


@zoned
async def test_cli_drive_info_and_fsck_on_a_zoned_block_device(zbd_path, tmp_path):
    import json

    from zonestore.zbd import ZbdZonedDevice
    from zonestore.zonelog import ZoneLog

    idx = tmp_path / "index.sqlite"
    with ZbdZonedDevice(zbd_path) as d:
        reset_all(d)
        log = await ZoneLog.open(d, idx, background_reclaim=False)
        for i in range(5):
            await log.put(f"r{i}", os.urandom(70_000 * i), stream="s")
        await log.delete("r2")
        await log.close()
        info = d.info

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway.cli", "drive", *args],
                              capture_output=True, text=True, timeout=120)

    res = cli("info", zbd_path, "--json")
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    assert shown["info"]["backend"] == "zbd"
    assert shown["info"]["max_open_zones"] == info.max_open_zones
    assert shown["info"]["nr_zones"] == info.nr_zones
    res = cli("fsck", zbd_path, "--index", str(idx), "--quiet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "index matches the zones" in res.stdout
    with ZbdZonedDevice(zbd_path) as d:
        reset_all(d)
