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
(gateway/store/storage.py), so a crash in between leaves a mark the sweeper resolves; the commit
(put_delete_marker / delete_many with `release`) drops the mark in its own transaction.

Batches (DeleteObjects, issue 15): 1000 markers written one part each cost 1000 erasure
writes (10-17 s). A batch of markers of one request is instead one 0-byte part per ~48 KiB of
marker list (uid `dmb:{uuid4 hex}`, meta `{"kind": "delete-markers", "bucket", "owner",
"last_modified", "markers": [[key, version_id], ...]}`), and every marker of it has that
layout as its `manifest`. The part is shared, so its deletion (queued whenever one of its
markers goes) is the sweeper's `settle`: the part goes once no marker it lists is stored with
it; while some are, those are rewritten into a new part (one write, one transaction) and the
old one goes, so a marker deleted by id does not come back on recovery once the sweeper has
run, as for any deleted version.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.metadata.store import VersionRecord
from gateway.s3.errors import S3Error
from gateway.store.records import FAILED_WRITE_DELAY, layout_to_dict
from gateway.store.streamhints import stream_hint

log = logging.getLogger("zonegate.deletemarkers")

KIND = "delete-marker"
PREFIX = "dm:"
BATCH_KIND = "delete-markers"
BATCH_PREFIX = "dmb:"
# Marker list bytes (as JSON) per batch part: the nodes refuse archive meta past 64 KiB
# (erasure/writer.py MAX_META) and the archive's own fields need some room.
BATCH_BYTES = 48 * 1024
# Marker part writes of one request in flight at once (one small request per node each).
CONCURRENCY = 128


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


def batch_meta(bucket: str, owner: str, last_modified: float,
               members: list[VersionRecord]) -> dict[str, Any]:
    """The meta dict every archive of a batch part carries."""
    return {"kind": BATCH_KIND, "bucket": bucket, "owner": owner,
            "last_modified": last_modified,
            "markers": [[m.key, m.version_id] for m in members]}


