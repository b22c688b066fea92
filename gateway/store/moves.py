"""The data mover's part index and leases over the gateway's metadata store
(gateway/metadata/moves.py), as erasure/mover.py's `PartIndex` and `MoveStore`: object
records follow the fragments the mover moves, and every gateway on one store shares one run.
The index is also erasure/records.py's `PartRecords` (`find`): records follow the fragments a
heal, a repair or a rehome puts elsewhere."""

from __future__ import annotations

import logging
from typing import Any

from erasure.layout import PartLayout
from gateway.metadata import MetadataStore

log = logging.getLogger("zonegate.mover")


def _layout(d: dict[str, Any]) -> PartLayout | None:
    try:
        return PartLayout.from_dict(d)
    except (KeyError, TypeError, ValueError):
        return None  # not a part layout (a pending mark): nothing to move


class StorePartIndex:
    """erasure.mover.PartIndex: every version's parts, manifest and tags archive, and every
    upload's parts, as recorded in the store."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def page(self, cursor: str, limit: int
                   ) -> tuple[list[tuple[str, PartLayout]], str | None]:
        items, nxt = await self.store.part_layout_page(cursor, limit)
        out = []
        for ref, d in items:
            lay = _layout(d)
            if lay is not None:
                out.append((ref, lay))
        return out, nxt

    async def get(self, ref: str) -> PartLayout | None:
        d = await self.store.part_layout_get(ref)
        return _layout(d) if d else None

    async def commit(self, ref: str, old: PartLayout, new: PartLayout) -> bool:
        return await self.store.part_layout_swap(ref, old.to_dict(), new.to_dict())

    async def find(self, part_uid: str, meta: dict[str, Any]) -> list[tuple[str, PartLayout]]:
        """erasure.records.PartRecords: the records naming the part, looked for where its
        archives' meta says it belongs (the key, the upload); a meta naming neither (a scan
        that found no archive) means a look at every row."""
        where = _where(meta)
        if where == ([], []):
            return []
        keys, uploads = where if where is not None else (None, None)
        out = []
        for ref, d in await self.store.part_layout_find(part_uid, keys, uploads):
            lay = _layout(d)
            if lay is not None:
                out.append((ref, lay))
        return out


def _where(meta: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]] | None:
    """(bucket, key) pairs and upload ids an archive's meta dict names (gateway/ops: a part
    names its bucket, key and upload; a manifest its upload and object; a delete marker its
    bucket and key), None when it names none of them; a bucket marker is in no record."""
    if meta.get("kind") == "bucket":
        return [], []
    keys: list[tuple[str, str]] = []
    for d in (meta, meta.get("object"), meta.get("marker")):
        if isinstance(d, dict) and isinstance(d.get("bucket"), str) and \
                isinstance(d.get("key"), str):
            keys.append((d["bucket"], d["key"]))
    # an upload's part: recorded in the upload until Complete, then in the key's versions
    uploads = [meta["upload"]] if isinstance(meta.get("upload"), str) else []
    if not keys and not uploads:
        return None
    return list(dict.fromkeys(keys)), uploads


class StoreMoveLeases:
    """erasure.mover.MoveStore on the metadata store's mover leases."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def claim(self, name: str, owner: str, seconds: float,
                    doc: dict[str, Any] | None = None) -> bool:
        return await self.store.move_claim(name, owner, seconds, doc)

    async def save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        return await self.store.move_save(name, owner, doc)

    async def get(self, name: str) -> dict[str, Any] | None:
        return await self.store.move_get(name)

    async def release(self, name: str, owner: str, *, drop: bool = False) -> None:
        await self.store.move_release(name, owner, drop)

    async def leftovers(self, prefix: str, limit: int = 100) -> list[tuple[str, dict[str, Any]]]:
        return await self.store.move_leftovers(prefix, limit)
