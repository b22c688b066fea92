"""PostgresStore's layout pages and mover leases (gateway/metadata/moves.py). A swap and a
claim lock their row (FOR UPDATE), so two gateways moving at once cannot both win; a claim
that loses an insert race runs again."""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

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
CREATE TABLE move_leases (name TEXT COLLATE "C" PRIMARY KEY, owner TEXT NOT NULL,
                          until DOUBLE PRECISION NOT NULL, doc TEXT)
"""

_VCOLS = "bucket, key, seq, parts, manifest, meta_part"


class PostgresMoves(MovesStore):
    # provided by PostgresStore
    _tx: Any
    _read: Any
    _again: type[Exception]

    # -- layouts --------------------------------------------------------------------------
    async def part_layout_page(self, cursor: str, limit: int
                          ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        r = parse_ref(cursor)

        async def q(c: asyncpg.Connection
                    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
            out: list[tuple[str, dict[str, Any]]] = []
            pos = r
            if not pos or pos[0] == "v":
                if pos:
                    kb = bytes.fromhex(pos[2])
                    rows = await c.fetch(
                        f"SELECT {_VCOLS} FROM versions WHERE bucket > $1 OR (bucket = $1 AND "
                        "(key > $2 OR (key = $2 AND seq < $3))) ORDER BY bucket, key, seq DESC "
                        "LIMIT $4", pos[1], kb, pos[3], limit)
                else:
                    rows = await c.fetch(f"SELECT {_VCOLS} FROM versions ORDER BY bucket, key, "
                                         "seq DESC LIMIT $1", limit)
                last: list[Any] = []
                for b, k, seq, parts, manifest, meta_part in rows:
                    last = ["v", b, bytes(k).hex(), seq]
                    out.extend(row_layouts(last, parts, manifest, meta_part))
                if len(rows) == limit:
                    return out, ref_of(last)
                pos = ["u", "", -1]
                if rows:
                    return out, ref_of(pos)
            rows = await c.fetch("SELECT upload_id, number, layout FROM parts WHERE "
                                 "upload_id > $1 OR (upload_id = $1 AND number > $2) "
                                 "ORDER BY upload_id, number LIMIT $3", pos[1], pos[2], limit)
            for uid, num, layout in rows:
                out.append((ref_of(["u", uid, num]), json.loads(layout)))
            if len(rows) == limit:
                return out, ref_of(["u", rows[-1][0], rows[-1][1]])
            return out, None
        return await self._read(q)

    async def part_layout_get(self, ref: str) -> dict[str, Any] | None:
        r = parse_ref(ref)

        async def q(c: asyncpg.Connection) -> dict[str, Any] | None:
            if r[0] == "u":
                raw = await c.fetchval("SELECT layout FROM parts WHERE upload_id=$1 AND "
                                       "number=$2", r[1], r[2])
                return json.loads(raw) if raw else None
            row = await c.fetchrow("SELECT parts, manifest, meta_part FROM versions WHERE "
                                   "bucket=$1 AND key=$2 AND seq=$3", r[1],
                                   bytes.fromhex(r[2]), r[3])
            if row is None:
                return None
            return dict(row_layouts(r[:4], *row)).get(ref_of(r[:4], r[4]))
        return await self._read(q)

    async def part_layout_find(self, part_uid: str, keys: list[tuple[str, str]] | None,
                               uploads: list[str] | None) -> list[tuple[str, dict[str, Any]]]:
        async def q(c: asyncpg.Connection) -> list[tuple[str, dict[str, Any]]]:
            pq = "SELECT upload_id, number, layout FROM parts"
            if keys is None and uploads is None:  # every row: a uid is matched verbatim
                vrows = await c.fetch(
                    f"SELECT {_VCOLS} FROM versions WHERE strpos(parts, $1) > 0 OR "
                    "strpos(COALESCE(manifest, ''), $1) > 0 OR "
                    "strpos(COALESCE(meta_part, ''), $1) > 0", part_uid)
                prows = await c.fetch(f"{pq} WHERE strpos(layout, $1) > 0", part_uid)
                return matching(part_uid, vrows, prows)
            vrows, prows = [], []
            for b, k in keys or []:
                vrows += await c.fetch(f"SELECT {_VCOLS} FROM versions WHERE bucket=$1 AND "
                                       "key=$2", b, key_bytes(k))
            for up in uploads or []:
                prows += await c.fetch(f"{pq} WHERE upload_id=$1", up)
            return matching(part_uid, vrows, prows)
        return await self._read(q)

    async def part_layout_swap(self, ref: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        r = parse_ref(ref)

        async def tx(c: asyncpg.Connection) -> bool:
            if r[0] == "u":
                # the upload's row first, as Complete and an UploadPart take it: a Complete
                # under way finishes first (the part is then the object's, and this fails)
                await c.execute("SELECT 1 FROM uploads WHERE upload_id=$1 FOR SHARE", r[1])
                raw = await c.fetchval("SELECT layout FROM parts WHERE upload_id=$1 AND "
                                       "number=$2 FOR UPDATE", r[1], r[2])
                if raw is None or json.loads(raw) != old:
                    return False
                await c.execute("UPDATE parts SET layout=$3 WHERE upload_id=$1 AND number=$2",
                                r[1], r[2], json.dumps(new))
                return True
            kb = bytes.fromhex(r[2])
            row = await c.fetchrow("SELECT parts, manifest, meta_part, version_id, version FROM "
                                   "versions WHERE bucket=$1 AND key=$2 AND seq=$3 FOR UPDATE",
                                   r[1], kb, r[3])
            if row is None:
                return False
            cols = swapped(row[0], row[1], row[2], r[4], old, new)
            if cols is None:
                return False
            await c.execute("UPDATE versions SET parts=$4, manifest=$5, meta_part=$6 WHERE "
                            "bucket=$1 AND key=$2 AND seq=$3", r[1], kb, r[3], *cols)
            await c.execute("UPDATE objects SET parts=$5, manifest=$6 WHERE bucket=$1 AND "
                            "key=$2 AND version_id=$3 AND version=$4", r[1], kb, row[3], row[4],
                            cols[0], cols[1])
            return True
        return await self._tx(tx)

    # -- leases ---------------------------------------------------------------------------
    async def move_claim(self, name: str, owner: str, seconds: float,
                         doc: dict[str, Any] | None = None) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            now = time.time()
            row = await c.fetchrow("SELECT owner, until FROM move_leases WHERE name=$1 "
                                   "FOR UPDATE", name)
            if row is not None and row[0] != owner and row[1] > now:
                return False
            text = None if doc is None else json.dumps(doc)
            if row is None:
                got = await c.execute("INSERT INTO move_leases VALUES ($1,$2,$3,$4) "
                                      "ON CONFLICT (name) DO NOTHING", name, owner,
                                      now + seconds, text)
                if not got.endswith(" 1"):
                    raise self._again  # claimed by another gateway since our read
            else:
                await c.execute("UPDATE move_leases SET owner=$2, until=$3, "
                                "doc=COALESCE($4, doc) WHERE name=$1", name, owner,
                                now + seconds, text)
            return True
        return await self._tx(tx)

    async def move_save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        got = await self._tx(lambda c: c.execute(
            "UPDATE move_leases SET doc=$3 WHERE name=$1 AND owner=$2 AND until>$4", name,
            owner, json.dumps(doc), time.time()))
        return got.endswith(" 1")

    async def move_get(self, name: str) -> dict[str, Any] | None:
        raw = await self._read(lambda c: c.fetchval(
            "SELECT doc FROM move_leases WHERE name=$1", name))
        return json.loads(raw) if raw else None

    async def move_release(self, name: str, owner: str, drop: bool = False) -> None:
        sql = ("DELETE FROM move_leases WHERE name=$1 AND owner=$2" if drop else
               "UPDATE move_leases SET until=0 WHERE name=$1 AND owner=$2")
        await self._tx(lambda c: c.execute(sql, name, owner))

    async def move_leftovers(self, prefix: str, limit: int = 100
                             ) -> list[tuple[str, dict[str, Any]]]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT name, doc FROM move_leases WHERE starts_with(name, $1) AND until <= $2 "
            "ORDER BY name LIMIT $3", prefix, time.time(), limit))
        return [(r[0], json.loads(r[1]) if r[1] else {}) for r in rows]
