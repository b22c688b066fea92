"""PostgresStore's repair queue and deletion records (gateway/metadata/queues.py).

Claims take rows FOR UPDATE SKIP LOCKED and lease them (`leased` = until when), so two
gateways claiming at once get different records and a dead gateway's records come back when
its lease ends. A record added twice at once (two gateways reading one damaged part) is one
row: an insert that loses the race runs the transaction again and merges."""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

from erasure.repairqueue import merge_reason
from gateway.metadata.queues import QueueStore, RepairEntry

MIGRATION = """
CREATE TABLE repairs (part_uid TEXT COLLATE "C" PRIMARY KEY, layout TEXT NOT NULL,
                      indexes TEXT NOT NULL, reason TEXT NOT NULL,
                      since DOUBLE PRECISION NOT NULL, due DOUBLE PRECISION NOT NULL,
                      leased DOUBLE PRECISION NOT NULL, attempts INTEGER NOT NULL);
CREATE INDEX repairs_due ON repairs (due);
CREATE TABLE deletions (part_uid TEXT COLLATE "C" PRIMARY KEY, done BOOLEAN NOT NULL,
                        since DOUBLE PRECISION NOT NULL);
CREATE INDEX deletions_done ON deletions (done, since);
"""
# work leases (rehoming a part, healing it): one gateway worker at a time (issue 24 D5)
LEASES_MIGRATION = """
CREATE TABLE leases (name TEXT COLLATE "C" PRIMARY KEY, holder TEXT NOT NULL,
                     until DOUBLE PRECISION NOT NULL);
"""

_COLS = "part_uid, layout, indexes, reason, since, attempts"


def _entry(r: Any) -> RepairEntry:
    return RepairEntry(r[0], json.loads(r[1]), json.loads(r[2]), r[3], r[4], r[5])


