"""Find parts with missing or corrupt fragments and rebuild them from any k others.

Damage is found two ways: the repair queue (writes that lost a node, reads that met a missing or
corrupt fragment) and a scan of every node's records grouped by part (an index found on no
reachable node is missing). `deep=True` also reads every archive through, so a node's CRC check
finds silent corruption. A rebuilt fragment goes back to the node the layout names when that node
is up and holds no other fragment of the part, else to the next node in rendezvous order.

Each part is rebuilt segment by segment (pyeclib reconstruct) and streamed like a write, so
memory stays bounded; a part is finished or not at all (an interrupted PUT is never committed),
so repair can be interrupted and run again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from erasure.codec import CodecError
from erasure.errors import ErasureError
from erasure.layout import PartLayout, ScannedPart, archive_id, parse_archive_id
from erasure.nodeclient import NodeError, RecordCorrupt, RecordReader
from erasure.records import record_placed
from erasure.rehome import off_home, rehome_part
from erasure.writer import ArchiveUpload, Batches

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

log = logging.getLogger(__name__)


@dataclass
class Damage:
    part: ScannedPart
    rebuild: list[int]             # fragment indexes to rebuild
    reasons: dict[int, str]
    layout: PartLayout | None = None  # from the repair queue, when there is a record
    targets: dict[int, str] | None = None  # where each rebuilt fragment goes (the mover's)


@dataclass
class RepairReport:
    fixed: list[tuple[str, dict[int, str]]] = field(default_factory=list)  # part, index -> node
    failed: list[tuple[str, str]] = field(default_factory=list)
    unrecoverable: list[tuple[str, str]] = field(default_factory=list)
    healthy: int = 0
    unreachable: list[str] = field(default_factory=list)
    deferred: list[tuple[str, int, str]] = field(default_factory=list)  # part, index, node
    # parts not to rebuild because they are going away: (part, why) - an unfinished deletion
    # (this cluster's `deletions`) or what the `owner` callback says (a queued orphan, a
    # pending write)
    queued: list[tuple[str, str]] = field(default_factory=list)
    # parts with fewer than k fragments found while nodes that may hold the rest are unreachable
    waiting: list[tuple[str, str]] = field(default_factory=list)
    purged: list[str] = field(default_factory=list)  # unfinished deletions finished here
    misplaced: list[str] = field(default_factory=list)  # whole parts with a fragment off home
    moved: int = 0  # fragments moved home (erasure/rehome.py)

    @property
    def lost(self) -> bool:
        """Something is lost or could not be fixed (what `zonegate repair` exits 1 for)."""
        return bool(self.unrecoverable or self.failed)


Owner = Callable[[str], "str | None"]


async def find_damage(cluster: ErasureCluster, prefix: str = "", *, deep: bool = False,
                      include_unreachable: bool = False,
                      progress: Callable[[int, int], None] | None = None,
                      owner: Owner | None = None) -> tuple[list[Damage], RepairReport]:
    """Parts needing repair. A fragment found on no reachable node while some node cannot be
    listed may just sit on that node (its primary, or the handoff a write or a heal gave it):
    it is only rebuilt when the repair queue names it as lost or `include_unreachable` says the
    unreachable nodes are gone for good, so repair never makes a copy of a fragment that is not
    lost. Parts being deleted are reported in `queued`, not rebuilt: those this cluster began to
    delete (`cluster.deletions`) and those `owner(part_uid)` names (it returns why, e.g. "queued
    for deletion" from the gateway's orphan queue, or None for a live part)."""
    report = RepairReport()
    parts = await cluster.scan(prefix)
    report.unreachable = list(cluster.unreachable)
    scrubbed = await scrub_damage(cluster, prefix)
    deletions = await cluster.deletions.all()
    records = {r.layout.part_uid: r for r in await cluster.repair_queue.records()
               if r.layout.part_uid.startswith(prefix)}
    damaged: list[Damage] = []
    for n, p in enumerate(parts):
        rec = records.pop(p.part_uid, None)
        if progress:
            progress(n + 1, len(parts))
        why = "queued for deletion" if p.part_uid in deletions else (
            owner(p.part_uid) if owner else None)
        if why:
            report.queued.append((p.part_uid, why))
            continue
        # homes by the part's own scheme: a part written 8+2 stays 8+2 after a switch to 4+2
        expected = rec.layout.placement if rec else dict(
            enumerate(cluster.home(p.part_uid, p.scheme.n)))
        reasons = {}
        maybe = 0  # fragments that may be on unreachable nodes
        for i in range(p.scheme.n):
            if i in p.fragments:
                continue
            if report.unreachable and not include_unreachable and not (
                    rec and i in rec.indexes):
                node = expected.get(i, "")
                report.deferred.append((p.part_uid, i, node if node in report.unreachable
                                        else "an unreachable node"))
                maybe += 1
            else:
                reasons[i] = "missing"
        if rec:
            for i in rec.indexes:
                reasons.setdefault(i, rec.reason)
        for i, why in scrubbed.get(p.part_uid, {}).items():
            if p.fragments.get(i) == [why[0]]:  # the only copy of it is the damaged one
                reasons.setdefault(i, f"corrupt on {why[0]} (scrub: {why[1]})")
        if deep:
            for i, nodes in p.fragments.items():
                if i not in reasons and not await _verify(cluster, p, i, nodes[0]):
                    reasons[i] = f"corrupt on {nodes[0]}"
        have = len(set(p.fragments) - set(reasons))
        if have < p.scheme.k:
            if have + maybe >= p.scheme.k:
                report.waiting.append((p.part_uid, f"{have} fragments found, {p.scheme.k} "
                                       f"needed; the rest may be on {report.unreachable}"))
            else:
                report.unrecoverable.append((p.part_uid, f"only {have} fragments found, "
                                             f"{p.scheme.k} needed"))
            continue
        if not reasons:
            report.healthy += not maybe
            home = cluster.home(p.part_uid, p.scheme.n)
            if not maybe and any(i < len(home) and nodes != [home[i]]
                                 for i, nodes in p.fragments.items()):
                report.misplaced.append(p.part_uid)
            continue
        damaged.append(Damage(p, sorted(reasons), reasons, rec.layout if rec else None))
    for uid in records:  # queued parts that no reachable node holds any more (deleted)
        if not report.unreachable:
            await cluster.repair_queue.done(uid)
    return damaged, report


async def scrub_damage(cluster: ErasureCluster, prefix: str = ""
                       ) -> dict[str, dict[int, tuple[str, str]]]:
    """What the nodes' scrubbers found: part uid -> index -> (node, error)."""
    nodes = [c for c in cluster.clients.values() if c.up]
    lists = await asyncio.gather(*(c.damage() for c in nodes), return_exceptions=True)
    out: dict[str, dict[int, tuple[str, str]]] = {}
    for c, found in zip(nodes, lists, strict=True):
        if isinstance(found, BaseException):
            if not isinstance(found, NodeError):
                raise found
            continue
        for d in found:
            parsed = parse_archive_id(str(d.get("id", "")))
            if parsed and parsed[0].startswith(prefix):
                out.setdefault(parsed[0], {})[parsed[1]] = (c.id, str(d.get("error", "")))
    return out


async def heal_scrub_damage(cluster: ErasureCluster) -> int:
    """Hand what the scrubbers found to the background healer (the cluster's health loop
    runs this now and then); returns how many parts were queued."""
    found = await scrub_damage(cluster)
    n = 0
    for uid, bad in found.items():
        if await cluster.deletions.known(uid):
            continue
        parts = [p for p in await cluster.scan(uid + ".") if p.part_uid == uid]
        if not parts or cluster.unreachable:
            continue
        layout = parts[0].layout()
        await cluster.note_damage(layout, sorted(bad), "scrub: " + "; ".join(
            f"f{i:02d} on {node}: {err}" for i, (node, err) in sorted(bad.items())))
        n += 1
    return n


async def _verify(cluster: ErasureCluster, p: ScannedPart, index: int, node: str) -> bool:
    """Read an archive through; the node checks every chunk's CRC and cuts a bad stream."""
    client = cluster.clients[node]
    try:
        async with client.get(archive_id(p.part_uid, index)) as r:
            left = r.expected
            while left:
                n = min(left, 1 << 20)
                await r.read_exactly(n)
                left -= n
        return True
    except NodeError:
        return False


def _targets(cluster: ErasureCluster, d: Damage) -> dict[int, str]:
    if d.targets is not None:
        return dict(d.targets)
    p = d.part
    holders = {nodes[0] for i, nodes in p.fragments.items() if i not in d.rebuild}
    home = cluster.home(p.part_uid, p.scheme.n)
    wanted = d.layout.placement if d.layout else dict(enumerate(home))
    # nodes that take no new fragments (down, full, draining) and nodes the layout no
    # longer has (gone: no client) are never targets
    down = {nid for nid, c in cluster.clients.items() if not c.writable}
    placement = cluster.placement_for(p.scheme.n) or cluster.placement
    down |= {nid for nid in cluster.clients if nid not in placement.domain_of}
    out: dict[int, str] = {}
    spare = placement.handoffs(p.part_uid, holders, down)
    for i in d.rebuild:
        here = [n for n in p.fragments.get(i, []) if n in cluster.clients]
        node = here[0] if here else wanted.get(i)
        if not here and i < len(home) and home[i] not in down and home[i] not in holders:
            node = home[i]  # the home is back: no new handoff copy to move later
        if node is None or node not in cluster.clients or node in down or node in holders:
            # the generator's view of who holds what predates this loop's choices
            node = next((n for n in spare if n not in holders), None)
            if node is None:
                raise ValueError(f"no node left to hold fragment {i}")
        out[i] = node
        holders.add(node)
    return out


async def rebuild(cluster: ErasureCluster, d: Damage) -> tuple[dict[int, str], dict[int, str]]:
    """Rebuild d.rebuild; returns (index -> node written, sources found corrupt on the way).
    A source that fails is replaced by another fragment, as long as k remain."""
    p = d.part
    bad_sources: set[tuple[int, str]] = set()
    corrupt: dict[int, str] = {}
    last: Exception | None = None
    for _ in range(p.scheme.m + 1):
        sources = [(i, nodes[0]) for i, nodes in sorted(p.fragments.items())
                   if i not in d.rebuild and (i, nodes[0]) not in bad_sources]
        if len(sources) < p.scheme.k:
            break
        try:
            return await _rebuild_once(cluster, d, sources[:p.scheme.k]), corrupt
        except _SourceFailed as e:
            bad_sources.add(e.source)
            if e.corrupt:
                corrupt[e.source[0]] = str(e)
            last = e
    raise RuntimeError(f"part {p.part_uid}: not enough readable fragments ({last})")


class _SourceFailed(Exception):
    def __init__(self, source: tuple[int, str], why: str, corrupt: bool = False) -> None:
        super().__init__(f"f{source[0]:02d} on {source[1]}: {why}")
        self.source = source
        self.corrupt = corrupt


async def _rebuild_once(cluster: ErasureCluster, d: Damage, sources: list[tuple[int, str]]
                        ) -> dict[int, str]:
    p = d.part
    if await cluster.deletions.known(p.part_uid):
        raise PartDeleted(p.part_uid)
    codec = cluster.codec_for(p.scheme)
    alen = codec.archive_length(p.length)
    targets = _targets(cluster, d)
    readers: list[tuple[tuple[int, str], RecordReader]] = []
    sinks: dict[int, ArchiveUpload] = {}
    try:
        for src in sources:
            r = cluster.clients[src[1]].get(archive_id(p.part_uid, src[0]))
            try:
                await r.__aenter__()
            except NodeError as e:
                raise _SourceFailed(src, str(e), isinstance(e, RecordCorrupt)) from e
            readers.append((src, r))
        meta = json.loads(readers[0][1].head.meta)
        for i, node in targets.items():
            s = sinks[i] = ArchiveUpload(i, cluster.clients[node])
            s.meta = json.dumps({**meta, "index": i}, separators=(",", ":"),
                                sort_keys=True).encode()
            s.start(archive_id(p.part_uid, i), alen, _stream_of(meta))
        order = sorted(targets)
        batches = Batches(sinks, cluster.node_timeout)
        for seg in range(codec.segment_count(p.length)):
            fsize = codec.fragment_size(codec.segment_length(p.length, seg))
            frags = []
            for src, r in readers:
                try:
                    frags.append(await r.read_exactly(fsize))
                except NodeError as e:
                    raise _SourceFailed(src, str(e), isinstance(e, RecordCorrupt)) from e
            try:
                rebuilt = codec.reconstruct(frags, order)
            except CodecError as e:
                raise _SourceFailed(readers[0][0], str(e), True) from e
            by_index = {codec.fragment_index(f): [f] for f in rebuilt}
            await batches.add(by_index)
            failed = [f"{i}: {_why(s)}" for i, s in sinks.items() if not s.alive]
            if failed:
                raise RuntimeError(f"writing rebuilt fragments failed: {failed}")
        await batches.flush()
        await asyncio.gather(*(s.feed(None, cluster.node_timeout) for s in sinks.values()))
        await asyncio.wait([s.task for s in sinks.values()])
        failed = [f"{i}: {_why(s)}" for i, s in sinks.items() if not s.alive]
        if failed:
            raise RuntimeError(f"writing rebuilt fragments failed: {failed}")
        if await cluster.deletions.known(p.part_uid):
            # Deleted while we rebuilt: the delete's listing may have run before our writes
            # landed, so remove them here (the deletion record was written before it listed).
            await _unwrite(cluster, p.part_uid, targets)
            raise PartDeleted(p.part_uid)
        if off_home(cluster, p.part_uid, targets, p.scheme.n):
            cluster.handoffs.add(p.part_uid)
        return targets
    except BaseException:
        for s in sinks.values():
            if s.task and not s.task.done():
                s.task.cancel()
        await asyncio.gather(*(s.task for s in sinks.values() if s.task), return_exceptions=True)
        raise
    finally:
        for _, r in readers:
            await r.__aexit__(None, None, None)


def _why(s: ArchiveUpload) -> str:
    """A dead upload's error (its done-callback may not have run yet)."""
    t = s.task
    if s.error is None and t is not None and t.done() and not t.cancelled():
        return str(t.exception())
    return str(s.error)


class PartDeleted(RuntimeError):
    def __init__(self, part_uid: str) -> None:
        super().__init__(f"part {part_uid} was deleted; not rebuilt")


async def _unwrite(cluster: ErasureCluster, part_uid: str, written: dict[int, str]) -> None:
    for i, node in written.items():
        try:
            await cluster.clients[node].delete(archive_id(part_uid, i))
        except NodeError as e:  # the deletion record stays pending: the sweeper retries
            log.warning("rebuilt %s on %s after its part was deleted, and could not remove it: "
                        "%s", archive_id(part_uid, i), node, e)


def _stream_of(meta: dict) -> str:
    return str(meta.get("stream") or "repair")


async def repair(cluster: ErasureCluster, prefix: str = "", *, deep: bool = False,
                 include_unreachable: bool = False, dry_run: bool = False,
                 on_found: Callable[[int], None] | None = None,
                 on_done: Callable[[str, dict[int, str] | str], None] | None = None,
                 owner: Owner | None = None) -> RepairReport:
    """Find damaged parts and rebuild them, and finish deletions this cluster left unfinished
    (a node was down); `on_found(n)` once the scan is done, `on_done(part, index -> node |
    error)` after each part. `owner`: see find_damage."""
    damaged, report = await find_damage(cluster, prefix, deep=deep, owner=owner,
                                        include_unreachable=include_unreachable)
    if not dry_run and not report.unreachable:
        # unfinished deletions, and finished ones whose archives are back (a write whose
        # answer was lost committed after its abort's delete)
        deletions = await cluster.deletions.all()
        again = {u for u, _ in report.queued if u in deletions}
        for uid in sorted(again | {u for u, done in deletions.items() if not done}):
            if uid.startswith(prefix):
                try:
                    await cluster.purge(uid)
                    report.purged.append(uid)
                except (NodeError, ErasureError) as e:
                    log.warning("deletion of %s not finished: %s", uid, e)
    if on_found:
        on_found(len(damaged))
    for d in damaged:
        if dry_run:
            report.failed.append((d.part.part_uid, f"would rebuild {d.rebuild} (dry run)"))
            continue
        try:
            written = await _rebuild_all(cluster, d)
        except PartDeleted as e:
            report.queued.append((d.part.part_uid, str(e)))
            continue
        except (NodeError, RuntimeError, ValueError, CodecError) as e:
            report.failed.append((d.part.part_uid, str(e)))
            if on_done:
                on_done(d.part.part_uid, str(e))
            continue
        await record_rebuilt(cluster, d, written)
        await cluster.repair_queue.done(d.part.part_uid)
        report.fixed.append((d.part.part_uid, written))
        if on_done:
            on_done(d.part.part_uid, written)
    if not dry_run:
        before = cluster.stats["fragments_moved_home"]
        # With a layout store, placement is the data mover's (erasure/mover.py): a whole part
        # off its rendezvous home may be where a rebalance put it, so only the handoffs a
        # write or rebuild recorded go home here (issue 25: a repair undid the weighting).
        misplaced = report.misplaced if cluster.layout_store is None else []
        for uid in sorted(set(misplaced) | set(cluster.handoffs.parts())):
            if uid.startswith(prefix) and await rehome_part(cluster, uid) == 0:
                cluster.handoffs.done(uid)
        report.moved = cluster.stats["fragments_moved_home"] - before
    return report


async def record_rebuilt(cluster: ErasureCluster, d: Damage, written: dict[int, str]) -> int:
    """Commit where a rebuild put the fragments into the caller's records (erasure/records.py),
    so reads follow them instead of going degraded; the copies the scan found of a rebuilt
    index (missing or corrupt ones) do not count as good."""
    bad = {(i, n) for i in written for n in d.part.fragments.get(i, []) if n != written[i]}
    bad |= {(i, n) for i, n in (d.layout.placement.items() if d.layout else ())
            if i in written and n != written[i]}
    return await record_placed(cluster, d.part.part_uid, d.part.meta, written, bad)


async def _rebuild_all(cluster: ErasureCluster, d: Damage) -> dict[int, str]:
    """Rebuild a part, then the sources found corrupt while doing it (one more pass)."""
    written, corrupt = await rebuild(cluster, d)
    if corrupt:
        p = d.part
        fragments = {**p.fragments, **{i: [n] for i, n in written.items()}}
        again = Damage(dataclasses.replace(p, fragments=fragments), sorted(corrupt), corrupt,
                       d.layout)
        more, still = await rebuild(cluster, again)
        written.update(more)
        if still:
            raise RuntimeError(f"part {p.part_uid}: more corrupt fragments: {still}")
    return written


async def heal(cluster: ErasureCluster, layout: PartLayout, indexes: list[int]) -> dict[int, str]:
    """Rebuild some fragments of a part: what the cluster's background healer runs after a
    degraded write or read. The part is looked up on the nodes first (its fragments may have
    moved home since `layout` was stored: issue 24 D5); a fragment found there now is not
    rebuilt. Without an answer from the nodes, `layout` is trusted."""
    # A fragment on a node the layout no longer has (gone, or left the cluster file) is lost
    # as well: rebuilt too, never asked for (issue 25: `KeyError: 'node05'`).
    gone = [i for i, n in layout.placement.items() if n not in cluster.clients]
    indexes = sorted(set(indexes) | set(gone))
    skip = set(indexes) | set(layout.missing)
    part = ScannedPart(layout.part_uid, layout.length, layout.scheme, layout.crc32c, {},
                       {i: [n] for i, n in layout.placement.items() if i not in skip})
    now = [p for p in await cluster.scan(layout.part_uid + ".") if p.part_uid == layout.part_uid]
    found = now[0] if now else None  # as scanned: every copy, bad ones too
    if now:
        part = now[0]
        # found now (moved home meanwhile) and readable: nothing to rebuild; found but bad (a
        # scrubber's finding): rebuilt, and never read as a source
        present = [i for i in indexes if i in part.fragments
                   and await _verify(cluster, part, i, part.fragments[i][0])]
        indexes = [i for i in indexes if i not in present]
        if not indexes:
            await cluster.repair_queue.resolve(layout.part_uid, present)
            return {}
        layout = part.layout()
        part = dataclasses.replace(part, fragments={
            i: ns for i, ns in part.fragments.items() if i not in indexes})
    d = Damage(part, sorted(set(indexes)), {i: "heal" for i in indexes}, layout)
    written = await _rebuild_all(cluster, d)
    await record_rebuilt(cluster, dataclasses.replace(d, part=found or d.part), written)
    await cluster.repair_queue.resolve(layout.part_uid, list(written))
    return written