def records_from_batch(meta: dict[str, Any]) -> list[VersionRecord]:
    """The markers a batch part's meta dict lists; ValueError when it is malformed."""
    try:
        bucket, owner = str(meta["bucket"]), str(meta["owner"])
        t = float(meta["last_modified"])
        out = [new_marker(bucket, str(k), owner, str(v), t) for k, v in meta["markers"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed delete marker batch: {e!r}") from None
    if not bucket or any(not m.key for m in out):
        raise ValueError("malformed delete marker batch: empty bucket or key")
    return out


def batches(markers: list[VersionRecord]) -> list[list[int]]:
    """Indexes of `markers` grouped into batch parts: one (bucket, owner, time) per part (the
    part says them once) and at most BATCH_BYTES of list each."""
    groups: dict[tuple[str, str, float], list[list[int]]] = {}
    size: dict[tuple[str, str, float], int] = {}
    for i, m in enumerate(markers):
        g = (m.bucket, m.owner, m.last_modified)
        n = len(json.dumps([m.key, m.version_id])) + 2
        if g not in groups or size[g] + n > BATCH_BYTES:
            groups.setdefault(g, []).append([])
            size[g] = 0
        groups[g][-1].append(i)
        size[g] += n
    return [b for bs in groups.values() for b in bs]


async def settle(storage: Any, store: Any, uid: str) -> bool:
    """The sweeper's step for a batch part queued for deletion; True when the part must stay.
    Its markers (read from its archives' meta: every archive lists them) that are still
    stored with it (`store.live_markers`): none, the part goes; all, it stays (a marker's own
    deletion queues it again); some, they are written as a new batch part and moved onto it
    (`store.move_markers`, checking none went meanwhile), and the old part goes, so a
    deleted marker does not come back on recovery. Any failure keeps the part: a later
    deletion of one of its markers queues it again."""
    found = [p for p in await storage.cluster.scan(uid) if p.part_uid == uid]
    if not found:
        return False
    try:
        members = records_from_batch(found[0].meta)
    except ValueError as e:
        log.warning("%s: %s; deleting it", uid, e)
        return False
    bucket = members[0].bucket
    live = set(await store.live_markers(bucket, uid, [(m.key, m.version_id) for m in members]))
    if not live:
        return False
    if len(live) == len(members):
        return True
    kept = [m for m in members if (m.key, m.version_id) in live]
    marks, errors = await write_markers(storage, store, kept, storage.pending_grace,
                                        batch=True)
    if any(e is not None for e in errors):
        await _drop(store, kept, marks)
        return True
    ok = await store.move_markers(bucket, uid, [(m.key, m.version_id, m.manifest)
                                                for m in kept],
                                  release=sorted({m for m in marks if m is not None}))
    if not ok:
        await _drop(store, kept, marks)
        return True
    return False


async def _drop(store: Any, written: list[VersionRecord], marks: list[int | None]) -> None:
    """Queue the parts a failed rewrite wrote (their pending marks go with it)."""
    lays = {m.manifest["part_uid"]: m.manifest for m in written if m.manifest}
    if lays:
        await store.queue_orphans(list(lays.values()))
    done = sorted({m for m in marks if m is not None})
    if done:
        await store.done_orphans(done)


async def _no_bytes() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


async def write_markers(storage: Any, store: Any, markers: list[VersionRecord],
                        grace: float, *, batch: bool = False
                        ) -> tuple[list[int | None], list[S3Error | None]]:
    """Write the archives of `markers` (their `manifest` is set to the layout). Returns the
    pending mark of each to release at commit (None where the write failed; markers of one
    batch part share theirs) and the error of each failed one (ServiceUnavailable: too few
    nodes answered). A single marker is a `dm:` part of its own; several are written as
    batch parts (see the module's doc), so a DeleteObjects of 1000 keys costs one or a few
    erasure writes and one store commit for their pending marks. `batch`: batch parts even
    for one marker (the sweeper's rewrite: a fresh uid each time, never `dm:{id}` twice)."""
    from erasure.errors import ErasureError
    if not markers:
        return [], []
    if len(markers) == 1 and not batch:
        groups = [[0]]
        uids = [marker_uid(markers[0].version_id)]
        metas = [marker_meta(markers[0])]
    else:
        groups = batches(markers)
        uids = [f"{BATCH_PREFIX}{uuid.uuid4().hex}" for _ in groups]
        metas = [batch_meta(markers[g[0]].bucket, markers[g[0]].owner,
                            markers[g[0]].last_modified, [markers[i] for i in g])
                 for g in groups]
    gmarks: list[int | None] = list(await store.queue_orphans(
        [{"part_uid": u, "pending": True} for u in uids], delay=grace))
    gerrors: list[S3Error | None] = [None] * len(groups)
    written: list[bool] = [False] * len(groups)
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(j: int) -> None:
        m = markers[groups[j][0]]
        async with sem:
            try:
                layout = await storage.cluster.write_part(
                    uids[j], _no_bytes(), length=0, stream=stream_hint(m.bucket, m.key),
                    meta=lambda _r, d=metas[j]: d)
            except ErasureError:
                gerrors[j] = S3Error("ServiceUnavailable", "Not enough storage nodes "
                                     "answered; the delete marker was not written. Please "
                                     "retry.")
                return
        lay = layout_to_dict(layout)
        for i in groups[j]:
            markers[i].manifest = lay
        written[j] = True

    try:
        await asyncio.gather(*(one(j) for j in range(len(groups))))
    finally:
        bad = [j for j in range(len(groups)) if not written[j]]
        if bad:
            # As Storage._failed: a node may hold an archive whose answer was lost; the
            # sweeper's scan for the uid soon deletes what is left.
            await store.queue_orphans([{"part_uid": uids[j], "pending": True} for j in bad],
                                      delay=FAILED_WRITE_DELAY)
            await store.done_orphans([gmarks[j] for j in bad if gmarks[j] is not None])
            for j in bad:
                gmarks[j] = None
    marks: list[int | None] = [None] * len(markers)
    errors: list[S3Error | None] = [None] * len(markers)
    for j, g in enumerate(groups):
        for i in g:
            marks[i], errors[i] = gmarks[j], gerrors[j]
    return marks, errors
