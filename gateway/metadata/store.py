"""The metadata store interface: buckets, objects, multipart uploads, parts, orphan queue.

Keys are handled as UTF-8 bytes so that every implementation lists in S3's binary order.
Part layouts are opaque JSON-able dicts (erasure.PartLayout serialised); the store never
interprets them. Methods are coroutines and each one is a short transaction: the embedded
SQLite implementation answers in microseconds (its blocking work off the event loop), a shared
SQL backend over a connection pool in a network round trip or two.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import S3Error
from gateway.metadata.queues import QueueStore


@dataclass
class BucketRecord:
    name: str
    owner: str
    created: float
    region: str = "us-east-1"


@dataclass
class ObjectRecord:
    bucket: str
    key: str
    size: int
    etag: str                      # hex, no quotes; multipart: "<hex>-N"
    last_modified: float
    owner: str
    version: str                   # uuid of the write that made it (its part uids start with it)
    headers: dict[str, str] = field(default_factory=dict)     # Content-Type, Cache-Control, ...
    user_meta: dict[str, str] = field(default_factory=dict)   # x-amz-meta-* without the prefix
    checksum: dict[str, str] = field(default_factory=dict)    # {"algorithm","value","type"}
    # Each part: {"number", "size", "etag", "layout", optional "checksum"}; in object order.
    parts: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] | None = None  # layout of the multipart manifest part, if any

    def layouts(self) -> list[dict[str, Any]]:
        out = [p["layout"] for p in self.parts if p.get("layout")]
        if self.manifest:
            out.append(self.manifest)
        return out


@dataclass
class UploadRecord:
    upload_id: str
    bucket: str
    key: str
    owner: str
    initiated: float
    headers: dict[str, str] = field(default_factory=dict)
    user_meta: dict[str, str] = field(default_factory=dict)
    checksum_algorithm: str = ""   # "" or CRC32/CRC32C/CRC64NVME/SHA1/SHA256
    checksum_type: str = ""        # "" or COMPOSITE / FULL_OBJECT


@dataclass
class PartRecord:
    upload_id: str
    number: int
    size: int
    etag: str
    last_modified: float
    layout: dict[str, Any]
    checksum: dict[str, str] = field(default_factory=dict)


@dataclass
class OrphanEntry:
    id: int
    layout: dict[str, Any]


@dataclass
class ListPage:
    """One page of a listing: objects (or uploads), common prefixes and the truncation state."""

    items: list[Any]
    prefixes: list[str]
    truncated: bool
    next_marker: str | None        # last key (or prefix) returned, when truncated


class BucketNotEmptyError(Exception):
    pass


class UploadChangedError(Exception):
    """A completing upload was aborted, or one of its parts replaced, meanwhile."""


class NoSuchBucketError(Exception):
    """The bucket was deleted (by another request or gateway) before the commit: an object or
    upload must never be committed into a bucket that is gone."""


class StoreUnavailableError(S3Error):
    """The metadata database does not answer (lost, restarting, overloaded). Nothing of the
    transaction was applied, or its commit's answer was lost; S3 clients see 503 SlowDown and
    retry. str() is the reason, for logs and /health/ready."""

    def __init__(self, detail: str) -> None:
        super().__init__("SlowDown", "The metadata store is not reachable right now; "
                         "please retry.")
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class MetadataStore(QueueStore, abc.ABC):
    """What the S3 operations need from metadata. Old layouts freed by a call are queued in the
    orphan queue inside the same transaction, so a crash never loses track of them.

    Every data method is a coroutine: a shared database answers over the network. `start`
    connects (and creates or upgrades the schema) before first use; `close` lets go."""

    async def start(self) -> None:  # noqa: B027 - optional, not abstract
        """Connect and bring the schema up to date (a no-op where the constructor did it)."""

    @abc.abstractmethod
    async def schema_version(self) -> int: ...


    # buckets
    @abc.abstractmethod
    async def create_bucket(self, rec: BucketRecord) -> BucketRecord | None:
        """Insert; return the existing record instead if the name is taken."""

    @abc.abstractmethod
    async def get_bucket(self, name: str) -> BucketRecord | None: ...

    @abc.abstractmethod
    async def list_buckets(self, owner: str | None = None) -> list[BucketRecord]: ...

    @abc.abstractmethod
    async def delete_bucket(self, name: str) -> bool:
        """Raise BucketNotEmptyError if objects remain; uploads in progress are aborted."""

    # objects
    @abc.abstractmethod
    async def get_object(self, bucket: str, key: str) -> ObjectRecord | None:
        """The object's record; read-only for the caller (an implementation may hand the
        same parsed `parts` list to every reader of one stored version)."""

    @abc.abstractmethod
    async def put_object(self, rec: ObjectRecord, *, if_version: str | None = None,
                   if_absent: bool = False, upload_id: str | None = None,
                   release: list[int] | None = None) -> ObjectRecord | None:
        """Commit rec, queueing the replaced object's layouts (and, with upload_id, the upload's
        parts not used by rec) for deletion. With if_absent / if_version the commit only happens
        if the key is absent / still has that version: returns the current record on conflict,
        None on success. With upload_id, every part of rec must still be a current part of that
        upload, else UploadChangedError and nothing changes; NoSuchBucketError if the bucket
        is gone (checked in the same transaction). `release`: orphan-queue entries (the pending marks of the data just
        written) removed in the same transaction, so committed data is never swept."""

    @abc.abstractmethod
    async def delete_object(self, bucket: str, key: str) -> ObjectRecord | None: ...

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[ObjectRecord | None]:
        """Delete many keys of one bucket (DeleteObjects), their layouts queued for the
        sweeper; one result per key, in order (None: the key was absent). Implementations
        should do it in one transaction; this default only loops."""
        return [await self.delete_object(bucket, k) for k in keys]

    @abc.abstractmethod
    async def list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                     limit: int) -> ListPage:
        """Objects in the page carry no headers, user metadata or parts (listings need only
        key, size, ETag, last-modified, owner and checksum)."""

    # uploads
    @abc.abstractmethod
    async def create_upload(self, rec: UploadRecord) -> None:
        """NoSuchBucketError if the bucket is gone (checked in the same transaction)."""

    @abc.abstractmethod
    async def get_upload(self, upload_id: str) -> UploadRecord | None: ...

    @abc.abstractmethod
    async def put_part(self, part: PartRecord, release: list[int] | None = None) -> bool:
        """Store a part (replacing the same number, queueing its old layout) and drop the
        `release` orphan entries in the same transaction. False if the upload no longer exists
        (then nothing changes and the caller frees the new layout)."""

    @abc.abstractmethod
    async def list_parts(self, upload_id: str, after: int = 0, limit: int = 10000) -> list[PartRecord]: ...

    @abc.abstractmethod
    async def abort_upload(self, upload_id: str) -> bool: ...

    @abc.abstractmethod
    async def list_uploads(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                     upload_id_marker: str, limit: int) -> ListPage: ...

    @abc.abstractmethod
    async def stale_uploads(self, older_than: float) -> list[str]: ...

    # orphan fragments
    @abc.abstractmethod
    async def queue_orphans(self, layouts: list[dict[str, Any]], delay: float = 0.0) -> list[int]: ...

    @abc.abstractmethod
    async def claim_orphans(self, limit: int = 100, lease: float = 300.0) -> list[OrphanEntry]:
        """Due entries, leased for `lease` seconds so concurrent sweepers skip them."""

    @abc.abstractmethod
    async def done_orphans(self, ids: list[int]) -> None: ...

    @abc.abstractmethod
    async def next_due(self) -> float | None:
        """When the earliest queued orphan becomes due (epoch seconds), None if none."""

    @abc.abstractmethod
    async def orphan_count(self) -> int: ...

    # repair queue and deletion records: see gateway/metadata/queues.py (QueueStore)

    # fragment audit
    @abc.abstractmethod
    async def part_owners(self) -> dict[str, str]:
        """Every part uid something here owns -> "live" (an object's part or manifest, an
        upload's part, a bucket's marker), "pending write" or "queued for deletion" (the orphan
        queue), read in one snapshot. For the fragment audit (gateway/audit.py)."""

    @abc.abstractmethod
    async def close(self) -> None: ...
