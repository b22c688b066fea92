"""Delete markers on the nodes: what `recover-metadata` needs to rebuild a key's version chain.

A DELETE without a version id on a versioned bucket adds a delete marker. Besides its row in
the metadata store, each marker is a 0-byte erasure-coded part whose archives' meta dict is
`{"kind": "delete-marker", "marker": {bucket, key, version_id, last_modified, owner}}` (every
archive carries it: recovery needs the scan only, no read). Its part uid is
`dm:{version_id}`; a suspended bucket's marker has the version id "null", so its uid is
`dm:null-{uuid4 hex}` (unique: a later null marker replaces it, and a late deletion of the old
one must not hit the new one). The stream hint is the key's, so markers die with the data of
the "directory" they belong to.

The marker's layout is the VersionRecord's `manifest`: deleting the marker version (or the
null version it replaced) queues it like any layout, and the fragment audit sees it owned.
Markers are written before the metadata commit, under a pending mark as every write is
(gateway/storage.py), so a crash in between leaves a mark the sweeper resolves.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import S3Error
from gateway.metadata.store import VersionRecord
from gateway.storage import FAILED_WRITE_DELAY, layout_to_dict
from gateway.streams import stream_hint

KIND = "delete-marker"
PREFIX = "dm:"
# Marker writes of one DeleteObjects in flight at once: each is one small request per node.
CONCURRENCY = 32


def marker_uid(version_id: str) -> str:
    """The part uid of a delete marker with this version id."""
    if version_id == "null":
        return f"{PREFIX}null-{uuid.uuid4().hex}"
    return PREFIX + version_id


def marker_meta(m: VersionRecord) -> dict[str, Any]:
    """The meta dict every archive of the marker carries."""
    return {"kind": KIND, "marker": {"bucket": m.bucket, "key": m.key,
                                     "version_id": m.version_id,
                                     "last_modified": m.last_modified, "owner": m.owner}}


def record_from_meta(meta: dict[str, Any]) -> VersionRecord:
    """The marker an archive's meta dict describes; ValueError when it is malformed."""
    try:
        d = meta["marker"]
        rec = new_marker(str(d["bucket"]), str(d["key"]), str(d["owner"]),
                         str(d["version_id"]), float(d["last_modified"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed delete marker: {e!r}") from None
    if not rec.bucket or not rec.key:
        raise ValueError("malformed delete marker: empty bucket or key")
    return rec


def new_marker(bucket: str, key: str, owner: str, version_id: str,
               last_modified: float) -> VersionRecord:
    """A delete marker record (no layout yet)."""
    return VersionRecord(bucket=bucket, key=key, size=0, etag="", last_modified=last_modified,
                         owner=owner, version=uuid.uuid4().hex, version_id=version_id,
                         delete_marker=True, is_latest=True)


async def _no_bytes() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


async def write_markers(storage: Any, store: Any, markers: list[VersionRecord],
                        grace: float) -> tuple[list[int | None], list[S3Error | None]]:
    """Write the archives of `markers` (their `manifest` is set to the layout). Returns the
    pending mark of each to release at commit (None where the write failed) and the error of
    each failed one (ServiceUnavailable: too few nodes answered). One store transaction marks
    them all pending, so a DeleteObjects of 1000 keys costs one commit here, not 1000."""
    from erasure.errors import ErasureError
    if not markers:
        return [], []
    uids = [marker_uid(m.version_id) for m in markers]
    marks: list[int | None] = list(await store.queue_orphans(
        [{"part_uid": u, "pending": True} for u in uids], delay=grace))
    errors: list[S3Error | None] = [None] * len(markers)
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        m = markers[i]
        async with sem:
            try:
                layout = await storage.cluster.write_part(
                    uids[i], _no_bytes(), length=0, stream=stream_hint(m.bucket, m.key),
                    meta=lambda _r, m=m: marker_meta(m))
            except ErasureError:
                errors[i] = S3Error("ServiceUnavailable", "Not enough storage nodes answered; "
                                    "the delete marker was not written. Please retry.")
                return
        m.manifest = layout_to_dict(layout)

    try:
        await asyncio.gather(*(one(i) for i in range(len(markers))))
    finally:
        failed = [i for i, e in enumerate(errors) if e is not None]
        unfinished = [i for i, m in enumerate(markers) if m.manifest is None and i not in failed]
        bad = failed + unfinished
        if bad:
            # As Storage._failed: a node may hold an archive whose answer was lost; the
            # sweeper's scan for the uid soon deletes what is left.
            await store.queue_orphans([{"part_uid": uids[i], "pending": True} for i in bad],
                                      delay=FAILED_WRITE_DELAY)
            await store.done_orphans([marks[i] for i in bad if marks[i] is not None])
            for i in bad:
                marks[i] = None
    return marks, errors
