"""The node's scrubber: re-read every record of every drive at a bounded rate and report the
ones that fail their check.

Reads go through the zone log's verified read (`ZoneLog.get`: every chunk's CRC32C is checked
before it is handed out), so a bit flipped on the medium, a torn write or a failing drive shows
up as `CorruptRecord` or an I/O error. Damaged records are kept in a list, `GET /v1/damage`
(signed, like every node request), that the gateways' repair (`zonegate repair`, and the
cluster's background check) fetch to rebuild those fragments from the other nodes. An entry
goes away once the record is gone or was written again (another put sequence number).

One pass walks each drive's index in id order; a pass is followed by `interval` seconds of
rest. The rate (bytes/s, summed over the node's drives) bounds what scrubbing takes from the
drives' bandwidth; 0 turns the scrubber off.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from zonestore.errors import CorruptRecord, RecordNotFound
from zonestore.node.metrics import PREFIX
from zonestore.node.state import STATE, NodeState

log = logging.getLogger("zonestore.node.scrub")

DEFAULT_RATE = 8 * 1024 * 1024      # bytes/s: a 1 TB node is re-read about every 36 hours
DEFAULT_INTERVAL = 3600.0           # seconds of rest between passes
PAGE = 256                          # records per index page
FIRST_PASS_DELAY = 600.0            # at most this long after start before the first pass


class Scrubber:
    def __init__(self, state: NodeState, rate: float = DEFAULT_RATE,
                 interval: float = DEFAULT_INTERVAL) -> None:
        self.state = state
        self.rate = float(rate)
        self.interval = float(interval)
        self.damage: dict[str, dict[str, Any]] = {}
        self.passes = 0
        self.position: dict[int, str] = {}  # drive -> last record id checked in this pass
        reg = state.metrics.registry
        self.bytes = Counter(f"{PREFIX}_scrub_bytes", "Record bytes re-read and checked by "
                             "the scrubber.", ["drive"], registry=reg)
        self.records = Counter(f"{PREFIX}_scrub_records", "Records checked by the scrubber.",
                               ["drive"], registry=reg)
        self.errors = Counter(f"{PREFIX}_scrub_errors", "Records the scrubber found damaged "
                              "(CRC mismatch or read error).", ["drive"], registry=reg)
        self.pass_count = Counter(f"{PREFIX}_scrub_passes", "Finished scrub passes over all "
                                  "drives.", registry=reg)
        self.damaged = Gauge(f"{PREFIX}_scrub_damaged_records", "Damaged records known and "
                             "not yet rewritten.", registry=reg)
        self.damaged.set_function(lambda: float(len(self.damage)))
        self._budget_start = time.monotonic()
        self._budget_bytes = 0

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        if self.rate <= 0:
            return
        # not at once: a node just (re)started has other work first, and nodes started
        # together should not scrub in step
        await asyncio.sleep(min(self.interval, FIRST_PASS_DELAY) * random.uniform(0.5, 1.0))
        while True:
            started = time.monotonic()
            for i, zlog in enumerate(list(self.state.logs)):
                if i not in getattr(self.state.pool, "failed", {}):  # its records are gone
                    await self._scrub_drive(i, zlog)
            self.passes += 1
            self.pass_count.inc()
            log.info("scrub pass %d done in %.1f s: %d damaged records known", self.passes,
                     time.monotonic() - started, len(self.damage))
            await asyncio.sleep(self.interval)

    async def _scrub_drive(self, drive: int, zlog: Any) -> None:
        after = ""
        label = str(drive)
        while True:
            page = zlog.scan("", after, PAGE)
            if not page:
                break
            for info in page:
                after = info.id
                self.position[drive] = after
                await self.check(drive, zlog, info, label)
        self.position.pop(drive, None)

    async def check(self, drive: int, zlog: Any, info: Any, label: str | None = None) -> bool:
        """Re-read one record; True if it is whole (or gone meanwhile)."""
        label = label or str(drive)
        try:
            async for chunk in await zlog.get(info.id):
                n = len(chunk)
                self.bytes.labels(label).inc(n)
                await self._throttle(n)
        except RecordNotFound:
            return True  # deleted or replaced while we read it
        except asyncio.CancelledError:
            raise
        except (CorruptRecord, OSError) as e:
            self._found(drive, info, e, label)
            return False
        self.records.labels(label).inc()
        old = self.damage.get(info.id)
        if old is not None and old["seq"] != info.seq:
            del self.damage[info.id]  # written again since
        return True

    def _found(self, drive: int, info: Any, e: BaseException, label: str) -> None:
        known = self.damage.get(info.id)
        if known is None or known["seq"] != info.seq:
            self.errors.labels(label).inc()
            log.warning("scrub: record %s on drive %d is damaged: %s", info.id, drive, e)
        self.damage[info.id] = {"id": info.id, "drive": drive, "seq": info.seq,
                                "length": info.length, "error": f"{type(e).__name__}: {e}",
                                "found": time.time()}

    async def _throttle(self, n: int) -> None:
        self._budget_bytes += n
        ahead = self._budget_bytes / self.rate - (time.monotonic() - self._budget_start)
        if ahead > 0:
            await asyncio.sleep(ahead)
        elif ahead < -1.0:  # idle for a while: do not burst to catch up
            self._budget_start = time.monotonic()
            self._budget_bytes = 0

    # -- the report -----------------------------------------------------------------------

    def report(self) -> list[dict[str, Any]]:
        """Damaged records still there as found (entries for records deleted or written again
        since are dropped)."""
        pool = self.state.pool
        if pool is None:
            return []
        for rid, d in list(self.damage.items()):
            found = pool.find(rid)
            if found is None or found[0].seq != d["seq"]:
                self.damage.pop(rid, None)
        return sorted(self.damage.values(), key=lambda d: d["id"])


SCRUBBER: web.AppKey[Scrubber] = web.AppKey("zg_scrubber", Scrubber)


async def get_damage(request: web.Request) -> web.Response:
    state = request.app[STATE]
    scrub = request.app[SCRUBBER]
    return web.json_response({
        "node": state.node_id, "damage": scrub.report(),
        "scrub": {"rate": scrub.rate, "passes": scrub.passes,
                  "position": {str(k): v for k, v in scrub.position.items()}}})


def add_scrubber(app: web.Application, state: NodeState, rate: float, interval: float) -> None:
    """Wire the scrubber into a node's app: `GET /v1/damage`. Start `app[SCRUBBER].run()`
    once the drives are open."""
    app[SCRUBBER] = Scrubber(state, rate, interval)
    app.router.add_get("/v1/damage", get_damage, name="damage")
