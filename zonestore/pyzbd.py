"""pyzbd: a thin ctypes binding to libzbd (libzbd.so.2, Debian package libzbd2).

Only what the zbd backend needs: zbd_open / zbd_close / zbd_report_zones / zbd_zones_operation /
zbd_device_is_zoned / zbd_set_log_level, with `struct zbd_info` and `struct zbd_zone` laid out
exactly as in <libzbd/zbd.h> (packed, 128 and 64 bytes). Failures raise `ZbdError`, an OSError
carrying the errno the kernel or libzbd reported.

libzbd's zbd_reset_zones / zbd_finish_zones / ... are static inline in the header, not exported
from the .so, so zone operations all go through zbd_zones_operation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from dataclasses import dataclass
from enum import IntEnum

# ZONEGATE_LIBZBD: a libzbd somewhere the loader does not look (also lets tests drop it).
LIBRARY = os.environ.get("ZONEGATE_LIBZBD", "libzbd.so.2")
INSTALL_HINT = "libzbd not found: apt-get install libzbd2"


class ZbdUnavailable(OSError):
    """libzbd cannot be loaded on this machine (an OSError, so CLIs print it in one line)."""

    def __init__(self, message: str = INSTALL_HINT) -> None:
        super().__init__(errno.ENOENT, message)

    def __str__(self) -> str:
        return str(self.strerror)


class NotZonedError(OSError):
    """The path is not a zoned block device."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ENXIO, f"{path}: not a zoned block device")

    def __str__(self) -> str:
        return str(self.strerror)


class ZbdError(OSError):
    """A libzbd call failed; `errno` is what the kernel (or libzbd) reported."""

    def __str__(self) -> str:
        return str(self.strerror)


class ZoneOp(IntEnum):
    """`enum zbd_zone_op`."""

    RESET = 1
    OPEN = 2
    CLOSE = 3
    FINISH = 4


class DeviceModel(IntEnum):
    """`enum zbd_dev_model`."""

    HOST_MANAGED = 1
    HOST_AWARE = 2
    NOT_ZONED = 3


REPORT_ALL = 0  # enum zbd_report_option ZBD_RO_ALL
LOG_NONE = 0  # enum zbd_log_level ZBD_LOG_NONE
_UNKNOWN_LIMIT = 0xFFFFFFFF  # libzbd documents "-1" in an unsigned field as "unknown"


class ZbdInfoStruct(ctypes.Structure):
    """`struct zbd_info` (packed, 128 bytes)."""

    _pack_ = 1
    _fields_ = [
        ("vendor_id", ctypes.c_char * 32),
        ("nr_sectors", ctypes.c_ulonglong),
        ("nr_lblocks", ctypes.c_ulonglong),
        ("nr_pblocks", ctypes.c_ulonglong),
        ("zone_size", ctypes.c_ulonglong),
        ("zone_sectors", ctypes.c_uint),
        ("lblock_size", ctypes.c_uint),
        ("pblock_size", ctypes.c_uint),
        ("nr_zones", ctypes.c_uint),
        ("max_nr_open_zones", ctypes.c_uint),
        ("max_nr_active_zones", ctypes.c_uint),
        ("model", ctypes.c_uint),
        ("reserved", ctypes.c_uint8 * 36),
    ]


class ZbdZoneStruct(ctypes.Structure):
    """`struct zbd_zone` (packed, 64 bytes); positions and sizes in bytes."""

    _pack_ = 1
    _fields_ = [
        ("start", ctypes.c_ulonglong),
        ("len", ctypes.c_ulonglong),
        ("capacity", ctypes.c_ulonglong),
        ("wp", ctypes.c_ulonglong),
        ("flags", ctypes.c_uint),
        ("type", ctypes.c_uint),
        ("cond", ctypes.c_uint),
        ("reserved", ctypes.c_uint8 * 20),
    ]


assert ctypes.sizeof(ZbdInfoStruct) == 128
assert ctypes.sizeof(ZbdZoneStruct) == 64


@dataclass(frozen=True, slots=True)
class ZbdInfo:
    """`struct zbd_info` as Python values. Limits: 0 = none (an unknown limit also reads 0)."""

    vendor_id: str
    nr_sectors: int
    nr_lblocks: int
    nr_pblocks: int
    zone_size: int
    zone_sectors: int
    lblock_size: int
    pblock_size: int
    nr_zones: int
    max_nr_open_zones: int
    max_nr_active_zones: int
    model: int


