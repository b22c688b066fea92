"""What is left on a draining node once the mover's pass over the recorded parts was clean:
records no part record names (bucket markers, parts queued for deletion, a copy a crash left).
Each goes to a writable node that holds none of its part (its rendezvous home when it can),
so that a drained node ends with no records; parts being deleted are left to their purge,
which finds their archives wherever they are. And the draining drives' records, rewritten
on their own node (`drain_drives`), so that a drained drive ends empty."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from erasure.clusterlayout import ClusterLayout
from erasure.layout import parse_archive_id
from erasure.nodeclient import NodeClient, NodeError, RecordHead
from erasure.rehome import copy_one

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

log = logging.getLogger(__name__)
PAGE = 200


async def sweep_draining(cluster: ErasureCluster, layout: ClusterLayout
                         ) -> tuple[int, int, int]:
    """Move every record off the draining nodes; returns (moved or dropped as a second
    copy, with nowhere to go, failed)."""
    down = {nid for nid, c in cluster.clients.items() if not c.writable}
    takes = [n.id for n in layout.writable() if n.id not in down]
    domain = {n.id: n.domain for n in layout.nodes}
    totals = [0, 0, 0]
    for node in (n for n in layout.nodes if n.state == "draining"):
        client = cluster.clients.get(node.id)
        if client is None or not client.up:
            continue
        after = ""
        while True:
            recs, _ = await client.list("", after, PAGE)
            if not recs:
                break
            after = recs[-1].id
            for rec in recs:
                outcome = await _one(cluster, client, rec, takes, domain)
                if outcome is not None:
                    totals[outcome] += 1
    return totals[0], totals[1], totals[2]


async def _one(cluster: ErasureCluster, client: NodeClient, rec: RecordHead,
               takes: list[str], domain: dict[str, str]) -> int | None:
    """0 moved (or a second copy dropped), 1 nowhere to go, 2 failed, None left alone."""
    parsed = parse_archive_id(rec.id)
    if parsed is None or await cluster.deletions.known(parsed[0]):
        return None
    uid, i = parsed
    found = [p for p in await cluster.scan(uid + ".") if p.part_uid == uid]
    if not found:
        return None
    part = found[0]
    holders = {x for nodes in part.fragments.values() for x in nodes}
    try:
        if [x for x in part.fragments.get(i, []) if x != client.id]:
            await client.delete(rec.id)  # the fragment is elsewhere too: this copy goes
            return 0
        share = -(-part.scheme.n // max(1, len({domain[x] for x in takes})))
        per = Counter(domain.get(x, x) for x in holders if x != client.id)
        cands = [x for x in takes if x not in holders and per[domain[x]] < share]
        if not cands:
            return 1
        home = cluster.home(uid, part.scheme.n)
        dst = home[i] if i < len(home) and home[i] in cands else cands[0]
        if await copy_one(cluster, uid, i, client.id, dst):
            await client.delete(rec.id)
        return 0
    except NodeError as e:
        log.info("mover: %s not moved off %s: %s", rec.id, client.id, e)
        return 2


def _norm(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


async def drain_drives(cluster: ErasureCluster, layout: ClusterLayout,
                       pace: Callable[[str, int], Awaitable[None]] | None = None
                       ) -> tuple[int, int]:
    """Empty the draining drives: each record on one is written again to its own node, which
    puts it on a drive that takes records (a draining drive takes none) and then deletes the
    old copy (zonestore/pool.py), in the record's stream; the fragment stays on its node, so no
    part record changes. Returns (records moved, failed)."""
    moved = failed = 0
    for node in layout.known():
        paths = {_norm(d.path) for d in node.drives if d.state == "draining"}
        client = cluster.clients.get(node.id)
        if not paths or client is None or not client.up:
            continue
        try:
            stats = await client.stats()
        except NodeError as e:
            log.info("mover: cannot drain the drives of %s yet: %s", node.id, e)
            failed += 1
            continue
        drives = {int(d.get("drive", j)) for j, d in enumerate(stats.get("drives", []))
                  if _norm(str(d.get("path", ""))) in paths}
        after = ""
        while drives:
            recs, nxt = await client.list("", after, PAGE)
            for rec in recs:
                parsed = parse_archive_id(rec.id)
                if rec.drive not in drives or parsed is None:
                    continue
                try:
                    if pace is not None:
                        await pace(node.id, rec.length)
                    if await copy_one(cluster, parsed[0], parsed[1], node.id, node.id):
                        moved += 1
                except NodeError as e:
                    log.info("mover: %s not moved off its draining drive: %s", rec.id, e)
                    failed += 1
            if not nxt or not recs:
                break
            after = recs[-1].id
    return moved, failed


async def records_on(node_id: str, url: str, secret: str, node_timeout: float = 5.0,
                     limit: int = 1000) -> int | None:
    """How many records (up to `limit`) a node holds, asked directly (no cluster needed);
    None when it does not answer. What `zonegate layout node remove` checks: a node that
    answers with records must be drained first (or removed with --force)."""
    from erasure.config import NodeSpec
    from erasure.nodeclient import make_session
    async with make_session() as session:
        client = NodeClient(NodeSpec(node_id, url, node_id, ()), secret, session, node_timeout)
        try:
            recs, _ = await client.list("", "", limit)
        except NodeError:
            return None
    return len(recs)
