"""S3 versioning: Put/GetBucketVersioning, version ids on writes and reads, DeleteObject and
DeleteObjects with version ids and delete markers.

A bucket's versioning is its `versioning` configuration document, `{"Status": "Enabled"}` or
`{"Status": "Suspended"}` (none: never enabled; S3 has no way back to that). The store keeps
every version (gateway/metadata/store.py); this module decides, per request, which version id
a write gets (a fresh one when enabled, "null" otherwise), answers the version headers, and
writes delete markers to the nodes too (gateway/store/deletemarkers.py) so recovery finds them.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from starlette.responses import Response

from gateway.metadata.store import LOCKED, DeleteItem, NoSuchBucketError, ObjectRecord
from gateway.metadata.versionids import new_version_id
from gateway.metadata.versionwalk import once_per_part
from gateway.ops import access, lockguard
from gateway.ops.bucketconfig import save_bucket_config
from gateway.ops.common import (
    MAX_DELETE_KEYS,
    S3_NS,
    S3Request,
    bucket_config,
    check_key,
    el,
    http_date,
    notify_sweeper,
    now,
    parse_xml,
    read_small_body,
    require_bucket,
    seen_configs,
    x,
    xml_response,
)
from gateway.s3.errors import S3Error
from gateway.s3.xmlio import parse_versioning_configuration
from gateway.store.deletemarkers import new_marker, write_markers

log = logging.getLogger("zonegate.versioning")

KIND = "versioning"
NULL = "null"
_STATES = {"Enabled": "enabled", "Suspended": "suspended"}
_VERSION_ID = re.compile(r"^[0-9a-f]{32}$")  # versionids.new_version_id()


# ---- the bucket's state --------------------------------------------------------------------

def state_of(doc: str | None) -> str:
    """"off" | "enabled" | "suspended" from a stored versioning document."""
    if not doc:
        return "off"
    try:
        return _STATES.get(json.loads(doc).get("Status"), "off")
    except (ValueError, AttributeError):
        return "off"


async def bucket_state(store: Any, bucket: str) -> str:
    """The versioning state of `bucket` ("off" when never enabled)."""
    return state_of(await store.get_bucket_config(bucket, KIND))


async def put_versioning(req: S3Request) -> Response:
    """PutBucketVersioning (the marker on the nodes is rewritten with the new document, so
    recover-metadata brings the state back)."""
    await require_bucket(req)
    status = parse_versioning_configuration(await read_small_body(req, 64 * 1024))
    await lockguard.refuse_suspending(req, status)
    await save_bucket_config(req.gw, req.bucket, KIND, json.dumps({"Status": status}))
    return Response(b"")


async def get_versioning(req: S3Request) -> Response:
    await require_bucket(req)
    state = await bucket_state(req.gw.store, req.bucket)
    inner = "" if state == "off" else el("Status", "Enabled" if state == "enabled"
                                         else "Suspended")
    return xml_response(f'<VersioningConfiguration xmlns="{x(S3_NS)}">{inner}'
                        f'</VersioningConfiguration>')


# ---- writes ----------------------------------------------------------------------------------

async def prepare_write(req: S3Request, rec: ObjectRecord) -> str:
    """Give rec its version id by the bucket's state (remembered on the request for the
    commit, `store_state`, and the response, `written_headers`)."""
    state = state_of(await bucket_config(req, rec.bucket, KIND))
    req.extra["versioning"] = state
    rec.version_id = new_version_id() if state == "enabled" else NULL
    return state


def store_state(req: S3Request) -> str:
    """The versioning state `prepare_write` found for this request's write."""
    return str(req.extra.get("versioning", "off"))


def written_headers(req: S3Request, rec: ObjectRecord) -> dict[str, str]:
    """x-amz-version-id of a write, as S3 answers it: only on versioning-enabled buckets (a
    suspended bucket's writes make the "null" version, and S3 sends no header for it)."""
    if store_state(req) == "off" or rec.version_id == NULL:
        return {}
    return {"x-amz-version-id": rec.version_id}


# ---- reads -----------------------------------------------------------------------------------

def requested_version(req: S3Request, param: str = "versionId") -> str | None:
    """The version id a request names (None: the current object); InvalidArgument when it
    cannot be one of ours."""
    vid = req.query.get(param)
    if vid is None:
        return None
    return checked_version_id(vid, param)


def checked_version_id(vid: str, name: str = "versionId") -> str:
    if vid == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string",
                      ArgumentName=name, ArgumentValue=vid)
    if vid != NULL and not _VERSION_ID.match(vid):
        raise S3Error("InvalidArgument", "Invalid version id specified", ArgumentName=name,
                      ArgumentValue=vid[:1024])
    return vid


