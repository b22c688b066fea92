"""The reader's per-segment step with real pyeclib fragments: bytes taken straight from the data
fragments of a systematic code equal the decoded bytes for every sub-range, however the node
stream cut the fragments into chunks; fragments with a bad or foreign header are refused;
with parity among the fragments it decodes. And the SQLite store's parsed-parts cache never
serves a stale part list."""

from __future__ import annotations

import random

import pytest

from erasure.codec import HEADER_SIZE, Codec, CodecError
from erasure.reader import _segment, _Source
from gateway.metadata import BucketRecord, ObjectRecord, SqliteStore
from gateway.metadata import sqlite as sqlite_store

MiB = 1 << 20


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def pieces(frag: bytes, rng: random.Random) -> list[memoryview]:
    """A fragment cut at random places, as a node stream's chunks would cut it."""
    mv, out, pos = memoryview(frag), [], 0
    while pos < len(frag):
        n = rng.choice([1, 7, HEADER_SIZE, 4096, 65536, len(frag)])
        out.append(mv[pos:pos + n])
        pos += n
    return out


def sources(indexes: list[int]) -> list[_Source]:
    return [_Source(i, f"node{i}", None) for i in indexes]  # type: ignore[arg-type]


@pytest.mark.parametrize("seg_len", [MiB, 12345, 1000, 8])
def test_segment_from_data_fragments_equals_every_range(codec: Codec, seg_len: int) -> None:
    rng = random.Random(seg_len)
    seg = rng.randbytes(seg_len)
    frags = codec.encode(seg)
    k = codec.scheme.k
    p = codec.fragment_size(seg_len) - HEADER_SIZE
    cuts = sorted({0, seg_len, *(min(seg_len, j * p + d) for j in range(k + 1) for d in (-1, 0, 1)
                                if 0 <= j * p + d <= seg_len),
                   *(rng.randrange(seg_len + 1) for _ in range(20))})
    for lo in cuts:
        for hi in cuts:
            if hi <= lo:
                continue
            got = {j: pieces(frags[j], rng) for j in range(k)}
            assert _segment(codec, got, sources(list(range(k))), seg_len, lo, hi) == seg[lo:hi]
    # a data fragment missing: parity stands in and pyeclib decodes the same bytes
    idx = [i for i in range(k + 1) if i != 2]
    got = {j: pieces(frags[j], rng) for j in idx}
    assert _segment(codec, got, sources(idx), seg_len, 0, seg_len) == seg
    assert _segment(codec, got, sources(idx), seg_len, 1, seg_len - 1) == seg[1:-1]


def test_segment_refuses_bad_or_foreign_headers(codec: Codec) -> None:
    seg = random.Random(5).randbytes(MiB)
    frags = codec.encode(seg)
    k = codec.scheme.k
    rng = random.Random(6)
    bad = bytearray(frags[3])
    bad[10] ^= 0x40  # inside the header: its checksum no longer matches
    got = {j: pieces(frags[j], rng) for j in range(k)}
    got[3] = pieces(bytes(bad), rng)
    with pytest.raises(CodecError):
        _segment(codec, got, sources(list(range(k))), MiB, 0, MiB)
    with pytest.raises(CodecError):
        codec.check_fragment(bytes(bad[:HEADER_SIZE + 1]), 3, MiB)
    # a sound fragment in the wrong place (another index, or another segment's size)
    got = {j: pieces(frags[j], rng) for j in range(k)}
    got[1], got[2] = got[2], got[1]
    with pytest.raises(CodecError):
        _segment(codec, got, sources(list(range(k))), MiB, 0, MiB)
    short = codec.encode(seg[:MiB - 16])
    with pytest.raises(CodecError):
        codec.check_fragment(short[0][:HEADER_SIZE + 1], 0, MiB)


def multipart(version: str, nparts: int) -> ObjectRecord:
    parts = [{"number": n, "size": 8 * MiB, "etag": f"{version}-{n}",
              "layout": {"part_uid": f"{version}.p{n}", "placement": {str(i): f"node{i:02d}"
                                                                      for i in range(10)}}}
             for n in range(1, nparts + 1)]
    return ObjectRecord(bucket="bkt", key="big", size=8 * MiB * nparts, etag=f"{version}-x",
                        last_modified=1.0, owner="alice", version=version, parts=parts)


