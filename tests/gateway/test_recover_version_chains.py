"""recover-metadata's ordering of a key's versions (gateway/store/recoverversions.py): oldest first
by (last-modified, version id), one "null" version (the newest) per key, repeats superseded."""

from __future__ import annotations

from gateway.metadata.store import ObjectRecord
from gateway.store.deletemarkers import new_marker
from gateway.store.recoverversions import build_chains


def obj(key: str, vid: str, t: float, version: str = "") -> ObjectRecord:
    return ObjectRecord(bucket="b", key=key, size=1, etag="e", last_modified=t, owner="o",
                        version=version or f"w{t}", version_id=vid)


def ids(chain: list) -> list[tuple[str, bool]]:
    return [(r.version_id, getattr(r, "delete_marker", False)) for r in chain]


def test_a_chain_comes_back_oldest_first_with_its_markers_and_one_null_version() -> None:
    v1, v2, v3 = "0" * 31 + "1", "0" * 31 + "2", "0" * 31 + "3"
    found = [obj("k", v3, 5.0), obj("k", "null", 2.0, "old-null"), obj("k", v1, 1.0),
             new_marker("b", "k", "o", v2, 4.0), obj("k", "null", 3.0, "new-null"),
             obj("other", "null", 1.0)]
    chains = build_chains(found)
    assert ids(chains.keys[("b", "k")]) == [(v1, False), ("null", False), (v2, True),
                                            (v3, False)]
    assert chains.keys[("b", "k")][1].version == "new-null"
    assert [r.version for r in chains.superseded] == ["old-null"]
    assert ids(chains.keys[("b", "other")]) == [("null", False)]
    assert chains.versioned_buckets() == {"b"}


def test_an_unversioned_key_keeps_its_newest_write_only() -> None:
    chains = build_chains([obj("k", "null", t) for t in (3.0, 1.0, 2.0)])
    assert [r.last_modified for r in chains.keys[("b", "k")]] == [3.0]
    assert sorted(r.last_modified for r in chains.superseded) == [1.0, 2.0]
    assert chains.versioned_buckets() == set()