async def object_for_read(req: S3Request, bucket: str, key: str,
                          vid: str | None) -> ObjectRecord:
    """The object (current or the version `vid`) a GET/HEAD/copy reads. NoSuchKey (with
    x-amz-delete-marker when the newest version is a marker), NoSuchVersion, or 405
    MethodNotAllowed for a delete marker named by its version id, as S3 answers."""
    store = req.gw.store
    obj = await store.get_object(bucket, key, vid) if vid is not None else \
        await store.get_object(bucket, key)
    resource = f"/{bucket}/{key}"
    if obj is None:
        if vid is not None:
            raise S3Error("NoSuchVersion", resource=resource, Key=key, VersionId=vid)
        err = S3Error("NoSuchKey", resource=resource, Key=key)
        latest = await store.head_version(bucket, key)
        if latest is not None and latest.delete_marker:
            err.headers = {"x-amz-delete-marker": "true",
                           "x-amz-version-id": latest.version_id}
        raise err
    if getattr(obj, "delete_marker", False):
        err = S3Error("MethodNotAllowed", "The specified method is not allowed against this "
                      "resource.", resource=resource, Method=req.method,
                      ResourceType="DeleteMarker")
        err.headers = {"x-amz-delete-marker": "true", "x-amz-version-id": obj.version_id,
                       "Last-Modified": http_date(obj.last_modified), "Allow": "DELETE"}
        raise err
    return obj


def read_headers(req: S3Request, obj: ObjectRecord) -> dict[str, str]:
    """x-amz-version-id on GET/HEAD: for versions that have an id, whenever one was asked for,
    and for the "null" version of a versioning-enabled or suspended bucket, as S3 (its state
    from the configs the access check read; without that read, the null version goes
    without)."""
    if obj.version_id != NULL or "versionId" in req.query:
        return {"x-amz-version-id": obj.version_id}
    seen = seen_configs(req, obj.bucket)
    if seen is not None and state_of(seen.get(KIND)) != "off":
        return {"x-amz-version-id": NULL}
    return {}


# ---- deletes ---------------------------------------------------------------------------------

async def add_markers(gw: Any, bucket: str, owner: str, keys: list[str], state: str
                      ) -> tuple[list[Any], list[int | None], list[S3Error | None]]:
    """New delete markers for keys, written to the nodes (see gateway/store/deletemarkers.py): the
    markers, their pending marks (release them once committed) and per key the write's
    error, if any."""
    t = now()
    markers = [new_marker(bucket, k, owner, new_version_id() if state == "enabled" else NULL,
                          t) for k in keys]
    marks, errors = await write_markers(gw.storage, gw.store, markers,
                                        gw.storage.pending_grace)
    return markers, marks, errors


def _marks(marks: list[int | None]) -> list[int]:
    """The pending marks to release, each once (the markers of a batch part share one)."""
    return sorted({m for m in marks if m is not None})


async def release(gw: Any, marks: list[int | None]) -> None:
    done = _marks(marks)
    if done:
        await gw.store.done_orphans(done)


async def delete_current(gw: Any, bucket: str, key: str, owner: str,
                         state: str | None = None, if_version: str | None = None) -> Any:
    """DELETE without a version id, as S3 does it for the bucket's versioning state: "off"
    removes the object (returns its record, None if absent); enabled or suspended adds a
    delete marker, written to the nodes first (returns the marker as stored).
    NoSuchBucket when the bucket went meanwhile; ServiceUnavailable when too few nodes
    answered the marker write. For DeleteObject and the lifecycle worker alike.
    if_version: only if the current object is still that write (`ObjectRecord.version`), else
    nothing changes and the answer is None (the lifecycle worker's expiry)."""
    store = gw.store
    if state is None:
        state = await bucket_state(store, bucket)
    if state == "off":
        gone = await store.delete_object(bucket, key, if_version=if_version)
        if gone is not None:
            gw.kick_sweeper()
        return gone
    markers, marks, errors = await add_markers(gw, bucket, owner, [key], state)
    if errors[0] is not None:
        raise errors[0]
    # The pending mark goes in the commit's transaction (or once the commit is known not to
    # have happened): after any other failure it stays, and the sweeper deletes the archives.
    try:
        stored = await store.put_delete_marker(markers[0], state, if_version=if_version,
                                               release=_marks(marks))
    except NoSuchBucketError:
        await store.queue_orphans([markers[0].manifest])
        await release(gw, marks)
        gw.kick_sweeper()
        raise S3Error("NoSuchBucket", resource="/" + bucket, BucketName=bucket) from None
    if stored is None or stored is LOCKED:
        # the object changed meanwhile, or is locked: the marker written is not needed
        await store.queue_orphans([markers[0].manifest])
    gw.kick_sweeper()
    return stored


async def delete_object(req: S3Request) -> Response:
    """DeleteObject: a version by id (204 even when there is none, as S3), a delete marker on a
    versioned bucket, else the object."""
    b = await require_bucket(req)
    vid = requested_version(req)
    if vid is not None:
        bypass = await lockguard.bypass_governance(req, b, req.key)
        gone = await req.gw.store.delete_version(req.bucket, req.key, vid,
                                                 bypass_governance=bypass)
        if gone is LOCKED:
            raise lockguard.locked_error()
        headers = {"x-amz-version-id": vid}
        if gone is not None:
            if getattr(gone, "delete_marker", False):
                headers["x-amz-delete-marker"] = "true"
            notify_sweeper(req)
        return Response(status_code=204, headers=headers)
    state = await bucket_state(req.gw.store, req.bucket)
    res = await delete_current(req.gw, req.bucket, req.key, req.user, state)
    if res is LOCKED:
        raise lockguard.locked_error()
    if state == "off":
        return Response(status_code=204)
    return Response(status_code=204, headers={"x-amz-delete-marker": "true",
                                              "x-amz-version-id": res.version_id})


