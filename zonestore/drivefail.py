"""A drive that fails: which errors mean it, and what the pool answers for its records.

A device error (EIO and friends: the kernel gave up on the drive or its filesystem) is not the
caller's fault and not one record's corruption. The drive pool marks the drive failed for the
rest of the process's life: it takes no more puts, its records are no longer listed or found
(they are lost to the cluster: the erasure layer sees them missing and rebuilds them
elsewhere), and the node reports it (`/v1/stats` `failed`/`error` per drive, `/health/ready`
`failed_drives`, the `zonegate_node_drive_failed` gauge).
"""

from __future__ import annotations

import errno

from zonestore.errors import CorruptRecord, NoSpace

# EUCLEAN: the filesystem under an emulated drive found itself corrupt
DRIVE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENXIO, errno.ENODEV, errno.EUCLEAN})


def is_drive_failure(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and not isinstance(exc, NoSpace | CorruptRecord)
            and exc.errno in DRIVE_ERRNOS)


class DriveFailed(NoSpace):
    """A put no working drive can take (its drive failed, or every drive has): the node
    answers 507 `drive_failed`, so writers hand the record to another node."""

    def __init__(self, message: str, writable_bytes: int = 0) -> None:
        super().__init__(message)
        self.writable_bytes = writable_bytes


class UnreadableRecord(CorruptRecord):
    """The record's drive failed while it was read: like corruption, never a byte more."""
