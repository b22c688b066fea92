"""Tags, ACLs and Object Lock set after a write, on the nodes: what `recover-metadata` needs to
bring back the tags of PutObjectTagging / DeleteObjectTagging, the ACL of PutObjectAcl and the
retention and legal hold of PutObjectRetention / PutObjectLegalHold.

An object's archives are immutable and carry its write-time tags, ACL and lock (in its
headers). Each later change writes a 0-byte erasure part (as delete markers do,
gateway/store/deletemarkers.py) whose archives' meta dict is `{"kind": "object-tags", "tags":
{bucket, key, version_id, version, tags, acl, time, lock}}` (`lock`: the version's
x-amz-object-lock-* headers, {} for none; archives older than Object Lock lack it, and
recovery then keeps the write-time headers), part uid `tg:{uuid4 hex}`. The version owns it (`ObjectRecord.meta_part`, freed with
the version; the one it replaces is queued for deletion in the same commit). Order: the
archive is written under a pending mark, then the store change and the mark's release commit
in one transaction; a crash in between leaves a mark the sweeper resolves after the grace.
Recovery applies the newest archive (by `time`) whose `version` is the version's write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.metadata.store import ObjectRecord
from gateway.s3.errors import S3Error
from gateway.s3.lockrules import lock_of, with_lock
from gateway.store.records import FAILED_WRITE_DELAY, layout_to_dict
from gateway.store.streamhints import stream_hint

KIND = "object-tags"
PREFIX = "tg:"


async def _no_bytes() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


def archive_meta(obj: ObjectRecord, tags: dict[str, str],
                 acl: list[dict[str, Any]] | None, when: float,
                 lock: dict[str, str] | None = None) -> dict[str, Any]:
    """The meta dict every archive of the change carries."""
    d: dict[str, Any] = {"bucket": obj.bucket, "key": obj.key,
                         "version_id": obj.version_id or "null", "version": obj.version,
                         "tags": dict(tags), "acl": acl, "time": when}
    if lock is not None:
        d["lock"] = dict(lock)
    return {"kind": KIND, "tags": d}


async def write_change(storage: Any, store: Any, obj: ObjectRecord, tags: dict[str, str],
                       acl: list[dict[str, Any]] | None,
                       lock: dict[str, str] | None = None) -> tuple[dict[str, Any], int]:
    """Write the archive recording `obj`'s new tags and ACL; (its layout, the pending mark to
    release at commit). ServiceUnavailable when too few nodes answered."""
    from erasure.errors import ErasureError
    uid = f"{PREFIX}{uuid.uuid4().hex}"
    (mark,) = await store.queue_orphans([{"part_uid": uid, "pending": True}],
                                        delay=storage.pending_grace)
    meta = archive_meta(obj, tags, acl, time.time(), lock)
    try:
        layout = await storage.cluster.write_part(
            uid, _no_bytes(), length=0, stream=stream_hint(obj.bucket, obj.key),
            meta=lambda _r: meta)
    except BaseException as e:
        # As Storage._failed: a node may hold an archive whose answer was lost; the
        # sweeper's scan for the uid soon deletes what is left.
        await store.queue_orphans([{"part_uid": uid, "pending": True}],
                                  delay=FAILED_WRITE_DELAY)
        await store.done_orphans([mark])
        if isinstance(e, ErasureError):
            raise S3Error("ServiceUnavailable", "Not enough storage nodes answered; the "
                          "change was not saved. Please retry.") from None
        raise
    return layout_to_dict(layout), mark


async def save_change(req: Any, obj: ObjectRecord, tags: dict[str, str],
                      acl: list[dict[str, Any]] | None, field: str,
                      lock: dict[str, str] | None = None) -> bool:
    """Record `obj`'s new tags (field "tags"), ACL ("acl") or Object Lock ("lock": `lock`
    replaces the lock entries of its headers, and commits only if the lock is still the one
    `obj` was read with: a retention decision is never made on a stale read, OperationAborted
    otherwise): the archive, then the store change with the mark's release. False (the
    archive queued for deletion) if the version is gone or is another write now.

    Every archive carries all three fields, and recovery takes the newest: the change commits
    only if the version's other fields are still the ones its archive carries, else (a
    PutObjectAcl and a PutObjectTagging raced) the archive is written again with the other
    fields as now stored, so the newest archive never brings back a stale one."""
    gw = req.gw
    vid = obj.version_id or "null"
    was = lock_of(obj.headers)
    new_lock = dict(lock) if field == "lock" and lock is not None else was
    for _ in range(8):
        layout, mark = await write_change(gw.storage, gw.store, obj, tags, acl, new_lock)
        if field == "tags":
            done = await gw.store.put_object_tags(obj.bucket, obj.key, vid, tags,
                                                  meta_part=layout, if_version=obj.version,
                                                  release=[mark], if_acl=acl, if_lock=was)
        elif field == "acl":
            done = await gw.store.put_object_acl(obj.bucket, obj.key, vid, acl,
                                                 meta_part=layout, if_version=obj.version,
                                                 release=[mark], if_tags=tags, if_lock=was)
        else:
            done = await gw.store.put_object_lock(obj.bucket, obj.key, vid, new_lock,
                                                  meta_part=layout, if_version=obj.version,
                                                  release=[mark], if_tags=tags, if_acl=acl,
                                                  if_lock=was)
        if not done:
            await gw.store.queue_orphans([layout])
            await gw.store.done_orphans([mark])
        gw.kick_sweeper()  # the replaced (or unused) archive was queued: free it now
        if done:
            return True
        now = await gw.store.get_object(obj.bucket, obj.key, vid)
        if now is None or getattr(now, "delete_marker", False) or now.version != obj.version:
            return False
        if field != "acl":
            acl = now.acl
        if field != "tags":
            tags = dict(now.tags)
        if lock_of(now.headers) != was:
            if field == "lock":
                raise S3Error("OperationAborted")
            was = new_lock = lock_of(now.headers)
    raise S3Error("ServiceUnavailable", "The object's tags or ACL kept changing; please retry.")


def change_from_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The change an archive's meta dict describes; ValueError when it is malformed."""
    try:
        d = meta["tags"]
        out = {"bucket": str(d["bucket"]), "key": str(d["key"]),
               "version_id": str(d["version_id"]), "version": str(d["version"]),
               "tags": {str(k): str(v) for k, v in dict(d["tags"]).items()},
               "acl": list(d["acl"]) if d.get("acl") is not None else None,
               "time": float(d["time"]),
               "lock": {str(k): str(v) for k, v in dict(d["lock"]).items()}
               if d.get("lock") is not None else None}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed tag archive: {e!r}") from None
    if not out["bucket"] or not out["key"]:
        raise ValueError("malformed tag archive: empty bucket or key")
    return out


