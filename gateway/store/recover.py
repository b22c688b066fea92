"""`zonegate recover-metadata --config C`: rebuild the metadata store from the nodes alone.

Every fragment archive carries the caller's meta dict (gateway/store/storage.py):
- kind "object": a single-PUT object; the dict holds its whole metadata.
- kind "manifest": written at CompleteMultipartUpload; its body (JSON) names the parts in order
  and the final object metadata.
- kind "part": a multipart part; used through its manifest, otherwise it belongs to an upload
  that never completed and is skipped (queued for deletion after a grace period).
- kind "bucket": a bucket marker (gateway/store/bucketmarkers.py), written at CreateBucket and
  removed at DeleteBucket; it carries the bucket's ACL and configuration documents.
- kind "delete-marker": a delete marker of a versioned bucket (gateway/store/deletemarkers.py);
  kind "delete-markers": a batch of them (DeleteObjects), every one brought back.
- kind "object-tags": tags / ACL set on a version after its write (gateway/store/tagarchives.py);
  the newest one of each version's write wins over its write-time tags and ACL.
Every version of a key comes back, delete markers included, in their order, with tags
(gateway/store/recoverversions.py); of several copies of one version id (a "null" version replaced
before the sweeper freed it) the newest wins, and the others are queued for deletion after a
grace period. A bucket comes back from its marker (owner, creation time, region, ACL and
configuration documents; the newest marker of a name wins), so empty buckets come back too;
a bucket with
objects but no marker (created before markers existed) is recreated from its objects as before:
owned by the owner of its oldest object, created then, in the gateway's region. A marker with
fewer than k archives is what a DeleteBucket left on a node that was down: it brings nothing
back, and is queued for deletion when every node answered the scan. Once the store is written,
the buckets that had no whole marker get one, so the next recovery finds them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gateway.metadata import (
    BucketRecord,
    ObjectRecord,
    describe,
    is_database_url,
    store_from_config,
    store_path,
)
from gateway.store import bucketmarkers, deletemarkers, tagarchives
from gateway.store.recoverversions import build_chains, is_marker, restore_configs, write_chain

T = TypeVar("T")

GRACE = 24 * 3600.0  # seconds before leftovers found by recovery are deleted


@dataclass
class RecoveryReport:
    objects: int = 0
    multipart: int = 0
    buckets: int = 0
    empty_buckets: int = 0      # recreated from their marker alone
    versions: int = 0           # every version written, current or not, markers included
    delete_markers: int = 0
    configs: int = 0            # bucket configuration documents put back
    markers_written: int = 0    # for buckets that had none (made before markers existed)
    superseded: int = 0
    skipped_parts: int = 0
    unreadable: list[str] = field(default_factory=list)
    unreachable_nodes: list[str] = field(default_factory=list)


def _record(obj: dict[str, Any], parts: list[dict[str, Any]],
            manifest: dict[str, Any] | None) -> ObjectRecord:
    # Archives written before versions existed carry no version_id: they are "null" versions.
    return ObjectRecord(bucket=obj["bucket"], key=obj["key"], size=int(obj["size"]),
                        etag=obj["etag"], last_modified=float(obj["last_modified"]),
                        owner=obj["owner"], version=obj["version"],
                        headers=dict(obj.get("headers") or {}),
                        user_meta=dict(obj.get("user_meta") or {}),
                        checksum=dict(obj.get("checksum") or {}), parts=parts, manifest=manifest,
                        tags=dict(obj.get("tags") or {}),
                        acl=list(obj["acl"]) if obj.get("acl") is not None else None,
                        version_id=str(obj.get("version_id") or "null"))


async def _read_all(cluster: Any, layout: Any) -> bytes:
    out = bytearray()
    async for chunk in cluster.read_part(layout, 0, layout.length):
        out += chunk
    return bytes(out)


async def recover(config: Any, *, progress: Any = None) -> RecoveryReport:
    """Scan the nodes and write every recoverable object into the configured store."""
    from erasure.cluster import ErasureCluster
    gw = dict(config.gateway or {})
    store = store_from_config(gw)
    report = RecoveryReport()
    from gateway.store.erasurequeues import shared_queues
    cluster = ErasureCluster(config, health_interval=0, **shared_queues(store))
    try:
        await store.start()
        await cluster.start()
        task = progress.add_task("scanning nodes", total=None) if progress else None
        scanned = await cluster.scan()
        report.unreachable_nodes = list(cluster.unreachable)
        if progress:
            progress.update(task, total=1, completed=1,
                            description=f"scanned nodes: {len(scanned)} parts")
        by_uid = {p.part_uid: p for p in scanned}
        candidates: list[ObjectRecord] = []
        used: set[str] = set()
        manifests = [p for p in scanned if p.meta.get("kind") == "manifest"]
        task = progress.add_task("reading manifests", total=len(manifests)) if progress else None
        marker_leftovers: list[dict[str, Any]] = []
        changes: list[tuple[dict[str, Any], dict[str, Any]]] = []
        def readable(p: Any, parse: Callable[[dict[str, Any]], T]) -> T | None:
            """A tag/ACL archive's or a marker part's meta parsed, or None: a part a deletion
            left short of k fragments (on a node that was down) is a leftover to delete, a
            bad meta is reported unreadable."""
            if len(p.fragments) < p.scheme.k:
                marker_leftovers.append(p.layout().to_dict())
                return None
            try:
                return parse(p.meta)
            except ValueError as e:
                report.unreadable.append(f"{p.part_uid}: {e}")
                return None

        for p in scanned:
            kind = p.meta.get("kind")
            if kind == tagarchives.KIND:
                used.add(p.part_uid)
                change = readable(p, tagarchives.change_from_meta)
                if change is not None:
                    changes.append((change, p.layout().to_dict()))
                continue
            if kind in (deletemarkers.KIND, deletemarkers.BATCH_KIND):
                # A DELETE's marker, or a DeleteObjects' markers: each comes back with the
                # part as its manifest.
                batch = readable(p, (lambda meta: [deletemarkers.record_from_meta(meta)])
                                 if kind == deletemarkers.KIND
                                 else deletemarkers.records_from_batch)
                if batch is None:
                    continue
                lay = p.layout().to_dict()
                for m in batch:
                    m.manifest = lay
                candidates.extend(batch)
                used.add(p.part_uid)
                continue
            if kind == "object" and "object" in p.meta:
                if len(p.fragments) < p.scheme.k:
                    report.unreadable.append(p.part_uid)
                    continue
                o = p.meta["object"]
                lay = p.layout().to_dict()
                candidates.append(_record(o, [{"number": 1, "size": int(o["size"]),
                                               "etag": o["etag"], "layout": lay}], None))
                used.add(p.part_uid)
        for p in manifests:
            try:
                doc = json.loads(await _read_all(cluster, p.layout()))
                parts = []
                for part in doc["parts"]:
                    uid = part["layout"]["part_uid"]
                    found = by_uid.get(uid)
                    if found is not None:
                        # The nodes' current view (after repairs) beats the manifest's copy.
                        part = {**part, "layout": found.layout().to_dict()}
                    parts.append(part)
                    used.add(uid)
                candidates.append(_record(doc["object"], parts, p.layout().to_dict()))
                used.add(p.part_uid)
            except Exception as e:  # one bad manifest must not stop the others
                report.unreadable.append(f"{p.part_uid}: {e}")
            if progress:
                progress.advance(task)
        tag_leftovers = tagarchives.apply_changes(candidates, changes)
        chains = build_chains(candidates)
        older = chains.superseded
        task = progress.add_task("writing metadata", total=len(chains.keys)) if progress else None
        owners: dict[str, tuple[str, float]] = {}
        for chain in chains.keys.values():
            for rec in chain:
                first = owners.get(rec.bucket)
                if first is None or rec.last_modified < first[1]:
                    owners[rec.bucket] = (rec.owner, rec.last_modified)
        region = str(gw.get("region") or "us-east-1")
        found = bucketmarkers.find_markers(scanned)
        report.unreadable.extend(found.malformed)
        versioned = chains.versioned_buckets()
        for name in sorted(set(owners) | set(found.buckets)):
            rec = found.buckets.get(name)
            if rec is None:
                owner, created = owners[name]
                rec = BucketRecord(name, owner, created, region)
            if await store.get_bucket(name) is None:
                await store.create_bucket(rec)
                # the ACL came with rec; the configuration documents below
                report.buckets += 1
                report.empty_buckets += name not in owners
            report.configs += await restore_configs(store, name, found.configs.get(name),
                                                    name in versioned)
        for chain in chains.keys.values():
            report.versions += await write_chain(store, chain)
            current = [v for v in chain if not is_marker(v)]
            report.delete_markers += len(chain) - len(current)
            if chain and not is_marker(chain[-1]):
                report.objects += 1
                report.multipart += chain[-1].manifest is not None
            if progress:
                progress.advance(task)
        leftovers = [lay for rec in older for lay in rec.layouts()] + tag_leftovers
        report.superseded = len(older)
        stray = [p.layout().to_dict() for p in scanned
                 if p.part_uid not in used and p.meta.get("kind") in ("part", "manifest")]
        if not report.unreachable_nodes:
            # Not while a node is unreachable: a whole marker may look partial until it is back.
            # Nor a live bucket's: ensure_markers below rewrites that one under the same uid.
            live = {bucketmarkers.marker_uid(b.name, b.created) for b in await store.list_buckets()}
            stray += [p.layout().to_dict() for p in found.leftovers if p.part_uid not in live]
            stray += marker_leftovers
        report.skipped_parts = len(stray)
        await store.queue_orphans(leftovers + stray, delay=GRACE)
        ensured = await bucketmarkers.ensure_markers(store, cluster, found)
        report.markers_written = len(ensured.written)
        report.unreadable.extend(f"bucket marker of {f}" for f in ensured.failed)
    finally:
        await cluster.close()
        await store.close()
    return report


async def store_has_buckets(gateway_config: dict | None) -> bool:
    """Whether the configured metadata store (a file or a database) holds any bucket."""
    store = store_from_config(gateway_config)
    try:
        await store.start()
        return bool(await store.list_buckets())
    finally:
        await store.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recover-metadata",
                       help="rebuild the gateway's metadata store from the nodes' archives "
                            "(run it with the gateway stopped)")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.add_argument("--force", action="store_true",
                   help="merge into an existing, non-empty metadata store")
    p.set_defaults(func=cmd_recover)


def cmd_recover(args: argparse.Namespace) -> int:
    from erasure.config import ClusterConfig
    from zonestore.progress import progress
    config = ClusterConfig.load(args.config)
    target = store_path(config.gateway)
    meta_path = describe(target)
    if not args.force and (is_database_url(target) or Path(target).exists()):
        if asyncio.run(store_has_buckets(config.gateway)):
            raise ValueError(f"metadata store {meta_path} is not empty; move it away first, "
                             "or pass --force to merge into it")
    with progress() as prog:
        report = asyncio.run(recover(config, progress=prog))
    print(f"recovered {report.objects} objects ({report.multipart} multipart) in "
          f"{report.buckets} new buckets ({report.empty_buckets} empty) into {meta_path}, "
          f"{report.versions} versions in all ({report.delete_markers} delete markers); "
          f"{report.superseded} older versions and {report.skipped_parts} unreferenced parts "
          f"queued for deletion in {GRACE / 3600:.0f} h")
    if report.markers_written:
        print(f"wrote {report.markers_written} missing bucket markers")
    if report.unreachable_nodes:
        print("warning: nodes not reachable (run again when they are back): "
              + ", ".join(report.unreachable_nodes))
    for u in report.unreadable:
        print(f"warning: could not recover {u}")
    return 1 if report.unreachable_nodes or report.unreadable else 0
