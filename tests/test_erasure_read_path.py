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


def test_parsed_parts_are_reused_and_never_stale(tmp_path, monkeypatch) -> None:
    store = SqliteStore(tmp_path / "meta.sqlite")
    other = SqliteStore(tmp_path / "meta.sqlite")  # another worker process on the same file
    try:
        store.create_bucket(BucketRecord("bkt", "alice", 1.0))
        store.put_object(multipart("v1", 64))
        a, b = store.get_object("bkt", "big"), store.get_object("bkt", "big")
        assert a is not None and b is not None
        assert a.parts is b.parts and a.parts == multipart("v1", 64).parts
        other.put_object(multipart("v2", 64))  # replaced behind this store's back
        c = store.get_object("bkt", "big")
        assert c is not None and c.version == "v2" and c.parts == multipart("v2", 64).parts
        other.delete_object("bkt", "big")
        assert store.get_object("bkt", "big") is None
        # the cache stays within its byte budget
        monkeypatch.setattr(sqlite_store, "PARTS_CACHE_BYTES", 30_000)
        for i in range(5):
            rec = multipart(f"k{i}", 64)
            rec.key = f"big{i}"
            store.put_object(rec)
            got = store.get_object("bkt", f"big{i}")
            assert got is not None and got.parts == rec.parts
        assert 0 < store._parts_cache_bytes <= 30_000
        assert len(store._parts_cache) < 5
    finally:
        store.close()
        other.close()
