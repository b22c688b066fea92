"""Adapter from S3 semantics to `erasure.ErasureCluster`.

- Part uids: `{version}.p{n}` where version is a uuid4 hex chosen per write (a single PUT is
  part 1; a multipart upload's parts use the upload id; the multipart manifest is part 0).
- Stream hints: the bucket for single PUTs, the upload id for multipart parts, so fragments of
  things that die together sit together in the zones.
- Every archive's meta dict names bucket, key, version, part number, ETag and sizes; a single
  PUT's meta also holds the whole object metadata, so `recover-metadata` can rebuild it.
- `Storage.write()` is the upload pipeline: body chunks are coalesced to ~1 MiB, hashed (MD5 and the
  S3 checksum, in a worker thread) while the erasure layer encodes and sends them; the length,
  Content-MD5 and checksums are verified before the body ends, so a bad upload raises inside
  write_part and commits nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from erasure.codec import segments
from gateway.s3 import checksums
from gateway.s3.errors import S3Error
from gateway.s3.md5lanes import new_md5
from gateway.store.deletemarkers import BATCH_PREFIX
from gateway.store.deletemarkers import settle as settle_batch
from gateway.store.records import FAILED_WRITE_DELAY, layout_to_dict

log = logging.getLogger("zonegate.storage")

MANIFEST_PART = 0
COALESCE = 1024 * 1024
PREFETCH = 2 * 1024 * 1024  # bytes before a part's end at which a read opens the next part


def new_version() -> str:
    return uuid.uuid4().hex


def part_uid(version: str, number: int) -> str:
    return f"{version}.p{number}"


async def coalesce(chunks: AsyncIterable[bytes], size: int = COALESCE) -> AsyncIterator[bytes]:
    """Regroup a stream's small network reads into `size`-byte chunks (fewer, bigger hashing
    and coding steps: hashing can then run in a worker thread). Exactly `size` (the default
    segment size) so that the erasure writer can encode them without regrouping again."""
    async for chunk in segments(chunks, size):
        yield chunk


class CopyBody:
    """An internal stream (a copy source) hashed like a client body: MD5 for the ETag and an
    optional S3 checksum; the same attributes as gateway.s3.auth.RequestBody."""

    def __init__(self, source: AsyncIterable[bytes], length: int,
                 checksum_algorithm: str = "") -> None:
        self._source = source
        self.expected_size: int | None = length
        self.size = 0
        self.checksum_algorithm = checksum_algorithm or None
        self._md5 = new_md5()
        self._ck = checksums.new_hasher(checksum_algorithm) if checksum_algorithm else None
        self.md5_digest: bytes | None = None
        self.checksum: str | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        hashers: list[Any] = [self._md5] + ([self._ck] if self._ck is not None else [])
        feeder = checksums.ThreadedHashers(hashers)
        try:
            async for chunk in coalesce(self._source):
                self.size += len(chunk)
                await feeder.feed(chunk)
                yield chunk
            await feeder.finish()
        except BaseException:
            feeder.cancel()
            raise
        if self.size != self.expected_size:
            raise S3Error("InternalError", "The copy source changed while it was read.")
        self.md5_digest = self._md5.digest()
        self.checksum = self._ck.b64() if self._ck is not None else None


PENDING_GRACE = 6 * 3600.0
# An orphan entry narrowed to the nodes that were down is first tried again this much later.
DOWN_RETRY = 60.0


class Storage:
    """Bytes of S3 parts on the erasure cluster. Layouts leave as plain dicts.

    Every write is first marked *pending* in the store's orphan queue (due after
    `pending_grace` seconds); the metadata commit that adopts the part releases the mark in the
    same transaction. A gateway that dies between writing data and committing metadata thus
    leaves a queued mark, and the sweeper later finds and deletes those fragments by scanning
    the nodes for the part uid."""

    def __init__(self, cluster: Any, pending_grace: float = PENDING_GRACE) -> None:
        self.cluster = cluster
        self.pending_grace = pending_grace
        # A node came back: the entries waiting for it are made due at the next sweep, which
        # `wake` (the gateway's sweeper kick) starts at once (issue 24 D6).
        self.nodes_back = False
        self.wake: Callable[[], None] | None = None
        observers = getattr(cluster, "return_observers", None)
        if observers is not None:
            observers.append(self._nodes_returned)

    def _nodes_returned(self, node_ids: list[str]) -> None:
        self.nodes_back = True
        if self.wake is not None:
            self.wake()

    @classmethod
    def from_config(cls, config: Any, store: Any = None) -> Storage:
        """Storage on the config's cluster; with `store` (the gateway's MetadataStore) the
        repair queue, deletion records and cluster layout are the store's, shared with other
        gateways (the layout is polled every `[gateway] layout_poll_seconds`, default 3)."""
        from erasure.cluster import ErasureCluster
        gw = dict(config.gateway or {})
        grace = float(gw.get("pending_grace_seconds", PENDING_GRACE))
        kw: dict[str, Any] = {}
        if store is not None:
            from gateway.store.erasurequeues import shared_queues
            kw = shared_queues(store)
            if "layout_poll_seconds" in gw:
                kw["layout_poll"] = float(gw["layout_poll_seconds"])
        cluster = ErasureCluster(config, **kw)
        if "census_seconds" in gw:
            cluster.census_max_age = float(gw["census_seconds"])
        if "repair_lease_seconds" in gw:
            cluster.repair_lease = float(gw["repair_lease_seconds"])
        return cls(cluster, pending_grace=grace)

    async def start(self) -> None:
        await self.cluster.start()

    async def close(self) -> None:
        await self.cluster.close()

    async def write(self, store: Any, uid: str, body: AsyncIterable[bytes], *, length: int,
                    stream: str, meta: Callable[[Any], dict[str, Any]]
                    ) -> tuple[dict[str, Any], int]:
        """Write a part; returns its layout and the pending mark to release at commit."""
        from erasure.errors import ErasureError
        mark = (await store.queue_orphans([{"part_uid": uid, "pending": True}],
                                          delay=self.pending_grace))[0]
        try:
            layout = await self.cluster.write_part(uid, body, length=length, stream=stream,
                                                   meta=meta)
        except ErasureError as e:
            await self._failed(store, uid, mark)
            log.warning("write of %s failed: %s", uid, e)
            raise S3Error("ServiceUnavailable", "Not enough storage nodes answered; "
                          "nothing was stored. Please retry.") from None
        except BaseException:
            await self._failed(store, uid, mark)
            raise
        return layout_to_dict(layout), mark

    async def _failed(self, store: Any, uid: str, mark: int) -> None:
        """A write failed: the writer deleted what it could, but a node that committed and
        whose answer was lost, or that went away before the delete, may still hold an archive.
        So the mark is never dropped: it is made due soon (a new mark first, then the old one
        goes: a crash in between leaves two, harmless), and the sweeper's scan for the uid
        deletes whatever is left."""
        try:
            await store.queue_orphans([{"part_uid": uid, "pending": True}],
                                      delay=FAILED_WRITE_DELAY)
            await store.done_orphans([mark])
        except Exception:  # the old mark stays: the sweeper resolves it after the grace
            log.exception("could not reschedule the pending mark of %s", uid)

    def _layout(self, d: dict[str, Any]) -> Any:
        from erasure.cluster import PartLayout
        if hasattr(PartLayout, "from_dict"):
            return PartLayout.from_dict(d)
        return PartLayout(**d)

    async def read(self, parts: list[dict[str, Any]], offset: int, length: int
                   ) -> AsyncIterator[bytes]:
        """Bytes [offset, offset+length) of an object made of `parts` (in order); only the
        parts (and, inside the erasure layer, the segments) that overlap are fetched.

        Across a part boundary the next part's fragment streams are opened, and its first
        segment fetched, while the last PREFETCH bytes of the current part are still being
        sent: no pause of a node round trip at each boundary of a multipart object."""
        spans: list[tuple[dict[str, Any], int, int]] = []  # (layout, offset in part, length)
        pos = 0
        end = offset + length
        for p in parts:
            size = int(p["size"])
            lo, hi = max(offset, pos), min(end, pos + size)
            if lo < hi:
                spans.append((p["layout"], lo - pos, hi - lo))
            pos += size
            if pos >= end:
                break
        ahead: asyncio.Task | None = None      # the next part's first chunk, being fetched
        nxt: AsyncIterator[bytes] | None = None
        cur: AsyncIterator[bytes] | None = None
        try:
            for i, (layout, off, n) in enumerate(spans):
                pending: bytes | None = None
                if nxt is None:
                    cur = self.cluster.read_part(self._layout(layout), off, n)
                else:
                    cur, nxt = nxt, None
                    assert ahead is not None
                    pending, ahead = await ahead, None
                left = n
                while True:
                    if pending is None:
                        chunk = await anext(cur, None)
                        if chunk is None:
                            break
                    else:
                        chunk, pending = pending, None
                    left -= len(chunk)
                    if ahead is None and left <= PREFETCH and i + 1 < len(spans):
                        nl, noff, nn = spans[i + 1]
                        nxt = self.cluster.read_part(self._layout(nl), noff, nn)
                        ahead = asyncio.ensure_future(anext(nxt, None))
                        await asyncio.sleep(0)  # let it send its node requests now
                    yield chunk
                cur = None
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.wait([ahead])  # its reader closes its node streams as it ends
                if not ahead.cancelled():
                    ahead.exception()  # retrieved: the read was abandoned, nobody wants it
            for it in (cur, nxt):
                if it is not None:
                    await aclose_quietly(it)

    async def open_read(self, parts: list[dict[str, Any]], offset: int, length: int
                        ) -> AsyncIterator[bytes]:
        """`read`, with its first chunk fetched now: an object whose data cannot be read
        gets a 503 error response instead of a 200 whose body breaks off."""
        from erasure.errors import ErasureError
        it = self.read(parts, offset, length)
        try:
            first = await anext(it)
        except StopAsyncIteration:
            first = b""
        except ErasureError as e:
            log.error("read of %s failed: %s", [p["layout"].get("part_uid") for p in parts], e)
            raise S3Error("ServiceUnavailable", "Not enough storage nodes answered to read "
                          "this object. Please retry.") from None

        return prepend(first, it)

    async def delete(self, layout: dict[str, Any]) -> None:
        # A write never committed (a pending mark), or a committed part's layout: either way
        # its archives are looked for on every node (the layout may not know a healer's
        # copies); raises while a node cannot be asked, so the entry is retried.
        await self.cluster.purge(layout["part_uid"])

    async def sweep_orphans(self, store: Any, batch: int = 100) -> int:
        """Delete the fragments queued in the store's orphan queue; returns the entries dealt
        with. A node that is down does not hold up the others: each part's archives go from
        the nodes that answer, and the entry is replaced by one naming only the nodes left
        (`purge_nodes`), tried again after DOWN_RETRY and then once per lease (entries whose
        nodes are all still down are left leased, no node is asked). Other failures leave the
        entry leased: it comes back after the lease. A batch part of delete markers goes
        only once none of its markers is stored, its live ones moved to a new part first
        (gateway/store/deletemarkers.py: settle)."""
        freed = 0
        if self.nodes_back:
            await store.wake_orphans()
            self.nodes_back = False
        settling = asyncio.Lock()  # one batch part's markers at a time
        while True:
            entries = await store.claim_orphans(batch)
            if not entries:
                return freed
            outcomes = await self._sweep(store, entries, settling)
            done = [e.id for e, (what, _) in zip(entries, outcomes, strict=True)
                    if what != "kept"]
            rest = [left for _, left in outcomes if left is not None]
            freed += sum(1 for what, _ in outcomes if what == "freed")
            if rest:  # the remainder is queued before its entry goes: a crash leaves both
                await store.queue_orphans(rest, delay=DOWN_RETRY)
            await store.done_orphans(done)
            if len(entries) < batch:
                return freed

    async def _sweep(self, store: Any, entries: list[Any], settling: asyncio.Lock
                     ) -> list[tuple[str, dict[str, Any] | None]]:
        """The outcome of each orphan entry: ("kept", None) leaves it queued (its nodes are
        down, or a node failed), ("settled", None) drops it (a batch part whose markers
        live), ("freed", rest) drops it, `rest` naming the nodes still to purge, if any. The
        parts go to the cluster together: one request per node for all of them."""
        out: list[tuple[str, dict[str, Any] | None]] = [("kept", None)] * len(entries)
        parts: dict[str, set[str] | None] = {}
        first: dict[str, int] = {}  # part uid -> its first entry (which queues what is left)
        for i, e in enumerate(entries):
            uid, only = e.layout.get("part_uid", ""), e.layout.get("purge_nodes")
            if only is not None and not any(map(self.cluster.is_up, only)):
                continue
            if only is None and uid.startswith(BATCH_PREFIX):
                try:
                    async with settling:
                        if await settle_batch(self, store, uid):
                            out[i] = ("settled", None)
                            continue
                except asyncio.CancelledError:
                    raise
                except Exception as ex:
                    log.warning("orphan %s not deleted yet: %s", uid, ex)
                    continue
            if uid in parts:  # the same part queued twice: every node either entry names
                was = parts[uid]
                parts[uid] = None if was is None or only is None else was | set(only)
            else:
                parts[uid], first[uid] = (None if only is None else set(only)), i
        if not parts:
            return out
        try:
            purged = await self.cluster.purge_parts(parts)
        except asyncio.CancelledError:
            raise
        except Exception as ex:
            log.warning("orphans %s not deleted yet: %s", ", ".join(sorted(parts)[:3]), ex)
            return out
        for i, e in enumerate(entries):
            uid = e.layout.get("part_uid", "")
            if out[i][0] == "kept" and uid in purged:
                left = purged[uid][1] if first[uid] == i else []
                out[i] = ("freed", {"part_uid": uid, "purge_nodes": left} if left else None)
        return out


async def aclose_quietly(it: Any) -> None:
    with contextlib.suppress(Exception):
        await it.aclose()


async def prepend(first: bytes, it: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`first` (a chunk already taken to see that the read starts), then the rest of `it`,
    which is closed however the consumer stops."""
    try:
        if first:
            yield first
        async for chunk in it:
            yield chunk
    finally:
        await aclose_quietly(it)
