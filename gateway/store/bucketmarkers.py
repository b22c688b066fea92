"""Bucket markers: what the nodes know of a bucket, so `recover-metadata` brings back empty
buckets, and every bucket's owner, creation time and region.

A marker is a 0-byte erasure-coded part written through `ErasureCluster.write_part` whose
archives' meta dict is `{"kind": "bucket", "bucket": {name, owner, created, region[, acl]}
[, "configs": {kind: document}]}` (every archive carries it: recovery needs no read, only the
scan). A change of the bucket's ACL or configuration documents rewrites the marker under the
same uid (gateway/ops/bucketconfig.py), so recovery brings those back too. Its part uid is derived from the
bucket record alone, `bucket:{name}:{created in µs, hex}`, so the gateway finds it again from
the metadata row (to delete it) and a rewrite of a missing marker replaces any partial one.

Why the creation time is in the uid: deletions of archives can be late. A DeleteBucket whose
marker could not be removed from every node leaves the removal to the orphan sweeper, which
deletes archive ids; if the same name were re-created meanwhile under the same uid, that late
removal would delete the new bucket's marker. With a generation in the uid it can only delete
the old one. Recovery keeps, per name, the marker with the newest creation time.

Order, and what a crash leaves:
- CreateBucket inserts the row first (the store's insert is the atomic claim of the name, so
  BucketAlreadyOwnedByYou / BucketAlreadyExists write nothing), then writes the marker, and
  answers only once the marker is durable. If the marker cannot be written (below the write
  quorum) the row is removed again and the client gets 503 ServiceUnavailable: no bucket. A
  crash between the two leaves a bucket without a marker, never a marker without a bucket the
  client was told about; `zonegate bucket-markers` (or the next `recover-metadata`) writes the
  missing marker.
- DeleteBucket needs the write quorum (like CreateBucket), deletes the row first, then the
  marker: a bucket with objects is refused by the row delete before its marker is touched,
  so a crash can never leave a live bucket (with objects) without its marker through a delete.
  A crash between the two leaves the marker of a deleted, *empty* bucket: only if the metadata
  store is then lost too would that empty bucket come back. Markers without a row are not
  pruned automatically: a gateway started on an empty store (one lost and not yet recovered)
  would otherwise delete every marker.
- A node unreachable during the delete keeps its archive. The removal is first queued in the
  orphan queue as a find-and-delete mark (`{"part_uid", "pending": true}`: the sweeper scans
  the nodes for the uid and deletes what it finds, retrying while a node is unreachable) and
  released once the inline delete reached every node. A leftover is never a marker: recovery
  counts a marker only with at least k archives, and with the write quorum (k+1 of k+m nodes)
  up at the delete, at most m-1 archives can be left.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from erasure.errors import ErasureError
from gateway.metadata import BucketRecord, store_from_config
from gateway.metadata.keys import MARKER_PREFIX, marker_uid

log = logging.getLogger("zonegate.bucketmarkers")

PREFIX = MARKER_PREFIX
KIND = "bucket"
STREAM = "bucket-markers"  # markers live long: keep them together, away from object data
RETRY_DELAY = 60.0  # seconds before the sweeper retries a marker removal that failed inline


def marker_meta(rec: BucketRecord, configs: dict[str, str] | None = None) -> dict[str, Any]:
    """The meta dict every archive of the marker carries."""
    b: dict[str, Any] = {"name": rec.name, "owner": rec.owner, "created": rec.created,
                         "region": rec.region}
    if rec.acl is not None:
        b["acl"] = rec.acl
    meta: dict[str, Any] = {"kind": KIND, "bucket": b}
    if configs:
        meta["configs"] = dict(configs)
    return meta


def configs_from_meta(meta: dict[str, Any]) -> dict[str, str]:
    """The configuration documents a marker's meta carries ({} for none); ValueError when
    they are malformed."""
    from gateway.metadata.store import CONFIG_KINDS
    configs = meta.get("configs") or {}
    if not isinstance(configs, dict) or not all(
            k in CONFIG_KINDS and isinstance(v, str) for k, v in configs.items()):
        raise ValueError("malformed bucket marker: bad configs")
    return dict(configs)


def record_from_meta(meta: dict[str, Any]) -> BucketRecord:
    """The bucket a marker's meta dict describes; ValueError when it is malformed."""
    try:
        b = meta["bucket"]
        acl = b.get("acl")
        if acl is not None and not (isinstance(acl, list)
                                    and all(isinstance(g, dict) for g in acl)):
            raise ValueError("bad acl")
        rec = BucketRecord(str(b["name"]), str(b["owner"]), float(b["created"]),
                           str(b["region"]), acl)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed bucket marker: {e!r}") from None
    if not rec.name or not rec.owner:
        raise ValueError("malformed bucket marker: empty name or owner")
    return rec


@dataclass
class FoundMarkers:
    """The markers a scan found: the newest whole one per bucket, and the rest."""

    buckets: dict[str, BucketRecord] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)  # of the buckets' markers
    whole: set[str] = field(default_factory=set)   # part uids with at least k archives
    leftovers: list[Any] = field(default_factory=list)  # ScannedParts with fewer than k
    malformed: list[str] = field(default_factory=list)


