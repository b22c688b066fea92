"""The shared work queues in the metadata store: erasure's repair queue and deletion records.

They live in the store (not in files under `erasure.state_dir`) so that every gateway on one
store sees the same queue: a part queued by one gateway is healed by exactly one of them
(`repair_claim` leases records, FOR UPDATE SKIP LOCKED on PostgreSQL, and a dead gateway's
lease runs out), and a rebuild on one gateway sees a deletion begun on another. Layouts are
opaque dicts here too; gateway/store/erasurequeues.py adapts these methods to erasure's contracts.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any


@dataclass
class RepairEntry:
    part_uid: str
    layout: dict[str, Any]
    indexes: list[int]       # fragments to rebuild
    reason: str
    since: float
    attempts: int = 0        # failed heals since it was added or woken


class QueueStore(abc.ABC):
    """Repair queue and deletion records: each method one transaction."""

    # repair queue
    @abc.abstractmethod
    async def repair_add(self, layout: dict[str, Any], indexes: list[int], reason: str) -> None:
        """Queue fragments of a part, merged into its record if it has one (indexes united,
        reasons kept once); due at once, attempts forgotten, a lease held stays."""

    @abc.abstractmethod
    async def repair_get(self, part_uid: str) -> RepairEntry | None: ...

    @abc.abstractmethod
    async def repair_list(self) -> list[RepairEntry]:
        """Every record, by part uid."""

    @abc.abstractmethod
    async def repair_claim(self, limit: int = 8, lease: float = 300.0) -> list[RepairEntry]:
        """Due records not leased, leased for `lease` seconds (concurrent claimers skip them),
        oldest due first."""

    @abc.abstractmethod
    async def repair_resolve(self, part_uid: str, indexes: list[int]) -> None:
        """These fragments are whole: the record goes when none is left, else it is released
        and due at once (fragments noted during the heal)."""

    @abc.abstractmethod
    async def repair_retry(self, part_uid: str, delay: float) -> None:
        """A failed heal: released, due after `delay`, one more attempt counted."""

    @abc.abstractmethod
    async def repair_done(self, part_uid: str) -> None: ...

    @abc.abstractmethod
    async def repair_wake(self) -> None:
        """Records not leased are due now, attempts forgotten (a node came back)."""

    @abc.abstractmethod
    async def repair_count(self) -> int: ...

    @abc.abstractmethod
    async def repair_next_due(self) -> float | None:
        """When the earliest record can be claimed (its due time or lease end), or None."""

    # deletion records
    @abc.abstractmethod
    async def deletion_begin(self, part_uid: str) -> None:
        """Pending from now (a finished one begins again; a pending one keeps its time)."""

    @abc.abstractmethod
    async def deletion_end(self, part_uid: str) -> None: ...

    @abc.abstractmethod
    async def deletion_forget(self, part_uid: str) -> None: ...

    @abc.abstractmethod
    async def deletion_state(self, part_uid: str) -> bool | None:
        """None: no record; False: pending; True: done."""

    @abc.abstractmethod
    async def deletions(self) -> dict[str, bool]:
        """part uid -> done, for every record."""

    @abc.abstractmethod
    async def deletions_unfinished(self) -> list[str]:
        """Pending deletions, by part uid."""

    @abc.abstractmethod
    async def deletion_prune(self, before: float) -> int:
        """Drop finished deletions that ended before `before`; returns how many."""

    # work leases: one holder at a time for a named piece of shared work (issue 24 D5)
    @abc.abstractmethod
    async def lease_take(self, name: str, holder: str, seconds: float) -> bool:
        """Take (or extend, for the same holder) the lease `name` for `seconds`: False when
        another holder has it unexpired. A holder's crash frees it when it runs out."""

    @abc.abstractmethod
    async def lease_release(self, name: str, holder: str) -> None:
        """Give the lease back (nothing happens unless `holder` has it)."""
