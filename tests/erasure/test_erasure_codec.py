"""The codec round-trips every size and every pattern of up to m lost fragments, and maps byte
ranges to the archive bytes of only the segments they touch."""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erasure.codec import (
    HEADER_SIZE,
    Codec,
    CodecError,
    Scheme,
    decode_from_archives,
    encode_to_archives,
    segments,
)

SEG = 1000  # small and not a multiple of k, so fragment padding is exercised
CODEC = Codec(Scheme(k=8, m=2, segment_size=SEG))
SIZES = [0, 1, SEG - 1, SEG, SEG + 1, 3 * SEG, 3 * SEG + 7]
LOSSES = [c for r in range(CODEC.scheme.m + 1) for c in itertools.combinations(range(10), r)]


def data_of(n: int, seed: int = 0) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


@pytest.mark.parametrize("size", SIZES)
def test_every_loss_pattern_up_to_m_round_trips(size: int) -> None:
    data = data_of(size, size)
    archives = encode_to_archives(CODEC, data)
    assert all(len(a) == CODEC.archive_length(size) for a in archives)
    for lost in LOSSES:
        kept = {i: a for i, a in enumerate(archives) if i not in lost}
        assert decode_from_archives(CODEC, size, kept) == data, lost


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from(SIZES) | st.integers(0, 5 * SEG),
       lost=st.sampled_from(LOSSES), seed=st.integers(0, 1000),
       r=st.tuples(st.integers(0, 6 * SEG), st.integers(0, 6 * SEG)))
def test_hypothesis_round_trip_with_ranges(size: int, lost: tuple, seed: int, r: tuple) -> None:
    data = data_of(size, seed)
    archives = encode_to_archives(CODEC, data)
    kept = {i: a for i, a in enumerate(archives) if i not in lost}
    assert decode_from_archives(CODEC, size, kept) == data
    offset = min(r[0], size)
    assert decode_from_archives(CODEC, size, kept, offset, r[1]) == data[offset:offset + r[1]]


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 10), m=st.integers(1, 4), seg=st.integers(1, 3000),
       size=st.integers(0, 8000), data=st.data())
def test_other_schemes_round_trip(k: int, m: int, seg: int, size: int, data) -> None:
    codec = Codec(Scheme(k=k, m=m, segment_size=seg), warm_up=False)
    payload = data_of(size, k * m)
    archives = encode_to_archives(codec, payload)
    lost = data.draw(st.sets(st.integers(0, k + m - 1), max_size=m))
    kept = {i: a for i, a in enumerate(archives) if i not in lost}
    assert decode_from_archives(codec, size, kept) == payload


def test_more_than_m_losses_are_refused() -> None:
    archives = encode_to_archives(CODEC, data_of(2 * SEG))
    kept = {i: a for i, a in enumerate(archives) if i not in (0, 4, 9)}
    with pytest.raises(CodecError):
        decode_from_archives(CODEC, 2 * SEG, kept)


def test_fragment_header_and_sizes() -> None:
    codec = Codec()  # the default 8+2, 1 MiB segments, ISA-L
    assert codec.scheme == Scheme(8, 2, 1024 * 1024, "isa_l_rs_vand")
    frags = codec.encode(data_of(1024 * 1024))
    assert [len(f) for f in frags] == [131072 + HEADER_SIZE] * 10
    assert codec.fragment_size(1024 * 1024) == 131072 + HEADER_SIZE
    assert [codec.fragment_index(f) for f in frags] == list(range(10))
    assert codec.archive_length(0) == 0
    assert codec.archive_length(3 * 1024 * 1024 + 5) == 3 * (131072 + 80) + codec.fragment_size(5)


def test_4k_ranged_read_touches_one_segment_only() -> None:
    codec = Codec()
    part = 100 * 1024 * 1024
    frag = codec.fragment_size(1024 * 1024)
    plan = codec.plan_range(part, 37 * 1024 * 1024 + 8192, 4096)
    assert (plan.first_segment, plan.last_segment) == (37, 37)
    assert (plan.archive_start, plan.archive_end) == (37 * frag, 38 * frag)
    assert (plan.skip, plan.length) == (8192, 4096)
    # a range straddling a segment boundary needs exactly the two segments
    plan = codec.plan_range(part, 2 * 1024 * 1024 - 10, 20)
    assert (plan.first_segment, plan.last_segment) == (1, 2)
    assert plan.archive_end - plan.archive_start == 2 * frag


def test_range_past_the_end_is_refused_and_empty_ranges_are_empty() -> None:
    with pytest.raises(ValueError):
        CODEC.plan_range(10, 11, 1)
    assert CODEC.plan_range(10, 10, 5).empty
    assert CODEC.plan_range(0).empty


def test_impossible_scheme_names_the_backend() -> None:
    with pytest.raises(ValueError, match="no_such_backend"):
        Codec(Scheme(k=8, m=2, backend="no_such_backend"))


async def test_segmenter_rechunks_any_chunking() -> None:
    data = data_of(7 * 333 + 5)

    async def body():
        for i in range(0, len(data), 777):
            yield data[i:i + 777]
        yield b""

    out = [s async for s in segments(body(), 333)]
    assert all(len(s) == 333 for s in out[:-1]) and len(out[-1]) == 5
    assert b"".join(out) == data


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 900), max_size=12), seg=st.integers(1, 400))
async def test_segmenter_gives_exact_bytes_segments_even_from_reused_buffers(cuts, seg) -> None:
    data = data_of(sum(cuts) + 1)
    reused = bytearray()

    async def body():
        pos = 0
        for i, n in enumerate(cuts + [1]):
            piece = data[pos:pos + n]
            pos += n
            if i % 3 == 0:
                reused[:] = piece  # the caller overwrites this buffer after each chunk
                yield reused
            elif i % 3 == 1:
                yield memoryview(piece)
            else:
                yield piece

    out = [s async for s in segments(body(), seg)]
    # bytes, or a read-only view passed on as is (nobody writes one while it is held)
    assert all(type(s) is bytes or (type(s) is memoryview and s.readonly) for s in out)
    assert all(len(s) == seg for s in out[:-1]) and 0 < len(out[-1]) <= seg
    assert b"".join(out) == data


@settings(max_examples=80, deadline=None)
@given(size=st.sampled_from(SIZES) | st.integers(1, 5 * SEG), data=st.data())
def test_direct_pieces_hold_the_range_verbatim(size: int, data) -> None:
    assert CODEC.systematic
    payload = data_of(size, size)
    archives = encode_to_archives(CODEC, payload)
    offset = data.draw(st.integers(0, size))
    length = data.draw(st.integers(0, 300))
    pieces = CODEC.direct_pieces(size, offset, length, max_pieces=1000)
    got = b"".join(archives[j][a:b] for j, a, b in pieces)
    assert all(j < CODEC.scheme.k for j, _, _ in pieces)
    assert got == payload[offset:offset + length]


def test_direct_pieces_of_a_4k_read_are_one_fragment_slice() -> None:
    codec = Codec()
    part = 100 * 1024 * 1024
    frag = codec.fragment_size(1024 * 1024)
    off = 37 * 1024 * 1024 + 3 * 131072 + 100
    assert codec.direct_pieces(part, off, 4096) == [
        (3, 37 * frag + HEADER_SIZE + 100, 37 * frag + HEADER_SIZE + 100 + 4096)]
    # straddling two data fragments: two pieces; a whole segment: too many, decode instead
    assert len(codec.direct_pieces(part, 131072 - 10, 20)) == 2
    assert codec.direct_pieces(part, 0, 1024 * 1024) is None
