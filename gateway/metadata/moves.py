"""What the data mover (erasure/mover.py) needs from the metadata store: the recorded part
layouts, page by page, with a compare-and-set of one, and leases with a document each (the run's
durable progress, the parts in flight). gateway/store/moves.py adapts these methods to erasure's
`PartIndex` and `MoveStore` (and erasure/records.py's `PartRecords`: the healer's, repair's and
rehome's commits of where they put a fragment).

Where layouts are recorded (a *ref* names one, a JSON list):
- `["v", bucket, key hex, seq, slot]`: a version's part (`slot` = its index in `parts`), its
  manifest (`"m"`) or its tags/ACL archive (`"t"`); `objects` holds a copy of the current
  version's parts and manifest, kept in step by `part_layout_swap`;
- `["u", upload id, part number]`: a multipart upload's part.
Pages list versions by (bucket, key, seq descending), then upload parts by (upload id, number);
a cursor is the last row's position (`["v", bucket, key hex, seq]` or `["u", id, number]`),
and a page holds whole rows.
"""

from __future__ import annotations

import abc
import json
from typing import Any

SLOT_MANIFEST = "m"
SLOT_META = "t"


def ref_of(row: list[Any], slot: int | str | None = None) -> str:
    return json.dumps(row + ([slot] if slot is not None else []), separators=(",", ":"))


def parse_ref(ref: str) -> list[Any]:
    """The ref's fields; ValueError for something that is not one."""
    try:
        r = json.loads(ref) if ref else []
    except json.JSONDecodeError:
        raise ValueError(f"not a layout ref: {ref!r}") from None
    if not isinstance(r, list) or (r and r[0] not in ("v", "u")):
        raise ValueError(f"not a layout ref: {ref!r}")
    return r


def row_layouts(row_pos: list[Any], parts: str, manifest: str | None,
                meta_part: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The (ref, layout) pairs of one versions row."""
    out = []
    for i, p in enumerate(json.loads(parts)):
        if p.get("layout"):
            out.append((ref_of(row_pos, i), p["layout"]))
    for slot, raw in ((SLOT_MANIFEST, manifest), (SLOT_META, meta_part)):
        if raw:
            out.append((ref_of(row_pos, slot), json.loads(raw)))
    return out


def swapped(parts: str, manifest: str | None, meta_part: str | None, slot: Any,
            old: dict[str, Any], new: dict[str, Any]
            ) -> tuple[str, str | None, str | None] | None:
    """The row's columns with the layout at `slot` replaced by `new`, or None when `old` is
    not what is recorded there (any difference: a concurrent move, a rewrite)."""
    if slot == SLOT_MANIFEST or slot == SLOT_META:
        raw = manifest if slot == SLOT_MANIFEST else meta_part
        if not raw or json.loads(raw) != old:
            return None
        text = json.dumps(new)
        return (parts, text, meta_part) if slot == SLOT_MANIFEST else (parts, manifest, text)
    plist = json.loads(parts)
    if not isinstance(slot, int) or not 0 <= slot < len(plist) or \
            plist[slot].get("layout") != old:
        return None
    plist[slot] = {**plist[slot], "layout": new}
    return json.dumps(plist), manifest, meta_part


def matching(part_uid: str, version_rows: list[Any], part_rows: list[Any]
             ) -> list[tuple[str, dict[str, Any]]]:
    """The (ref, layout) pairs naming `part_uid` among versions rows (bucket, key, seq, parts,
    manifest, meta_part) and upload part rows (upload id, number, layout)."""
    out: dict[str, dict[str, Any]] = {}
    for b, k, seq, parts, manifest, meta_part in version_rows:
        for ref, d in row_layouts(["v", b, bytes(k).hex(), seq], parts, manifest, meta_part):
            if d.get("part_uid") == part_uid:
                out[ref] = d
    for uid, num, layout in part_rows:
        d = json.loads(layout)
        if d.get("part_uid") == part_uid:
            out[ref_of(["u", uid, num])] = d
    return list(out.items())


class MovesStore(abc.ABC):
    """Layout pages and mover leases: each method one transaction."""

    @abc.abstractmethod
    async def part_layout_page(self, cursor: str, limit: int
                          ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """Recorded layouts after `cursor` ("" = the start), about `limit` rows' worth, and
        the next cursor (None at the end)."""

    @abc.abstractmethod
    async def part_layout_get(self, ref: str) -> dict[str, Any] | None:
        """The layout recorded at `ref`, None if the row or slot is gone."""

    @abc.abstractmethod
    async def part_layout_find(self, part_uid: str, keys: list[tuple[str, str]] | None,
                               uploads: list[str] | None) -> list[tuple[str, dict[str, Any]]]:
        """Every (ref, layout) naming `part_uid`: among the versions of `keys` ((bucket,
        key) pairs) and the parts of `uploads`; both None: anywhere (a scan of every row:
        for parts whose meta names neither)."""

    @abc.abstractmethod
    async def part_layout_swap(self, ref: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Record `new` at `ref` if `old` is recorded there (and in `objects` where that
        version is current); False, nothing changed, otherwise."""

    @abc.abstractmethod
    async def move_claim(self, name: str, owner: str, seconds: float,
                         doc: dict[str, Any] | None = None) -> bool:
        """Take the lease `name` for `seconds` if it is free, expired or `owner`'s (FOR
        UPDATE on PostgreSQL); `doc` replaces its document when given."""

    @abc.abstractmethod
    async def move_save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        """Replace the document while `owner` holds the lease."""

    @abc.abstractmethod
    async def move_get(self, name: str) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def move_release(self, name: str, owner: str, drop: bool = False) -> None:
        """End `owner`'s lease; `drop`: the row goes too."""

    @abc.abstractmethod
    async def move_leftovers(self, prefix: str, limit: int = 100
                             ) -> list[tuple[str, dict[str, Any]]]:
        """Expired leases whose name starts with `prefix`, with their documents."""
