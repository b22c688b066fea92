"""SqliteStore's repair queue and deletion records (gateway/metadata/queues.py).

Every write runs on the store's one writer thread in a BEGIN IMMEDIATE transaction, which is
what keeps claims exclusive between the gateway's worker processes sharing the file."""

from __future__ import annotations

import json
import time
from typing import Any

from erasure.repairqueue import merge_reason
from gateway.metadata.queues import QueueStore, RepairEntry

MIGRATION = """
CREATE TABLE repairs (part_uid TEXT PRIMARY KEY, layout TEXT NOT NULL, indexes TEXT NOT NULL,
                      reason TEXT NOT NULL, since REAL NOT NULL, due REAL NOT NULL,
                      leased REAL NOT NULL, attempts INTEGER NOT NULL);
CREATE INDEX repairs_due ON repairs (due);
CREATE TABLE deletions (part_uid TEXT PRIMARY KEY, done INTEGER NOT NULL, since REAL NOT NULL);
CREATE INDEX deletions_done ON deletions (done, since);
"""
# work leases (rehoming a part, healing it): one gateway worker at a time (issue 24 D5)
LEASES_MIGRATION = """
CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until REAL NOT NULL);
"""

_COLS = "part_uid, layout, indexes, reason, since, attempts"


def _entry(r: Any) -> RepairEntry:
    return RepairEntry(r[0], json.loads(r[1]), json.loads(r[2]), r[3], r[4], r[5])


