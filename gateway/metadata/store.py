"""The metadata store interface: buckets (with their configuration documents), objects and
their versions, multipart uploads, parts, orphan queue, users, lifecycle runs.

Keys are handled as UTF-8 bytes so that every implementation lists in S3's binary order.
Part layouts are opaque JSON-able dicts (erasure.PartLayout serialised); the store never
interprets them. Methods are coroutines and each one is a short transaction: the embedded
SQLite implementation answers in microseconds (its blocking work off the event loop), a shared
SQL backend over a connection pool in a network round trip or two.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.metadata.layouts import LayoutTables
from gateway.metadata.moves import MovesStore
from gateway.metadata.queues import QueueStore
from gateway.s3.errors import S3Error


@dataclass
class BucketRecord:
    name: str
    owner: str
    created: float
    region: str = "us-east-1"
    # Normalised grant list (JSON-able dicts, as gateway/access/ makes them); None: only the
    # owner has FULL_CONTROL (a fresh bucket, or one whose ACL was never set).
    acl: list[dict[str, Any]] | None = None


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
    tags: dict[str, str] = field(default_factory=dict)        # object tags (<= 10, ops-checked)
    acl: list[dict[str, Any]] | None = None  # normalised grant list; None: owner FULL_CONTROL
    # S3 version id: "null" while the bucket's versioning is off or suspended, else chosen by
    # the caller with gateway.metadata.versionids.new_version_id().
    version_id: str = "null"
    # Layout of the 0-byte archive recording tags/ACL set after the write
    # (gateway/store/tagarchives.py); kept on the version only (None in `objects` rows).
    meta_part: dict[str, Any] | None = None

    def layouts(self) -> list[dict[str, Any]]:
        out = [p["layout"] for p in self.parts if p.get("layout")]
        if self.manifest:
            out.append(self.manifest)
        if self.meta_part:
            out.append(self.meta_part)
        return out


@dataclass
class VersionRecord(ObjectRecord):
    """One version of a key (ListObjectVersions, GET ?versionId=). A delete marker has
    size 0, no parts, and its 0-byte archive part's layout (if any) as `manifest`, so deleting
    the marker frees that part like any other layout."""

    is_latest: bool = False
    delete_marker: bool = False


@dataclass
class DeleteItem:
    """One key of a batch delete (`delete_many`): with `version_id`, that version is removed
    (delete_version); else with `marker`, that delete marker is added (put_delete_marker, on
    an enabled or suspended bucket); else the current object is removed (delete_object).
    `if_version` (marker or current only): act only if the current object is that write
    (`ObjectRecord.version`), else nothing changes and the answer is None (the lifecycle
    worker's expiry of the version it judged, never of a PUT that landed meanwhile)."""

    key: str
    version_id: str | None = None
    marker: VersionRecord | None = None
    if_version: str | None = None
    # Object Lock: a version whose stored headers lock it (gateway/s3/lockrules.py) is never
    # removed (the answer is LOCKED); this lets an unexpired GOVERNANCE retention go.
    bypass_governance: bool = False


@dataclass
class UserRecord:
    """An S3 user kept in the store (`zonegate user add/list/remove`), beside the config's."""

    access_key: str
    secret: str
    canonical_id: str
    display_name: str
    created: float


@dataclass
class LifecycleClaim:
    """A bucket leased to one lifecycle worker for `day`; `marker` is the resume point saved by
    lifecycle_progress during that day's run ("" to start from the first key)."""

    bucket: str
    day: int
    marker: str


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
    # list_versions: the version id of the last version returned, when truncated (None when
    # the page ended on a common prefix)
    next_version_marker: str | None = None


# Kinds of bucket configuration documents (put_bucket_config).
# The bucket ACL is not one of them: it is BucketRecord.acl (put_bucket_acl), read with the
# bucket on every request that evaluates access.
CONFIG_KINDS = ("versioning", "lifecycle", "tagging", "policy", "cors", "ownership",
                "public-access-block", "encryption", "object-lock")
# put_object_tags / put_object_acl: the other field is not checked
ANY: Any = object()


class _Locked:
    """The answer for a version a delete left in place because Object Lock protects it."""

    delete_marker = False

    def __repr__(self) -> str:
        return "LOCKED"


# delete_version / delete_many / put_delete_marker / delete_object: the version is locked
# (a legal hold or retention in its headers, gateway/s3/lockrules.py): nothing changed.
LOCKED: Any = _Locked()

# put_object / put_delete_marker / delete_many versioning states
VERSIONING_STATES = ("off", "enabled", "suspended")


class BucketNotEmptyError(Exception):
    pass


class UploadChangedError(Exception):
    """A completing upload was aborted, or one of its parts replaced, meanwhile."""


def upload_layouts_into(rec: ObjectRecord, upload_id: str,
                        current: list[dict[str, Any]]) -> None:
    """Complete's check and copy, inside its transaction: every part of `rec` must still be
    one of the upload's parts (`current`: their layouts as recorded now, by part uid), else
    UploadChangedError; each part of `rec` then takes the layout recorded now. The data
    mover may have committed a new layout for an upload part since Complete read the parts:
    the object records where the fragments are, not where they were (the mover deletes the
    old copies)."""
    now = {d.get("part_uid"): d for d in current}
    if not {p["layout"].get("part_uid") for p in rec.parts} <= set(now):
        raise UploadChangedError(upload_id)
    rec.parts = [{**p, "layout": now[p["layout"].get("part_uid")]} for p in rec.parts]


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


def storable_key(text: str) -> bool:
    """Whether `text` can be stored as a key in both backends: UTF-8 encodable (a client's
    invalid bytes arrive as surrogate escapes) and without NUL (PostgreSQL's text has none)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class MetadataStore(QueueStore, LayoutTables, MovesStore, abc.ABC):
    """What the S3 operations need from metadata. Old layouts freed by a call are queued in the
    orphan queue inside the same transaction, so a crash never loses track of them.

    Every data method is a coroutine: a shared database answers over the network. `start`
    connects (and creates or upgrades the schema) before first use; `close` lets go."""

    # put_object commits that queued layouts to free, in this process: the gateway wakes its
    # sweeper after a PUT only when its commit moved this (a new key frees nothing, and each
    # sweep is a few more queries to a shared database).
    freeing_puts: int = 0

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
        """Raise BucketNotEmptyError if any version (or delete marker) remains; uploads in
        progress are aborted; the bucket's configuration documents and lifecycle state go
        with it."""

    @abc.abstractmethod
    async def put_bucket_acl(self, bucket: str, acl: list[dict[str, Any]] | None) -> bool:
        """Set the bucket's grant list (None: back to owner-only). False: no such bucket."""

    # bucket configuration documents
    @abc.abstractmethod
    async def get_bucket_config(self, bucket: str, kind: str) -> str | None:
        """The bucket's document of this kind (CONFIG_KINDS), None if unset or no bucket."""

    @abc.abstractmethod
    async def put_bucket_config(self, bucket: str, kind: str, doc: str | None) -> bool:
        """Set (doc: the validated, normalised JSON text) or delete (None) the bucket's
        document of this kind. False: no such bucket. ValueError: unknown kind."""

    @abc.abstractmethod
    async def bucket_configs(self, bucket: str) -> dict[str, str]:
        """Every document the bucket has, by kind ({} if none or no bucket)."""

    async def bucket_and_configs(self, name: str) -> tuple[BucketRecord | None, dict[str, str]]:
        """get_bucket and bucket_configs together (what every request's access check reads):
        both at once here, one statement where the backend can (PostgreSQL)."""
        b, configs = await asyncio.gather(self.get_bucket(name), self.bucket_configs(name))
        return b, configs

    async def read_for_get(self, bucket: str, key: str
                           ) -> tuple[BucketRecord | None, dict[str, str], ObjectRecord | None]:
        """bucket_and_configs and the current object (get_object) together: a GET's reads,
        one statement where the backend can (PostgreSQL). The object is only read, the caller
        checks access before it answers with it."""
        (b, configs), obj = await asyncio.gather(self.bucket_and_configs(bucket),
                                                 self.get_object(bucket, key))
        return b, configs, obj

    # objects and versions
    @abc.abstractmethod
    async def get_object(self, bucket: str, key: str,
                         version_id: str | None = None) -> ObjectRecord | None:
        """Without version_id: the current object (None if absent or if the newest version is
        a delete marker). With it: that version as a VersionRecord (delete_marker set for a
        marker, is_latest for the newest), None if there is no such version. Read-only for the
        caller (an implementation may hand the same parsed `parts` list to every reader)."""

    @abc.abstractmethod
    async def head_version(self, bucket: str, key: str) -> VersionRecord | None:
        """The newest version of the key, delete markers included (for a GET's 404 to say
        x-amz-delete-marker), None if the key has no version."""

    @abc.abstractmethod
    async def put_object(self, rec: ObjectRecord, *, if_version: str | None = None,
                         if_absent: bool = False, upload_id: str | None = None,
                         release: list[int] | None = None,
                         versioning: str = "off") -> ObjectRecord | None:
        """Commit rec as the key's newest version and current object. versioning "enabled":
        rec.version_id (the caller's new_version_id()) is added and the old current version
        stays as a noncurrent one (its layouts are kept); "off" / "suspended": rec replaces the
        key's "null" version (its layouts queued; rec.version_id is stored as "null"), other
        versions stay. Also queued: with upload_id, the upload's parts not used by rec.

        With if_absent / if_version the commit only happens if there is no current object /
        the current object still has that `version` (write uuid): returns the current record
        on conflict, None on success. With upload_id, every part of rec must still be a current
        part of that upload (by part uid), else UploadChangedError and nothing changes, and
        each part of rec takes the layout the upload's part has then (a data mover's commit
        since the caller read the parts: the object records where the fragments are); NoSuchBucketError if
        the bucket is gone (checked in the same transaction). `release`: orphan-queue entries
        (the pending marks of the data just written) removed in the same transaction, so
        committed data is never swept."""

    @abc.abstractmethod
    async def delete_object(self, bucket: str, key: str, *,
                            if_version: str | None = None) -> ObjectRecord | None:
        """Remove the current object (the version it is) and queue its layouts; the next newest
        version, if any and not a marker, becomes current. For unversioned buckets (and
        existing callers); versioned deletes use put_delete_marker / delete_version.
        if_version: only if the current object's `version` is that (else None, no change)."""

    @abc.abstractmethod
    async def delete_version(self, bucket: str, key: str, version_id: str, *,
                             bypass_governance: bool = False) -> VersionRecord | None:
        """Remove exactly that version (object or delete marker), queueing its layouts; if it
        was the newest, the next newest becomes current (none if that one is a marker). The
        removed version, None if there was none, LOCKED (nothing changes) if Object Lock
        protects it (lockrules.blocks_delete, checked in the same transaction; every delete
        that would free a version's data answers LOCKED so: delete_object, delete_many,
        put_delete_marker replacing a null version)."""

    @abc.abstractmethod
    async def put_delete_marker(self, marker: VersionRecord, versioning: str, *,
                                if_version: str | None = None,
                                release: list[int] | None = None) -> VersionRecord | None:
        """DELETE without a version id on a versioned bucket. "enabled": marker (its
        version_id from new_version_id()) becomes the newest version and the current object
        is no longer current (kept as a noncurrent version); "suspended": the marker, stored
        with version id "null", replaces the key's null version (its layouts queued). The
        marker as stored. NoSuchBucketError if the bucket is gone; ValueError for "off".
        if_version: only if the current object's `version` is that (else None, no change).
        `release`: orphan-queue entries (the marker's pending mark) removed in the same
        transaction, as put_object's."""

    @abc.abstractmethod
    async def delete_many(self, bucket: str, items: list[DeleteItem],
                          versioning: str = "off",
                          release: list[int] | None = None) -> list[ObjectRecord | None]:
        """DeleteObjects on any bucket, in one transaction: per item (see DeleteItem) what
        delete_version, put_delete_marker or delete_object returns, in order. `release` as
        put_object's (the markers' pending marks). Freed layouts are queued once per part
        (markers of one DeleteObjects share a batch part, gateway/store/deletemarkers.py)."""

    @abc.abstractmethod
    async def live_markers(self, bucket: str, part_uid: str,
                           members: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Those of the delete markers `members` ((key, version_id) in `bucket`) still stored
        with the part `part_uid` as their manifest: a batch part of markers is deleted only
        after its last marker (gateway/store/deletemarkers.py)."""

    @abc.abstractmethod
    async def move_markers(self, bucket: str, part_uid: str,
                           moves: list[tuple[str, str, dict[str, Any]]],
                           release: list[int] | None = None) -> bool:
        """Give each delete marker (key, version_id, layout) of `moves` that layout as its
        manifest, in one transaction, only if every one is still stored with the part
        `part_uid` as its manifest (else False, nothing changes); `release` as put_object's.
        For the sweeper's rewrite of a batch part some of whose markers are gone."""

    @abc.abstractmethod
    async def list_versions(self, bucket: str, prefix: str, delimiter: str, key_marker: str,
                            version_id_marker: str, limit: int) -> ListPage:
        """ListObjectVersions: VersionRecords (no headers, user metadata, tags, ACL or parts)
        with keys ascending in binary order and each key's versions newest first, keys holding
        the delimiter rolled up into common prefixes (both count toward limit). Resumes after
        (key_marker, version_id_marker) or, without a version id marker, after every version
        of key_marker. Truncated: next_marker is the last key (or prefix), next_version_marker
        the last version's id (None after a prefix)."""

    @abc.abstractmethod
    async def put_object_tags(self, bucket: str, key: str, version_id: str | None,
                              tags: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_acl: Any = ANY, if_lock: Any = ANY) -> bool:
        """Replace the tags of that version (None: the current object). False if there is no
        such version, it is a delete marker, or `if_version` is given and is not its write
        (`ObjectRecord.version`), or `if_acl` is given and is not its grant list, or
        `if_lock` is given and is not its lock (lockrules.lock_of its headers): then
        nothing changes. With `meta_part`, that layout becomes the version's `meta_part` and
        the one it had is queued for deletion; the pending marks in `release` are dropped in
        the same transaction (only when it changes)."""

    @abc.abstractmethod
    async def put_object_acl(self, bucket: str, key: str, version_id: str | None,
                             acl: list[dict[str, Any]] | None, *,
                             meta_part: dict[str, Any] | None = None,
                             if_version: str | None = None,
                             release: list[int] | None = None,
                             if_tags: Any = ANY, if_lock: Any = ANY) -> bool:
        """Replace the grant list of that version (None: the current object); False, and
        `meta_part` / `release`, as put_object_tags (`if_tags`: only if its tags are those)."""

    @abc.abstractmethod
    async def put_object_lock(self, bucket: str, key: str, version_id: str | None,
                              lock: dict[str, str], *, meta_part: dict[str, Any] | None = None,
                              if_version: str | None = None,
                              release: list[int] | None = None,
                              if_tags: Any = ANY, if_acl: Any = ANY,
                              if_lock: Any = ANY) -> bool:
        """Replace the Object Lock entries of that version's headers with `lock`'s
        (PutObjectRetention / PutObjectLegalHold; lockrules.with_lock); False, and the other
        arguments, as put_object_tags (`if_lock`: only if its lock is still that one, so a
        retention is never changed on the strength of a stale read)."""

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[ObjectRecord | None]:
        """Delete many keys of one bucket (DeleteObjects), their layouts queued for the
        sweeper; one result per key, in order (None: the key was absent). Implementations
        should do it in one transaction; this default only loops."""
        return [await self.delete_object(bucket, k) for k in keys]

    @abc.abstractmethod
    async def list_objects(self, bucket: str, prefix: str, delimiter: str, after: str,
                     limit: int) -> ListPage:
        """Current objects only. Objects in the page carry no headers, user metadata, tags,
        ACL or parts (listings need only key, size, ETag, last-modified, owner, checksum and
        version id)."""

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
    async def wake_orphans(self) -> int:
        """Make due now every entry waiting for nodes that were down (a `purge_nodes`
        layout), leased or not: a node came back. Returns how many."""

    @abc.abstractmethod
    async def orphan_count(self) -> int: ...

    # users
    @abc.abstractmethod
    async def add_user(self, rec: UserRecord) -> bool:
        """False (nothing changes) if the access key is taken."""

    @abc.abstractmethod
    async def get_user(self, access_key: str) -> UserRecord | None:
        """None too for a key no user can have (see `storable_key`): a client's bytes that
        are not UTF-8 or hold a NUL are an unknown key, never a database error."""

    @abc.abstractmethod
    async def list_users(self) -> list[UserRecord]:
        """Ordered by access key."""

    @abc.abstractmethod
    async def remove_user(self, access_key: str) -> bool: ...

    # lifecycle runs
    @abc.abstractmethod
    async def lifecycle_claim(self, worker: str, day: int, lease: float,
                              limit: int = 10) -> list[LifecycleClaim]:
        """Lease to `worker` for `lease` seconds up to `limit` buckets that have a `lifecycle`
        document and whose run for `day` is not done, skipping buckets another worker holds an
        unexpired lease on (FOR UPDATE SKIP LOCKED on PostgreSQL, as orphans are). `day` is an
        integer day number the caller computes (floor(epoch seconds / day length), the day
        length configurable so tests run days in seconds). A claim resumes the marker saved
        for the same day; a new day starts from "". Ordered by bucket name."""

    @abc.abstractmethod
    async def lifecycle_progress(self, bucket: str, worker: str, day: int, marker: str,
                                 lease: float) -> bool:
        """Save the resume point of the day's run and extend the lease. False (nothing saved)
        if worker no longer holds the bucket's lease for that day (it expired and another
        worker claimed it): the caller stops working that bucket."""

    @abc.abstractmethod
    async def lifecycle_done(self, bucket: str, worker: str, day: int) -> bool:
        """The day's run finished: the bucket is not claimed again before day + 1. False if
        worker no longer holds the lease."""

    # repair queue and deletion records: see gateway/metadata/queues.py (QueueStore)
    # recorded layouts and the data mover's leases: gateway/metadata/moves.py (MovesStore)

    # fragment audit
    @abc.abstractmethod
    async def part_owners(self) -> dict[str, str]:
        """Every part uid something here owns -> "live" (any version's part or manifest, a
        delete marker's part, an upload's part, a bucket's marker), "pending write" or "queued for deletion" (the orphan
        queue), read in one snapshot. For the fragment audit (gateway/store/partowners.py)."""

    @abc.abstractmethod
    async def close(self) -> None: ...
