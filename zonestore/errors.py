"""Errors a zone log raises to its callers (node daemon, drive pool, tools)."""

from __future__ import annotations

import errno


class RecordNotFound(KeyError):
    """No live record with this id."""


class CorruptRecord(IOError):
    """Stored bytes failed their CRC32C (or a header is damaged): never returned as data."""


class NoSpace(OSError):
    """The drive has no zone left for new records (reclaim may free some)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return str(self.strerror)


class InvalidRange(ValueError):
    """A byte range outside the record."""
