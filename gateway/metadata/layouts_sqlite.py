"""SqliteStore's layout tables (gateway/metadata/layouts.py). Writes run on the store's one
writer thread in BEGIN IMMEDIATE transactions, so the compare-and-set of `layout_publish` holds
between the gateway's worker processes sharing the file."""

from __future__ import annotations

import time
from typing import Any

from gateway.metadata.layouts import LayoutTables

MIGRATION = """
CREATE TABLE layouts (version INTEGER PRIMARY KEY, doc TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE layout_staged (id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL,
                            at REAL NOT NULL);
CREATE TABLE drive_identities (node TEXT NOT NULL, path TEXT NOT NULL,
                               generation INTEGER NOT NULL, identity TEXT NOT NULL,
                               at REAL NOT NULL, PRIMARY KEY (node, path, generation));
"""


class SqliteLayouts(LayoutTables):
    # provided by SqliteStore
    _tx: Any
    _conn: Any
    _w: Any
    _r: Any

    async def layout_current(self) -> tuple[int, str] | None:
        row = self._conn().execute("SELECT version, doc FROM layouts ORDER BY version DESC "
                                   "LIMIT 1").fetchone()
        return (int(row[0]), row[1]) if row else None

    async def layout_version(self) -> int:
        return int(self._conn().execute("SELECT COALESCE(MAX(version), 0) FROM layouts")
                   .fetchone()[0])

    async def layout_get(self, version: int) -> str | None:
        row = self._conn().execute("SELECT doc FROM layouts WHERE version=?",
                                   (version,)).fetchone()
        return row[0] if row else None

    async def layout_history(self, limit: int = 20) -> list[tuple[int, str]]:
        def run() -> list[tuple[int, str]]:  # many documents: off the event loop
            return [(int(v), d) for v, d in self._conn().execute(
                "SELECT version, doc FROM layouts ORDER BY version DESC LIMIT ?", (limit,))]
        return await self._r(run)

    def _layout_publish(self, version: int, doc: str) -> bool:
        with self._tx() as c:
            have = c.execute("SELECT MAX(version) FROM layouts").fetchone()[0] or 0
            if have != version - 1:
                return False
            c.execute("INSERT INTO layouts VALUES (?,?,?)", (version, doc, time.time()))
            return True

    async def layout_publish(self, version: int, doc: str) -> bool:
        return await self._w(self._layout_publish, version, doc)

    async def layout_staged(self) -> list[str]:
        def run() -> list[str]:
            return [r[0] for r in self._conn().execute(
                "SELECT doc FROM layout_staged ORDER BY id")]
        return await self._r(run)

    def _layout_stage(self, doc: str) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO layout_staged (doc, at) VALUES (?,?)", (doc, time.time()))

    async def layout_stage(self, doc: str) -> None:
        await self._w(self._layout_stage, doc)

    def _layout_clear_staged(self) -> int:
        with self._tx() as c:
            return c.execute("DELETE FROM layout_staged").rowcount

    async def layout_clear_staged(self) -> int:
        return await self._w(self._layout_clear_staged)

    def _drive_identity(self, node: str, path: str, generation: int, identity: str) -> str:
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO drive_identities VALUES (?,?,?,?,?)",
                      (node, path, generation, identity, time.time()))
            return c.execute("SELECT identity FROM drive_identities WHERE node=? AND path=? "
                             "AND generation=?", (node, path, generation)).fetchone()[0]

    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        return await self._w(self._drive_identity, node, path, generation, identity)


__all__ = ["MIGRATION", "SqliteLayouts"]
