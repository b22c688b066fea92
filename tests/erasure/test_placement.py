"""Rendezvous placement: deterministic, one fragment per node and failure domain, minimal
movement when nodes join, leave or are down."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from erasure.placement import NodeSlot, Placement, room_weights

PARTS = [f"{i:08x}.p1" for i in range(3000)]


def nodes(n: int, domains: int | None = None) -> list[NodeSlot]:
    return [NodeSlot(f"node{i:02d}", f"rack{i % domains}" if domains else f"node{i:02d}")
            for i in range(n)]


def moved(a: Placement, b: Placement, **kw) -> float:
    diff = sum(x != y for p in PARTS for x, y in zip(a.place(p), b.place(p, **kw), strict=True))
    return diff / (len(PARTS) * a.width)


def test_deterministic_and_no_duplicates() -> None:
    p1, p2 = Placement(nodes(12), 10), Placement(list(reversed(nodes(12))), 10)
    for part in PARTS[:500]:
        a = p1.place(part)
        assert a == p2.place(part)  # independent of node order in the config
        assert len(set(a)) == 10


def test_load_is_spread_over_all_nodes() -> None:
    p = Placement(nodes(12), 10)
    counts = Counter(n for part in PARTS for n in p.place(part))
    expected = len(PARTS) * 10 / 12
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts
    # and every node is the holder of every index now and then (no fixed roles)
    idx0 = Counter(p.place(part)[0] for part in PARTS)
    assert len(idx0) == 12


def test_failure_domains_never_hold_two_fragments() -> None:
    p = Placement(nodes(24, domains=12), 10)
    for part in PARTS[:500]:
        doms = [p.domain_of[n] for n in p.place(part)]
        assert len(set(doms)) == 10
        doms = [p.domain_of[n] for n in p.place(part, exclude=["node00", "node13"])]
        assert len(set(doms)) == 10


def test_fewer_domains_than_fragments_spread_evenly() -> None:
    p = Placement(nodes(15, domains=5), 10)
    for part in PARTS[:300]:
        a = p.place(part)
        assert len(set(a)) == 10
        assert max(Counter(p.domain_of[n] for n in a).values()) == 2


def test_adding_a_13th_node_moves_about_one_thirteenth() -> None:
    frac = moved(Placement(nodes(12), 10), Placement(nodes(13), 10))
    # ideal is 1/13 = 0.077; the greedy matching cascades a little. Moving everything
    # (naive modulo hashing) would be ~0.9.
    assert 0.6 / 13 < frac < 1.6 / 13, frac


def test_removing_a_node_from_the_config_moves_little() -> None:
    frac = moved(Placement(nodes(13), 10), Placement(nodes(13)[1:], 10))
    assert 1 / 13 <= frac < 1.6 / 13, frac


def test_down_node_moves_only_its_own_fragments_to_handoffs() -> None:
    p = Placement(nodes(12), 10)
    for part in PARTS[:1000]:
        a = p.place(part)
        b = p.place(part, exclude=["node03", "node07"])
        for x, y in zip(a, b, strict=True):
            if x in ("node03", "node07"):
                assert y not in ("node03", "node07") and y not in a
            else:
                assert x == y
        assert len(set(b)) == 10


def test_handoffs_follow_rendezvous_order() -> None:
    p = Placement(nodes(12), 10)
    part = PARTS[0]
    a = p.place(part)
    spare = [n for n in p.ranked(part) if n not in a]
    assert list(p.handoffs(part, a)) == spare
    down = a[4]
    assert p.place(part, exclude=[down])[4] == spare[0]


def test_too_many_down_is_refused() -> None:
    p = Placement(nodes(12), 10)
    with pytest.raises(ValueError, match="not enough nodes"):
        p.place(PARTS[0], exclude=["node00", "node01", "node02"])
    with pytest.raises(ValueError, match="at least 10 nodes"):
        Placement(nodes(9), 10)


# ---------------------------------------------------------------- room-weighted placement

def test_weighted_placement_keeps_one_fragment_per_node_and_domain() -> None:
    p = Placement(nodes(24, domains=12), 10)
    weights = {n.id: (i % 7 + 1) / 7 for i, n in enumerate(nodes(24))}
    for part in PARTS[:300]:
        a = p.place_weighted(part, weights)
        assert a == p.place_weighted(part, dict(reversed(weights.items())))  # deterministic
        assert len(set(a)) == 10 and len({p.domain_of[n] for n in a}) == 10
        b = p.place_weighted(part, weights, exclude=["node00", "node13"])
        assert not {"node00", "node13"} & set(b) and len({p.domain_of[n] for n in b}) == 10


def test_weighted_placement_keeps_primary_indexes_of_chosen_nodes() -> None:
    p = Placement(nodes(12), 10)
    weights = {n.id: 1.0 for n in nodes(12)} | {"node05": 0.01}
    for part in PARTS[:300]:
        prim, a = p.primary(part), p.place_weighted(part, weights)
        for x, y in zip(prim, a, strict=True):
            assert x == y or x not in a  # a node keeps its index, or leaves the part


def test_nodes_with_less_room_take_fewer_fragments() -> None:
    p = Placement(nodes(12), 10)
    weights = room_weights({n.id: (300 if i < 6 else 150) for i, n in enumerate(nodes(12))})
    assert weights is not None
    counts = Counter(n for part in PARTS for n in p.place_weighted(part, weights))
    roomy = [counts[f"node{i:02d}"] for i in range(6)]
    tight = [counts[f"node{i:02d}"] for i in range(6, 12)]
    assert min(roomy) > max(tight), counts


def test_room_weights_leave_balanced_nodes_on_the_plain_placement() -> None:
    assert room_weights({"a": 100, "b": 95, "c": 91}) is None
    assert room_weights({"a": 0, "b": 0}) is None
    w = room_weights({"a": 100, "b": 50, "c": 0})
    assert w is not None and w["a"] == 1.0 and w["b"] == 0.25 and 0 < w["c"] < 1e-5


def best_left(room: dict[str, float], width: int) -> float:
    """The least room any placement can leave: the most parts P with sum(min(r, P)) >= width P
    (a node takes at most one fragment of a part)."""
    lo, hi = 0, int(sum(room.values()))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(r, mid) for r in room.values()) >= width * mid:
            lo = mid
        else:
            hi = mid - 1
    return sum(room.values()) - width * lo


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(60, 100), min_size=12, max_size=12), st.integers(0, 2**32))
@example([60] * 7 + [79, 79, 79, 60, 80], 0)  # left 3.4 % once
def test_weighted_placement_fills_uneven_nodes_to_the_end(start: list[int], seed: int) -> None:
    """Nodes that start unevenly full (up to 40 % apart) take parts, weighted by room as
    the cluster does, until fewer than 10 have room for a fragment: little room is left."""
    p = Placement(nodes(12), 10)
    frag = 1.0
    room = {f"node{i:02d}": float(r * 3) for i, r in enumerate(start)}
    total = sum(room.values())
    best = best_left(room, 10) / total
    i = 0
    while True:
        up = {n: r for n, r in room.items() if r >= frag}
        if len(up) < 10:
            break
        w = room_weights(up)
        down = set(room) - set(up)
        chosen = p.place_weighted(f"{seed:x}.{i}", w, down) if w else p.place(
            f"{seed:x}.{i}", exclude=down)
        for n in chosen:
            room[n] -= frag
        i += 1
    left = sum(room.values()) / total
    # within the fill target (>= 0.95 of capacity used); plain placement leaves 11-21 %
    assert left <= best + 0.05, (left, best, room)
