"""The parity-only encoder gives exactly pyeclib's fragments, without copying the segment, and
leaves to pyeclib what it cannot do."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from erasure import fastencode
from erasure.codec import Codec, Scheme

pytestmark = pytest.mark.skipif(fastencode._ISAL is None, reason="no libisal next to pyeclib")

SCHEMES = [(8, 2, 1 << 20), (4, 2, 64 * 1024), (10, 4, 160 * 1024), (6, 3, 48 * 1024)]
CODECS = {s: Codec(Scheme(k=s[0], m=s[1], segment_size=s[2])) for s in SCHEMES}


def joined(frags):
    return [b"".join(bytes(b) for b in f) for f in frags]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=st.sampled_from(SCHEMES), seed=st.binary(min_size=1, max_size=64),
       view=st.booleans(), short=st.integers(min_value=0, max_value=3))
def test_fragments_are_pyeclibs_byte_for_byte(scheme, seed, view, short):
    codec = CODECS[scheme]
    size = scheme[2] - short * 17  # the scheme's segments, and a part's shorter last one
    data = (seed * (size // len(seed) + 1))[:size]
    seg = memoryview(bytearray(data)).toreadonly() if view else data
    got = codec.encode_pieces(seg)
    assert joined(got) == codec.encode(data)
    if short == 0:  # data fragments are views of the segment, no copy
        for j in range(scheme[0]):
            assert len(got[j]) == 2 and isinstance(got[j][1], memoryview)
    assert codec.decode(joined(got)[scheme[1]:]) == data


def test_random_segments_decode_from_any_k_fragments():
    codec = CODECS[(8, 2, 1 << 20)]
    for _ in range(5):
        data = os.urandom(1 << 20)
        frags = joined(codec.encode_pieces(data))
        assert frags == codec.encode(data)
        assert codec.decode(frags[:6] + frags[8:]) == data  # two data fragments lost


def test_a_segment_size_that_does_not_split_evenly_stays_with_pyeclib():
    codec = Codec(Scheme(k=8, m=2, segment_size=1001))  # pyeclib pads the last fragment
    data = os.urandom(1001)
    for _ in range(2):
        got = codec.encode_pieces(data)
        assert all(len(f) == 1 for f in got) and joined(got) == codec.encode(data)


def test_a_parity_that_differs_from_pyeclib_turns_the_fast_path_off(monkeypatch):
    codec = Codec(Scheme(k=4, m=2, segment_size=4096))
    real = codec._parity._encode

    def wrong(segment, headers):
        frags = real(segment, headers)
        frags[-1][0][-1] ^= 1
        return frags

    monkeypatch.setattr(codec._parity, "_encode", wrong)
    data = os.urandom(4096)
    assert joined(codec.encode_pieces(data)) == codec.encode(data)  # pyeclib's answer
    assert codec._parity._headers is None
    assert joined(codec.encode_pieces(data)) == codec.encode(data)