def find_markers(scanned: Iterable[Any]) -> FoundMarkers:
    """Sort the marker parts of a cluster scan. A marker with fewer than k archives is what a
    delete left on a node that was down (or a write that failed): it does not count."""
    out = FoundMarkers()
    for p in scanned:
        if p.meta.get("kind") != KIND:
            continue
        if len(p.fragments) < p.scheme.k:
            out.leftovers.append(p)
            continue
        try:
            rec = record_from_meta(p.meta)
            configs = configs_from_meta(p.meta)
        except ValueError as e:
            out.malformed.append(f"{p.part_uid}: {e}")
            continue
        out.whole.add(p.part_uid)
        cur = out.buckets.get(rec.name)
        if cur is None or rec.created > cur.created:
            out.buckets[rec.name] = rec
            out.configs[rec.name] = configs
    return out


async def _no_bytes() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


async def write_marker(cluster: Any, rec: BucketRecord,
                       configs: dict[str, str] | None = None) -> None:
    """Write (or rewrite) the bucket's marker, with its ACL and configuration documents;
    returns once it is durable on the write quorum. Raises erasure.errors.QuorumError
    (nothing left behind) when too few nodes are up."""
    meta = marker_meta(rec, configs)
    uid = marker_uid(rec.name, rec.created)
    # the one uid written again (a rewrite, or after a failed try): a deletion record of it
    # must go first
    await cluster.deletions.forget(uid)
    await cluster.write_part(uid, _no_bytes(), length=0,
                             stream=STREAM, meta=lambda _result: meta)


async def delete_marker(cluster: Any, store: Any, rec: BucketRecord) -> bool:
    """Remove the bucket's marker from every node. Returns False when some node could not be
    reached: the removal then stays queued for the orphan sweeper (which retries it)."""
    uid = marker_uid(rec.name, rec.created)
    mark = (await store.queue_orphans([{"part_uid": uid, "pending": True}], delay=RETRY_DELAY))[0]
    try:
        parts = await cluster.scan(uid + ".")
        unreachable = list(cluster.unreachable)  # read before any other task scans
        for p in parts:
            if p.part_uid == uid:
                await cluster.delete_part(p.layout())
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a node went away mid-delete: the sweeper retries
        log.warning("marker of deleted bucket %s not removed yet: %s", rec.name, e)
        return False
    if unreachable:
        log.warning("marker of deleted bucket %s not removed yet: nodes unreachable: %s",
                    rec.name, ", ".join(unreachable))
        return False
    await store.done_orphans([mark])
    return True


@dataclass
class EnsureReport:
    written: list[str] = field(default_factory=list)
    present: int = 0
    failed: list[str] = field(default_factory=list)


async def ensure_markers(store: Any, cluster: Any, found: FoundMarkers | None = None,
                         *, progress: Any = None) -> EnsureReport:
    """Write the marker of every bucket in the store that has no whole marker on the nodes
    (buckets made before markers existed, or whose marker write was cut by a crash). Markers
    without a bucket are left alone (see the module docstring). `progress`: a
    zonestore.progress object (or rich Progress) to report on."""
    if found is None:
        found = find_markers(await cluster.scan(PREFIX))
    report = EnsureReport()
    buckets = await store.list_buckets()
    task = progress.add_task("checking bucket markers", total=len(buckets)) if progress else None
    for rec in buckets:
        if progress:
            progress.advance(task)
        if marker_uid(rec.name, rec.created) in found.whole:
            report.present += 1
            continue
        try:
            await write_marker(cluster, rec, await store.bucket_configs(rec.name))
            report.written.append(rec.name)
        except ErasureError as e:
            report.failed.append(f"{rec.name}: {e}")
    return report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bucket-markers",
                       help="write the bucket markers missing on the nodes (buckets created "
                            "before markers existed), so that recover-metadata brings every "
                            "bucket back; safe while the gateway runs")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.set_defaults(func=cmd_bucket_markers)


def cmd_bucket_markers(args: argparse.Namespace) -> int:
    from erasure.cluster import ErasureCluster
    from erasure.config import ClusterConfig
    config = ClusterConfig.load(args.config)
    store = store_from_config(config.gateway)

    async def run(prog: Any) -> EnsureReport:
        from gateway.store.erasurequeues import shared_queues
        cluster = ErasureCluster(config, health_interval=0, auto_repair=False,
                                 **shared_queues(store))
        try:
            await store.start()
            await cluster.start()
            return await ensure_markers(store, cluster, progress=prog)
        finally:
            await cluster.close()
            await store.close()

    from zonestore.progress import progress
    with progress() as prog:
        report = asyncio.run(run(prog))
    print(f"wrote {len(report.written)} bucket markers; {report.present} buckets already had "
          "one")
    for f in report.failed:
        print(f"warning: marker not written (run again when the nodes are up): {f}")
    return 1 if report.failed else 0