def apply_changes(records: list[ObjectRecord],
                  changes: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Recovery: give each record the tags, ACL and `meta_part` of its newest change (pairs of
    (change, layout)) whose `version` is the record's write. Returns the layouts no record
    took (older changes, or changes of writes that are gone), for the deletion queue."""
    by_write: dict[tuple[str, str, str, str], ObjectRecord] = {
        (r.bucket, r.key, r.version_id, r.version): r for r in records}
    newest: dict[tuple[str, str, str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    leftovers: list[dict[str, Any]] = []
    for ch, lay in changes:
        k = (ch["bucket"], ch["key"], ch["version_id"], ch["version"])
        if k not in by_write:
            leftovers.append(lay)
            continue
        have = newest.get(k)
        if have is not None and (have[0]["time"], have[1]["part_uid"]) >= \
                (ch["time"], lay["part_uid"]):
            leftovers.append(lay)
            continue
        if have is not None:
            leftovers.append(have[1])
        newest[k] = (ch, lay)
    for k, (ch, lay) in newest.items():
        rec = by_write[k]
        rec.tags, rec.acl, rec.meta_part = dict(ch["tags"]), ch["acl"], lay
        if ch.get("lock") is not None:
            rec.headers = with_lock(rec.headers, ch["lock"])
    return leftovers
