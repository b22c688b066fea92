"""Write one part: encode it segment by segment and stream the k+m archives to their nodes.

Each archive has a bounded queue (one batch of SEND_BATCH bytes of fragments, gathered by the
writer) feeding a streamed PUT, so memory stays at a few segments plus three batches per
archive (gathering, queued, being sent) whatever the part's size, and a slow node slows the
writer down (back-pressure) —
until it makes no progress for the node timeout, then it counts as failed. A node that fails
mid-write is dropped; as long as the write quorum holds the write succeeds, and the missing
indexes go into the layout and the repair queue. Below quorum, every archive of the part is
cancelled or deleted and QuorumError is raised.

A node that answers 507 (out of space), or that cuts the connection but is still up, is not a
lost fragment: its archive is handed off to the next writable node in the part's rendezvous
order, replaying what was already sent. The node answers 507 before it reads the body (aiohttp sends the headers
with the first batch), so each upload keeps its first REPLAY_LIMIT bytes for that; a failure
after them costs the fragment (repair rebuilds it).

A node that stalls (hung, SIGSTOPped: its kernel still takes connections and some bytes) is
handed off the same way once it has taken no bytes and given no answer for the cluster's
`write_stall` (`[erasure] write_stall`, 1.5 s; a slow node that keeps taking bytes is waited
for), instead of holding the part for the node timeout; the node takes no new archives for
STALLED_FOR. The abandoned request is left to end by itself (cut if the node asks for more of
its body, so a partial archive is never committed); its node may still commit a whole archive
it had all the bytes of, so the part is recorded as a handoff and, once that request ended,
rehome (erasure/rehome.py) keeps one copy of the fragment: a copy never outlives the part
unaccounted, and the audit and `zonegate repair` see it as the part's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import crc32c

from erasure.codec import segments
from erasure.errors import QuorumError
from erasure.fastencode import Fragment
from erasure.layout import PartLayout, PartResult, archive_id, archive_metas
from erasure.nodeclient import BodyAbandoned, NodeClient, NodeError, NodeUnavailable
from erasure.rehome import off_home, rehome_part
from zonestore.ids import validate_record_id

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

log = logging.getLogger(__name__)
QUEUE_DEPTH = 1  # batches (SEND_BATCH bytes of fragments) queued per archive
# Fragments are sent to a node in batches of at least this many bytes (a 1 MiB segment makes
# 128 KiB fragments with 8+2): each network write wakes the node process, and on a loaded
# machine those wake-ups, not the bytes, are what a node spends most of its CPU on.
SEND_BATCH = 1024 * 1024
MAX_META = 64 * 1024  # a node refuses larger metadata blobs (docs/design.md)
REPLAY_LIMIT = 2 * SEND_BATCH  # bytes of an archive kept to replay on a handoff node (507)
MAX_HANDOFFS = 3  # full nodes one archive may move away from
# A node that stalled a write gets no new archives for this long (about the reader's
# SLOW_FOR: by then the health check has said whether it is down)
STALLED_FOR = 10.0
ABANDONED_TRIES = 3  # rehomes of a part after its stalled request ended


class WriteStalled(NodeUnavailable):
    """A fragment write took no bytes and gave no answer for the stall limit."""


class _Attempt:
    """One PUT of an archive: whether it waits on its node (since when) or was abandoned."""

    def __init__(self) -> None:
        self.waiting_since: float | None = time.monotonic()  # None: waits for our bytes
        self.abandoned = False


class ArchiveUpload:
    """One archive's upload: a bounded queue feeding a streamed PUT (moved to another node if
    its node is full, see the module docstring)."""

    def __init__(self, index: int, client: NodeClient,
                 handoff: Callable[[ArchiveUpload], NodeClient | None] | None = None,
                 stall: float | None = None,
                 abandoned: Callable[[NodeClient, asyncio.Future], None] | None = None
                 ) -> None:
        self.index = index
        self.client = client
        self.handoff = handoff
        self.stall = stall  # seconds without progress before a handoff (None: node timeout)
        self.abandoned = abandoned  # told of each stalled request left running
        self.q: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_DEPTH)
        self.task: asyncio.Task | None = None
        self.error: BaseException | None = None
        self.meta: bytes | None = None
        # what the PUT took so far, for a handoff node; None past the limit (or with no handoff)
        self.replay: list[Fragment] | None = [] if handoff is not None else None
        self.replay_bytes = 0
        self.ended = False  # the end of the body was taken from the queue
        self.moved_from: list[str] = []  # full nodes this archive was handed off from

    def _keep(self, item: Fragment, size: int) -> None:
        if self.replay is None:
            return
        self.replay_bytes += size
        if self.replay_bytes > REPLAY_LIMIT:
            self.replay = None  # too late for a 507 to come: stop holding the bytes
        else:
            self.replay.append(item)

    async def _body(self, att: _Attempt):
        # Each batch (`Batches`) goes out as a list of fragments: the node client writes a
        # list as one HTTP chunk without joining it (a copy of every byte sent, see
        # erasure/nodeput.py). A handed-off upload starts again with what it took so far.
        for batch in list(self.replay or ()):
            att.waiting_since = time.monotonic()
            yield batch
            self._went_on(att)
        while not self.ended:
            att.waiting_since = None  # waiting for the encoder, not for the node
            batch = await self.q.get()
            if batch is None:
                self.ended = True
                break
            self._keep(batch, sum(map(len, batch)))
            att.waiting_since = time.monotonic()
            yield batch
            self._went_on(att)
        att.waiting_since = time.monotonic()  # the metadata blob, then the node's answer

    @staticmethod
    def _went_on(att: _Attempt) -> None:
        """The node took the last batch: unless this request was given up (then cut it, so
        that its node commits nothing, and leave the queue to the upload's next request)."""
        if att.abandoned:
            raise BodyAbandoned("fragment write given up after a stall")

    async def _attempt(self, record_id: str, length: int, stream: str) -> dict:
        """One PUT to the current node; with a stall limit, WriteStalled once it took no bytes
        and gave no answer that long (the request is left running, see the module doc)."""
        att = _Attempt()
        put = self.client.put(record_id, self._body(att), length=length, stream=stream,
                              meta=lambda: self.meta or b"")
        if self.stall is None:
            return await put
        task = asyncio.ensure_future(put)
        try:
            while True:
                since = att.waiting_since
                left = self.stall if since is None else since + self.stall - time.monotonic()
                if left <= 0:
                    break
                done, _ = await asyncio.wait({task}, timeout=left)
                if done:
                    return task.result()
        except BaseException:
            task.cancel()
            raise
        att.abandoned = True
        if task.done():  # it ended as we gave up on it
            return task.result()
        self.client.note_stalled(STALLED_FOR)
        if self.abandoned is not None:
            self.abandoned(self.client, task)
        else:
            task.cancel()
        raise WriteStalled(self.client.id, 0, "stalled",
                           f"no bytes taken and no answer for {self.stall} s")

    async def _put(self, record_id: str, length: int, stream: str) -> dict:
        while True:
            try:
                return await self._attempt(record_id, length, stream)
            except NodeError as e:
                # 507, a stall, or the connection cut by a node that is still up (a node that
                # refuses a body before reading it closes the connection, and the reset may
                # beat its answer to us); a node that is gone costs the fragment, as before
                stalled = isinstance(e, WriteStalled)
                movable = e.status == 507 or isinstance(e, NodeUnavailable)
                if (not movable or self.replay is None or self.handoff is None
                        or len(self.moved_from) >= MAX_HANDOFFS):
                    raise
                if not stalled and e.status != 507 and not await self.client.check():
                    raise
                nxt = self.handoff(self)
                if nxt is None:
                    raise
                why = "is full" if e.status == 507 else "stalled" if stalled else "failed"
                log.info("%s: %s %s, fragment goes to %s instead", record_id, self.client.id,
                         why, nxt.id)
                self.moved_from.append(self.client.id)
                self.client = nxt

    def start(self, record_id: str, length: int, stream: str) -> None:
        self.task = asyncio.create_task(self._put(record_id, length, stream))
        self.task.add_done_callback(self._done)

    def _done(self, t: asyncio.Task) -> None:
        if t.cancelled():
            self.error = self.error or asyncio.CancelledError()
        elif t.exception() is not None:
            self.error = t.exception()
        # a feeder blocked on a full queue must not wait for a consumer that is gone
        while not self.q.empty():
            self.q.get_nowait()
        # Nothing is replayed any more: let go of the fragments (views of the part's segment
        # buffers) now, not when the cyclic GC collects this upload (the handoff closure refers
        # to the part's uploads), so that the buffers go back to the body's pool at once.
        self.replay = None
        self.handoff = self.abandoned = None

    @property
    def alive(self) -> bool:
        t = self.task
        return self.error is None and t is not None and not (
            t.done() and (t.cancelled() or t.exception() is not None))

    def offer(self, item: Fragment | None) -> bool:
        """Queue item if there is room (or drop it if this upload is dead): True when done
        with it, False when `feed` must wait for room."""
        if not self.alive or self.task.done():
            return True
        try:
            self.q.put_nowait(item)
            return True
        except asyncio.QueueFull:
            return False

    async def feed(self, item: Fragment | None, stall: float) -> None:
        if self.offer(item):
            return
        try:
            await asyncio.wait_for(self.q.put(item), stall)
        except TimeoutError:
            self.error = NodeUnavailable(self.client.id, 0, "stalled",
                                         f"no progress for {stall} s")
            self.client.up = False
            self.task.cancel()


async def write_part(cluster: ErasureCluster, part_uid: str, body: AsyncIterable[bytes], *,
                     length: int, stream: str, meta: Callable[[PartResult], dict[str, Any]]
                     ) -> PartLayout:
    codec, scheme = cluster.codec, cluster.scheme
    validate_record_id(archive_id(part_uid, scheme.n - 1))
    if length < 0:
        raise ValueError(f"negative part length {length}")
    targets = cluster.targets(part_uid, length)
    timeout = cluster.node_timeout
    sinks: dict[int, ArchiveUpload] = {}

    stalls: list[str] = []

    def handoff(_: ArchiveUpload) -> NodeClient | None:
        # synchronous: the chosen node is this upload's before any other upload can choose
        return cluster.handoff(part_uid, {s.client.id for s in sinks.values()})

    def abandoned(client: NodeClient, request: asyncio.Future) -> None:
        if not stalls:
            cluster.handoffs.add(part_uid)  # before any copy can be left: see the module doc
        stalls.append(client.id)
        cluster.stats["stalled_writes"] += 1
        _watch_abandoned(cluster, part_uid, client, request)

    sinks.update({i: ArchiveUpload(i, cluster.clients[nid], handoff, cluster.write_stall,
                                   abandoned)
                  for i, nid in enumerate(targets) if nid})
    if len(sinks) < cluster.write_quorum:
        down = "; ".join(f"{c.id}: {c.last_error}" for c in cluster.clients.values() if not c.up)
        raise QuorumError(f"part {part_uid}: only {len(sinks)} nodes are up, "
                          f"the write quorum is {cluster.write_quorum} (down: {down})")
    alen = codec.archive_length(length)
    for i, s in sinks.items():
        s.start(archive_id(part_uid, i), alen, stream)

    def check_quorum() -> None:
        alive = sum(s.alive for s in sinks.values())
        if alive < cluster.write_quorum:
            errors = "; ".join(str(s.error) for s in sinks.values() if s.error)
            raise QuorumError(f"part {part_uid}: {alive} of {scheme.n} fragment writes left, "
                              f"below the write quorum {cluster.write_quorum}: {errors}")

    total, crc = 0, 0
    batches = Batches(sinks, timeout)
    try:
        async for seg in segments(body, scheme.segment_size):
            total += len(seg)
            if total > length:
                raise ValueError(f"part body is longer than its announced {length} bytes")
            crc = crc32c.crc32c(seg, crc)
            started = time.perf_counter()
            frags = codec.encode_pieces(seg)
            cluster.stats["encode_seconds"] += time.perf_counter() - started
            cluster.stats["encode_bytes"] += len(seg)
            if not await batches.add(frags):
                await asyncio.sleep(0)  # let the uploads and the hashing run between segments
            check_quorum()
        if total != length:
            raise ValueError(f"part body ended after {total} of its announced {length} bytes")
        await batches.flush()
        result = PartResult(part_uid, length, crc, scheme)
        caller = meta(result)
        blobs = archive_metas(result, sinks, caller, stream)
        for s, blob in zip(sinks.values(), blobs, strict=True):
            s.meta = blob
            if len(s.meta) > MAX_META:
                raise ValueError(f"part metadata is {len(s.meta)} bytes as JSON, the limit is "
                                 f"{MAX_META}")
        await asyncio.gather(*(s.feed(None, timeout) for s in sinks.values()))
        await asyncio.wait([s.task for s in sinks.values()])
        check_quorum()
    except BaseException as e:
        await _abort(cluster, part_uid, sinks)
        if isinstance(e, NodeError):
            raise QuorumError(str(e)) from e
        raise
    missing = sorted(set(range(scheme.n)) - {i for i, s in sinks.items() if s.alive})
    primary = cluster.placement.primary(part_uid)
    placed = {i: s.client.id for i, s in sinks.items()}  # handed-off uploads changed node
    layout = PartLayout(part_uid, length, scheme,
                        {i: placed.get(i) or targets[i] or primary[i] for i in range(scheme.n)},
                        missing, crc)
    cluster.stats["parts_written"] += 1
    if stalls or off_home(cluster, part_uid,
                          {i: layout.placement[i] for i in placed if i not in missing}):
        cluster.handoffs.add(part_uid)  # moved home once its home takes writes again
    moved = sum(1 for s in sinks.values() if s.moved_from and s.alive)
    if moved:
        cluster.stats["full_handoffs"] += moved
    if missing:
        cluster.stats["degraded_writes"] += 1
        reasons = "; ".join(f"f{i:02d}: {sinks[i].error if i in sinks else 'no node up'}"
                            for i in missing)
        log.warning("part %s written without fragments %s: %s", part_uid, missing, reasons)
        await cluster.note_damage(layout, missing, f"write: {reasons}")
    return layout


class Batches:
    """Each archive's fragments, gathered into batches of SEND_BATCH bytes that go to its
    upload whole: an upload's task wakes once per batch, not once per segment (a 1 MiB
    segment makes 128 KiB fragments with 8+2)."""

    def __init__(self, sinks: dict[int, ArchiveUpload], stall: float) -> None:
        self._sinks = sinks
        self._stall = stall
        self._batches: dict[int, Fragment] = {i: [] for i in sinks}
        self._pending = 0  # bytes of each archive gathered

    async def add(self, frags: Mapping[int, Fragment] | Sequence[Fragment]) -> bool:
        """One segment's fragments (`frags[i]` for archive i; every archive gets as many
        bytes): True when they went to the uploads with the batch they completed."""
        if not self._batches:
            return False
        for i, batch in self._batches.items():
            batch += frags[i]
        self._pending += sum(map(len, frags[i]))  # the same for every archive
        if self._pending < SEND_BATCH:
            return False
        await self.flush()
        return True

    async def flush(self) -> None:
        """Hand over what is gathered. Most uploads find room at once: only the full queues
        need a waiting task."""
        if not self._pending:
            return
        batches, self._pending = self._batches, 0
        self._batches = {i: [] for i in self._sinks}
        sinks, stall = self._sinks, self._stall
        full = [i for i, s in sinks.items() if not s.offer(batches[i])]
        if full:
            await asyncio.gather(*(sinks[i].feed(batches[i], stall) for i in full))
        else:
            await asyncio.sleep(0)


def _watch_abandoned(cluster: ErasureCluster, part_uid: str, client: NodeClient,
                     request: asyncio.Future) -> None:
    """Once a stalled request ends (its node committed the archive, cut it, or the node
    timeout ran out; a commit also starts a run over every recorded handoff, like a node's
    return), rehome the part: it keeps one copy of each fragment (the home's),
    deleting a copy the stalled node committed late. Its handoff record is set again first
    (a rehome run may have cleared it before the late commit) and stays until that is done."""
    async def watch() -> None:
        try:
            await request
            log.info("%s: the stalled write to %s was committed late", part_uid, client.id)
            # the node answers again: what was placed off it meanwhile may go home now
            cluster.move_handoffs_home()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - cut short or timed out: nothing more to wait for
            pass
        cluster.stats["stalled_writes_ended"] += 1
        cluster.handoffs.add(part_uid)
        for attempt in range(ABANDONED_TRIES):
            try:
                if await rehome_part(cluster, part_uid) == 0:
                    cluster.handoffs.done(part_uid)
                    return
            except NodeError as e:
                log.info("%s: rehome after a stalled write: %s", part_uid, e)
            # the home still stalled or down, or another worker holds the part: later (the
            # record makes the node's return, or `zonegate repair`, finish it)
            await asyncio.sleep(STALLED_FOR * (attempt + 1))

    t = asyncio.create_task(watch())
    cluster._wakers.add(t)  # cancelled by close(); the handoff record stays for a later run
    t.add_done_callback(cluster._wakers.discard)


async def _abort(cluster: ErasureCluster, part_uid: str, sinks: dict[int, ArchiveUpload]) -> None:
    """Cancel the uploads, then delete whatever archive a node may already have committed.
    The deletion is recorded first (`cluster.deletions`) and stays pending unless every node
    confirmed: a node that committed but whose answer was lost, then could not be reached,
    leaves an archive that repair reports as queued for deletion (and finishes deleting), and
    whose owner (the gateway's pending mark) the sweeper resolves - never an unowned one."""
    try:
        await cluster.deletions.begin(part_uid)
    except Exception as e:  # the caller's pending mark still owns whatever is left
        log.warning("could not record the deletion of %s: %s", part_uid, e)
    for s in sinks.values():
        if s.task and not s.task.done():
            s.task.cancel()
    await asyncio.gather(*(s.task for s in sinks.values() if s.task), return_exceptions=True)
    failed: list[str] = []

    async def rm(s: ArchiveUpload) -> None:
        try:
            await s.client.delete(archive_id(part_uid, s.index))
        except NodeError as e:
            failed.append(s.client.id)
            log.warning("could not delete %s on %s: %s", archive_id(part_uid, s.index),
                        s.client.id, e)

    await asyncio.shield(asyncio.gather(*(rm(s) for s in sinks.values())))
    if not failed:
        with contextlib.suppress(Exception):  # left pending: repair finishes it
            await cluster.deletions.end(part_uid)
