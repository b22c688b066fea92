"""The per-part shortcuts on the write path give exactly what the plain definitions give:
archive metadata blobs serialised once per part, and remembered rendezvous placements."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from erasure import layout as layout_mod
from erasure import placement as placement_mod
from erasure.codec import Scheme
from erasure.layout import PartResult, archive_meta, archive_metas, parse_archive_meta
from erasure.placement import NodeSlot, Placement

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(), inner, max_size=3)),
    max_leaves=8)


def plain_meta(result: PartResult, index: int, caller: dict, stream: str) -> bytes:
    return json.dumps({"v": layout_mod.META_VERSION, "part_uid": result.part_uid,
                       "index": index, "stream": stream, "scheme": result.scheme.to_dict(),
                       "length": result.length, "crc32c": result.crc32c, "meta": caller},
                      separators=(",", ":"), sort_keys=True).encode()


@settings(max_examples=200, deadline=None)
@given(uid=st.text(min_size=1), length=st.integers(0, 2**42), crc=st.integers(0, 2**32 - 1),
       caller=st.dictionaries(st.text(), json_values, max_size=5), stream=st.text())
def test_archive_metas_are_byte_identical_to_one_dump_per_archive(uid, length, crc, caller,
                                                                  stream):
    result = PartResult(uid, length, crc, Scheme(8, 2, 1 << 20, "isa_l_rs_vand"))
    blobs = archive_metas(result, range(10), caller, stream)
    for i, blob in enumerate(blobs):
        assert blob == plain_meta(result, i, caller, stream)
        assert blob == archive_meta(result, i, caller, stream)
        assert parse_archive_meta(blob)["index"] == i


def test_remembered_placements_equal_computed_ones_and_are_not_shared(monkeypatch):
    monkeypatch.setattr(placement_mod, "PRIMARY_CACHE", 50)
    nodes = [NodeSlot(f"node{i:02d}", f"rack{i % 6}") for i in range(12)]
    p = Placement(nodes, 10)
    fresh = Placement(nodes, 10)
    uids = [f"obj{i}.p1" for i in range(200)]
    for _ in range(2):  # the second pass runs after most entries were evicted
        for uid in uids:
            got = p.primary(uid)
            assert got == fresh._primary(uid)
            got.append("mutated")  # callers own the list they get
            assert p.primary(uid) == fresh._primary(uid)
    assert len(p._primary_cache) <= 50
