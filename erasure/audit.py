"""The fragment audit: every archive on every node must have an owner.

An owner is what will read or delete the archive one day: a live part (an object, an upload's
part, a bucket marker), a write still in flight (the gateway's pending mark), or a queued
deletion (the gateway's orphan queue, or a deletion this cluster began and has not finished,
`ErasureCluster.deletions`). The caller supplies `owners()`: a fresh snapshot, part uid -> what
owns it (the gateway reads its metadata store; this layer knows no gateway). Archives of parts
nobody owns are leaks: nothing would ever delete them.

Nodes are listed first and the owners read after, so a part whose owner went away in between
(deleted meanwhile) may look unowned: each such part is looked up again on the nodes, and only
reported if its archives are still there and still nobody owns it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from erasure.cluster import ErasureCluster, ScannedPart


@dataclass
class AuditReport:
    fragments: int = 0          # archives listed on all nodes
    parts: int = 0
    owners: Counter[str] = field(default_factory=Counter)   # what owns them -> parts
    unowned: dict[str, dict[int, list[str]]] = field(default_factory=dict)  # part -> fragments
    extra_copies: int = 0       # archives of one index on more than one node
    unreachable: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.unowned and not self.unreachable

    def summary(self) -> str:
        own = ", ".join(f"{n} {what}" for what, n in sorted(self.owners.items()))
        return (f"{self.fragments} fragments of {self.parts} parts audited ({own or 'none'}); "
                f"{len(self.unowned)} parts unowned, {self.extra_copies} extra copies"
                + (f"; could not list {', '.join(self.unreachable)}" if self.unreachable else ""))


async def audit(cluster: ErasureCluster, owners: Callable[[], Awaitable[dict[str, str]]],
                prefix: str = "") -> AuditReport:
    report = AuditReport()
    parts = await cluster.scan(prefix)
    report.unreachable = list(cluster.unreachable)
    snapshot = await owners()
    suspects: list[ScannedPart] = []
    for p in parts:
        report.parts += 1
        report.fragments += sum(len(n) for n in p.fragments.values())
        report.extra_copies += sum(len(n) - 1 for n in p.fragments.values())
        what = snapshot.get(p.part_uid) or await _erasure_owner(cluster, p.part_uid)
        if what:
            report.owners[what] += 1
        else:
            suspects.append(p)
    if suspects:
        again = await owners()
        for p in suspects:
            what = again.get(p.part_uid) or await _erasure_owner(cluster, p.part_uid)
            if not what:
                found = [q for q in await cluster.scan(p.part_uid + ".")
                         if q.part_uid == p.part_uid]
                if found:
                    report.unowned[p.part_uid] = found[0].fragments
                    continue
                what = "deleted meanwhile"
            report.owners[what] += 1
    return report


async def _erasure_owner(cluster: ErasureCluster, part_uid: str) -> str | None:
    return "queued for deletion" if await cluster.deletions.pending(part_uid) else None
