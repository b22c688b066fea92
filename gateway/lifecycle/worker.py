"""The background lifecycle worker: applies each bucket's lifecycle rules once per day.

Every gateway process runs one (started by `Gateway.start`, like the sweeper). Work is shared
through the store: `lifecycle_claim` leases buckets whose run for today is not done, so each
bucket is worked by one worker; `lifecycle_progress` saves a resume point after every page
(and renews the lease), so a worker that dies is replaced by another that resumes where it
stopped; `lifecycle_done` ends the day's run. A run has three phases, each a walk of one
listing, and the resume point names the phase: `o:<key>` current objects (Expiration),
`v:<key>` versions (NoncurrentVersionExpiration, expired delete markers), `u:<key>\\0<upload
id>` incomplete uploads (AbortIncompleteMultipartUpload).

Expirations go through the normal delete paths (delete markers on versioned buckets; removed
versions and aborted uploads queue their layouts, and the sweeper frees the fragments). Deletes
are rate-limited (`[gateway] lifecycle_rate`, actions per second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from gateway.lifecycle import config as lcconfig
from gateway.lifecycle import rules
from gateway.metadata.store import LOCKED, StoreUnavailableError
from gateway.ops.versioning import delete_current, state_of
from gateway.s3.errors import S3Error

log = logging.getLogger("zonegate.lifecycle")

PAGE = 500
LEASE = 300.0
DEFAULT_INTERVAL = 600.0
DEFAULT_RATE = 200.0  # lifecycle actions per second, per worker


@dataclass
class RunStats:
    """What one worker did (cumulative)."""

    buckets: int = 0
    expired: int = 0            # current versions expired (deleted, or a marker added)
    noncurrent_deleted: int = 0
    markers_removed: int = 0
    uploads_aborted: int = 0
    errors: int = 0
    rules_hit: dict[str, int] = field(default_factory=dict)


class _Stop(Exception):
    """The lease was lost: another worker has the bucket now."""


class LifecycleWorker:
    def __init__(self, gw: Any, *, day: float = rules.DAY, interval: float = DEFAULT_INTERVAL,
                 rate: float = DEFAULT_RATE, lease: float = LEASE) -> None:
        self.gw = gw
        self.day = day
        self.interval = interval
        self.rate = rate
        self.lease = lease
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stats = RunStats()
        self._task: asyncio.Task | None = None
        self._next_slot = 0.0

    @classmethod
    def from_gateway(cls, gw: Any, settings: dict[str, Any]) -> LifecycleWorker:
        day = float(settings.get("lifecycle_day_seconds", rules.DAY))
        interval = float(settings.get("lifecycle_interval_seconds",
                                      min(DEFAULT_INTERVAL, max(day / 4, 0.2))))
        return cls(gw, day=day, interval=interval,
                   rate=float(settings.get("lifecycle_rate", DEFAULT_RATE)))

    # ---- running ------------------------------------------------------------------------

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except StoreUnavailableError as e:
                log.warning("lifecycle run postponed: %s", e)
            except Exception:
                log.exception("lifecycle run failed; will retry")
            await asyncio.sleep(self.interval)

    def today(self, now: float | None = None) -> int:
        return int((time.time() if now is None else now) // self.day)

    async def run_once(self) -> int:
        """Work every bucket whose run for today is not done (and that no one else holds).
        Returns the number of buckets finished."""
        done = 0
        day = self.today()
        tried: set[str] = set()
        while True:
            claims = [c for c in await self.gw.store.lifecycle_claim(self.id, day, self.lease)
                      if c.bucket not in tried]
            if not claims:
                return done
            for claim in claims:
                tried.add(claim.bucket)
                try:
                    await self.work_bucket(claim.bucket, claim.day, claim.marker)
                    done += 1
                except _Stop:
                    log.info("lifecycle: lost the lease on %s; another worker has it",
                             claim.bucket)
                except (asyncio.CancelledError, StoreUnavailableError):
                    raise
                except Exception:
                    # one bucket's failure must not hold up the others: its lease runs
                    # out and the run resumes from its saved marker
                    self.stats.errors += 1
                    log.exception("lifecycle run of bucket %s failed; will retry",
                                  claim.bucket)

    async def _pace(self) -> None:
        """At most `rate` actions per second."""
        if self.rate <= 0:
            return
        now = time.monotonic()
        self._next_slot = max(self._next_slot, now)
        wait = self._next_slot - now
        self._next_slot += 1.0 / self.rate
        if wait > 0:
            await asyncio.sleep(wait)

    async def _progress(self, bucket: str, day: int, marker: str) -> None:
        if not await self.gw.store.lifecycle_progress(bucket, self.id, day, marker,
                                                      self.lease):
            raise _Stop(bucket)

    def _hit(self, rule_id: str) -> None:
        self.stats.rules_hit[rule_id] = self.stats.rules_hit.get(rule_id, 0) + 1

    # ---- one bucket ---------------------------------------------------------------------

    async def work_bucket(self, bucket: str, day: int, marker: str = "") -> None:
        store = self.gw.store
        doc = lcconfig.load(await store.get_bucket_config(bucket, "lifecycle"))
        if doc:
            now = time.time()
            state = state_of(await store.get_bucket_config(bucket, "versioning"))
            phase, _, rest = marker.partition(":") if marker else ("o", "", "")
            phases = ["o", "v", "u"]
            start = phases.index(phase) if phase in phases else 0
            for i, name in enumerate(phases[start:]):
                resume = rest if i == 0 else ""
                if name == "o" and rules.has_action(doc, "expiration"):
                    await self._objects(bucket, day, doc, now, resume, state)
                elif name == "v" and state != "off" and (
                        rules.has_action(doc, "noncurrent")
                        or rules.has_action(doc, "expiration")):
                    # a bucket never versioned has no noncurrent versions nor markers
                    await self._versions(bucket, day, doc, now, resume)
                elif name == "u" and rules.has_action(doc, "abort"):
                    await self._uploads(bucket, day, doc, now, resume)
        if not await store.lifecycle_done(bucket, self.id, day):
            raise _Stop(bucket)
        self.stats.buckets += 1

    async def _objects(self, bucket: str, day: int, doc: dict[str, Any], now: float,
                       after: str, state: str) -> None:
        """Expiration of current versions."""
        store = self.gw.store
        tagged = rules.needs_tags(doc)
        while True:
            page = await store.list_objects(bucket, "", "", after, PAGE)
            for item in page.items:
                obj = item
                if tagged:
                    obj = await store.get_object(bucket, item.key)
                    if obj is None:
                        continue
                hit = rules.current_expiry(doc, obj.key, obj.size, obj.tags or {},
                                           obj.last_modified, self.day)
                if hit is not None and hit[0] <= now:
                    await self._pace()
                    if await self._expire_current(bucket, obj, state):
                        self.stats.expired += 1
                        self._hit(hit[1])
            if not page.items or not page.truncated:
                return
            after = page.items[-1].key
            await self._progress(bucket, day, "o:" + after)

    async def _expire_current(self, bucket: str, listed: Any, state: str) -> bool:
        """Expire the current version, if it is still the one that was judged."""
        store = self.gw.store
        cur = await store.get_object(bucket, listed.key)
        if cur is None or cur.version != listed.version:
            return False  # overwritten or deleted meanwhile: judged again next day
        b = await store.get_bucket(bucket)
        try:
            # Conditional on the write judged: a PUT landing after the re-read is kept.
            gone = await delete_current(self.gw, bucket, listed.key, b.owner if b else "",
                                        state, if_version=listed.version)
        except S3Error as e:
            if e.code == "NoSuchBucket":
                return False
            raise
        return gone is not None and gone is not LOCKED

    async def _versions(self, bucket: str, day: int, doc: dict[str, Any], now: float,
                        after: str) -> None:
        """NoncurrentVersionExpiration and expired delete markers, key by key (a key's
        versions are judged together once all of them are listed)."""
        store = self.gw.store
        key_marker, vid_marker = after, ""
        group: list[Any] = []
        while True:
            page = await store.list_versions(bucket, "", "", key_marker, vid_marker, PAGE)
            for v in page.items:
                if group and v.key != group[0].key:
                    await self._judge_versions(bucket, doc, now, group)
                    group = []
                group.append(v)
            if not page.truncated or not page.items:
                break
            key_marker = page.next_marker or page.items[-1].key
            vid_marker = page.next_version_marker or ""
            done_key = group[0].key if group else key_marker
            # resume at a key boundary: after every version of the last finished key
            finished = [v.key for v in page.items if v.key != done_key]
            if finished:
                await self._progress(bucket, day, "v:" + finished[-1])
        if group:
            await self._judge_versions(bucket, doc, now, group)

    async def _judge_versions(self, bucket: str, doc: dict[str, Any], now: float,
                              versions: list[Any]) -> None:
        """versions: one key's, newest first."""
        store = self.gw.store
        tagged = rules.needs_tags(doc)
        key = versions[0].key
        for i in range(1, len(versions)):
            v = versions[i]
            since = versions[i - 1].last_modified  # when its successor was made
            tags: dict[str, str] = {}
            if tagged and not v.delete_marker:
                full = await store.get_object(bucket, key, v.version_id)
                tags = (full.tags if full is not None else None) or {}
            rid = rules.noncurrent_expires(doc, key, v.size, tags, since, i - 1, now,
                                           self.day)
            if rid is not None:
                await self._pace()
                if await store.delete_version(bucket, key, v.version_id) not in (None, LOCKED):
                    self.stats.noncurrent_deleted += 1
                    self._hit(rid)
                    self.gw.kick_sweeper()
        newest = versions[0]
        if len(versions) == 1 and newest.delete_marker:
            rid = rules.marker_expires(doc, key, newest.last_modified, now, self.day)
            if rid is not None:
                await self._pace()
                if await store.delete_version(bucket, key, newest.version_id) is not None:
                    self.stats.markers_removed += 1
                    self._hit(rid)
                    self.gw.kick_sweeper()

    async def _uploads(self, bucket: str, day: int, doc: dict[str, Any], now: float,
                       after: str) -> None:
        """AbortIncompleteMultipartUpload."""
        store = self.gw.store
        key_marker, _, uid_marker = after.partition("\0")
        while True:
            page = await store.list_uploads(bucket, "", "", key_marker, uid_marker, PAGE)
            for up in page.items:
                hit = rules.upload_abort(doc, up.key, up.initiated, self.day)
                if hit is not None and hit[0] <= now:
                    await self._pace()
                    if await store.abort_upload(up.upload_id):
                        self.stats.uploads_aborted += 1
                        self._hit(hit[1])
                        self.gw.kick_sweeper()
            if not page.truncated or not page.items:
                return
            last = page.items[-1]
            key_marker, uid_marker = last.key, last.upload_id
            await self._progress(bucket, day, f"u:{key_marker}\0{uid_marker}")
