"""A drive whose host filesystem runs out of space: full, not failed (issue 24, D1).

An emulated drive is a directory of sparse zone files (and its index), so its zones promise
more than the filesystem under it may hold: a write can end in ENOSPC (EDQUOT under a quota,
SQLITE_FULL from the index) with the zones far from full. That is no device error and no
client's fault: the drive takes no more puts (the node answers 507 `no_space`, the writers
hand the fragment to another node), reads and deletes go on, and it is writable again once the
filesystem has ROOM_AGAIN bytes free (checked at most every CHECK_EVERY seconds). Before that
happens, a drive's writable figure is capped by what its filesystem has free (less LOW_SPACE),
so that gateways see it fill up and send new fragments elsewhere before a write fails.

A real zoned device has no filesystem under it (`path` None): only the ENOSPC marks it, and
it is tried again after RETRY_S.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from pathlib import Path

from zonestore.errors import NoSpace

log = logging.getLogger("zonestore.hostspace")
MiB = 1 << 20
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
LOW_SPACE = 4 * MiB      # kept free on the filesystem: its own metadata, the index's growth
ROOM_AGAIN = 8 * MiB     # free bytes that make a drive that ran out writable again
CHECK_EVERY = 1.0        # seconds between statvfs calls per drive
RETRY_S = 30.0           # a device without a filesystem: try again after this


class HostFull(NoSpace):
    """A put the drive's filesystem cannot take (the node answers 507 `no_space`)."""


def is_out_of_space(exc: BaseException) -> bool:
    """ENOSPC / EDQUOT from a write or sync, or SQLite's 'database or disk is full'."""
    if isinstance(exc, OSError) and not isinstance(exc, NoSpace):
        return exc.errno in OUT_OF_SPACE_ERRNOS
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return False


class HostSpace:
    """Per drive (by index): the directory its files live in, whether it ran out of space,
    and what its filesystem has free."""

    def __init__(self, paths: list[Path | None]) -> None:
        self.paths = paths
        self.full: dict[int, tuple[str, float]] = {}  # drive -> (why, since: monotonic)
        self._free: dict[int, tuple[int | None, float]] = {}

    def free(self, i: int) -> int | None:
        """Bytes free on drive i's filesystem for an unprivileged writer (None: no
        filesystem, or it cannot be asked); cached for CHECK_EVERY seconds."""
        now = time.monotonic()
        hit = self._free.get(i)
        if hit is not None and now - hit[1] < CHECK_EVERY:
            return hit[0]
        path = self.paths[i] if i < len(self.paths) else None
        value: int | None = None
        if path is not None:
            try:
                st = os.statvfs(path)
                value = st.f_bavail * st.f_frsize
            except OSError:
                value = None
        self._free[i] = (value, now)
        return value

    def mark(self, i: int, exc: BaseException) -> None:
        """Drive i's filesystem refused a write."""
        self._free.pop(i, None)
        if i not in self.full:
            why = f"the filesystem under it is full ({type(exc).__name__}: {exc})"
            self.full[i] = (why, time.monotonic())
            log.warning("drive %d: %s; no puts until it has %d MiB free again", i, why,
                        ROOM_AGAIN // MiB)

    def is_full(self, i: int) -> bool:
        """Whether drive i takes no puts; clears the mark once its filesystem has room."""
        entry = self.full.get(i)
        if entry is None:
            return False
        free = self.free(i)
        if (free is not None and free >= ROOM_AGAIN) or (
                free is None and time.monotonic() - entry[1] >= RETRY_S):
            del self.full[i]
            log.warning("drive %d: its filesystem has room again, it takes puts", i)
            return False
        return True

    def cap(self, i: int) -> int | None:
        """What drive i's filesystem can still take (None: no limit known)."""
        free = self.free(i)
        return None if free is None else max(0, free - LOW_SPACE)

    def writable(self, i: int, zone_writable: int) -> int:
        """Drive i's writable figure: its zones' (`zone_writable`), 0 while it is marked
        full, capped by what its filesystem has free."""
        if self.is_full(i):
            return 0
        cap = self.cap(i)
        return zone_writable if cap is None else min(zone_writable, cap)

    def reasons(self, drives: list[int]) -> dict[int, str]:
        """Why each of `drives` that takes no puts for lack of host space takes none."""
        out = {}
        for i in drives:
            if self.is_full(i):
                out[i] = self.full[i][0]
            elif self.cap(i) == 0:
                out[i] = f"the filesystem under it has {self.free(i)} bytes free"
        return out