def _deleted_xml(key: str, vid: str | None, res: Any, marker_made: bool) -> str:
    out = el("Key", key)
    if vid is not None:
        out += el("VersionId", vid)
        if res is not None and getattr(res, "delete_marker", False):
            out += el("DeleteMarker", "true") + el("DeleteMarkerVersionId", vid)
    elif marker_made and res is not None:
        out += el("DeleteMarker", "true") + el("DeleteMarkerVersionId", res.version_id)
    return f"<Deleted>{out}</Deleted>"


async def delete_objects(req: S3Request) -> Response:
    """DeleteObjects: every entry checked, the markers a versioned bucket needs written to the
    nodes (as batch parts: one erasure write per ~48 KiB of marker list, one pending-mark
    commit), then one store transaction for all that also releases the marks."""
    bucket = await require_bucket(req)
    root = parse_xml(await read_small_body(req))
    if root.tag != "Delete":
        raise S3Error("MalformedXML")
    quiet = (root.findtext("Quiet") or "").strip().lower() == "true"
    objs = root.findall("Object")
    if not objs or len(objs) > MAX_DELETE_KEYS:
        raise S3Error("MalformedXML")
    entries: list[tuple[str, str | None, S3Error | None]] = []
    bypass: list[bool] = []
    for o in objs:
        key = o.findtext("Key")
        vid = o.findtext("VersionId")
        if key is None:
            raise S3Error("MalformedXML")
        err: S3Error | None = None
        try:
            check_key(key)
            if vid is not None:
                vid = checked_version_id(vid.strip())
        except S3Error as e:
            # S3 reports a version id that cannot exist as the version not existing.
            err = S3Error("NoSuchVersion") if e.code == "InvalidArgument" else e
        action = "DeleteObjectVersion" if vid is not None else "DeleteObject"
        if err is None and not await access.check_key(req, bucket, action, key):
            err = S3Error("AccessDenied")
        entries.append((key, vid, err))
        bypass.append(err is None and vid is not None and
                      await lockguard.bypass_governance(req, bucket, key))
    store = req.gw.store
    state = await bucket_state(store, req.bucket)
    need_marker = [i for i, (_, vid, err) in enumerate(entries)
                   if err is None and vid is None and state != "off"]
    marks: list[int | None] = []
    markers_by_entry: dict[int, Any] = {}
    errors: list[S3Error | None] = [e for _, _, e in entries]
    if need_marker:
        markers, marks, merrs = await add_markers(req.gw, req.bucket, req.user,
                                                  [entries[i][0] for i in need_marker], state)
        for i, m, me in zip(need_marker, markers, merrs, strict=True):
            if me is not None:
                errors[i] = me
            else:
                markers_by_entry[i] = m
    todo = [i for i in range(len(entries)) if errors[i] is None]
    items = [DeleteItem(entries[i][0], version_id=entries[i][1],
                        marker=markers_by_entry.get(i), bypass_governance=bypass[i])
             for i in todo]
    results: dict[int, Any] = {}
    try:
        if items:
            # the markers' pending marks go in the same transaction: a crash after it leaves
            # no committed marker part for the sweeper
            got = await store.delete_many(req.bucket, items, versioning=state,
                                          release=_marks(marks))
            for i, r in zip(todo, got, strict=True):
                if r is LOCKED:
                    errors[i] = lockguard.locked_error()
                    m = markers_by_entry.pop(i, None)
                    if m is not None:  # its marker was written for nothing
                        await store.queue_orphans(once_per_part([m.manifest]))
                    continue
                results[i] = r
        else:
            await release(req.gw, marks)
    except NoSuchBucketError:
        await store.queue_orphans(once_per_part([m.manifest for m in
                                                 markers_by_entry.values()]))
        await release(req.gw, marks)
        notify_sweeper(req)
        raise S3Error("NoSuchBucket", resource="/" + req.bucket, BucketName=req.bucket) from None
    notify_sweeper(req)
    out: list[str] = []
    for i, (key, vid, _) in enumerate(entries):
        err = errors[i]
        if err is not None:
            vxml = el("VersionId", vid) if vid else ""
            out.append(f"<Error>{el('Key', key)}{vxml}{el('Code', err.code)}"
                       f"{el('Message', err.message)}</Error>")
        elif not quiet:
            out.append(_deleted_xml(key, vid, results.get(i), i in markers_by_entry))
    return xml_response(f'<DeleteResult xmlns="{x(S3_NS)}">{"".join(out)}</DeleteResult>')
