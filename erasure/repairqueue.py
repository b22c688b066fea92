"""The repair queue and the deletion records: what the healer, repair and purge share.

Two small async contracts (`RepairStore`, `DeletionStore`) and their file implementations under
`<state_dir>/` (one JSON file per part), for erasure-only use: tests, `zonegate repair` on a
machine without the gateway's store. The gateway passes implementations over its metadata
store instead (gateway/store/erasurequeues.py), so that every gateway sees one queue: claims carry a lease,
so two healers never rebuild the same part, and a dead gateway's leases run out.

Writers add a record when a write succeeds without every fragment; readers when they meet a
missing or corrupt fragment. The healer claims due records, rebuilds, and resolves them;
`zonegate repair` reads them (besides scanning the nodes) and removes each once the part is
whole again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from erasure.layout import PartLayout

REASON_MAX = 2000   # characters of reasons kept per record (degraded reads add one each)


@dataclass
class RepairRecord:
    layout: PartLayout
    indexes: list[int]     # fragments to rebuild
    reason: str
    since: float
    attempts: int = 0      # failed heals since the record was added or woken


def merge_reason(old: str, new: str) -> str:
    """Reasons of a record noted again: each kept once, the total bounded."""
    if not old or new in old.split("; "):
        return old or new
    return f"{old}; {new}"[:REASON_MAX]


class RepairStore(Protocol):
    """Parts that need repair. `claim` leases due records (no other claimer gets them until
    the lease runs out or the holder calls resolve/retry/done)."""

    async def add(self, layout: PartLayout, indexes: list[int], reason: str) -> None: ...
    async def get(self, part_uid: str) -> RepairRecord | None: ...
    async def records(self) -> list[RepairRecord]: ...
    async def claim(self, limit: int, lease: float) -> list[RepairRecord]: ...
    async def resolve(self, part_uid: str, indexes: list[int]) -> None:
        """These fragments are whole again: drop the record once none is left; releases the
        lease (fragments noted meanwhile stay, due at once)."""
    async def retry(self, part_uid: str, delay: float) -> None:
        """A heal failed: release the lease, due again after `delay`, one more attempt."""
    async def done(self, part_uid: str) -> None: ...
    async def wake(self) -> None:
        """Every record not leased is due now, its attempts forgotten (a node came back)."""
    async def size(self) -> int: ...
    async def next_due(self) -> float | None:
        """When the earliest record can be claimed (epoch seconds), None if none."""


class DeletionStore(Protocol):
    """Parts being deleted, or deleted lately (kept an hour: rebuilds in flight see them)."""

    async def begin(self, part_uid: str) -> None: ...
    async def end(self, part_uid: str) -> None: ...
    async def forget(self, part_uid: str) -> None:
        """The part is written again under its old uid (a bucket marker): alive."""
    async def known(self, part_uid: str) -> bool:
        """Deleted or being deleted: never write this part again."""
    async def pending(self, part_uid: str) -> bool: ...
    async def all(self) -> dict[str, bool]:
        """part uid -> done, for every deletion known."""
    async def unfinished(self) -> list[str]: ...


def _atomic_write(p: Path, doc: dict) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(p)


# The file implementations do their (tiny, local) file I/O inline, as they always did: the
# gateway does not use them, and a thread hop per call would break their read-merge-write.

class RepairQueue:
    """One JSON file per part under `<state_dir>/repair/`, replaced atomically, so an
    interrupted repair or a crash leaves either the old record or the new one. Leases live in
    the file too (one process at a time is what this implementation is for)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "repair"

    def _path(self, part_uid: str) -> Path:
        return self.dir / f"{part_uid}.json"

    def _read(self, part_uid: str) -> dict | None:
        try:
            return json.loads(self._path(part_uid).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    @staticmethod
    def _rec(d: dict) -> RepairRecord:
        return RepairRecord(PartLayout.from_dict(d["layout"]), list(d["indexes"]),
                            d.get("reason", ""), float(d.get("since", 0)),
                            int(d.get("attempts", 0)))

    async def add(self, layout: PartLayout, indexes: list[int], reason: str) -> None:
        old = self._read(layout.part_uid) or {}
        doc = {**old, "layout": layout.to_dict(),
               "indexes": sorted(set(indexes) | set(old.get("indexes", ()))),
               "reason": merge_reason(old.get("reason", ""), reason),
               "since": old.get("since", time.time()), "due": 0.0, "attempts": 0}
        _atomic_write(self._path(layout.part_uid), doc)

    async def get(self, part_uid: str) -> RepairRecord | None:
        d = self._read(part_uid)
        return self._rec(d) if d else None

    def _docs(self) -> list[dict]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in sorted(self.dir.glob("*.json")):
            d = self._read(p.name[:-len(".json")])
            if d is not None:
                out.append(d)
        return out

    async def records(self) -> list[RepairRecord]:
        return [self._rec(d) for d in self._docs()]

    async def claim(self, limit: int, lease: float) -> list[RepairRecord]:
        now = time.time()
        out = []
        for d in self._docs():
            if len(out) >= limit:
                break
            if float(d.get("due", 0)) <= now and float(d.get("leased", 0)) <= now:
                d["leased"] = now + lease
                _atomic_write(self._path(d["layout"]["part_uid"]), d)
                out.append(self._rec(d))
        return out

    async def resolve(self, part_uid: str, indexes: list[int]) -> None:
        d = self._read(part_uid)
        if d is None:
            return
        left = sorted(set(d["indexes"]) - set(indexes))
        if not left:
            await self.done(part_uid)
            return
        _atomic_write(self._path(part_uid), {**d, "indexes": left, "leased": 0.0, "due": 0.0})

    async def retry(self, part_uid: str, delay: float) -> None:
        d = self._read(part_uid)
        if d is not None:
            _atomic_write(self._path(part_uid), {**d, "leased": 0.0, "due": time.time() + delay,
                                                 "attempts": int(d.get("attempts", 0)) + 1})

    async def done(self, part_uid: str) -> None:
        self._path(part_uid).unlink(missing_ok=True)

    async def wake(self) -> None:
        now = time.time()
        for d in self._docs():
            if float(d.get("leased", 0)) <= now and (d.get("due", 0) or d.get("attempts")):
                _atomic_write(self._path(d["layout"]["part_uid"]),
                              {**d, "due": 0.0, "attempts": 0})

    async def size(self) -> int:
        if not self.dir.is_dir():
            return 0
        return sum(1 for p in self.dir.iterdir() if p.suffix == ".json"
                   and not p.name.startswith("."))

    async def next_due(self) -> float | None:
        whens = [max(float(d.get("due", 0)), float(d.get("leased", 0))) for d in self._docs()]
        return min(whens) if whens else None


DELETED_KEEP = 3600.0   # seconds a finished deletion stays known (rebuilds in flight see it)
PRUNE_EVERY = 60.0


class Deletions:
    """Deletion records as one small file per part under `<state_dir>/deleting/`. Written
    before any archive is removed, so a rebuild that started before the delete sees it (and
    deletes what it wrote itself) and repair reports the leftovers of an unfinished deletion
    as "queued for deletion", not as lost. Callers give every write a fresh uid; a caller that
    writes a uid again (a bucket marker rewritten by `zonegate bucket-markers` after a failed
    try) calls `forget` first."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "deleting"
        self._pruned = 0.0

    def _path(self, part_uid: str) -> Path:
        return self.dir / part_uid

    def _get(self, part_uid: str) -> dict | None:
        try:
            return json.loads(self._path(part_uid).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    async def begin(self, part_uid: str) -> None:
        doc = self._get(part_uid)
        if doc is None or doc.get("done"):
            _atomic_write(self._path(part_uid), {"since": time.time(), "done": False})

    async def end(self, part_uid: str) -> None:
        _atomic_write(self._path(part_uid), {"since": time.time(), "done": True})
        now = time.monotonic()
        if now - self._pruned > PRUNE_EVERY:
            self._pruned = now
            self.prune()

    async def forget(self, part_uid: str) -> None:
        self._path(part_uid).unlink(missing_ok=True)

    async def known(self, part_uid: str) -> bool:
        return self._path(part_uid).exists()

    async def pending(self, part_uid: str) -> bool:
        doc = self._get(part_uid)
        return doc is not None and not doc.get("done")

    def docs(self) -> dict[str, dict]:
        """part uid -> {"since", "done"} (also what the gateway's import reads)."""
        if not self.dir.is_dir():
            return {}
        out = {}
        for p in self.dir.iterdir():
            if p.name.startswith("."):
                continue
            doc = self._get(p.name)
            if doc is not None:
                out[p.name] = doc
        return out

    async def all(self) -> dict[str, bool]:
        return {uid: bool(d.get("done")) for uid, d in self.docs().items()}

    async def unfinished(self) -> list[str]:
        return sorted(uid for uid, d in self.docs().items() if not d.get("done"))

    def prune(self, keep: float = DELETED_KEEP) -> None:
        cutoff = time.time() - keep
        for uid, doc in self.docs().items():
            if doc.get("done") and float(doc.get("since", 0)) < cutoff:
                self._path(uid).unlink(missing_ok=True)
