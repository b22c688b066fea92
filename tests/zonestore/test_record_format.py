"""The on-device record format round-trips and every damaged byte is detected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zonestore.errors import CorruptRecord
from zonestore.ids import validate_record_id
from zonestore.record import (
    FLAG_INLINE,
    Extent,
    RecordType,
    check_payload,
    crc32c,
    crc32c_combine,
    decode_commit,
    decode_header,
    encode_commit,
    encode_record,
)

ids = st.from_regex(r"[A-Za-z0-9_:][A-Za-z0-9._:-]{0,199}", fullmatch=True)
types = st.sampled_from(list(RecordType))
u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)


@given(ids, types, st.binary(max_size=2000), u64, u32, u64)
def test_record_round_trips(rid, rtype, payload, seq, gen, arg):
    rec = encode_record(rtype, rid, payload, seq=seq, gen=gen, arg=arg)
    h = decode_header(rec)
    assert (h.type, h.id, h.seq, h.gen, h.arg, h.payload_len) == (rtype, rid, seq, gen, arg,
                                                                   len(payload))
    assert h.record_size == len(rec)
    check_payload(h, rec[h.size:])


@settings(max_examples=60)
@given(ids, st.binary(min_size=1, max_size=300), st.data())
def test_every_corrupted_byte_is_detected(rid, payload, data):
    rec = bytearray(encode_record(RecordType.DATA, rid, payload, seq=7, gen=1, arg=3))
    pos = data.draw(st.integers(0, len(rec) - 1))
    flip = data.draw(st.integers(1, 255))
    rec[pos] ^= flip
    with pytest.raises(CorruptRecord):
        h = decode_header(rec)
        if h is None:
            raise CorruptRecord("truncated")
        check_payload(h, rec[h.size:])


def test_every_byte_of_a_record_is_covered_exhaustively():
    rec = encode_record(RecordType.COMMIT, "a.b:c-d_e", b"payload-bytes", seq=1, arg=13)
    for pos in range(len(rec)):
        bad = bytearray(rec)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecord):
            h = decode_header(bad)
            check_payload(h, bad[h.size:])


def test_truncated_header_reads_as_incomplete_not_as_a_record():
    rec = encode_record(RecordType.TOMBSTONE, "x", seq=1)
    for n in range(len(rec)):
        assert decode_header(rec[:n]) is None


@given(st.text(max_size=50), st.binary(max_size=500),
       st.lists(st.tuples(u64, u32, u32), max_size=20), st.integers(0, 2**40))
def test_commit_payload_round_trips(stream, meta, exts, length):
    extents = [Extent(*e) for e in exts]
    p = encode_commit(length=length, crc=5, stream=stream, meta=meta, extents=extents)
    c = decode_commit(p, inline=False)
    assert (c.length, c.crc, c.stream, c.meta, list(c.extents)) == (length, 5, stream, meta,
                                                                    extents)


@given(st.binary(max_size=3000))
def test_inline_commit_carries_the_body(body):
    p = encode_commit(length=len(body), crc=crc32c(body), stream="s", meta=b"m", extents=(),
                      inline=body)
    assert decode_commit(p, inline=bool(FLAG_INLINE)).inline == body


@given(st.binary(max_size=5000), st.binary(max_size=5000))
def test_crc32c_combine_equals_crc_of_concatenation(a, b):
    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)


def test_metadata_blob_is_limited():
    with pytest.raises(ValueError):
        encode_commit(length=0, crc=0, stream="s", meta=bytes(64 * 1024 + 1), extents=())


@pytest.mark.parametrize("bad", ["", ".x", "-x", "a/b", "a b", "é", "x" * 201, None, 5])
def test_record_id_rule_refuses(bad):
    with pytest.raises(ValueError):
        validate_record_id(bad)


@given(ids)
def test_record_id_rule_accepts(rid):
    assert validate_record_id(rid) == rid
