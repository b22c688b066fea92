"""Records of parts that need repair: one small JSON file per part under `<state_dir>/repair/`.

Writers add one when a write succeeds without every fragment; readers add one when they meet a
missing or corrupt fragment. `zonegate repair` reads them (besides scanning the nodes) and
removes each once the part is whole again. Files are replaced atomically, so an interrupted
repair or a crash leaves either the old record or the new one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from erasure.layout import PartLayout


@dataclass
class RepairRecord:
    layout: PartLayout
    indexes: list[int]     # fragments to rebuild
    reason: str
    since: float


class RepairQueue:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "repair"

    def _path(self, part_uid: str) -> Path:
        return self.dir / f"{part_uid}.json"

    def add(self, layout: PartLayout, indexes: list[int], reason: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        old = self.get(layout.part_uid)
        merged = sorted(set(indexes) | (set(old.indexes) if old else set()))
        rec = {"layout": layout.to_dict(), "indexes": merged,
               "reason": reason if not old else f"{old.reason}; {reason}",
               "since": old.since if old else time.time()}
        p = self._path(layout.part_uid)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rec, sort_keys=True))
        tmp.replace(p)

    def get(self, part_uid: str) -> RepairRecord | None:
        try:
            d = json.loads(self._path(part_uid).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return RepairRecord(PartLayout.from_dict(d["layout"]), list(d["indexes"]),
                            d.get("reason", ""), float(d.get("since", 0)))

    def records(self) -> list[RepairRecord]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in sorted(self.dir.glob("*.json")):
            rec = self.get(p.name[:-len(".json")])
            if rec is not None:
                out.append(rec)
        return out

    def done(self, part_uid: str) -> None:
        self._path(part_uid).unlink(missing_ok=True)

    def resolve(self, part_uid: str, indexes: list[int]) -> None:
        """These fragments are whole again; drop the record once none is left."""
        rec = self.get(part_uid)
        if rec is None:
            return
        left = sorted(set(rec.indexes) - set(indexes))
        if not left:
            self.done(part_uid)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        p = self._path(part_uid)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"layout": rec.layout.to_dict(), "indexes": left,
                                   "reason": rec.reason, "since": rec.since}, sort_keys=True))
        tmp.replace(p)


DELETED_KEEP = 3600.0   # seconds a finished deletion stays known (rebuilds in flight see it)
PRUNE_EVERY = 60.0


class Deletions:
    """Parts being deleted, or deleted lately: one small file per part under
    `<state_dir>/deleting/`. Written before any archive is removed, so a rebuild that started
    before the delete sees it (and deletes what it wrote itself) and repair reports the
    leftovers of an unfinished deletion as "queued for deletion", not as lost. Callers give
    every write a fresh uid; a write of a uid known here (a bucket marker written again by
    `zonegate bucket-markers` after a failed try) forgets the record first."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "deleting"
        self._pruned = 0.0

    def _path(self, part_uid: str) -> Path:
        return self.dir / part_uid

    def _write(self, part_uid: str, doc: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        p = self._path(part_uid)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True))
        tmp.replace(p)

    def begin(self, part_uid: str) -> None:
        if not self.pending(part_uid):
            self._write(part_uid, {"since": time.time(), "done": False})

    def end(self, part_uid: str) -> None:
        self._write(part_uid, {"since": time.time(), "done": True})
        now = time.monotonic()
        if now - self._pruned > PRUNE_EVERY:
            self._pruned = now
            self.prune()

    def forget(self, part_uid: str) -> None:
        """The part is written again (a bucket marker rewritten with its old uid): alive."""
        self._path(part_uid).unlink(missing_ok=True)

    def get(self, part_uid: str) -> dict | None:
        try:
            return json.loads(self._path(part_uid).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def known(self, part_uid: str) -> bool:
        """Deleted or being deleted: never write this part again."""
        return self._path(part_uid).exists()

    def pending(self, part_uid: str) -> bool:
        doc = self.get(part_uid)
        return doc is not None and not doc.get("done")

    def all(self) -> dict[str, bool]:
        """part uid -> done, for every deletion known."""
        if not self.dir.is_dir():
            return {}
        out = {}
        for p in self.dir.iterdir():
            if p.name.startswith("."):
                continue
            doc = self.get(p.name)
            if doc is not None:
                out[p.name] = bool(doc.get("done"))
        return out

    def prune(self, keep: float = DELETED_KEEP) -> None:
        if not self.dir.is_dir():
            return
        cutoff = time.time() - keep
        for p in self.dir.iterdir():
            doc = self.get(p.name) if not p.name.startswith(".") else None
            if doc and doc.get("done") and float(doc.get("since", 0)) < cutoff:
                p.unlink(missing_ok=True)
