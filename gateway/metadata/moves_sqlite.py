"""SqliteStore's layout pages and mover leases (gateway/metadata/moves.py). Writes run on the
store's writer thread in BEGIN IMMEDIATE transactions (exclusive between processes sharing
the file), reads on a worker thread."""

from __future__ import annotations

import json
import time
from typing import Any

from gateway.metadata.keys import key_bytes
from gateway.metadata.moves import (
    MovesStore,
    matching,
    parse_ref,
    ref_of,
    row_layouts,
    swapped,
)

MIGRATION = """
CREATE TABLE move_leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, until REAL NOT NULL,
                          doc TEXT)
"""


class SqliteMoves(MovesStore):
    # provided by SqliteStore
    _tx: Any
    _conn: Any
    _w: Any
    _r: Any

    # -- layouts --------------------------------------------------------------------------
    def _part_layout_page(self, cursor: str, limit: int
                     ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        r = parse_ref(cursor)
        c = self._conn()
        out: list[tuple[str, dict[str, Any]]] = []
        if not r or r[0] == "v":
            if r:
                rows = c.execute(
                    "SELECT bucket, key, seq, parts, manifest, meta_part FROM versions "
                    "WHERE bucket > ? OR (bucket = ? AND (key > ? OR (key = ? AND seq < ?))) "
                    "ORDER BY bucket, key, seq DESC LIMIT ?",
                    (r[1], r[1], bytes.fromhex(r[2]), bytes.fromhex(r[2]), r[3], limit)
                ).fetchall()
            else:
                rows = c.execute("SELECT bucket, key, seq, parts, manifest, meta_part FROM "
                                 "versions ORDER BY bucket, key, seq DESC LIMIT ?",
                                 (limit,)).fetchall()
            pos: list[Any] = []
            for b, k, seq, parts, manifest, meta_part in rows:
                pos = ["v", b, bytes(k).hex(), seq]
                out.extend(row_layouts(pos, parts, manifest, meta_part))
            if len(rows) == limit:
                return out, ref_of(pos)
            r = ["u", "", -1]
            if rows:
                return out, ref_of(r)
        rows = c.execute("SELECT upload_id, number, layout FROM parts WHERE upload_id > ? OR "
                         "(upload_id = ? AND number > ?) ORDER BY upload_id, number LIMIT ?",
                         (r[1], r[1], r[2], limit)).fetchall()
        for uid, num, layout in rows:
            out.append((ref_of(["u", uid, num]), json.loads(layout)))
        if len(rows) == limit:
            return out, ref_of(["u", rows[-1][0], rows[-1][1]])
        return out, None

    def _part_layout_get(self, ref: str) -> dict[str, Any] | None:
        r = parse_ref(ref)
        c = self._conn()
        if r[0] == "u":
            row = c.execute("SELECT layout FROM parts WHERE upload_id=? AND number=?",
                            (r[1], r[2])).fetchone()
            return json.loads(row[0]) if row else None
        row = c.execute("SELECT parts, manifest, meta_part FROM versions WHERE bucket=? AND "
                        "key=? AND seq=?", (r[1], bytes.fromhex(r[2]), r[3])).fetchone()
        if row is None:
            return None
        found = dict(row_layouts(r[:4], *row))
        return found.get(ref_of(r[:4], r[4]))

    def _part_layout_find(self, part_uid: str, keys: list[tuple[str, str]] | None,
                          uploads: list[str] | None) -> list[tuple[str, dict[str, Any]]]:
        c = self._conn()
        vq = "SELECT bucket, key, seq, parts, manifest, meta_part FROM versions"
        pq = "SELECT upload_id, number, layout FROM parts"
        if keys is None and uploads is None:  # every row; instr: no LIKE wildcards in a uid
            vrows = c.execute(f"{vq} WHERE instr(parts, ?) OR instr(COALESCE(manifest, ''), ?) "
                              "OR instr(COALESCE(meta_part, ''), ?)", (part_uid,) * 3).fetchall()
            prows = c.execute(f"{pq} WHERE instr(layout, ?)", (part_uid,)).fetchall()
            return matching(part_uid, vrows, prows)
        vrows, prows = [], []
        for b, k in keys or []:
            vrows += c.execute(f"{vq} WHERE bucket=? AND key=?", (b, key_bytes(k))).fetchall()
        for up in uploads or []:
            prows += c.execute(f"{pq} WHERE upload_id=?", (up,)).fetchall()
        return matching(part_uid, vrows, prows)

    async def part_layout_find(self, part_uid: str, keys: list[tuple[str, str]] | None,
                               uploads: list[str] | None) -> list[tuple[str, dict[str, Any]]]:
        return await self._r(self._part_layout_find, part_uid, keys, uploads)

    def _part_layout_swap(self, ref: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        r = parse_ref(ref)
        with self._tx() as c:
            if r[0] == "u":
                row = c.execute("SELECT layout FROM parts WHERE upload_id=? AND number=?",
                                (r[1], r[2])).fetchone()
                if row is None or json.loads(row[0]) != old:
                    return False
                c.execute("UPDATE parts SET layout=? WHERE upload_id=? AND number=?",
                          (json.dumps(new), r[1], r[2]))
                return True
            kb = bytes.fromhex(r[2])
            row = c.execute("SELECT parts, manifest, meta_part, version_id, version FROM "
                            "versions WHERE bucket=? AND key=? AND seq=?",
                            (r[1], kb, r[3])).fetchone()
            if row is None:
                return False
            cols = swapped(row[0], row[1], row[2], r[4], old, new)
            if cols is None:
                return False
            c.execute("UPDATE versions SET parts=?, manifest=?, meta_part=? WHERE bucket=? AND "
                      "key=? AND seq=?", (*cols, r[1], kb, r[3]))
            c.execute("UPDATE objects SET parts=?, manifest=? WHERE bucket=? AND key=? AND "
                      "version_id=? AND version=?", (cols[0], cols[1], r[1], kb, row[3], row[4]))
            return True

    async def part_layout_page(self, cursor: str, limit: int
                          ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        return await self._r(self._part_layout_page, cursor, limit)

    async def part_layout_get(self, ref: str) -> dict[str, Any] | None:
        return await self._r(self._part_layout_get, ref)

    async def part_layout_swap(self, ref: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return await self._w(self._part_layout_swap, ref, old, new)

    # -- leases ---------------------------------------------------------------------------
    def _move_claim(self, name: str, owner: str, seconds: float,
                    doc: dict[str, Any] | None) -> bool:
        now = time.time()
        with self._tx() as c:
            row = c.execute("SELECT owner, until FROM move_leases WHERE name=?",
                            (name,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            if row is None:
                c.execute("INSERT INTO move_leases VALUES (?,?,?,?)",
                          (name, owner, now + seconds, None if doc is None else json.dumps(doc)))
            elif doc is None:
                c.execute("UPDATE move_leases SET owner=?, until=? WHERE name=?",
                          (owner, now + seconds, name))
            else:
                c.execute("UPDATE move_leases SET owner=?, until=?, doc=? WHERE name=?",
                          (owner, now + seconds, json.dumps(doc), name))
            return True

    def _move_save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        with self._tx() as c:
            return c.execute("UPDATE move_leases SET doc=? WHERE name=? AND owner=? AND until>?",
                             (json.dumps(doc), name, owner, time.time())).rowcount == 1

    def _move_release(self, name: str, owner: str, drop: bool) -> None:
        with self._tx() as c:
            if drop:
                c.execute("DELETE FROM move_leases WHERE name=? AND owner=?", (name, owner))
            else:
                c.execute("UPDATE move_leases SET until=0 WHERE name=? AND owner=?",
                          (name, owner))

    async def move_claim(self, name: str, owner: str, seconds: float,
                         doc: dict[str, Any] | None = None) -> bool:
        return await self._w(self._move_claim, name, owner, seconds, doc)

    async def move_save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        return await self._w(self._move_save, name, owner, doc)

    async def move_get(self, name: str) -> dict[str, Any] | None:
        row = self._conn().execute("SELECT doc FROM move_leases WHERE name=?",
                                   (name,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    async def move_release(self, name: str, owner: str, drop: bool = False) -> None:
        await self._w(self._move_release, name, owner, drop)

    async def move_leftovers(self, prefix: str, limit: int = 100
                             ) -> list[tuple[str, dict[str, Any]]]:
        def q() -> list[tuple[str, dict[str, Any]]]:
            rows = self._conn().execute(
                "SELECT name, doc FROM move_leases WHERE name >= ? AND name < ? AND until <= ? "
                "ORDER BY name LIMIT ?", (prefix, prefix + "\uffff", time.time(), limit)
            ).fetchall()
            return [(n, json.loads(d) if d else {}) for n, d in rows]
        return await self._r(q)