@dataclass(frozen=True, slots=True)
class ZbdZone:
    """`struct zbd_zone` as Python values (bytes; type and cond as libzbd numbers them)."""

    start: int
    len: int
    capacity: int
    wp: int
    flags: int
    type: int
    cond: int


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def load(name: str = LIBRARY) -> ctypes.CDLL:
    """Load libzbd once and declare the prototypes; ZbdUnavailable (one line) if missing."""
    global _lib
    with _lib_lock:
        if _lib is not None and name == LIBRARY:
            return _lib
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise ZbdUnavailable(INSTALL_HINT) from e
        off_t = ctypes.c_int64  # off_t is 64-bit on every platform Debian ships libzbd2 for
        lib.zbd_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ZbdInfoStruct)]
        lib.zbd_open.restype = ctypes.c_int
        lib.zbd_close.argtypes = [ctypes.c_int]
        lib.zbd_close.restype = None
        lib.zbd_device_is_zoned.argtypes = [ctypes.c_char_p]
        lib.zbd_device_is_zoned.restype = ctypes.c_int
        lib.zbd_report_zones.argtypes = [
            ctypes.c_int, off_t, off_t, ctypes.c_int,
            ctypes.POINTER(ZbdZoneStruct), ctypes.POINTER(ctypes.c_uint),
        ]
        lib.zbd_report_zones.restype = ctypes.c_int
        lib.zbd_zones_operation.argtypes = [ctypes.c_int, ctypes.c_int, off_t, off_t]
        lib.zbd_zones_operation.restype = ctypes.c_int
        lib.zbd_set_log_level.argtypes = [ctypes.c_int]
        lib.zbd_set_log_level.restype = None
        # libzbd prints its own error lines to stderr; our exceptions carry the reason instead.
        lib.zbd_set_log_level(LOG_NONE)
        if name == LIBRARY:
            _lib = lib
        return lib


def available() -> bool:
    """True when libzbd can be loaded here."""
    try:
        load()
    except ZbdUnavailable:
        return False
    return True


def _error(what: str, ret: int) -> ZbdError:
    # libzbd returns -1 with errno set, or a negative errno directly (report zones).
    err = -ret if ret < -1 else ctypes.get_errno()
    err = err or errno.EIO
    return ZbdError(err, f"{what}: {os.strerror(err)}")


def _to_info(s: ZbdInfoStruct) -> ZbdInfo:
    def limit(v: int) -> int:
        return 0 if v == _UNKNOWN_LIMIT else v

    return ZbdInfo(
        vendor_id=s.vendor_id.decode(errors="replace").strip(),
        nr_sectors=s.nr_sectors,
        nr_lblocks=s.nr_lblocks,
        nr_pblocks=s.nr_pblocks,
        zone_size=s.zone_size,
        zone_sectors=s.zone_sectors,
        lblock_size=s.lblock_size,
        pblock_size=s.pblock_size,
        nr_zones=s.nr_zones,
        max_nr_open_zones=limit(s.max_nr_open_zones),
        max_nr_active_zones=limit(s.max_nr_active_zones),
        model=s.model,
    )


def device_is_zoned(path: str | os.PathLike[str]) -> bool:
    """zbd_device_is_zoned: True for a host-managed or host-aware block device."""
    lib = load()
    ret = lib.zbd_device_is_zoned(os.fsencode(path))
    if ret < 0:
        raise _error(f"{os.fspath(path)}: zbd_device_is_zoned", ret)
    return ret == 1


def open_device(path: str | os.PathLike[str], flags: int) -> tuple[int, ZbdInfo]:
    """zbd_open: (fd, info). NotZonedError when `path` is not a zoned block device."""
    lib = load()
    spath = os.fspath(path)
    # zbd_open returns -1 without a meaningful errno for a non-zoned device: ask first.
    if not os.path.exists(spath):
        raise FileNotFoundError(errno.ENOENT, f"{spath}: no such device")
    if not device_is_zoned(spath):
        raise NotZonedError(spath)
    info = ZbdInfoStruct()
    ctypes.set_errno(0)
    fd = lib.zbd_open(os.fsencode(spath), flags, ctypes.byref(info))
    if fd < 0:
        raise _error(f"{spath}: zbd_open", fd)
    return fd, _to_info(info)


def close_device(fd: int) -> None:
    """zbd_close (closes the fd too)."""
    load().zbd_close(fd)


def report_zones(fd: int, offset: int, length: int, max_zones: int) -> list[ZbdZone]:
    """zbd_report_zones over [offset, offset + length), at most `max_zones` zones."""
    lib = load()
    if max_zones <= 0:
        return []
    arr = (ZbdZoneStruct * max_zones)()
    n = ctypes.c_uint(max_zones)
    ctypes.set_errno(0)
    ret = lib.zbd_report_zones(fd, offset, length, REPORT_ALL, arr, ctypes.byref(n))
    if ret != 0:
        raise _error(f"zbd_report_zones at {offset}", ret)
    return [
        ZbdZone(z.start, z.len, z.capacity, z.wp, z.flags, z.type, z.cond)
        for z in arr[: n.value]
    ]


def zones_operation(fd: int, op: ZoneOp, offset: int, length: int) -> None:
    """zbd_zones_operation on the zones covering [offset, offset + length)."""
    lib = load()
    ctypes.set_errno(0)
    ret = lib.zbd_zones_operation(fd, int(op), offset, length)
    if ret != 0:
        raise _error(f"zone {op.name.lower()} at {offset}", ret)
