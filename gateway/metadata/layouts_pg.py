"""PostgresStore's layout tables (gateway/metadata/layouts.py). `layout_publish` inserts the
next version under its primary key: of two gateways publishing the same version, the insert of
the second finds the row and does nothing (it is told False); a version that skips one is
refused by checking the newest in the same transaction, after locking the table's write lock
so that two publishes serialise."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from gateway.metadata.layouts import LayoutTables

MIGRATION = """
CREATE TABLE layouts (version BIGINT PRIMARY KEY, doc TEXT NOT NULL,
                      at DOUBLE PRECISION NOT NULL);
CREATE TABLE layout_staged (id BIGSERIAL PRIMARY KEY, doc TEXT NOT NULL,
                            at DOUBLE PRECISION NOT NULL);
CREATE TABLE drive_identities (node TEXT COLLATE "C" NOT NULL, path TEXT COLLATE "C" NOT NULL,
                               generation BIGINT NOT NULL, identity TEXT NOT NULL,
                               at DOUBLE PRECISION NOT NULL,
                               PRIMARY KEY (node, path, generation));
"""


class PostgresLayouts(LayoutTables):
    # provided by PostgresStore
    _tx: Any
    _read: Any

    async def layout_current(self) -> tuple[int, str] | None:
        row = await self._read(lambda c: c.fetchrow(
            "SELECT version, doc FROM layouts ORDER BY version DESC LIMIT 1"))
        return (int(row[0]), row[1]) if row else None

    async def layout_version(self) -> int:
        return int(await self._read(lambda c: c.fetchval(
            "SELECT COALESCE(MAX(version), 0) FROM layouts")))

    async def layout_get(self, version: int) -> str | None:
        return await self._read(lambda c: c.fetchval(
            "SELECT doc FROM layouts WHERE version=$1", version))

    async def layout_history(self, limit: int = 20) -> list[tuple[int, str]]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT version, doc FROM layouts ORDER BY version DESC LIMIT $1", limit))
        return [(int(r[0]), r[1]) for r in rows]

    async def layout_publish(self, version: int, doc: str) -> bool:
        async def tx(c: asyncpg.Connection) -> bool:
            # SHARE ROW EXCLUSIVE conflicts with itself: concurrent publishes take turns, so
            # the check below and the insert are one step
            await c.execute("LOCK TABLE layouts IN SHARE ROW EXCLUSIVE MODE")
            have = await c.fetchval("SELECT COALESCE(MAX(version), 0) FROM layouts")
            if have != version - 1:
                return False
            await c.execute("INSERT INTO layouts VALUES ($1,$2,$3)", version, doc, time.time())
            return True
        return await self._tx(tx)

    async def layout_staged(self) -> list[str]:
        rows = await self._read(lambda c: c.fetch("SELECT doc FROM layout_staged ORDER BY id"))
        return [r[0] for r in rows]

    async def layout_stage(self, doc: str) -> None:
        await self._tx(lambda c: c.execute(
            "INSERT INTO layout_staged (doc, at) VALUES ($1,$2)", doc, time.time()))

    async def layout_clear_staged(self) -> int:
        got = await self._tx(lambda c: c.execute("DELETE FROM layout_staged"))
        return int(got.rsplit(" ", 1)[-1]) if got and got[-1].isdigit() else 0

    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        async def tx(c: asyncpg.Connection) -> str:
            await c.execute("INSERT INTO drive_identities VALUES ($1,$2,$3,$4,$5) "
                            "ON CONFLICT (node, path, generation) DO NOTHING",
                            node, path, generation, identity, time.time())
            return await c.fetchval("SELECT identity FROM drive_identities WHERE node=$1 "
                                    "AND path=$2 AND generation=$3", node, path, generation)
        return await self._tx(tx)


__all__ = ["MIGRATION", "PostgresLayouts"]
