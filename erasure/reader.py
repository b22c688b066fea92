"""Read a byte range of a part: stream the archive ranges of the segments it touches from k
nodes and decode segment by segment.

Sources are tried in this order: the data fragments (the code is systematic, so decoding them is
a copy), then parity, then fragments that were missing at write time (repair may have restored
them), then the other nodes in the part's rendezvous order (repair may have put a fragment on a
handoff node). A source that errors, times out, returns a short body (the node aborts a stream
whose CRC fails) or a fragment that does not decode is replaced by the next candidate from the
current segment on: a degraded read. Missing and corrupt fragments go into the repair queue.
A source that has not answered its open after HEDGE_AFTER gets a stand-in opened beside it
(the first k to answer are read): a hung node costs a read HEDGE_AFTER, not the node timeout.

Small ranges (within one or two data fragments) of a systematic code are served verbatim from
those fragments' nodes without decoding, falling back to the path above on any trouble.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import crc32c

from erasure.codec import HEADER_SIZE, Codec, CodecError
from erasure.errors import PartUnavailable
from erasure.layout import PartLayout
from erasure.nodeclient import NodeError, RecordCorrupt, RecordMissing, RecordReader

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster

log = logging.getLogger(__name__)
# Seconds a fragment open may take before the next candidate is opened beside it (at most
# half the node timeout). Node answers take milliseconds to ~0.3 s on a loaded 2-core machine
# (bench/README.md, Tails); a hung node would otherwise hold the read for the node timeout.
HEDGE_AFTER = 0.5
_late: set[asyncio.Future] = set()  # opens abandoned to a stand-in, closed when they end
# Nodes that needed a stand-in are asked after the others for SLOW_FOR seconds (until the
# abandoned open's node timeout says whether they are down, later reads would each wait
# HEDGE_AFTER for them again). Only the order of candidates changes.
SLOW_FOR = 10.0
# cluster -> {node id: when it last needed a stand-in}
_slow: weakref.WeakKeyDictionary[ErasureCluster, dict[str, float]] = weakref.WeakKeyDictionary()


def _is_slow(cluster: ErasureCluster, node: str) -> bool:
    slow = _slow.get(cluster)
    at = slow.get(node) if slow else None
    if at is None:
        return False
    if time.monotonic() - at > SLOW_FOR:
        del slow[node]
        return False
    return True


def _close_late(fut: asyncio.Future) -> None:
    """Close the source an abandoned open yields, whenever it does; drop its error."""
    async def close() -> None:
        try:
            src = await fut
        except BaseException:  # noqa: BLE001 - the read went on without it
            return
        if src is not None:
            await src.reader.__aexit__(None, None, None)
    t = asyncio.ensure_future(close())
    _late.add(t)
    t.add_done_callback(_late.discard)


class _Source:
    def __init__(self, index: int, node: str, reader: RecordReader) -> None:
        self.index, self.node, self.reader = index, node, reader


def _home(cluster: ErasureCluster, layout: PartLayout, index: int) -> str | None:
    """The fragment's home when the layout names a handoff node and the home is up: the
    fragment may have been moved there (erasure/rehome.py), so it is asked first."""
    home = cluster.home(layout.part_uid, layout.scheme.n)  # the part's own width
    node = home[index] if index < len(home) else None
    if node is None or node == layout.placement.get(index) or not cluster.is_up(node):
        return None
    return node


def _fast_up(cluster: ErasureCluster, layout: PartLayout, index: int) -> bool:
    node = _home(cluster, layout, index) or layout.placement.get(index, "")
    return cluster.is_up(node) and not _is_slow(cluster, node)


def _candidates(cluster: ErasureCluster, layout: PartLayout) -> Iterator[tuple[int, str]]:
    n = layout.scheme.n
    missing = set(layout.missing)
    first = [i for i in range(n) if i not in missing]  # data indexes come first: 0..k-1
    up = [i for i in first if _fast_up(cluster, layout, i)]
    down = [i for i in first if i not in up]
    for i in up + down + sorted(missing):
        home = _home(cluster, layout, i)
        if home is not None:
            yield i, home
        if i in layout.placement:
            yield i, layout.placement[i]
    for node in cluster.ranked(layout.part_uid):
        for i in range(n):
            if layout.placement.get(i) != node:
                yield i, node


async def read_part(cluster: ErasureCluster, layout: PartLayout, offset: int = 0,
                    length: int | None = None) -> AsyncIterator[bytes]:
    codec = cluster.codec_for(layout.scheme)
    plan = codec.plan_range(layout.length, offset, length)
    if plan.empty:
        return
    direct = await _read_direct(cluster, codec, layout, offset, plan.length)
    if direct is not None:
        for piece in direct:
            yield piece
        return
    k = layout.scheme.k
    # a list: a candidate passed over for one batch (its index was taken) is still there
    # for the next, when the one taken fails
    cands = list(_candidates(cluster, layout))
    used: set[int] = set()
    tried: set[tuple[int, str]] = set()
    bad: dict[int, str] = {}  # index -> why (for the repair queue)
    sources: list[_Source] = []
    whole = offset == 0 and plan.length == layout.length
    crc = 0
    degraded = False
    hedged = False
    hedge_after = min(HEDGE_AFTER, cluster.node_timeout / 2)

    async def open_one(index: int, node: str, seg: int) -> _Source | None:
        nonlocal degraded
        client = cluster.clients.get(node)
        if client is None:
            return None
        start = codec.archive_offset(layout.length, seg)
        reader = client.get(layout.archive_id(index), start, plan.archive_end)
        try:
            await reader.__aenter__()
        except NodeError as e:
            _note(e, index)
            return None
        if reader.head is not None and reader.head.length != codec.archive_length(layout.length):
            await reader.__aexit__(None, None, None)
            bad[index] = f"archive on {node} has {reader.head.length} bytes"
            return None
        if index >= k:
            degraded = True  # decoding needs parity
        return _Source(index, node, reader)

    def _note(e: NodeError, index: int) -> None:
        nonlocal degraded
        if isinstance(e, RecordMissing) and e.node == _home(cluster, layout, index):
            return  # not moved home yet: the layout's node has it
        degraded = True
        if isinstance(e, RecordMissing | RecordCorrupt) and layout.placement.get(index) == e.node:
            bad[index] = str(e)
        cluster.stats["fragment_errors"] += 1

    def next_candidates(count: int) -> list[tuple[int, str]]:
        out = []
        for i, node in cands:
            if i in used or (i, node) in tried or any(i == j for j, _ in out):
                continue
            tried.add((i, node))
            out.append((i, node))
            if len(out) == count:
                break
        return out

    async def fill(seg: int) -> None:
        """Open sources until there are k (several at once: the first k in parallel). A node
        that has not answered after HEDGE_AFTER seconds gets a stand-in: the next candidate
        is opened beside it and whichever k answer first are read (a hung or slow node costs
        the read HEDGE_AFTER, not the node timeout); the late ones are closed unread."""
        nonlocal hedged
        while len(sources) < k:
            batch = next_candidates(k - len(sources))
            if not batch:
                raise PartUnavailable(
                    f"part {layout.part_uid}: only {len(sources)} of the {k} fragments needed "
                    f"are readable ({'; '.join(f'f{i:02d}: {w}' for i, w in bad.items())})")
            for i, _ in batch:
                used.add(i)
            opening = {asyncio.ensure_future(open_one(i, nd, seg)): (i, nd) for i, nd in batch}
            wait_for: float | None = hedge_after
            try:
                while opening and len(sources) < k:
                    done, _ = await asyncio.wait(opening, timeout=wait_for,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if not done:  # stragglers: one stand-in each, once
                        wait_for = None
                        now = time.monotonic()
                        slow = _slow.setdefault(cluster, {})
                        for _, nd in opening.values():
                            slow[nd] = now
                        for i, nd in next_candidates(len(opening)):
                            used.add(i)
                            opening[asyncio.ensure_future(open_one(i, nd, seg))] = (i, nd)
                            hedged = True
                        continue
                    for t in done:
                        i, _ = opening.pop(t)
                        src = t.result()
                        if src is None:
                            used.discard(i)
                        elif len(sources) < k:
                            sources.append(src)
                        else:  # a stand-in and its straggler both answered at once
                            used.discard(i)
                            await src.reader.__aexit__(None, None, None)
            finally:
                for t, (i, _) in opening.items():  # k answered first: the rest is not needed
                    used.discard(i)
                    _close_late(t)

    async def drop(src: _Source, why: str, damaged: bool) -> None:
        sources.remove(src)
        used.discard(src.index)
        cluster.stats["fragment_errors"] += 1
        if damaged and layout.placement.get(src.index) == src.node:
            bad[src.index] = why
        await src.reader.__aexit__(None, None, None)

    try:
        await fill(plan.first_segment)
        seg_size = layout.scheme.segment_size
        range_end = plan.first_segment * seg_size + plan.skip + plan.length  # in the part
        for seg in range(plan.first_segment, plan.last_segment + 1):
            seg_len = codec.segment_length(layout.length, seg)
            fsize = codec.fragment_size(seg_len)
            lo = plan.skip if seg == plan.first_segment else 0
            hi = min(seg_len, range_end - seg * seg_size)
            got: dict[int, list[memoryview]] = {}
            while True:
                await fill(seg)
                # One source after the other, no task per fragment: the nodes' streams keep
                # arriving into their buffers while we wait on any one of them.
                for s in [s for s in sources if s.index not in got]:
                    try:
                        got[s.index] = await s.reader.take(fsize)
                    except NodeError as e:
                        degraded = True
                        await drop(s, str(e), isinstance(e, RecordCorrupt | RecordMissing))
                if len(got) < k:
                    continue
                started = time.perf_counter()
                try:
                    piece = _segment(codec, got, sources, seg_len, lo, hi)
                except CodecError:
                    piece = None
                cluster.stats["decode_seconds"] += time.perf_counter() - started
                if piece is not None:
                    cluster.stats["decode_bytes"] += seg_len
                    break
                # a fragment with a bad header: find it, drop it, and read a replacement
                degraded = True
                for s in list(sources):
                    try:
                        codec.check_fragment(_head(got[s.index]), s.index, seg_len)
                    except CodecError as e:
                        del got[s.index]
                        await drop(s, f"corrupt fragment: {e}", True)
                if len(got) == k:
                    raise PartUnavailable(f"part {layout.part_uid}: segment {seg} does not decode")
            if whole:
                crc = crc32c.crc32c(piece, crc)
            yield piece
        if whole and layout.crc32c and crc != layout.crc32c:
            raise PartUnavailable(f"part {layout.part_uid}: CRC32C mismatch after decoding")
    finally:
        for s in sources:
            await s.reader.__aexit__(None, None, None)
        if degraded or bad:
            cluster.stats["degraded_reads"] += 1
        if hedged:
            cluster.stats["hedged_reads"] += 1
        if bad:
            log.warning("part %s: bad fragments %s", layout.part_uid, bad)
            await cluster.note_damage(layout, sorted(bad), "read: " + "; ".join(
                f"f{i:02d}: {w}" for i, w in sorted(bad.items())))


async def _read_direct(cluster: ErasureCluster, codec: Codec, layout: PartLayout, offset: int,
                       length: int) -> list[bytes] | None:
    """Small ranges of a systematic code: fetch the bytes verbatim from the one or two data
    fragments holding them, no decoding. None (use the decoding path) when the range is large,
    a holder is missing or down, or anything goes wrong."""
    pieces = codec.direct_pieces(layout.length, offset, length)
    if not pieces:
        return None
    missing = set(layout.missing)
    nodes: dict[int, str] = {}
    for j, _, _ in pieces:
        node = _home(cluster, layout, j) or layout.placement.get(j)
        if j in missing or node is None or not cluster.is_up(node) or _is_slow(cluster, node):
            return None
        nodes[j] = node
    try:
        got = await asyncio.gather(*(
            cluster.clients[nodes[j]].get_bytes(layout.archive_id(j), a, b)
            for j, a, b in pieces))
    except NodeError:
        cluster.stats["fragment_errors"] += 1
        return None
    if [len(g) for g in got] != [b - a for _, a, b in pieces]:
        return None
    cluster.stats["direct_reads"] += 1
    return got


def _head(pieces: list[memoryview]) -> bytes:
    """A fragment's header (and one byte more, as pyeclib wants) from its pieces."""
    want = HEADER_SIZE + 1
    if len(pieces[0]) >= want:
        return bytes(pieces[0][:want])
    return b"".join(pieces)[:want]