class SqliteQueues(QueueStore):
    # provided by SqliteStore
    _tx: Any
    _conn: Any
    _w: Any
    _r: Any

    # -- repair queue ---------------------------------------------------------------------
    def _repair_add(self, layout: dict[str, Any], indexes: list[int], reason: str) -> None:
        uid = str(layout["part_uid"])
        with self._tx() as c:
            row = c.execute("SELECT indexes, reason FROM repairs WHERE part_uid=?",
                            (uid,)).fetchone()
            if row is None:
                c.execute("INSERT INTO repairs VALUES (?,?,?,?,?,0,0,0)",
                          (uid, json.dumps(layout), json.dumps(sorted(set(indexes))), reason,
                           time.time()))
                return
            merged = sorted(set(json.loads(row[0])) | set(indexes))
            c.execute("UPDATE repairs SET layout=?, indexes=?, reason=?, due=0, attempts=0 "
                      "WHERE part_uid=?", (json.dumps(layout), json.dumps(merged),
                                           merge_reason(row[1], reason), uid))

    def _repair_claim(self, limit: int, lease: float) -> list[RepairEntry]:
        now = time.time()
        with self._tx() as c:
            rows = c.execute(f"SELECT {_COLS} FROM repairs WHERE due <= ? AND leased <= ? "
                             "ORDER BY due, part_uid LIMIT ?", (now, now, limit)).fetchall()
            c.executemany("UPDATE repairs SET leased=? WHERE part_uid=?",
                          [(now + lease, r[0]) for r in rows])
        return [_entry(r) for r in rows]

    def _repair_resolve(self, part_uid: str, indexes: list[int]) -> None:
        with self._tx() as c:
            row = c.execute("SELECT indexes FROM repairs WHERE part_uid=?",
                            (part_uid,)).fetchone()
            if row is None:
                return
            left = sorted(set(json.loads(row[0])) - set(indexes))
            if left:
                c.execute("UPDATE repairs SET indexes=?, leased=0, due=0 WHERE part_uid=?",
                          (json.dumps(left), part_uid))
            else:
                c.execute("DELETE FROM repairs WHERE part_uid=?", (part_uid,))

    def _exec(self, sql: str, args: tuple = ()) -> int:
        with self._tx() as c:
            return c.execute(sql, args).rowcount

    async def repair_add(self, layout: dict[str, Any], indexes: list[int], reason: str) -> None:
        await self._w(self._repair_add, layout, indexes, reason)

    async def repair_get(self, part_uid: str) -> RepairEntry | None:
        row = self._conn().execute(f"SELECT {_COLS} FROM repairs WHERE part_uid=?",
                                   (part_uid,)).fetchone()
        return _entry(row) if row else None

    async def repair_list(self) -> list[RepairEntry]:
        def run() -> list[RepairEntry]:
            return [_entry(r) for r in self._conn().execute(
                f"SELECT {_COLS} FROM repairs ORDER BY part_uid")]
        return await self._r(run)

    async def repair_claim(self, limit: int = 8, lease: float = 300.0) -> list[RepairEntry]:
        return await self._w(self._repair_claim, limit, lease)

    async def repair_resolve(self, part_uid: str, indexes: list[int]) -> None:
        await self._w(self._repair_resolve, part_uid, indexes)

    async def repair_retry(self, part_uid: str, delay: float) -> None:
        await self._w(self._exec, "UPDATE repairs SET leased=0, due=?, attempts=attempts+1 "
                      "WHERE part_uid=?", (time.time() + delay, part_uid))

    async def repair_done(self, part_uid: str) -> None:
        await self._w(self._exec, "DELETE FROM repairs WHERE part_uid=?", (part_uid,))

    async def repair_wake(self) -> None:
        await self._w(self._exec, "UPDATE repairs SET due=0, attempts=0 WHERE leased <= ? "
                      "AND (due > 0 OR attempts > 0)", (time.time(),))

    async def repair_count(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM repairs").fetchone()[0]

    async def repair_next_due(self) -> float | None:
        row = self._conn().execute("SELECT MIN(CASE WHEN leased > due THEN leased ELSE due "
                                   "END) FROM repairs").fetchone()
        return row[0] if row and row[0] is not None else None

    # -- deletion records -----------------------------------------------------------------
    async def deletion_begin(self, part_uid: str) -> None:
        await self._w(self._exec, "INSERT INTO deletions VALUES (?, 0, ?) ON CONFLICT "
                      "(part_uid) DO UPDATE SET done=0, since=excluded.since WHERE "
                      "deletions.done=1", (part_uid, time.time()))

    async def deletion_end(self, part_uid: str) -> None:
        await self._w(self._exec, "INSERT INTO deletions VALUES (?, 1, ?) ON CONFLICT "
                      "(part_uid) DO UPDATE SET done=1, since=excluded.since",
                      (part_uid, time.time()))

    async def deletion_forget(self, part_uid: str) -> None:
        await self._w(self._exec, "DELETE FROM deletions WHERE part_uid=?", (part_uid,))

    async def deletion_state(self, part_uid: str) -> bool | None:
        row = self._conn().execute("SELECT done FROM deletions WHERE part_uid=?",
                                   (part_uid,)).fetchone()
        return None if row is None else bool(row[0])

    async def deletions(self) -> dict[str, bool]:
        def run() -> dict[str, bool]:
            return {u: bool(d) for u, d in self._conn().execute(
                "SELECT part_uid, done FROM deletions ORDER BY part_uid")}
        return await self._r(run)

    async def deletions_unfinished(self) -> list[str]:
        def run() -> list[str]:
            return [r[0] for r in self._conn().execute(
                "SELECT part_uid FROM deletions WHERE done=0 ORDER BY part_uid")]
        return await self._r(run)

    async def deletion_prune(self, before: float) -> int:
        return await self._w(self._exec, "DELETE FROM deletions WHERE done=1 AND since < ?",
                             (before,))

    # -- work leases ----------------------------------------------------------------------
    def _lease_take(self, name: str, holder: str, seconds: float) -> bool:
        now = time.time()
        with self._tx() as c:
            return c.execute(
                "INSERT INTO leases VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
                "holder=excluded.holder, until=excluded.until "
                "WHERE leases.until <= ? OR leases.holder = excluded.holder",
                (name, holder, now + seconds, now)).rowcount > 0

    async def lease_take(self, name: str, holder: str, seconds: float) -> bool:
        return await self._w(self._lease_take, name, holder, seconds)

    async def lease_release(self, name: str, holder: str) -> None:
        await self._w(self._exec, "DELETE FROM leases WHERE name=? AND holder=?",
                      (name, holder))


__all__ = ["LEASES_MIGRATION", "MIGRATION", "SqliteQueues"]
