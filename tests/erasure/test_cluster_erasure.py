"""The erasure layer against a real cluster: 12 node processes on emulated zoned drives.

Streams a 1 GiB part in and out with bounded memory; survives 2 SIGKILLed nodes on read; a node
killed mid-write leaves a degraded but successful write that `zonegate repair` completes; 3
nodes lost mid-write fail the write cleanly; a fragment corrupted on disk is detected, read
around and rewritten by repair.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import random
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from erasure import writer
from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig, write_config
from erasure.errors import ErasureError, QuorumError
from erasure.layout import PartLayout, archive_id
from erasure.nodeclient import RecordMissing
from erasure.repair import repair
from tests.support.nodeproc import NodeCluster

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
MiB = 1 << 20
SECRET = "erasure-cluster-test-secret"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    root = tmp_path_factory.mktemp("ec-cluster")
    with NodeCluster(root, 12, drives_per_node=2, secret=SECRET,
                     extra_args=["--reclaim-interval", "0"]) as nc:
        yield nc


@pytest.fixture
def config(nodes: NodeCluster, tmp_path: Path) -> ClusterConfig:
    for i, node in enumerate(nodes.nodes):  # every test starts with all 12 nodes up
        if not node.running:
            nodes.restart(i)
    cfg = ClusterConfig.from_dict({
        "secret": SECRET,
        "erasure": {"state_dir": str(tmp_path / "state"), "node_timeout": 20},
        "nodes": [{"id": nid, "url": url, "drives": [str(d) for d in nodes.drive_paths(i)]}
                  for i, (nid, url) in enumerate(zip(nodes.ids, nodes.urls, strict=True))],
    }, source="test")
    write_config(tmp_path / "cluster.toml", cfg)
    return cfg


def chunks(size: int, seed: int, chunk: int = MiB) -> Iterator[bytes]:
    """Deterministic, incompressible-enough data without holding it: a random block whose
    first 8 bytes carry the chunk number."""
    base = bytearray(random.Random(seed).randbytes(chunk))
    for n, off in enumerate(range(0, size, chunk)):
        base[:8] = n.to_bytes(8, "little")
        yield bytes(base[:min(chunk, size - off)])


async def body(size: int, seed: int, on_chunk=None) -> AsyncIterator[bytes]:
    for n, c in enumerate(chunks(size, seed, 256 * 1024)):
        if on_chunk:
            on_chunk(n)
        yield c


def data(size: int, seed: int) -> bytes:
    return b"".join(chunks(size, seed, 256 * 1024))


async def read_all(c: ErasureCluster, layout: PartLayout, offset: int = 0,
                   length: int | None = None) -> bytes:
    return b"".join([b async for b in c.read_part(layout, offset, length)])


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def put(c: ErasureCluster, uid: str, size: int, seed: int, on_chunk=None) -> PartLayout:
    return await c.write_part(uid, body(size, seed, on_chunk), length=size, stream="test",
                              meta=lambda r: {"bucket": "b", "key": uid, "crc": r.crc32c})


async def test_1gib_part_streams_in_and_out_with_bounded_memory(config: ClusterConfig) -> None:
    size = 1024 * MiB
    expected = hashlib.sha256()
    for c in chunks(size, 1, 256 * 1024):
        expected.update(c)
    async with ErasureCluster(config) as cluster:
        peak = base = rss_kib()

        def sample(_: int) -> None:
            nonlocal peak
            peak = max(peak, rss_kib())

        layout = await put(cluster, "big0001.p1", size, 1, sample)
        assert layout.missing == [] and layout.length == size
        got = hashlib.sha256()
        async for b in cluster.read_part(layout):
            got.update(b)
            peak = max(peak, rss_kib())
        assert got.hexdigest() == expected.hexdigest()
        # a few segments in flight per archive, not the part: far below the 1 GiB that moved
        print(f"RSS growth while streaming 1 GiB in and out: {(peak - base) // 1024} MiB")
        assert (peak - base) < 64 * 1024, f"RSS grew by {(peak - base) // 1024} MiB"
        # a 4 KiB ranged read deep inside the part
        off = 700 * MiB + 12345
        assert await read_all(cluster, layout, off, 4096) == _slice(size, 1, off, 4096)
        assert await cluster.delete_part(layout) == 10


def _slice(size: int, seed: int, off: int, n: int) -> bytes:
    out = bytearray()
    pos = 0
    for c in chunks(size, seed, 256 * 1024):
        if pos + len(c) > off and pos < off + n:
            out += c[max(0, off - pos):off + n - pos]
        pos += len(c)
        if pos >= off + n:
            break
    return bytes(out)


async def test_every_read_succeeds_with_two_nodes_killed(nodes: NodeCluster,
                                                         config: ClusterConfig) -> None:
    sizes = [0, 1, MiB - 1, MiB, MiB + 1, 5 * MiB + 3]
    async with ErasureCluster(config) as cluster:
        layouts = [await put(cluster, f"two{n:04d}.p1", s, n) for n, s in enumerate(sizes)]
        # kill the holders of data fragments 0 and 1 of the largest part: its reads must decode
        victims = [layouts[-1].placement[0], layouts[-1].placement[1]]
        for v in victims:
            nodes.kill(nodes.ids.index(v))
        before = cluster.stats["degraded_reads"]
        for layout, s, n in zip(layouts, sizes, range(len(sizes)), strict=True):
            assert await read_all(cluster, layout) == data(s, n)
            if s > 10:
                assert await read_all(cluster, layout, s // 2, 4096) == data(s, n)[s // 2:s // 2 + 4096]
        assert cluster.stats["degraded_reads"] > before
        # writes go on too: the dead nodes' fragments go to handoff nodes
        await cluster.check_health()
        layout = await put(cluster, "two9999.p1", 3 * MiB, 99)
        assert layout.missing == [] and not set(victims) & set(layout.placement.values())
        assert await read_all(cluster, layout) == data(3 * MiB, 99)

        # the two nodes are gone for good: repair rebuilds their fragments on other nodes
        report = await repair(cluster, "two", include_unreachable=True)
        assert sorted(report.unreachable) == sorted(victims)
        on_victims = [lay.part_uid for lay in layouts if set(victims) & set(lay.placement.values())]
        assert sorted(p for p, _ in report.fixed) == sorted(on_victims) and on_victims
        for p in await cluster.scan("two"):
            assert sorted(p.fragments) == list(range(10))
            assert not set(victims) & {n for ns in p.fragments.values() for n in ns}
            assert len({n for ns in p.fragments.values() for n in ns}) == 10


async def test_node_killed_mid_write_then_repair_restores_fragment(
        nodes: NodeCluster, config: ClusterConfig, tmp_path: Path) -> None:
    size = 48 * MiB
    async with ErasureCluster(config, auto_repair=False) as cluster:
        victim = cluster.placement.primary("kill0001.p1")[3]

        def kill_midway(n: int) -> None:
            if n == 40:  # 10 MiB in
                nodes.kill(nodes.ids.index(victim))

        layout = await put(cluster, "kill0001.p1", size, 7, kill_midway)
        assert layout.missing == [3] and layout.placement[3] == victim
        assert [r.indexes for r in (await cluster.repair_queue.records())] == [[3]]
        assert await read_all(cluster, layout) == data(size, 7)

    # the operator runs the real command while the node is still dead
    zonegate = str(Path(sys.executable).parent / "zonegate")
    proc = await asyncio.create_subprocess_exec(
        zonegate, "repair", "--config", str(tmp_path / "cluster.toml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"})
    stdout = (await proc.communicate())[0].decode()
    assert proc.returncode == 0, stdout
    assert "nodes unreachable: " in stdout and "fixed kill0001.p1: f03 -> " in stdout
    assert "1 parts fixed, 0 failed, 0 unrecoverable" in stdout  # others' parts: deferred
    async with ErasureCluster(config) as cluster:
        assert (await cluster.repair_queue.records()) == []
        [part] = await cluster.scan("kill0001")
        assert sorted(part.fragments) == list(range(10))
        handoff = part.fragments[3][0]
        assert handoff != victim and handoff not in layout.placement.values()
        # prove the rebuilt fragment is right: lose two others, so it is needed to decode
        for i in (0, 5):
            nodes.kill(nodes.ids.index(layout.placement[i]))
        await cluster.check_health()
        assert await read_all(cluster, part.layout()) == data(size, 7)
        # a rerun rebuilds nothing: the fragments it cannot see are on nodes that are down
        report = await repair(cluster, "kill0001")
        assert report.fixed == [] and sorted(i for _, i, _ in report.deferred) == [0, 5]
        # deleting with nodes down fails (to be retried: any node may hold a copy), then
        # removes every copy, the handoff's rebuilt fragment included, which the gateway's
        # layout does not name
        with pytest.raises(ErasureError, match="not deleted yet"):
            await cluster.delete_part(layout)
        for i in (0, 5):
            nodes.restart(nodes.ids.index(layout.placement[i]))
        nodes.restart(nodes.ids.index(victim))
        await cluster.check_health()
        await cluster.delete_part(layout)
        assert await cluster.scan("kill0001") == []


async def test_three_nodes_lost_mid_write_fail_cleanly(nodes: NodeCluster,
                                                       config: ClusterConfig) -> None:
    uid = "three001.p1"
    async with ErasureCluster(config) as cluster:
        victims = cluster.placement.primary(uid)[2:5]

        def kill_three(n: int) -> None:
            if n == 20:
                for v in victims:
                    nodes.kill(nodes.ids.index(v))

        with pytest.raises(QuorumError, match="below the write quorum"):
            await put(cluster, uid, 32 * MiB, 3, kill_three)
        for v in victims:
            nodes.restart(nodes.ids.index(v))
        await cluster.check_health()
        assert await cluster.scan(uid) == []
        assert (await cluster.repair_queue.records()) == []

        # the same with the nodes known to be down before the write: 9 nodes for 10 fragments
        # meet the quorum of 9, so the write succeeds and the 10th awaits repair ...
        down = cluster.placement.primary("three002.p1")[:3]
        for v in down:
            nodes.kill(nodes.ids.index(v))
        await cluster.check_health()
        layout = await put(cluster, "three002.p1", 2 * MiB, 4)
        assert len(layout.missing) == 1
        # ... and with a quorum of 10 it fails before sending a byte
        strict = ClusterConfig.from_dict({**config.to_dict(), "erasure": {
            **config.to_dict()["erasure"], "write_quorum": 10}})
        async with ErasureCluster(strict) as c2:
            with pytest.raises(QuorumError, match="only 9 nodes are up"):
                await put(c2, "three003.p1", 2 * MiB, 5)
            assert await c2.scan("three003") == []


def _flip_on_disk(drives: list[Path], needle: bytes) -> Path:
    for d in drives:
        for zf in sorted((d / "zones").iterdir()):
            if zf.suffix or zf.stat().st_size == 0:
                continue
            blob = zf.read_bytes()
            pos = blob.find(needle)
            if pos >= 0:
                with zf.open("r+b") as f:
                    f.seek(pos + 100)
                    f.write(bytes([blob[pos + 100] ^ 0xFF]))
                    f.flush()
                    os.fsync(f.fileno())
                return zf
    raise AssertionError("fragment bytes not found on the node's drives")


async def test_corrupt_fragment_is_detected_read_around_and_repaired(
        nodes: NodeCluster, config: ClusterConfig) -> None:
    size = 3 * MiB + 17
    uid = "corrupt1.p1"
    async with ErasureCluster(config, auto_repair=False) as cluster:
        layout = await put(cluster, uid, size, 11)
        # the code is systematic: fragment 0 of segment 1 holds bytes [1 MiB, 1 MiB + 128 KiB)
        payload = data(size, 11)
        node = layout.placement[0]
        _flip_on_disk(nodes.drive_paths(nodes.ids.index(node)), payload[MiB + 4096:MiB + 4160])
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 1
        [rec] = (await cluster.repair_queue.records())
        assert rec.indexes == [0]

        report = await repair(cluster, uid)
        assert [(p, list(w)) for p, w in report.fixed] == [(uid, [0])]
        assert report.fixed[0][1][0] == node  # rewritten in place
        assert (await cluster.repair_queue.records()) == []
        frag = await cluster.clients[node].get_bytes(archive_id(uid, 0))
        assert len(frag) == cluster.codec.archive_length(size)
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 1  # no longer degraded


async def test_deep_repair_finds_silent_corruption(nodes: NodeCluster,
                                                   config: ClusterConfig) -> None:
    size = 2 * MiB
    uid = "deep0001.p1"
    async with ErasureCluster(config) as cluster:
        layout = await put(cluster, uid, size, 21)
        node = layout.placement[1]
        payload = data(size, 21)
        _flip_on_disk(nodes.drive_paths(nodes.ids.index(node)),
                      payload[128 * 1024 + 512:128 * 1024 + 576])
        shallow = await repair(cluster, uid, dry_run=True)
        assert shallow.failed == [] and shallow.healthy == 1
        report = await repair(cluster, uid, deep=True)
        assert [(p, dict(w)) for p, w in report.fixed] == [(uid, {1: node})]
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 0


async def test_body_length_mismatch_is_refused_and_leaves_nothing(config: ClusterConfig) -> None:
    async with ErasureCluster(config) as cluster:
        for uid, announced, actual in (("short001.p1", 3 * MiB, 2 * MiB + 5),
                                       ("long0001.p1", 2 * MiB, 2 * MiB + 1)):
            with pytest.raises(ValueError, match="announced"):
                await cluster.write_part(uid, body(actual, 1), length=announced, stream="t",
                                         meta=lambda r: {})
            assert await cluster.scan(uid) == []
        with pytest.raises(ValueError, match="invalid record id"):
            await cluster.write_part("../etc/passwd", body(10, 1), length=10, stream="t",
                                     meta=lambda r: {})
        assert (await cluster.repair_queue.records()) == []


async def test_a_written_part_lets_go_of_its_body_buffers_without_the_gc(
        config: ClusterConfig) -> None:
    """The gateway receives a body into pooled buffers and reuses one once nothing refers to
    it; the writer keeps a part's fragments (views of those buffers) for a replay until its
    nodes answer. Its uploads and their handoff closure form a reference cycle, so fragments
    held there lived until the cyclic GC ran: a worker's heap grew past 1 GB, and every
    segment needed a fresh buffer. With the GC off, the buffers must be free once the part is
    written (a bytearray with a live view of it cannot grow)."""
    size = 4 * MiB
    buf = bytearray(data(size, 7))

    async def views() -> AsyncIterator[memoryview]:
        mv = memoryview(buf).toreadonly()
        for off in range(0, size, MiB):  # whole segments: passed on as views, not copied
            yield mv[off:off + MiB]

    async with ErasureCluster(config) as cluster:
        assert cluster.scheme.segment_size == MiB
        gc.collect()
        gc.disable()
        try:
            layout = await cluster.write_part("gcfree01.p1", views(), length=size,
                                              stream="t", meta=lambda r: {})
            buf.append(0)  # BufferError while anything still holds a view of it
            del buf[-1]
        finally:
            gc.enable()
        assert layout.missing == []
        assert await read_all(cluster, layout) == data(size, 7)
        assert await cluster.delete_part(layout) == cluster.scheme.n


async def test_an_upload_is_handed_whole_batches_not_each_segments_fragment(
        config: ClusterConfig, monkeypatch) -> None:
    """Each fragment queued wakes its upload's task: the writer gathers an archive's fragments
    into SEND_BATCH batches first, so an 8 MiB part (8 segments) wakes each of its ten
    uploads once for its bytes (and once for the end), not eight times."""
    offered = count_offers(monkeypatch)
    async with ErasureCluster(config) as cluster:
        size = 8 * MiB + 5000  # a short last segment: its batch goes with the end
        layout = await put(cluster, "batches1.p1", size, 11)
        check_two_batches_each(offered, cluster.scheme.n, cluster.codec.archive_length(size))
        assert await read_all(cluster, layout) == data(size, 11)


def count_offers(monkeypatch) -> list[int]:
    """The bytes of each batch queued for an upload from now on (-1: its end)."""
    offered: list[int] = []
    offer = writer.ArchiveUpload.offer

    def counting(self, item):
        offered.append(-1 if item is None else sum(map(len, item)))
        return offer(self, item)

    monkeypatch.setattr(writer.ArchiveUpload, "offer", counting)
    return offered


def check_two_batches_each(offered: list[int], uploads: int, archive_length: int) -> None:
    """Each upload got a full batch, then the short rest, then its end."""
    assert offered.count(-1) == uploads
    batches = [b for b in offered if b >= 0]
    assert len(batches) == 2 * uploads, offered
    assert sum(batches) == uploads * archive_length
    assert min(batches[:uploads]) >= writer.SEND_BATCH


async def test_a_repair_hands_its_uploads_whole_batches_too(
        config: ClusterConfig, monkeypatch) -> None:
    """Rebuilt fragments go to their uploads the writer's way (`writer.Batches`): two lost
    fragments of an 8 MiB part are rebuilt segment by segment, and each of their uploads is
    handed two batches and the end, not a fragment per segment."""
    from erasure.repair import heal

    async with ErasureCluster(config, auto_repair=False) as cluster:
        size = 8 * MiB + 5000
        layout = await put(cluster, "batches2.p1", size, 12)
        for i in (3, 7):
            assert await cluster.clients[layout.placement[i]].delete(
                archive_id("batches2.p1", i))
        offered = count_offers(monkeypatch)
        written = await heal(cluster, layout, [3, 7])
        assert sorted(written) == [3, 7]
        check_two_batches_each(offered, 2, cluster.codec.archive_length(size))
        monkeypatch.undo()
        # the rebuilt fragments are right: read with two others gone, they are needed
        for i in (0, 1):
            assert await cluster.clients[layout.placement[i]].delete(
                archive_id("batches2.p1", i))
        layout = PartLayout(layout.part_uid, layout.length, layout.scheme,
                            {**layout.placement, **written}, [0, 1], layout.crc32c)
        assert await read_all(cluster, layout) == data(size, 12)

async def test_4k_range_fetches_only_what_it_needs(nodes: NodeCluster,
                                                  config: ClusterConfig) -> None:
    async with ErasureCluster(config) as cluster:
        size = 24 * MiB
        layout = await put(cluster, "range001.p1", size, 31)
        fetched = lambda: sum(c.bytes_read for c in cluster.clients.values())  # noqa: E731
        off = 17 * MiB + 5000
        before = fetched()
        assert await read_all(cluster, layout, off, 4096) == data(size, 31)[off:off + 4096]
        assert fetched() - before == 4096  # verbatim from the one data fragment holding it
        assert cluster.stats["direct_reads"] == 1
        # with that fragment's node down: decode the one segment from 8 fragments
        holder = layout.placement[(5000 // 131072)]
        nodes.kill(nodes.ids.index(holder))
        await cluster.check_health()
        before = fetched()
        assert await read_all(cluster, layout, off, 4096) == data(size, 31)[off:off + 4096]
        assert fetched() - before == 8 * cluster.codec.fragment_size(MiB)
        # a range across a segment boundary with all up but one: two segments, no more
        before = fetched()
        assert await read_all(cluster, layout, 3 * MiB - 10, 20) == data(size, 31)[
            3 * MiB - 10:3 * MiB + 10]
        assert fetched() - before <= 2 * 8 * cluster.codec.fragment_size(MiB)


async def test_stalled_node_times_out_and_reads_and_writes_go_on(
        nodes: NodeCluster, config: ClusterConfig) -> None:
    quick = ClusterConfig.from_dict({**config.to_dict(), "erasure": {
        **config.to_dict()["erasure"], "node_timeout": 2}})
    async with ErasureCluster(quick, health_interval=0) as cluster:
        size = 6 * MiB
        layout = await put(cluster, "stall001.p1", size, 41)
        i = nodes.ids.index(layout.placement[2])
        os.kill(nodes.pid(i), signal.SIGSTOP)  # alive but silent: only a timeout notices
        try:
            assert await read_all(cluster, layout) == data(size, 41)
            # a stand-in fragment was opened after HEDGE_AFTER: the read did not wait for the
            # node timeout (2 s here, 30 s by default)
            assert cluster.stats["degraded_reads"] == 1
            assert cluster.stats["hedged_reads"] == 1
            # the next read asks the other nodes first: no second wait for the stalled one
            assert await read_all(cluster, layout) == data(size, 41)
            assert cluster.stats["hedged_reads"] == 1
            # the abandoned open still times out in the background and marks the node down
            for _ in range(100):
                if not cluster.is_up(nodes.ids[i]):
                    break
                await asyncio.sleep(0.1)
            assert not cluster.is_up(nodes.ids[i])
            # the writer skips the node known down now
            layout2 = await put(cluster, "stall002.p1", size, 42)
            assert layout2.missing == [] and nodes.ids[i] not in layout2.placement.values()
            # a node that stalls mid-write costs one fragment, not the write
            uid = "stall003.p1"
            j = nodes.ids.index(cluster.targets(uid)[5])

            def stop(n: int) -> None:
                if n == 2:
                    os.kill(nodes.pid(j), signal.SIGSTOP)

            try:
                layout3 = await put(cluster, uid, 16 * MiB, 43, stop)
            finally:
                os.kill(nodes.pid(j), signal.SIGCONT)
            assert layout3.missing == [5]
            assert await read_all(cluster, layout3) == data(16 * MiB, 43)
        finally:
            os.kill(nodes.pid(i), signal.SIGCONT)


async def test_wrong_secret_is_a_clear_error(config: ClusterConfig) -> None:
    bad = ClusterConfig.from_dict({**config.to_dict(), "secret": "not-the-cluster-secret"})
    async with ErasureCluster(bad, health_interval=0) as cluster:
        with pytest.raises(QuorumError, match="403"):
            await put(cluster, "secret01.p1", 1000, 1)


async def test_interrupted_repair_leaves_nothing_half_done_and_a_rerun_fixes(
        config: ClusterConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    uid, size = "intr0001.p1", 8 * MiB
    async with ErasureCluster(config) as cluster:
        layout = await put(cluster, uid, size, 51)
        node = layout.placement[6]
        assert await cluster.clients[node].delete(archive_id(uid, 6))  # a lost fragment
        codec = cluster.codec_for(layout.scheme)
        real, calls = codec.reconstruct, 0

        def interrupted(frags, indexes):
            nonlocal calls
            calls += 1
            if calls == 3:  # Ctrl-C in the middle of the part (asyncio.run cancels the task)
                asyncio.current_task().cancel()
            return real(frags, indexes)

        monkeypatch.setattr(codec, "reconstruct", interrupted)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(repair(cluster, uid))
        monkeypatch.undo()
        with pytest.raises(RecordMissing):  # the half-sent archive was never committed
            await cluster.clients[node].head(archive_id(uid, 6))
        report = await repair(cluster, uid)
        assert [(p, dict(w)) for p, w in report.fixed] == [(uid, {6: node})]
        head = await cluster.clients[node].head(archive_id(uid, 6))
        assert head.length == cluster.codec.archive_length(size)
        assert (await repair(cluster, uid)).fixed == []  # and a third run has nothing to do


async def test_oversized_metadata_is_refused_and_leaves_nothing(config: ClusterConfig) -> None:
    async with ErasureCluster(config) as cluster:
        with pytest.raises(ValueError, match="metadata"):
            await cluster.write_part("meta0001.p1", body(MiB, 1), length=MiB, stream="t",
                                     meta=lambda r: {"x": "y" * 70000})
        assert await cluster.scan("meta0001") == []


async def test_concurrent_writes_and_reads(config: ClusterConfig) -> None:
    async with ErasureCluster(config) as cluster:
        sizes = [(n * 613_457) % (5 * MiB) for n in range(24)]
        layouts = await asyncio.gather(*(put(cluster, f"conc{n:04d}.p1", s, 100 + n)
                                         for n, s in enumerate(sizes)))
        assert all(not lay.missing for lay in layouts)
        got = await asyncio.gather(*(read_all(cluster, lay) for lay in layouts))
        for n, (s, g) in enumerate(zip(sizes, got, strict=True)):
            assert g == data(s, 100 + n), n
        # ranges of every shape: inside a fragment, across fragments and segments, to the end
        rnd = random.Random(5)
        for n, (s, lay) in enumerate(zip(sizes, layouts, strict=True)):
            whole = data(s, 100 + n)
            for _ in range(6):
                off = rnd.randrange(s + 1)
                ln = rnd.choice([None, 0, 1, 4096, rnd.randrange(300_000), rnd.randrange(3 * MiB)])
                want = whole[off:] if ln is None else whole[off:off + ln]
                assert await read_all(cluster, lay, off, ln) == want, (n, off, ln)
        parts = {p.part_uid: p for p in await cluster.scan("conc")}
        assert len(parts) == 24
        for n, s in enumerate(sizes):
            p = parts[f"conc{n:04d}.p1"]
            assert p.length == s and sorted(p.fragments) == list(range(10))
            assert p.meta == {"bucket": "b", "key": f"conc{n:04d}.p1", "crc": p.crc32c}
        assert sum(await asyncio.gather(*(cluster.delete_part(lay) for lay in layouts))) == 240


async def test_corruption_found_mid_stream_is_not_a_dead_node(nodes: NodeCluster,
                                                             config: ClusterConfig) -> None:
    size, uid = 24 * MiB, "corrupt2.p1"
    async with ErasureCluster(config, auto_repair=False) as cluster:
        layout = await put(cluster, uid, size, 12)
        payload = data(size, 12)
        node = layout.placement[0]
        # deep inside the archive (segment 20), past the chunk the node checks before answering;
        # the chunk counter at 20 MiB makes these bytes unique
        _flip_on_disk(nodes.drive_paths(nodes.ids.index(node)), payload[20 * MiB:20 * MiB + 64])
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 1
        assert cluster.is_up(node)  # the node cut one stream; it is not down
        [rec] = (await cluster.repair_queue.records())
        assert rec.indexes == [0] and "stream cut by the node" in rec.reason, rec.reason
        report = await repair(cluster, uid)
        assert [(p, dict(w)) for p, w in report.fixed] == [(uid, {0: node})]
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 1


async def test_repair_also_fixes_a_corrupt_source_it_meets(nodes: NodeCluster,
                                                           config: ClusterConfig) -> None:
    size, uid = 24 * MiB, "corrupt3.p1"
    async with ErasureCluster(config) as cluster:
        layout = await put(cluster, uid, size, 13)
        payload = data(size, 13)
        lost, rotten = layout.placement[6], layout.placement[2]
        assert await cluster.clients[lost].delete(archive_id(uid, 6))
        # data fragment 2 of segment 20 starts with chunk 81's counter (unique bytes)
        start = 20 * MiB + 2 * 131072
        _flip_on_disk(nodes.drive_paths(nodes.ids.index(rotten)), payload[start:start + 64])
        report = await repair(cluster, uid)
        assert [(p, dict(w)) for p, w in report.fixed] == [(uid, {6: lost, 2: rotten})]
        for i in (2, 6):
            assert len(await cluster.clients[layout.placement[i]].get_bytes(
                archive_id(uid, i))) == cluster.codec.archive_length(size)
        assert await read_all(cluster, layout) == payload
        assert cluster.stats["degraded_reads"] == 0



async def test_degraded_write_is_healed_in_the_background(nodes: NodeCluster,
                                                          config: ClusterConfig) -> None:
    size, uid = 12 * MiB, "heal0001.p1"
    async with ErasureCluster(config) as cluster:  # auto_repair is the default
        victim = cluster.placement.primary(uid)[4]

        def kill_midway(n: int) -> None:
            if n == 8:
                nodes.kill(nodes.ids.index(victim))

        layout = await put(cluster, uid, size, 61, kill_midway)
        assert layout.missing == [4]
        for _ in range(600):  # wait for the healer, not for a time
            if cluster.stats["healed_parts"] or cluster.stats["heal_failures"]:
                break
            await asyncio.sleep(0.05)
        assert cluster.stats["healed_parts"] == 1, cluster.stats
        assert (await cluster.repair_queue.records()) == []
        [part] = await cluster.scan(uid)
        assert sorted(part.fragments) == list(range(10))
        assert part.fragments[4] != [victim]
        # the stale layout (missing [4]) still reads, and with two more nodes down it needs
        # the healed fragment, which it finds on the handoff node
        for i in (0, 1):
            nodes.kill(nodes.ids.index(layout.placement[i]))
        await cluster.check_health()
        assert await read_all(cluster, layout) == data(size, 61)
