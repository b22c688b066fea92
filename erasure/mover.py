"""The data mover: one background engine for rebalance, drain, drive replacement and removal.

A run works through every part the caller records (a `PartIndex`: the gateway's metadata
store) in two phases, its progress kept in a `MoveStore` (the same store) so that any gateway
can resume it after a crash:
- *tally*: bytes of fragments each node holds (from the recorded layouts), and what is left to
  move (fragments on nodes that must give them up, plus what the fullest nodes hold above their
  share);
- *move*: for each part, `moveplan.Planner.plan` says which fragments go where; parts move in
  batches (one lease `batch:<owner>:<n>` journals the copies they touch), 8 at a time: copy
  to the new home (verified stream, `rehome.copy_one`) or rebuild from parity
  (`repair.rebuild`) when the source is gone or unreadable, then compare-and-set of the part's recorded layout, then deletion of
  the copies the recorded layout no longer names. A part never has fewer durable fragments
  than before its move; a crash leaves a lease whose journal the next run finishes (`tidy`).
  Passes repeat until nothing is left to move or a pass makes no progress.
The run itself is leased (`run`), so one gateway at a time moves; a new layout version or an
operator's request (`request`) starts a new run. Copies are paced by a `Throttle` (bytes/s per
node and cluster-wide, `[erasure] move_rate` / `move_rate_total`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from erasure.clusterlayout import ClusterLayout
from erasure.layout import PartLayout, archive_id
from erasure.moveplan import TOLERANCE, Fill, Move, Planner, moved, plan
from erasure.movetypes import MoveStore, PartIndex, RunState, Throttle
from erasure.nodeclient import NodeError, RecordMissing

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

__all__ = ["Fill", "Move", "MoveStore", "Mover", "PartIndex", "RunState", "Throttle", "plan"]

log = logging.getLogger(__name__)
RUN_LEASE = 30.0     # seconds the run is this mover's alone (renewed as it goes)
PART_LEASE = 300.0   # seconds a part being moved is this mover's alone
RETRY_AFTER = 300.0  # seconds before a run that left moves undone tries them again
PAGE = 200           # recorded parts per index page
BATCH = 32           # parts journaled under one lease (one store write per batch)
PARALLEL = 8         # parts of a batch moved at once (the throttle bounds the bytes)
REBUILD_PARALLEL = 8  # of them, rebuilt from parity at once (2 was measured: slower, no gain)
MAX_PASSES = 4       # passes over the index per run while moves keep succeeding
SAVE_EVERY = 1.0     # seconds between saves of the run's progress (two small store writes;
                     # `zonegate status` and a restarted mover see it at most 1 s old)


class Mover:
    """The engine over one cluster, index and store. `layout()` gives the layout to move to
    (the cluster's current one)."""

    def __init__(self, cluster: ErasureCluster, index: PartIndex, store: MoveStore, *,
                 owner: str, layout: Callable[[], ClusterLayout],
                 rate: float = 0.0, rate_total: float = 0.0,
                 busy: Callable[[], bool] | None = None, busy_rate: float = 0.0) -> None:
        self.cluster = cluster
        self.index = index
        self.store = store
        self.owner = owner
        self.layout = layout
        # busy(): the caller's foreground is in flight (then `busy_rate` per node)
        self.throttle = Throttle(rate, rate_total, busy=busy, busy_rate=busy_rate)
        self.run_lease, self.part_lease = RUN_LEASE, PART_LEASE
        self.retry_after = RETRY_AFTER
        self.parallel = PARALLEL
        # rebuilds decode on the event loop (repair.rebuild): fewer at once than copies
        self.rebuild_parallel = REBUILD_PARALLEL
        self._rebuild_gate: asyncio.Semaphore | None = None
        self._batches = 0
        self.state = RunState()
        self.stats: Counter[str] = Counter()  # this process: fragments/bytes moved, failures
        self._saved = 0.0

    # -- the run ----------------------------------------------------------------------------

    async def request(self) -> None:
        """Ask for a new run (an operator's `zonegate rebalance`): any mover picks it up."""
        await self.store.claim("request", self.owner, 0.0, {"at": time.time()})

    async def progress(self) -> RunState:
        return RunState.from_dict(await self.store.get("run"))

    async def run_once(self) -> RunState | None:
        """Start or resume the run the current layout (or a request) calls for, to its end.
        None when another mover holds the run. Cheap when there is nothing to do: two reads."""
        layout = self.layout()
        st = RunState.from_dict(await self.store.get("run"))
        req = float((await self.store.get("request") or {}).get("at", 0.0))
        if st.phase == "done" and st.version == layout.version and req <= st.requested \
                and not self._retry_due(st) and not await self.store.leftovers("batch:", 1):
            self.state = st
            return st
        if not await self.store.claim("run", self.owner, self.run_lease):
            return None
        try:
            st = RunState.from_dict(await self.store.get("run"))
            if st.version != layout.version or req > st.requested:
                # rebalancing is for a new shape (nodes that take writes, their weights) or
                # an operator's request; otherwise only what must move moves (draining and
                # gone nodes, lost drives)
                shape = {n.id: n.weight for n in layout.writable()}
                new_shape = shape != st.shape if st.version else layout.version > 1
                st = RunState(version=layout.version, requested=max(req, st.requested),
                              started=time.time(), shape=shape,
                              balance=new_shape or req > st.requested)
            elif self._retry_due(st):  # moves left undone (a node down, full, leased)
                st.phase, st.passes, st.cursor = "move", 0, ""
            st.owner = self.owner
            self.state = st
            await self.finish_leftovers()
            if st.phase == "tally":
                await self._tally(layout, st)
            if st.phase == "move":
                await self._move(layout, st)
            return st
        except LostLease as e:
            log.warning("%s", e)
            return None
        finally:
            try:
                await self._save(force=True)
                await self.store.release("run", self.owner)
            except LostLease:
                pass

    def _retry_due(self, st: RunState) -> bool:
        unfinished = st.failed or st.stuck or st.spread > TOLERANCE
        return st.phase == "done" and bool(unfinished) and \
            time.time() - st.finished >= self.retry_after

    async def _save(self, force: bool = False) -> bool:
        now = time.time()
        if not force and now - self._saved < SAVE_EVERY:
            return True
        self._saved = now
        self.state.updated = now
        if not await self.store.claim("run", self.owner, self.run_lease):
            raise LostLease("run")
        return await self.store.save("run", self.owner, self.state.to_dict())

    def _frag_bytes(self, part: PartLayout) -> int:
        return self.cluster.codec_for(part.scheme).archive_length(part.length)

    async def _tally(self, layout: ClusterLayout, st: RunState) -> None:
        held: Counter[str] = Counter(st.held)
        takes = {n.id for n in layout.writable()}
        must = 0
        while True:
            items, nxt = await self.index.page(st.cursor, PAGE)
            for _, part in items:
                size = self._frag_bytes(part)
                st.parts += 1
                moving = False
                for i, node in part.placement.items():
                    if i in part.missing:
                        continue
                    held[node] += size
                    if node not in takes:
                        must += size
                        moving = True
                st.parts_left += moving
            st.held = dict(held)
            if nxt is None:
                break
            st.cursor = nxt
            await self._save()
        fill = Fill(layout, held)
        st.bytes_left = must + (fill.excess() if st.balance else 0)
        st.phase, st.cursor = "move", ""
        await self._save(force=True)

    async def _lost_scan(self, layout: ClusterLayout) -> dict[str, set[str]]:
        """Record ids held by each node with a failed or replaced drive: fragments recorded
        there but not found were on the lost drive."""
        out: dict[str, set[str]] = {}
        for n in layout.known():
            if any(d.state in ("failed", "replaced") for d in n.drives):
                client = self.cluster.clients.get(n.id)
                if client is None:
                    continue
                try:
                    out[n.id] = {r.id async for r in client.scan()}
                except NodeError as e:
                    log.warning("mover: cannot list %s (%s); its lost fragments wait", n.id, e)
        return out

    async def _lost(self, part: PartLayout, present: dict[str, set[str]]) -> list[int]:
        out = []
        for i, node in part.placement.items():
            ids = present.get(node)
            if ids is None or part.archive_id(i) in ids:
                continue
            try:  # written after the listing?
                await self.cluster.clients[node].head(part.archive_id(i))
            except RecordMissing:
                out.append(i)
            except NodeError:
                pass
        return out

    async def _move(self, layout: ClusterLayout, st: RunState) -> None:
        present = await self._lost_scan(layout)
        started = time.monotonic()
        moved_here = 0
        while st.passes < MAX_PASSES:
            down = {nid for nid, c in self.cluster.clients.items() if not c.writable}
            fill = Fill(layout, st.held, tolerance=TOLERANCE if st.balance else float("inf"))
            planner = Planner(layout, fill=fill, unavailable=down)
            done_before = st.moves
            st.failed = st.stuck = 0
            left_bytes = left_parts = 0
            while True:
                items, nxt = await self.index.page(st.cursor, PAGE)
                batch: list[tuple[str, PartLayout, list[Move], int]] = []
                for ref, part in items:
                    size = self._frag_bytes(part)
                    lost = await self._lost(part, present) if present else []
                    moves = planner.plan(part, lost=lost, frag_bytes=size)
                    st.stuck += _unplaced(layout, part, moves, lost)
                    if moves:
                        batch.append((ref, part, moves, size))
                for i in range(0, len(batch), BATCH):
                    chunk = batch[i:i + BATCH]
                    for (_, _, moves, size), got in zip(chunk, await self.move_batch(chunk),
                                                        strict=True):
                        ok = {m.index: m for m in got}
                        for m in moves:
                            if m.index in ok:  # as planned, or rebuilt (source unreadable)
                                st.moves += 1
                                st.rebuilt += ok[m.index].rebuild
                                st.bytes_moved += size
                                moved_here += size
                            else:
                                st.failed += 1
                                left_bytes += size
                                if m.src != m.dst:  # undo the plan's bookkeeping
                                    fill.add(m.dst, -size)
                                    fill.add(m.src, size)
                        left_parts += len(ok) < len(moves)
                        st.bytes_left = max(0, st.bytes_left - size * len(ok))
                    st.held = dict(fill.held)
                    st.rate = moved_here / max(time.monotonic() - started, 1e-3)
                    await self._save()
                if nxt is None:
                    break
                st.cursor = nxt
                await self._save()
            st.passes += 1
            st.cursor = ""
            st.bytes_left = left_bytes + fill.excess()
            st.parts_left = left_parts
            st.spread = fill.spread() if st.balance else 0.0
            if st.moves == done_before or (st.failed == 0 and st.stuck == 0
                                           and fill.balanced()):
                break
        from erasure.movesweep import drain_drives, sweep_draining
        if st.failed == 0 and st.stuck == 0:
            swept, stuck, failed = await sweep_draining(self.cluster, layout)
            st.swept += swept
            st.stuck += stuck
            st.failed += failed

        async def pace(node: str, n: int) -> None:
            await self.throttle.take((node,), 2 * n)  # read and written on the one node

        moved, failed = await drain_drives(self.cluster, layout, pace)
        st.drive_records += moved
        st.failed += failed
        st.phase = "done"
        st.finished = time.time()
        log.info("mover: run for layout v%d done: %d fragments moved (%d rebuilt), %d failed, "
                 "%d with nowhere to go", st.version, st.moves, st.rebuilt, st.failed, st.stuck)

    # -- one part ---------------------------------------------------------------------------

    async def move_batch(self, items: list[tuple[str, PartLayout, list[Move], int]]
                         ) -> list[list[Move]]:
        """Carry out the moves of several parts, `parallel` at a time, under one lease whose
        document journals every copy they touch (one store write for the batch, one commit
        per part). Returns, per part, the moves now committed (the others left nothing)."""
        name = f"batch:{self.owner}:{self._batches}"
        self._batches += 1
        journal = {"parts": [_journal(ref, part, moves) for ref, part, moves, _ in items]}
        if not await self.store.claim(name, self.owner, self.part_lease, journal):
            return [[] for _ in items]
        gate = asyncio.Semaphore(self.parallel)

        async def one(item: tuple[str, PartLayout, list[Move], int]) -> tuple[list[Move], bool]:
            async with gate:
                return await self._move_part(*item)

        got = await asyncio.gather(*(one(it) for it in items))
        if all(tidied for _, tidied in got):
            await self.store.release(name, self.owner, drop=True)
        return [done for done, _ in got]

    async def move_part(self, ref: str, part: PartLayout, moves: list[Move], size: int
                        ) -> list[Move]:
        """One part's moves (a batch of one)."""
        return (await self.move_batch([(ref, part, moves, size)]))[0]

    async def _move_part(self, ref: str, part: PartLayout, moves: list[Move], size: int
                         ) -> tuple[list[Move], bool]:
        """Copies and rebuilds, the commit, the deletion of the copies the record no longer
        names: (the moves committed, whether the tidy is done)."""
        uid = part.part_uid
        journal = _journal(ref, part, moves)
        done: list[Move] = []
        tidied = False
        try:
            rebuild = [m for m in moves if m.rebuild]
            for m in moves:
                if m.rebuild:
                    continue
                try:
                    if await self._copy(part, m, size):
                        done.append(m)
                except NodeError as e:
                    if e.node == m.src and e.status != 507:
                        log.info("mover: %s unreadable on %s (%s): rebuilt from parity instead",
                                 part.archive_id(m.index), m.src, e)
                        rebuild.append(Move(m.index, m.src, m.dst, True, "source unreadable"))
                    else:
                        log.info("mover: copy of %s to %s failed: %s", part.archive_id(m.index),
                                 m.dst, e)
                        self.stats["move_failures"] += 1
            if rebuild:
                done.extend(await self._rebuild(part, rebuild, done, size))
            committed = bool(done) and await self.index.commit(ref, part, moved(part, done))
            current = moved(part, done) if committed else await self.index.get(ref)
            if not committed:
                done = []
            tidied = await self.tidy(uid, journal, current)
        except NodeError as e:  # the tidy could not reach a node: the journal stays leased
            log.info("mover: part %s left for a later tidy: %s", uid, e)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("mover: moving part %s failed", uid)
            done = []
        for m in done:
            self.stats["fragments_moved"] += 1
            self.stats["bytes_moved"] += size
            self.stats["fragments_rebuilt"] += m.rebuild
        return done, tidied

    async def _copy(self, part: PartLayout, m: Move, size: int) -> bool:
        from erasure.rehome import copy_one

        async def pace(n: int) -> None:
            await self.throttle.take((m.src, m.dst), n)

        if not await copy_one(self.cluster, part.part_uid, m.index, m.src, m.dst, pace):
            return False  # the part is being deleted
        rid = part.archive_id(m.index)
        a, b = await asyncio.gather(self.cluster.clients[m.src].head(rid),
                                    self.cluster.clients[m.dst].head(rid))
        if a.length != b.length or (a.crc32c is not None and b.crc32c is not None
                                    and a.crc32c != b.crc32c):
            await self.cluster.clients[m.dst].delete(rid)
            raise NodeError(m.dst, 500, "CopyMismatch", f"{rid}: copy differs from source")
        return True

    async def _rebuild(self, part: PartLayout, moves: list[Move], copied: list[Move],
                       size: int) -> list[Move]:
        from erasure.cluster import ScannedPart
        from erasure.repair import Damage, PartDeleted, rebuild

        out_idx = {m.index for m in moves}
        sources = {i: [n] for i, n in part.placement.items()
                   if i not in out_idx and i not in part.missing and n in self.cluster.clients}
        for m in copied:  # a fresh copy is as good a source as its original
            sources.setdefault(m.index, [m.dst])
        if len(sources) < part.scheme.k:
            log.warning("mover: part %s has %d readable fragments, %d needed: not rebuilt",
                        part.part_uid, len(sources), part.scheme.k)
            return []
        # k sources each send, every target receives: all of them paced
        readers = [n[0] for _, n in sorted(sources.items())][:part.scheme.k]
        await self.throttle.take([*readers, *(m.dst for m in moves)], size * len(moves))
        scanned = ScannedPart(part.part_uid, part.length, part.scheme, part.crc32c, {}, sources)
        d = Damage(scanned, sorted(out_idx), {m.index: m.why for m in moves}, part,
                   targets={m.index: m.dst for m in moves})
        if self._rebuild_gate is None:
            self._rebuild_gate = asyncio.Semaphore(self.rebuild_parallel)
        try:
            async with self._rebuild_gate:
                written, _ = await rebuild(self.cluster, d)
        except PartDeleted:
            return []
        except (NodeError, RuntimeError, ValueError) as e:
            log.warning("mover: rebuilding %s of %s failed: %s", sorted(out_idx),
                        part.part_uid, e)
            self.stats["move_failures"] += 1
            return []
        return [m for m in moves if written.get(m.index) == m.dst]

    async def tidy(self, uid: str, journal: dict[str, Any], current: PartLayout | None) -> bool:
        """Delete the copies a part's move touched that its recorded layout does not name now:
        the old copies after a commit, the new ones after a failed commit. With no record at
        the ref (the part deleted, or recorded elsewhere by now) only new copies go: a part
        still recorded under another ref names its old copies. True when done."""
        if current is not None and current.part_uid != uid:
            current = None  # the ref holds another part now (the key was overwritten)
        pairs = [(int(i), str(n), True) for i, n in journal.get("dst", [])]
        if current is not None:
            pairs += [(int(i), str(n), False) for i, n in journal.get("src", [])]
        old_src = {(int(i), str(n)) for i, n in journal.get("src", [])}
        for i, node, is_dst in pairs:
            if current is not None and current.placement.get(i) == node:
                continue
            if current is None and is_dst and (i, node) in old_src:
                continue
            client = self.cluster.clients.get(node)
            if client is None:
                continue  # a node no longer in the cluster
            if not client.up:
                raise NodeError(node, 503, "NodeDown", "down: the copy is deleted later")
            await client.delete(archive_id(uid, i))
        return True

    async def finish_leftovers(self) -> int:
        """Tidy the batches a crashed (or cut off) mover left leased; returns how many parts
        were tidied. Idempotent: a part whose move finished is tidy already."""
        n = 0
        for name, doc in await self.store.leftovers("batch:"):
            if not await self.store.claim(name, self.owner, self.part_lease):
                continue
            try:
                for journal in doc.get("parts", []):
                    current = await self.index.get(str(journal.get("ref", "")))
                    await self.tidy(str(journal.get("uid", "")), journal, current)
                    n += 1
                await self.store.release(name, self.owner, drop=True)
            except NodeError as e:
                log.info("mover: leftover %s not tidied yet: %s", name, e)
        return n

    # -- queries ----------------------------------------------------------------------------

    async def dry_run(self, layout: ClusterLayout | None = None) -> DryRun:
        """The plan of a run now, without moving: moves per (src, dst), bytes, fill before
        and after (what `zonegate rebalance --dry-run` prints)."""
        layout = layout or self.layout()
        held: Counter[str] = Counter()
        parts: list[tuple[PartLayout, int]] = []
        cursor = ""
        while True:
            items, nxt = await self.index.page(cursor, PAGE)
            for _, part in items:
                size = self._frag_bytes(part)
                parts.append((part, size))
                for i, node in part.placement.items():
                    if i not in part.missing:
                        held[node] += size
            if nxt is None:
                break
            cursor = nxt
        out = DryRun(before=dict(held))
        present = await self._lost_scan(layout)
        fill = Fill(layout, held)
        down = {nid for nid, c in self.cluster.clients.items() if not c.writable}
        planner = Planner(layout, fill=fill, unavailable=down)
        for _ in range(MAX_PASSES):
            before = out.fragments
            for part, size in parts:
                lost = await self._lost(part, present) if present else []
                moves = planner.plan(part, lost=lost, frag_bytes=size)
                out.stuck += _unplaced(layout, part, moves, lost)
                for m in moves:
                    out.routes[(m.src, m.dst)] += 1
                    out.bytes += size
                    out.fragments += 1
                    out.rebuilds += m.rebuild
                    part.placement[m.index] = m.dst
                out.parts += bool(moves)
            if out.fragments == before or fill.balanced():
                break
        out.after = dict(fill.held)
        out.spread_before = Fill(layout, out.before).spread()
        out.spread_after = fill.spread()
        return out


def _journal(ref: str, part: PartLayout, moves: list[Move]) -> dict[str, Any]:
    """The copies a part's move touches: sources of copies, every destination."""
    return {"ref": ref, "uid": part.part_uid,
            "src": [[m.index, m.src] for m in moves if not m.rebuild],
            "dst": [[m.index, m.dst] for m in moves]}


def _unplaced(layout: ClusterLayout, part: PartLayout, moves: list[Move],
              lost: list[int]) -> int:
    """Fragments that must move but were given nowhere to go."""
    takes = {n.id for n in layout.writable()}
    planned = {m.index for m in moves}
    return sum(1 for i, n in part.placement.items()
               if i not in part.missing and i not in planned and (n not in takes or i in lost))


@dataclass
class DryRun:
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    routes: Counter[tuple[str, str]] = field(default_factory=Counter)
    parts: int = 0
    fragments: int = 0
    rebuilds: int = 0
    bytes: int = 0
    stuck: int = 0
    spread_before: float = 0.0
    spread_after: float = 0.0


class LostLease(RuntimeError):
    def __init__(self, name: str) -> None:
        super().__init__(f"mover: lease {name!r} taken over by another mover")


async def fragments_left(cluster: ErasureCluster, node_id: str, limit: int = 1000) -> int:
    """How many records node `node_id` still holds (up to `limit`): 0 once a drain emptied
    it. One listing request; what `zonegate layout node remove` checks before it removes."""
    client = cluster.clients.get(node_id)
    if client is None:
        raise KeyError(node_id)
    recs, _ = await client.list("", "", limit)
    return len(recs)