class PostgresQueues(QueueStore):
    # provided by PostgresStore
    _tx: Any
    _read: Any
    _again: type[Exception]

    async def _exec(self, sql: str, *args: Any) -> int:
        got = await self._tx(lambda c: c.execute(sql, *args))
        return int(got.rsplit(" ", 1)[-1]) if got and got[-1].isdigit() else 0

    # -- repair queue ---------------------------------------------------------------------
    async def repair_add(self, layout: dict[str, Any], indexes: list[int], reason: str) -> None:
        uid = str(layout["part_uid"])

        async def tx(c: asyncpg.Connection) -> None:
            row = await c.fetchrow("SELECT indexes, reason FROM repairs WHERE part_uid=$1 "
                                   "FOR UPDATE", uid)
            if row is None:
                got = await c.execute(
                    "INSERT INTO repairs VALUES ($1,$2,$3,$4,$5,0,0,0) "
                    "ON CONFLICT (part_uid) DO NOTHING", uid, json.dumps(layout),
                    json.dumps(sorted(set(indexes))), reason, time.time())
                if not got.endswith(" 1"):
                    raise self._again  # added by another gateway since our read: merge
                return
            merged = sorted(set(json.loads(row[0])) | set(indexes))
            await c.execute("UPDATE repairs SET layout=$2, indexes=$3, reason=$4, due=0, "
                            "attempts=0 WHERE part_uid=$1", uid, json.dumps(layout),
                            json.dumps(merged), merge_reason(row[1], reason))
        await self._tx(tx)

    async def repair_get(self, part_uid: str) -> RepairEntry | None:
        row = await self._read(lambda c: c.fetchrow(
            f"SELECT {_COLS} FROM repairs WHERE part_uid=$1", part_uid))
        return _entry(row) if row else None

    async def repair_list(self) -> list[RepairEntry]:
        rows = await self._read(lambda c: c.fetch(
            f"SELECT {_COLS} FROM repairs ORDER BY part_uid"))
        return [_entry(r) for r in rows]

    async def repair_claim(self, limit: int = 8, lease: float = 300.0) -> list[RepairEntry]:
        async def tx(c: asyncpg.Connection) -> list[RepairEntry]:
            now = time.time()
            rows = await c.fetch(f"SELECT {_COLS} FROM repairs WHERE due <= $1 AND leased <= $1 "
                                 "ORDER BY due, part_uid LIMIT $2 FOR UPDATE SKIP LOCKED",
                                 now, limit)
            if rows:
                await c.execute("UPDATE repairs SET leased=$1 WHERE part_uid = ANY($2::TEXT[])",
                                now + lease, [r[0] for r in rows])
            return [_entry(r) for r in rows]
        return await self._tx(tx)

    async def repair_resolve(self, part_uid: str, indexes: list[int]) -> None:
        async def tx(c: asyncpg.Connection) -> None:
            raw = await c.fetchval("SELECT indexes FROM repairs WHERE part_uid=$1 FOR UPDATE",
                                   part_uid)
            if raw is None:
                return
            left = sorted(set(json.loads(raw)) - set(indexes))
            if left:
                await c.execute("UPDATE repairs SET indexes=$2, leased=0, due=0 "
                                "WHERE part_uid=$1", part_uid, json.dumps(left))
            else:
                await c.execute("DELETE FROM repairs WHERE part_uid=$1", part_uid)
        await self._tx(tx)

    async def repair_retry(self, part_uid: str, delay: float) -> None:
        await self._exec("UPDATE repairs SET leased=0, due=$2, attempts=attempts+1 "
                         "WHERE part_uid=$1", part_uid, time.time() + delay)

    async def repair_done(self, part_uid: str) -> None:
        await self._exec("DELETE FROM repairs WHERE part_uid=$1", part_uid)

    async def repair_wake(self) -> None:
        await self._exec("UPDATE repairs SET due=0, attempts=0 WHERE leased <= $1 "
                         "AND (due > 0 OR attempts > 0)", time.time())

    async def repair_count(self) -> int:
        return await self._read(lambda c: c.fetchval("SELECT COUNT(*) FROM repairs"))

    async def repair_next_due(self) -> float | None:
        return await self._read(lambda c: c.fetchval(
            "SELECT MIN(CASE WHEN leased > due THEN leased ELSE due END) FROM repairs"))

    # -- deletion records -----------------------------------------------------------------
    async def deletion_begin(self, part_uid: str) -> None:
        await self._exec("INSERT INTO deletions VALUES ($1, FALSE, $2) ON CONFLICT (part_uid) "
                         "DO UPDATE SET done=FALSE, since=excluded.since WHERE deletions.done",
                         part_uid, time.time())

    async def deletion_end(self, part_uid: str) -> None:
        await self._exec("INSERT INTO deletions VALUES ($1, TRUE, $2) ON CONFLICT (part_uid) "
                         "DO UPDATE SET done=TRUE, since=excluded.since", part_uid, time.time())

    async def deletion_forget(self, part_uid: str) -> None:
        await self._exec("DELETE FROM deletions WHERE part_uid=$1", part_uid)

    async def deletion_state(self, part_uid: str) -> bool | None:
        return await self._read(lambda c: c.fetchval(
            "SELECT done FROM deletions WHERE part_uid=$1", part_uid))

    async def deletions(self) -> dict[str, bool]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT part_uid, done FROM deletions ORDER BY part_uid"))
        return {r[0]: bool(r[1]) for r in rows}

    async def deletions_unfinished(self) -> list[str]:
        rows = await self._read(lambda c: c.fetch(
            "SELECT part_uid FROM deletions WHERE NOT done ORDER BY part_uid"))
        return [r[0] for r in rows]

    async def deletion_prune(self, before: float) -> int:
        return await self._exec("DELETE FROM deletions WHERE done AND since < $1", before)

    # -- work leases ----------------------------------------------------------------------
    async def lease_take(self, name: str, holder: str, seconds: float) -> bool:
        now = time.time()
        done = await self._exec(
            "INSERT INTO leases VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET "
            "holder=excluded.holder, until=excluded.until "
            "WHERE leases.until <= $4 OR leases.holder = excluded.holder",
            name, holder, now + seconds, now)
        return done > 0

    async def lease_release(self, name: str, holder: str) -> None:
        await self._exec("DELETE FROM leases WHERE name=$1 AND holder=$2", name, holder)
