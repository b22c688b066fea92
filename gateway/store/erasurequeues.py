"""Erasure's repair queue and deletion records over the gateway's metadata store.

`ErasureCluster` takes any `erasure.repairqueue.RepairStore` / `DeletionStore`; the gateway
gives it these, so every gateway on one store shares one queue (the healer's claims are
leased, so a queued part is healed by one gateway; a dead gateway's lease runs out) and sees
every deletion any gateway began. `import_state_dir` moves the files an older gateway kept
under `erasure.state_dir` into the store at start, so an upgrade forgets no pending repair.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from erasure.layout import PartLayout
from erasure.repairqueue import (
    DELETED_KEEP,
    PRUNE_EVERY,
    Deletions,
    RepairQueue,
    RepairRecord,
)
from gateway.metadata import MetadataStore, RepairEntry

log = logging.getLogger("zonegate.queues")


def _record(e: RepairEntry) -> RepairRecord:
    return RepairRecord(PartLayout.from_dict(e.layout), list(e.indexes), e.reason, e.since,
                        e.attempts)


class StoreRepairQueue:
    """erasure.repairqueue.RepairStore on a MetadataStore."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def add(self, layout: PartLayout, indexes: list[int], reason: str) -> None:
        await self.store.repair_add(layout.to_dict(), list(indexes), reason)

    async def get(self, part_uid: str) -> RepairRecord | None:
        e = await self.store.repair_get(part_uid)
        return _record(e) if e else None

    async def records(self) -> list[RepairRecord]:
        return [_record(e) for e in await self.store.repair_list()]

    async def claim(self, limit: int, lease: float) -> list[RepairRecord]:
        return [_record(e) for e in await self.store.repair_claim(limit, lease)]

    async def resolve(self, part_uid: str, indexes: list[int]) -> None:
        await self.store.repair_resolve(part_uid, list(indexes))

    async def retry(self, part_uid: str, delay: float) -> None:
        await self.store.repair_retry(part_uid, delay)

    async def done(self, part_uid: str) -> None:
        await self.store.repair_done(part_uid)

    async def wake(self) -> None:
        await self.store.repair_wake()

    async def size(self) -> int:
        return await self.store.repair_count()

    async def next_due(self) -> float | None:
        return await self.store.repair_next_due()


class StoreDeletions:
    """erasure.repairqueue.DeletionStore on a MetadataStore; finished deletions are pruned
    an hour after they ended, by whichever gateway ends one after a minute's pause."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._pruned = 0.0

    async def begin(self, part_uid: str) -> None:
        await self.store.deletion_begin(part_uid)

    async def end(self, part_uid: str) -> None:
        await self.store.deletion_end(part_uid)
        now = time.monotonic()
        if now - self._pruned > PRUNE_EVERY:
            self._pruned = now
            await self.store.deletion_prune(time.time() - DELETED_KEEP)

    async def forget(self, part_uid: str) -> None:
        await self.store.deletion_forget(part_uid)

    async def known(self, part_uid: str) -> bool:
        return await self.store.deletion_state(part_uid) is not None

    async def pending(self, part_uid: str) -> bool:
        return await self.store.deletion_state(part_uid) is False

    async def all(self) -> dict[str, bool]:
        return await self.store.deletions()

    async def unfinished(self) -> list[str]:
        return await self.store.deletions_unfinished()


async def import_state_dir(store: MetadataStore, state_dir: str | Path) -> tuple[int, int]:
    """Move the repair records and deletion records an older gateway kept as files under
    `state_dir` into the store, each file removed once its record is committed (a crash in
    between imports it again: adding is a merge). Returns (repairs, deletions) moved."""
    files, dels = RepairQueue(state_dir), Deletions(state_dir)
    repairs = 0
    for rec in await files.records():
        await store.repair_add(rec.layout.to_dict(), rec.indexes, rec.reason or "imported")
        await files.done(rec.layout.part_uid)
        repairs += 1
    deletions = 0
    for uid, doc in dels.docs().items():
        if doc.get("done"):
            # kept for the rest of its hour only if it is still young
            if float(doc.get("since", 0)) > time.time() - DELETED_KEEP:
                await store.deletion_end(uid)
        elif await store.deletion_state(uid) is None:
            await store.deletion_begin(uid)
        await dels.forget(uid)
        deletions += 1
    for d in (files.dir, dels.dir):
        with contextlib.suppress(OSError):
            for tmp in d.glob(".*.tmp"):  # a write an older gateway left half done
                tmp.unlink()
            d.rmdir()
    if repairs or deletions:
        log.info("moved %d repair records and %d deletion records from %s into the "
                 "metadata store", repairs, deletions, state_dir)
    return repairs, deletions


def shared_queues(store: MetadataStore) -> dict[str, Any]:
    """ErasureCluster keyword arguments: the queues on `store`, its work leases (the store has
    erasure.leases.LeaseStore's methods itself), and the cluster layout kept there
    (gateway/store/layoutstore.py), so that every tool on the store (repair, recover, bucket
    markers) sees the nodes the layout has, not only the cluster file's; and its records of the
    parts' layouts, so that heals, repairs and rehomes commit where they put a fragment."""
    from gateway.store.layoutstore import StoreLayouts
    from gateway.store.moves import StorePartIndex
    return {"repair_queue": StoreRepairQueue(store), "deletions": StoreDeletions(store),
            "layout_store": StoreLayouts(store), "leases": store,
            "records": StorePartIndex(store)}
