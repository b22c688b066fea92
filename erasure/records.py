"""Where a caller records its parts' layouts, as the healer, repair and rehome update them.

The gateway records each part's layout (placement: fragment index -> node) in its metadata
store, and reads follow that record. When a rebuild (the healer's `heal`, `zonegate repair`)
puts a fragment on another node than the record names, or a rehome moves one to its home, the
record is told, the way the data mover commits its moves: a compare-and-set of the recorded
layout (`PartRecords.commit`), so a concurrent change (a mover's commit, an overwrite of the
key) is never clobbered. Erasure does not know the gateway: the caller passes its records in
(`ErasureCluster(records=...)`; the gateway's is `gateway/store/moves.py:StorePartIndex`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from erasure.layout import PartLayout, archive_id
from erasure.nodeclient import NodeError

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

log = logging.getLogger(__name__)
ATTEMPTS = 5  # compare-and-set tries per record while other writers change it


class PartRecords(Protocol):
    """The records naming a part: found by part uid (with the caller's meta dict from the
    part's archives as a hint), read and swapped by an opaque ref (as `mover.PartIndex`)."""

    async def find(self, part_uid: str, meta: dict[str, Any]
                   ) -> list[tuple[str, PartLayout]]:
        """Every (ref, layout) recording the part now."""

    async def get(self, ref: str) -> PartLayout | None: ...

    async def commit(self, ref: str, old: PartLayout, new: PartLayout) -> bool:
        """Record `new` at `ref` if `old` is still recorded there."""


async def _holds(cluster: ErasureCluster, node: str, rid: str) -> bool:
    """Whether `node` answers that it holds the archive (down, gone or any error: no)."""
    client = cluster.clients.get(node)
    if client is None or not client.up:
        return False
    try:
        await client.head(rid)
        return True
    except NodeError:
        return False


async def relocated(cluster: ErasureCluster, cur: PartLayout, placed: dict[int, str],
                    bad: Iterable[tuple[int, str]] = ()) -> PartLayout | None:
    """`cur` with fragment i on placed[i] wherever the node it names does not hold a good
    copy (it is down, gone, lacks the archive, or (i, node) is in `bad`); None if nothing
    changes. A record naming a node that holds the fragment stays as it is: it is right, and
    may be newer than this rebuild (a mover's copy)."""
    bad = set(bad)
    placement, missing = dict(cur.placement), set(cur.missing)
    for i, node in sorted(placed.items()):
        named = placement.get(i)
        if named != node and named is not None and (i, named) not in bad and \
                await _holds(cluster, named, archive_id(cur.part_uid, i)):
            placement[i] = named  # a good copy where recorded (missing: an answer lost)
        else:
            placement[i] = node
        missing.discard(i)
    if placement == cur.placement and missing == set(cur.missing):
        return None
    return dataclasses.replace(cur, placement=placement, missing=sorted(missing))


async def record_placed(cluster: ErasureCluster, part_uid: str, meta: dict[str, Any],
                        placed: dict[int, str], bad: Iterable[tuple[int, str]] = ()) -> int:
    """Tell the caller's records that fragment i of the part is on placed[i] now (just
    written there); `bad`: (index, node) copies known lost or corrupt. Returns how many
    records changed. Without records (erasure-only use) nothing happens; a store that fails
    is logged: the fragments are safe, reads find them (a degraded read queues a heal)."""
    records = getattr(cluster, "records", None)  # a stand-in cluster may have none
    if records is None or not placed:
        return 0
    bad = set(bad)
    changed = 0
    try:
        for ref, cur in await records.find(part_uid, meta):
            for _ in range(ATTEMPTS):
                new = await relocated(cluster, cur, placed, bad)
                if new is None or await records.commit(ref, cur, new):
                    changed += new is not None
                    break
                now = await records.get(ref)  # changed meanwhile: merge into what is there
                if now is None or now.part_uid != part_uid:
                    break  # the record went (deleted, overwritten): nothing to fix
                cur = now
            else:
                log.warning("record %s of part %s kept changing: not updated", ref, part_uid)
    except Exception as e:  # noqa: BLE001 - the store is away; the data is fine
        log.warning("could not record where %s's fragments %s are: %s", part_uid,
                    sorted(placed), e)
    if changed:
        cluster.stats["records_updated"] += changed
    return changed
