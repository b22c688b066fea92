"""ErasureCluster: the erasure layer's API to the gateway (docs/design.md, "erasure").

It owns one HTTP session, a NodeClient per configured node with up/down state refreshed by a
background health check, the codec (warmed up at start), placement and the repair queue.

Full nodes: the health check also reads every node's writable bytes (`/v1/stats`), and a 507
marks a node full at once. A full node takes no new archives until its largest drive has room
again (`full_headroom`, default two segments' fragments, or twice what it last refused); it is
not down, and while enough nodes have room writes go to other nodes at full width (handoff).
Once the nodes' writable room (all drives, from the same poll, less what was sent since) drifts
apart, new parts are placed weighted by it, so that the nodes run full together.

The cluster's shape is a versioned `ClusterLayout` (erasure/clusterlayout.py): the cluster file
bootstraps it, a `LayoutStore` (erasure/layoutstore.py) keeps it, and `adopt(layout)` switches
to a newer version while running: clients for new nodes, none for gone ones, placement of new
writes over the nodes that take writes (weighted by the layout's weights), each node told its
drives' states (`PUT /v1/layout`). Parts keep their own scheme and are read as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from erasure import reader, writer
from erasure.clusterlayout import ClusterLayout
from erasure.clusterlayoutmix import LayoutMixin
from erasure.codec import Codec, Scheme
from erasure.config import ClusterConfig
from erasure.errors import ErasureError, QuorumError
from erasure.layout import (
    PartLayout,
    PartResult,
    ScannedPart,
    archive_id,
    parse_archive_id,
    parse_archive_meta,
)
from erasure.layoutstore import LayoutStore, load_or_bootstrap
from erasure.leases import LeaseStore, LocalLeases, new_holder, part_lease
from erasure.nodeclient import NodeClient, NodeError, make_session
from erasure.placement import room_weights
from erasure.records import PartRecords
from erasure.rehome import Handoffs
from erasure.repair import heal, heal_scrub_damage
from erasure.repairqueue import (
    Deletions,
    DeletionStore,
    RepairQueue,
    RepairRecord,
    RepairStore,
)
from zonestore.ids import is_valid_record_id

log = logging.getLogger(__name__)
HEAL_ATTEMPTS = 5    # background rebuild tries per part before leaving it to `zonegate repair`
HEAL_BACKOFF = 2.0   # seconds before the first retry, doubling
HEAL_PARKED = 3600.0  # seconds before a part that used up its attempts is tried again
HEAL_LEASE = 300.0   # seconds a claimed repair record is this healer's alone
HEAL_POLL = 30.0     # seconds between looks at the queue when nothing woke the healer
HEAL_BATCH = 1       # records per claim: each lease starts when its own heal does
SCRUB_CHECK_INTERVAL = 60.0  # seconds between fetches of the nodes' scrub damage lists
LAYOUT_POLL = 3.0  # seconds between looks at the layout store for a newer version
CENSUS_MAX_AGE = 300.0  # seconds a count of the parts below full redundancy is reused
PURGE_BATCH = 1000  # parts per `POST /v1/purge` (the node's limit, zonestore/node/purge.py)


class ErasureCluster(LayoutMixin):
    def __init__(self, config: ClusterConfig, *, state_dir: str | Path | None = None,
                 health_interval: float | None = None, auto_repair: bool = True,
                 full_headroom: int | None = None, repair_queue: RepairStore | None = None,
                 deletions: DeletionStore | None = None, layout: ClusterLayout | None = None,
                 layout_store: LayoutStore | None = None,
                 layout_poll: float = LAYOUT_POLL,
                 leases: LeaseStore | None = None,
                 records: PartRecords | None = None) -> None:
        self.config = config
        # the caller's records of its parts' layouts: heals, repairs and rehomes that put a
        # fragment elsewhere commit it there (erasure/records.py); None: nothing records them
        self.records: PartRecords | None = records
        # one worker at a time rehomes or heals a part (erasure/leases.py)
        self.leases: LeaseStore = leases or LocalLeases()
        self.lease_holder = new_holder()
        self._codecs: dict[Scheme, Codec] = {}
        # the shape in use; with a layout_store, start() adopts the store's current version
        self.layout_store = layout_store
        self.layout_poll = layout_poll
        self._set_layout(layout or ClusterLayout.bootstrap(config))
        self.node_timeout = config.erasure.node_timeout
        # a fragment write taking no bytes and giving no answer this long is handed off
        self.write_stall = min(config.erasure.write_stall, self.node_timeout / 2)
        self._rehome_again = False
        # shared by every gateway when the caller passes its store's (gateway/store/erasurequeues.py)
        self.repair_queue: RepairStore = repair_queue or RepairQueue(
            state_dir or config.erasure.state_dir)
        self.deletions: DeletionStore = deletions or Deletions(
            state_dir or config.erasure.state_dir)
        self.handoffs = Handoffs(state_dir or config.erasure.state_dir)
        # None: the config's `[erasure] health_interval`; 0: no health checks (CLI tools)
        self.health_interval = config.erasure.health_interval if health_interval is None \
            else health_interval
        self.full_headroom = (2 * self.codec.fragment_size(self.scheme.segment_size)
                              if full_headroom is None else full_headroom)
        # told the sorted ids of the full nodes whenever that set changes (gateway metrics)
        self.full_observers: list[Callable[[list[str]], None]] = []
        # told the ids of nodes that came back (the gateway finishes deletions waiting on them)
        self.return_observers: list[Callable[[list[str]], None]] = []
        self.stats: Counter[str] = Counter()
        # aiohttp TraceConfigs for the node session (the gateway's node-call metrics)
        self.trace_configs: list[Any] = []
        self.clients: dict[str, NodeClient] = {}
        self.unreachable: list[str] = []  # nodes the last scan could not list
        self._session = None
        self._health: asyncio.Task | None = None
        self.auto_repair = auto_repair
        self.scrub_check_interval = SCRUB_CHECK_INTERVAL
        self.heal_attempts = HEAL_ATTEMPTS
        self.repair_lease = HEAL_LEASE
        self.heal_poll = HEAL_POLL
        self._purger: asyncio.Task | None = None
        self._heal_kick: asyncio.Event | None = None
        self._rehomer: asyncio.Task | None = None
        self._healer: asyncio.Task | None = None
        self._wakers: set[asyncio.Task] = set()
        self._layout_task: asyncio.Task | None = None
        self._pushes: dict[str, asyncio.Task] = {}  # node id -> its layout push in flight
        self.census_max_age = CENSUS_MAX_AGE
        self.last_census: Any = None  # erasure.layouthealth.Census, once one ran
        self.census_observers: list[Callable[[Any], None]] = []  # told each new census
        # drive identities recorded per (node, path, generation), and per node the drives
        # reporting another one (clusterlayoutmix.check_identities)
        self._identities: dict[tuple[str, str, int], str] = {}
        self._foreign: dict[str, set[str]] = {}
        self._census: asyncio.Task | None = None
        # told the new layout after each adopt (the gateway's metrics, the mover)
        self.layout_observers: list[Callable[[ClusterLayout], None]] = []

    async def _check_one(self, c: NodeClient) -> bool:
        if await c.check():
            await c.poll_room(self.full_headroom)
            await self.check_identities(c)
            if c.layout_version is not None and c.layout_version < self.layout.version:
                self.push_layout([c.id])
        return c.up

    async def start(self) -> None:
        self._session = make_session(trace_configs=self.trace_configs or None)
        if self.layout_store is not None:
            cur = await load_or_bootstrap(self.layout_store, self.config)
            if cur.version != self.layout.version or cur != self.layout:
                self._set_layout(cur)
                self._tell_layout()
        self._sync_clients()
        await self.check_health()
        if self.health_interval > 0:
            self._health = asyncio.create_task(self._health_loop())
        if self.layout_store is not None and self.layout_poll > 0:
            self._layout_task = asyncio.create_task(self._layout_loop())
        if self.auto_repair:
            self._heal_kick = asyncio.Event()
            self._healer = asyncio.create_task(self._heal_loop())
            self.drain_repair_queue()  # records left by an earlier run (or a crash)

    async def close(self) -> None:
        # unfinished heals stay in the repair queue (a lease held runs out) for the next
        # healer or `zonegate repair`
        tasks = [t for t in (self._health, self._healer, self._purger, self._rehomer,
                             self._layout_task, self._census, *self._wakers,
                             *self._pushes.values()) if t]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._health = self._healer = self._layout_task = None
        self._heal_kick = None
        for c in self.clients.values():
            c.close_idle()  # record GETs and PUTs keep their own (erasure/nodeget.py)
        if self._session:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ErasureCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- node state --------------------------------------------------------------------------

    async def check_health(self) -> dict[str, bool]:
        """Ask every node whether it is ready and how much room it has; returns id -> up."""
        was_down = self.down_nodes()
        clients = self.clients  # adopt() may put a new dict in place meanwhile
        ups = await asyncio.gather(*(self._check_one(c) for c in clients.values()))
        state = dict(zip(clients, ups, strict=True))
        back = [n for n in was_down if state.get(n)]
        if back:
            # A node came back: fragments that waited for it (or for a node to hand off to)
            # can be rebuilt now, without waiting for `zonegate repair`.
            self.drain_repair_queue()
            for observe in self.return_observers:
                try:
                    observe(back)
                except Exception:  # an observer's bug must not break the health check
                    log.exception("node-return observer failed")
        return state

    def drain_repair_queue(self) -> None:
        """Make every repair record due now and wake the background healer, and finish
        deletions left unfinished because a node was down (both in a background task)."""
        if self._heal_kick is None:
            return
        t = asyncio.create_task(self._wake())
        self._wakers.add(t)
        t.add_done_callback(self._wakers.discard)
        if self._purger is None or self._purger.done():
            self._purger = asyncio.create_task(self._finish_deletions())
        self.move_handoffs_home()

    async def _wake(self) -> None:
        try:
            await self.repair_queue.wake()
        except Exception as e:  # the store is away: the healer's next poll finds them
            log.warning("could not wake the repair queue: %s", e)
        if self._heal_kick is not None:
            self._heal_kick.set()

    def move_handoffs_home(self) -> None:
        """Start moving the recorded off-home fragments home (erasure/rehome.py) in the
        background: a node is back or has room again, or a stalled write's abandoned attempt
        ended. A call while a run is going makes it run once more (a part recorded after
        the run looked at it is not missed)."""
        if self._heal_kick is None:
            return
        if self._rehomer is not None and not self._rehomer.done():
            self._rehome_again = True
            return
        from erasure.rehome import rehome_recorded

        async def run() -> None:
            while True:
                self._rehome_again = False
                try:
                    await rehome_recorded(self)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("moving handoff fragments home failed")
                if not self._rehome_again:
                    return

        self._rehomer = asyncio.create_task(run())

    async def _finish_deletions(self) -> None:
        try:
            uids = await self.deletions.unfinished()
        except Exception as e:
            log.warning("could not read the unfinished deletions: %s", e)
            return
        for i in range(0, len(uids), PURGE_BATCH):
            try:
                done = await self.purge_parts(dict.fromkeys(uids[i:i + PURGE_BATCH]))
            except Exception:
                log.exception("finishing the deletion of %d parts failed", len(uids))
                return
            if any(left for _, left in done.values()):
                return  # a node is still down: the next return tries again

    def full_nodes(self) -> list[str]:
        """Nodes that are up but out of writable space (no new placements go there)."""
        return sorted(nid for nid, c in self.clients.items() if c.full)

    def _full_changed(self, client: NodeClient) -> None:
        if client.full:
            log.warning("node %s is full (writable %s bytes): new fragments go elsewhere",
                        client.id, client.writable_bytes)
        else:
            log.info("node %s has room again (writable %s bytes)", client.id,
                     client.writable_bytes)
            self.move_handoffs_home()
        full = self.full_nodes()
        for observe in self.full_observers:
            try:
                observe(full)
            except Exception:  # an observer's bug must not break writes
                log.exception("full-node observer failed")

    async def _health_loop(self) -> None:
        rounds = 0
        while True:
            await asyncio.sleep(self.health_interval)
            rounds += 1
            try:
                await self.check_health()
                if self._heal_kick is not None and rounds * self.health_interval >= \
                        self.scrub_check_interval:
                    rounds = 0
                    await heal_scrub_damage(self)
            except Exception:  # never let the loop die; the next round tries again
                log.exception("health check failed")

    # -- damage --------------------------------------------------------------------------

    async def note_damage(self, layout: PartLayout, indexes: list[int], reason: str) -> None:
        """Fragments of a part that need rebuilding: recorded in the repair queue and, with
        auto_repair, rebuilt in the background right away by whichever healer claims it (a
        part written without a fragment survives one failure less until then). A queue that
        cannot be written is logged, not raised: the data read or written is fine, and
        `zonegate repair`'s scan of the nodes finds the damage anyway."""
        try:
            if await self.deletions.known(layout.part_uid):
                return  # a read that met the fragments of a part being deleted
            await self.repair_queue.add(layout, indexes, reason)
        except Exception as e:
            log.warning("could not queue the repair of %s %s (%s): %s", layout.part_uid,
                        indexes, reason, e)
            return
        if self._heal_kick is not None:
            self._heal_kick.set()

    async def _heal_loop(self) -> None:
        while True:
            try:
                claimed = await self.repair_queue.claim(HEAL_BATCH, self.repair_lease)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("could not claim repairs: %s", e)
                claimed = []
            for rec in claimed:
                await self._heal_one(rec)
            if claimed:
                continue
            wait = self.heal_poll
            try:
                due = await self.repair_queue.next_due()
                if due is not None:
                    wait = min(wait, max(0.05, due - time.time()))
            except asyncio.CancelledError:
                raise
            except Exception:
                pass
            kick = self._heal_kick
            if kick is None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), wait)
            kick.clear()

    async def _heal_one(self, rec: RepairRecord) -> None:
        uid = rec.layout.part_uid
        try:
            if await self.deletions.known(uid):
                await self.repair_queue.done(uid)  # deleted meanwhile: nothing to heal
                return
            # the claim's length: a dead holder's part is free when its claim is
            async with part_lease(self.leases, self.lease_holder, uid, self.repair_lease,
                                  wait=self.repair_lease / 2) as mine:
                if not mine:  # still being moved home by another worker: after it
                    await self.repair_queue.retry(uid, HEAL_BACKOFF)
                    return
                written = await heal(self, rec.layout, rec.indexes)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            try:
                if await self.deletions.known(uid):
                    await self.repair_queue.done(uid)  # deleted while it was rebuilt
                    return
                self.stats["heal_failures"] += 1
                if rec.attempts < self.heal_attempts:
                    delay = HEAL_BACKOFF * 2 ** rec.attempts
                    log.info("heal of %s failed (%s); retrying in %.0f s", uid, e, delay)
                else:
                    delay = HEAL_PARKED
                    log.warning("heal of %s failed (%s); left for `zonegate repair` or a "
                                "node's return", uid, e)
                await self.repair_queue.retry(uid, delay)
            except Exception as ex:  # the store is away: the lease runs out by itself
                log.warning("heal of %s failed (%s) and could not be rescheduled: %s", uid, e,
                            ex)
            return
        self.stats["healed_parts"] += 1
        log.info("healed %s: %s", uid,
                 ", ".join(f"f{i:02d} -> {n}" for i, n in sorted(written.items())))

    def is_up(self, node_id: str) -> bool:
        c = self.clients.get(node_id)
        return c is not None and c.up

    def down_nodes(self) -> set[str]:
        return {nid for nid, c in self.clients.items() if not c.up}

    def targets(self, part_uid: str, length: int = 0) -> list[str | None]:
        """Node per fragment index for a new write of `length` bytes: weighted by the nodes'
        writable room once they fill unevenly (`room_weights`), else the placement, with the
        fragments of nodes that are down (or out of space) handed off to the next nodes in
        rendezvous order (None when no node is left)."""
        down = {nid for nid, c in self.clients.items() if not c.writable}
        stalled = {nid for nid in down if self.clients[nid].stalled
                   and self.clients[nid].up and not self.clients[nid].full}
        if stalled and sum(nid not in down for nid in self.placement.domain_of) \
                < self.write_quorum:
            down -= stalled  # rather wait for a node that stalled once than fail the write
        nodes: list[str | None] | None = None
        weights = self.room_weights(down)
        shares = self.layout.weights()
        if any(w != 1.0 for w in shares.values()):
            # the operator's weights (a bigger node, a node being filled) times the rooms'
            weights = {nid: w * (weights or {}).get(nid, 1.0) for nid, w in shares.items()}
        if weights is not None:
            try:
                nodes = list(self.placement.place_weighted(part_uid, weights, down))
            except ValueError:
                nodes = None
        if nodes is None:
            nodes = list(self.placement.primary(part_uid))
            if down.intersection(nodes):
                spare = self.placement.handoffs(part_uid, [n for n in nodes if n not in down],
                                                down)
                nodes = [next(spare, None) if n in down else n for n in nodes]
        if length:
            # Until the next poll, the room known for a node shrinks by what is sent there.
            frag = self.codec.archive_length(length)
            for nid in nodes:
                c = self.clients.get(nid) if nid else None
                if c is not None and c.room_bytes is not None:
                    c.room_bytes = max(0, c.room_bytes - frag)
        return nodes

    def room_weights(self, down: set[str]) -> dict[str, float] | None:
        """Placement weights of the writable nodes by their room (placement.room_weights);
        None while some node's room is unknown."""
        rooms = {nid: c.room_bytes for nid, c in self.clients.items()
                 if nid not in down and nid in self.placement.domain_of}
        if any(r is None for r in rooms.values()):
            return None
        return room_weights(rooms)  # type: ignore[arg-type]

    def handoff(self, part_uid: str, used: set[str]) -> NodeClient | None:
        """The next writable node in the part's rendezvous order that holds none of its
        fragments (`used`): where a fragment goes when its node turns out to be full."""
        down = {nid for nid, c in self.clients.items() if not c.writable}
        nid = next(self.placement.handoffs(part_uid, used, down), None)
        return None if nid is None else self.clients[nid]

    def codec_for(self, scheme: Scheme) -> Codec:
        codec = self._codecs.get(scheme)
        if codec is None:
            codec = self._codecs[scheme] = Codec(scheme)
        return codec

    # -- parts -------------------------------------------------------------------------------

    async def write_part(self, part_uid: str, body: AsyncIterable[bytes], *, length: int,
                         stream: str, meta: Callable[[PartResult], dict[str, Any]]
                         ) -> PartLayout:
        """Stream `length` bytes into k+m fragment archives. Raises QuorumError (nothing left
        behind) or ValueError (body length differs from `length`; nothing left behind)."""
        try:
            return await writer.write_part(self, part_uid, body, length=length,
                                           stream=stream, meta=meta)
        except QuorumError:
            self.stats["quorum_failures"] += 1
            raise

    def read_part(self, layout: PartLayout, offset: int = 0, length: int | None = None
                  ) -> AsyncIterator[bytes]:
        """Bytes [offset, offset+length) of a part, streamed. Raises PartUnavailable."""
        return reader.read_part(self, layout, offset, length)

    async def delete_part(self, layout: PartLayout) -> int:
        """Delete every archive of the part; returns how many were deleted. See `purge`."""
        return await self.purge(layout.part_uid)

    async def purge(self, part_uid: str) -> int:
        """Delete every archive of a part wherever it is: each node is asked for the part's
        archives (a list by prefix), so copies the caller's layout does not know - a healer's or
        repair's rebuilds on handoff nodes, a write whose answer was lost - go too. Raises
        ErasureError (after deleting what it can) while any node cannot be asked, so the caller
        retries later; a retry is harmless. The deletion is recorded first (`self.deletions`):
        a rebuild of this part that is still running deletes what it writes itself."""
        n, left = await self.purge_nodes(part_uid)
        if left:
            raise ErasureError(f"part {part_uid}: archives not deleted yet, nodes not "
                               f"reached: {'; '.join(left)}")
        return n

    async def purge_nodes(self, part_uid: str, nodes: Iterable[str] | None = None
                          ) -> tuple[int, list[str]]:
        """`purge` on `nodes` (every node when None) as far as they can be asked now: returns
        (archives deleted, ids of the nodes still to ask). The deletion stays pending until a
        call leaves no node, so a caller that remembers the rest (the gateway's sweeper
        queues it) frees the space of the nodes that are up while one is down."""
        (n, left), = (await self.purge_parts({part_uid: nodes})).values()
        return n, left

    async def purge_parts(self, parts: Mapping[str, Iterable[str] | None]
                          ) -> dict[str, tuple[int, list[str]]]:
        """`purge_nodes` of many parts (part uid -> its nodes, None for every node) with one
        request per node for up to PURGE_BATCH of them (`NodeClient.purge`: a part's archives
        are the records `<uid>.f<NN>`), instead of a listing and a DELETE per archive.
        Returns part uid -> (archives deleted, ids of the nodes still to ask)."""
        # a uid no record can be named after has nothing anywhere (and must not fail the rest)
        nothing = {uid: (0, []) for uid in parts if not is_valid_record_id(archive_id(uid, 0))}
        parts = {uid: nodes for uid, nodes in parts.items() if uid not in nothing}
        await asyncio.gather(*map(self.deletions.begin, parts))
        todo: dict[str, list[str]] = {}
        for uid, nodes in parts.items():
            for nid in (self.clients if nodes is None else nodes):
                if nid in self.clients:
                    todo.setdefault(nid, []).append(uid)
        deleted = dict.fromkeys(parts, 0)
        unreachable: dict[str, dict[str, str]] = {uid: {} for uid in parts}

        async def one(client: NodeClient, uids: list[str]) -> None:
            done = 0
            if not client.up:
                for uid in uids:
                    unreachable[uid][client.id] = "down"
                return
            try:
                for done in range(0, len(uids), PURGE_BATCH):
                    batch = uids[done:done + PURGE_BATCH]
                    got = await client.purge([uid + ".f" for uid in batch])
                    for uid in batch:
                        deleted[uid] += got.get(uid + ".f", 0)
            except NodeError as e:
                for uid in uids[done:]:
                    unreachable[uid][client.id] = str(e)

        clients = self.clients  # adopt() may put a new dict in place meanwhile
        await asyncio.gather(*(one(clients[nid], uids) for nid, uids in todo.items()))
        whole = [uid for uid in parts if not unreachable[uid]]
        await asyncio.gather(*map(self.repair_queue.done, whole))
        await asyncio.gather(*map(self.deletions.end, whole))
        why = {f"{k}: {v}" for left in unreachable.values() for k, v in left.items()}
        if why:
            log.info("%d of %d parts: archives left on %s", len(parts) - len(whole),
                     len(parts), "; ".join(sorted(why)))
        return {**nothing, **{uid: (deleted[uid], sorted(unreachable[uid])) for uid in parts}}

    async def scan(self, prefix: str = "") -> list[ScannedPart]:
        """Every part whose archives start with `prefix`, as found on the reachable nodes
        (sorted by part_uid). `self.unreachable` lists the nodes that could not be listed."""
        async def one(client: NodeClient) -> list[tuple[str, Any]]:
            out = []
            async for rec in client.scan(prefix):
                out.append((client.id, rec))
            return out

        clients = list(self.clients.values())  # adopt() may put a new dict in place meanwhile
        results = await asyncio.gather(*(one(c) for c in clients), return_exceptions=True)
        parts: dict[str, ScannedPart] = {}
        self.unreachable = []
        for client, res in zip(clients, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, NodeError):
                    raise res
                self.unreachable.append(client.id)
                continue
            for nid, rec in res:
                parsed = parse_archive_id(rec.id)
                if parsed is None:
                    continue
                try:
                    m = parse_archive_meta(rec.meta)
                except ValueError:
                    continue
                p = parts.get(parsed[0])
                if p is None:
                    p = parts[parsed[0]] = ScannedPart(parsed[0], m["length"], m["scheme"],
                                                       int(m.get("crc32c", 0)), m.get("meta", {}))
                p.fragments.setdefault(parsed[1], []).append(nid)
        return [parts[k] for k in sorted(parts)]