async def test_parsed_parts_are_reused_and_never_stale(tmp_path, monkeypatch) -> None:
    store = SqliteStore(tmp_path / "meta.sqlite")
    other = SqliteStore(tmp_path / "meta.sqlite")  # another worker process on the same file
    try:
        await store.create_bucket(BucketRecord("bkt", "alice", 1.0))
        await store.put_object(multipart("v1", 64))
        a, b = await store.get_object("bkt", "big"), await store.get_object("bkt", "big")
        assert a is not None and b is not None
        assert a.parts is b.parts and a.parts == multipart("v1", 64).parts
        await other.put_object(multipart("v2", 64))  # replaced behind this store's back
        c = await store.get_object("bkt", "big")
        assert c is not None and c.version == "v2" and c.parts == multipart("v2", 64).parts
        await other.delete_object("bkt", "big")
        assert await store.get_object("bkt", "big") is None
        # the cache stays within its byte budget
        monkeypatch.setattr(sqlite_store, "PARTS_CACHE_BYTES", 30_000)
        for i in range(5):
            rec = multipart(f"k{i}", 64)
            rec.key = f"big{i}"
            await store.put_object(rec)
            got = await store.get_object("bkt", f"big{i}")
            assert got is not None and got.parts == rec.parts
        assert 0 < store._parts_cache_bytes <= 30_000
        assert len(store._parts_cache) < 5
    finally:
        await store.close()
        await other.close()


# ---- Storage.read across parts, on real node processes ------------------------------------

@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
    from erasure.config import ClusterConfig
    from tests.support.nodeproc import NodeCluster

    root = tmp_path_factory.mktemp("read-path")
    with NodeCluster(root, 6, drives_per_node=1, secret="read-path-secret") as nc:
        cfg = ClusterConfig.from_dict({
            "secret": "read-path-secret",
            "erasure": {"k": 4, "m": 2, "write_quorum": 5, "segment_size": 64 * 1024,
                        "state_dir": str(root / "state"), "node_timeout": 20},
            "nodes": [{"id": nid, "url": url, "drives": [str(d) for d in nc.drive_paths(i)]}
                      for i, (nid, url) in enumerate(zip(nc.ids, nc.urls, strict=True))],
        }, source="test")
        yield cfg


async def test_reads_across_parts_prefetch_the_next_part_and_clean_up(small_cluster,
                                                                      monkeypatch) -> None:
    import asyncio

    from gateway.store import storage as storage_mod
    from gateway.store.storage import Storage

    monkeypatch.setattr(storage_mod, "PREFETCH", 100_000)  # a few segments, as 2 MiB is to 1 MiB
    st = Storage.from_config(small_cluster)
    await st.start()
    try:
        rng = random.Random(11)
        sizes = [300_000, 70_000, 1, 450_001, 65_536]
        blobs = [rng.randbytes(n) for n in sizes]
        parts = []
        for n, blob in enumerate(blobs, 1):
            async def body(b: bytes = blob):
                for i in range(0, len(b), 50_000):
                    yield b[i:i + 50_000]
            lay = await st.cluster.write_part(f"rp.p{n}", body(), length=len(blob), stream="t",
                                              meta=lambda r: {})
            parts.append({"number": n, "size": len(blob), "layout": lay.to_dict()})
        whole = b"".join(blobs)
        events: list[str] = []
        real = st.cluster.read_part

        async def logged(layout, offset=0, length=None):
            events.append(f"open {layout.part_uid}")
            async for c in real(layout, offset, length):
                yield c
            events.append(f"end {layout.part_uid}")

        monkeypatch.setattr(st.cluster, "read_part", logged)
        assert b"".join([c async for c in st.read(parts, 0, len(whole))]) == whole
        # each next part was opened before the one before it had ended
        for n in range(1, len(parts)):
            assert events.index(f"open rp.p{n + 1}") < events.index(f"end rp.p{n}"), events
        cases = [(0, len(whole)), (299_999, 2), (250_000, 200_000), (370_000, 1),
                 (369_999, 3), (len(whole) - 65_537, 65_537), (1234, len(whole) - 5000)]
        cases += [(a, rng.randrange(1, len(whole) - a + 1))
                  for a in (rng.randrange(len(whole)) for _ in range(15))]
        for off, n in cases:
            got = b"".join([c async for c in st.read(parts, off, n)])
            assert got == whole[off:off + n], (off, n)
        # a reader dropped mid-object (client gone) leaves no task or node stream behind
        before = len(asyncio.all_tasks())
        it = st.read(parts, 0, len(whole))
        got = 0
        async for c in it:
            got += len(c)
            if got > 280_000:  # inside part 1's last PREFETCH bytes: part 2 is being fetched
                break
        await it.aclose()
        await asyncio.sleep(0.1)
        assert len(asyncio.all_tasks()) <= before
        assert b"".join([c async for c in st.read(parts, 0, len(whole))]) == whole
    finally:
        await st.close()
