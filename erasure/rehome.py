"""Move fragments that sit on a handoff node back to their home (the part's primary placement).

A write (or a rebuild) whose home node was down or full puts a fragment on the next node in
rendezvous order. Once the home takes writes again the fragment is copied there (the node
verifies the CRC as it streams, and a record exists only once whole) and then the handoff copy is
deleted, so placement is restored and reads, which try a fragment's home first, stop depending
on handoffs. Before the handoff copy goes, the caller's records (the gateway's stored layouts,
erasure/records.py) are told: a record naming the handoff names the home.

Parts are found two ways: `Handoffs`, one small file per part under `<state_dir>/handoff/`
written when a write or rebuild placed a fragment off home (the cluster works through them when
a node comes back), and `zonegate repair`'s scan (`repair.find_damage` lists healthy parts with a
fragment off home). A deletion that begins during a move wins: the copy is removed again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from erasure.layout import archive_id
from erasure.leases import part_lease
from erasure.nodeclient import NodeError
from erasure.records import record_placed

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster, ScannedPart

log = logging.getLogger(__name__)
COPY_CHUNK = 1 << 20


class Handoffs:
    """Parts with a fragment written off home, waiting to be moved back."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "handoff"

    def add(self, part_uid: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        p = self.dir / part_uid
        if not p.exists():
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmp.write_text("{}")
            tmp.replace(p)

    def done(self, part_uid: str) -> None:
        (self.dir / part_uid).unlink(missing_ok=True)

    def parts(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.iterdir() if not p.name.startswith("."))


def off_home(cluster: ErasureCluster, part_uid: str, placed: dict[int, str],
             width: int | None = None) -> bool:
    """Whether a fragment of this placement (index -> node) of a part of `width` fragments
    (default: the current scheme's) is not on its home node."""
    home = cluster.home(part_uid, width)
    return any(i < len(home) and home[i] != n for i, n in placed.items())


def moves(cluster: ErasureCluster, part: ScannedPart) -> tuple[list[tuple[int, str, str]], int]:
    """(index, from, to) for each fragment to move home now (`to` == `from`'s home also for a
    copy already at home: then only the handoff copy goes), and how many more are off home
    but cannot move yet (the home is down, full, or holds another fragment of the part)."""
    home = cluster.home(part.part_uid, part.scheme.n)  # the part's own scheme
    held = {n for nodes in part.fragments.values() for n in nodes}
    out: list[tuple[int, str, str]] = []
    later = 0
    for i, nodes in sorted(part.fragments.items()):
        if i >= len(home):
            continue
        dst = home[i]
        extra = [n for n in nodes if n != dst]
        if not extra:
            continue
        client = cluster.clients.get(dst)
        if dst in nodes:
            out.extend((i, n, dst) for n in extra)  # a move that stopped before its delete
        elif dst in held or client is None or not client.writable:
            later += 1
        else:
            out.append((i, nodes[0], dst))
            held.add(dst)
    return out, later


async def move_one(cluster: ErasureCluster, part_uid: str, index: int, src: str, dst: str,
                   copy: bool = True, meta: dict[str, Any] | None = None) -> bool:
    """Copy one archive from `src` to `dst` (unless `copy` is False: it is there already),
    record it there (the caller's records, erasure/records.py: a record naming `src` then
    names `dst`; `meta`: the part's meta dict, the records' hint), then delete it on `src`.
    False when the part is being deleted (nothing is left behind)."""
    if copy and not await copy_one(cluster, part_uid, index, src, dst):
        return False
    if not copy and await cluster.deletions.known(part_uid):
        return False
    await record_placed(cluster, part_uid, meta or {}, {index: dst}, {(index, src)})
    await cluster.clients[src].delete(archive_id(part_uid, index))
    return True


async def copy_one(cluster: ErasureCluster, part_uid: str, index: int, src: str, dst: str,
                   pace: Callable[[int], Awaitable[None]] | None = None) -> bool:
    """Copy one archive from `src` to `dst` as a verified stream (the node checks the CRC and
    commits the record whole) in the part's stream (lifetime class); `pace(n)` is awaited
    before each chunk (the mover's throttle). False when the part is being deleted (the copy
    is removed again)."""
    rid = archive_id(part_uid, index)
    if await cluster.deletions.known(part_uid):
        return False
    async with cluster.clients[src].get(rid) as r:
        head = r.head
        assert head is not None
        try:
            stream = str(json.loads(head.meta).get("stream") or "repair")
        except (ValueError, AttributeError):
            stream = "repair"

        async def body():
            left = head.length
            while left:
                n = min(left, COPY_CHUNK)
                if pace is not None:
                    await pace(n)
                yield await r.read_exactly(n)
                left -= n

        await cluster.clients[dst].put(rid, body(), length=head.length, stream=stream,
                                       meta=lambda: head.meta)
    if await cluster.deletions.known(part_uid):
        # deleted while we copied: its listing of dst may have run before our write
        await cluster.clients[dst].delete(rid)
        return False
    return True


async def rehome_part(cluster: ErasureCluster, part_uid: str) -> int:
    """Move the part's off-home fragments home as far as possible now; returns how many may
    stay off home (0: done, or the part is gone; a node that cannot be listed counts as one,
    it may hold a fragment away from home). A part another worker holds the lease of
    (moving or healing it: erasure/leases.py) is left to it (1)."""
    async with part_lease(cluster.leases, cluster.lease_holder, part_uid,
                          cluster.repair_lease) as mine:
        return await _rehome_part(cluster, part_uid) if mine else 1


async def _rehome_part(cluster: ErasureCluster, part_uid: str) -> int:
    for _ in range(cluster.scheme.n + 1):  # a move may free another fragment's home
        found = [p for p in await cluster.scan(part_uid + ".") if p.part_uid == part_uid]
        if not found or await cluster.deletions.known(part_uid):
            return 0
        part = found[0]
        todo, later = moves(cluster, part)
        later += 1 if cluster.unreachable else 0
        if not todo:
            return later
        for i, src, dst in todo:
            try:
                if not await move_one(cluster, part_uid, i, src, dst,
                                      copy=dst not in part.fragments[i], meta=part.meta):
                    return 0
                cluster.stats["fragments_moved_home"] += 1
                log.info("moved %s home: %s -> %s", archive_id(part_uid, i), src, dst)
            except NodeError as e:
                log.warning("moving %s home (%s -> %s) failed: %s", archive_id(part_uid, i),
                            src, dst, e)
                return later + 1
    return 1


async def rehome_recorded(cluster: ErasureCluster) -> int:
    """Work through the recorded handoffs; returns how many fragments moved home."""
    before = cluster.stats["fragments_moved_home"]
    for uid in cluster.handoffs.parts():
        if await rehome_part(cluster, uid) == 0:
            cluster.handoffs.done(uid)
    return cluster.stats["fragments_moved_home"] - before