def _views(pieces: list[memoryview], start: int, stop: int, out: list[memoryview]) -> None:
    """Append views of bytes [start, stop) of the concatenation of pieces to out."""
    pos = 0
    for p in pieces:
        end = pos + len(p)
        if end > start and pos < stop:
            out.append(p[max(0, start - pos):min(len(p), stop - pos)])
        pos = end
        if pos >= stop:
            return


def _segment(codec: Codec, got: dict[int, list[memoryview]], sources: list[_Source],
             seg_len: int, lo: int, hi: int) -> bytes:
    """Bytes [lo, hi) of a segment from the k fragments read. With every data fragment of a
    systematic code at hand the bytes are taken straight from the fragments (headers checked
    as pyeclib's decode would): one copy, where decoding, joining each fragment and trimming
    made three. Otherwise pyeclib decodes. CodecError when a fragment is bad."""
    k = codec.scheme.k
    if codec.systematic and all(j in got for j in range(k)):
        p = codec.fragment_size(seg_len) - HEADER_SIZE
        views: list[memoryview] = []
        for j in range(k):
            codec.check_fragment(_head(got[j]), j, seg_len)
            a, b = max(lo, j * p), min(hi, (j + 1) * p)
            if a < b:
                _views(got[j], HEADER_SIZE + a - j * p, HEADER_SIZE + b - j * p, views)
        return b"".join(views)
    data = codec.decode([b"".join(got[s.index]) for s in sources])
    if lo == 0 and hi == len(data):
        return data
    return data[lo:hi]
