"""The mover's plan (erasure/moveplan.py): pure, over layouts built with the cluster layout
model, its invariants checked with hypothesis."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from erasure.clusterlayout import ClusterLayout, DriveEntry, NodeEntry
from erasure.codec import Scheme
from erasure.layout import PartLayout
from erasure.moveplan import Fill, Planner, moved, plan
from erasure.placement import Placement

SCHEME = Scheme(4, 2, 1 << 20, "liberasurecode_rs_vand")
FRAG = 1000


def layout(n: int, *, states: dict[str, str] | None = None, domains: int = 0,
           version: int = 1, weights: dict[str, float] | None = None) -> ClusterLayout:
    states = states or {}
    weights = weights or {}
    nodes = tuple(NodeEntry(f"n{i:02d}", f"http://127.0.0.1:{9000 + i}",
                            f"d{i % domains}" if domains else f"n{i:02d}",
                            weights.get(f"n{i:02d}", 1.0), states.get(f"n{i:02d}", "active"),
                            (DriveEntry("d0"),)) for i in range(n))
    return ClusterLayout(version, SCHEME, nodes)


def written(lay: ClusterLayout, uid: str) -> PartLayout:
    """A part placed as a write under `lay` places it (rendezvous primary)."""
    nodes = Placement(lay.slots(), SCHEME.n).primary(uid)
    return PartLayout(uid, 4 * FRAG, SCHEME, dict(enumerate(nodes)), [], 0)


def tally(lay: ClusterLayout, parts: list[PartLayout]) -> Fill:
    held: Counter[str] = Counter()
    for p in parts:
        for n in p.placement.values():
            held[n] += FRAG
    return Fill(lay, held)


def test_a_part_where_writes_put_it_plans_nothing() -> None:
    lay = layout(8)
    for i in range(50):
        assert plan(lay, written(lay, f"u{i}.p1")) == []


def test_a_balanced_cluster_plans_nothing() -> None:
    lay = layout(8)
    parts = [written(lay, f"u{i}.p1") for i in range(400)]
    fill = tally(lay, parts)
    assert fill.balanced()
    planner = Planner(lay, fill=fill)
    assert [m for p in parts for m in planner.plan(p, frag_bytes=FRAG)] == []


def test_a_drained_node_gives_up_every_fragment_by_copy() -> None:
    lay = layout(8)
    parts = [written(lay, f"u{i}.p1") for i in range(100)]
    drained = layout(8, states={"n03": "draining"}, version=2)
    for p in parts:
        moves = plan(drained, p)
        on_n03 = [i for i, n in p.placement.items() if n == "n03"]
        assert [m.index for m in moves] == on_n03
        assert all(m.src == "n03" and m.dst != "n03" and not m.rebuild for m in moves)
        after = moved(p, moves)
        assert "n03" not in after.placement.values()
        assert len(set(after.placement.values())) == SCHEME.n


def test_a_gone_node_s_fragments_are_rebuilt_elsewhere() -> None:
    lay = layout(8)
    gone = layout(8, states={"n05": "gone"}, version=2)
    for i in range(60):
        p = written(lay, f"u{i}.p1")
        moves = plan(gone, p)
        assert all(m.rebuild and m.src == "n05" and m.dst != "n05" for m in moves)
        assert len(moves) == sum(1 for n in p.placement.values() if n == "n05")


def test_lost_fragments_of_a_replaced_drive_are_rebuilt_on_their_node() -> None:
    lay = layout(8)
    p = written(lay, "u1.p1")
    node = p.placement[2]
    moves = plan(lay, p, lost=[2])
    assert len(moves) == 1
    m = moves[0]
    assert (m.index, m.src, m.dst, m.rebuild) == (2, node, node, True)


def test_missing_fragments_are_left_to_the_healer() -> None:
    lay = layout(8)
    p = written(lay, "u1.p1")
    p.missing = [1]
    drained = layout(8, states={p.placement[1]: "draining"}, version=2)
    assert plan(drained, p) == []


def test_new_homes_are_rendezvous_homes_where_possible() -> None:
    """Draining moves to the home writes (and erasure/rehome.py) would pick under the new
    layout, so the rehomer never moves a fragment back."""
    lay = layout(8)
    drained = layout(8, states={"n00": "draining"}, version=2)
    home = Placement(drained.slots(), SCHEME.n)
    agree = total = 0
    for i in range(100):
        p = written(lay, f"u{i}.p1")
        for m in plan(drained, p):
            total += 1
            agree += m.dst == home.primary(p.part_uid)[m.index]
    assert total and agree / total > 0.5


def test_adding_a_node_rebalances_within_the_tolerance() -> None:
    before = layout(8)
    parts = [written(before, f"u{i}.p1") for i in range(600)]
    after = layout(9, version=2)
    fill = tally(after, parts)
    assert fill.deviation("n08") == -1.0
    planner = Planner(after, fill=fill)
    for _ in range(3):
        for j, p in enumerate(parts):
            moves = planner.plan(p, frag_bytes=FRAG)
            parts[j] = moved(p, moves)
        if fill.balanced():
            break
    assert fill.balanced(), {n: round(fill.deviation(n), 3) for n in fill.weights}
    assert tally(after, parts).held == fill.held
    # as few moves as possible: about the new node's share, not a reshuffle
    assert fill.held["n08"] <= 1.06 * fill.total / 9


def test_weights_give_a_node_a_larger_share() -> None:
    lay = layout(16)  # a node holds one fragment of a part at most: room to hold twice
    parts = [written(lay, f"u{i}.p1") for i in range(800)]
    heavy = layout(16, weights={"n00": 2.0}, version=2)
    fill = tally(heavy, parts)
    planner = Planner(heavy, fill=fill)
    for _ in range(3):
        for j, p in enumerate(parts):
            parts[j] = moved(p, planner.plan(p, frag_bytes=FRAG))
    assert fill.balanced()
    assert fill.held["n00"] > 1.8 * fill.held["n01"]


def test_domains_never_hold_more_than_their_share() -> None:
    lay = layout(9, domains=3)  # 3 domains of 3: at most 2 of 6 fragments each
    drained = layout(9, domains=3, states={"n00": "draining", "n04": "draining"}, version=2)
    for i in range(100):
        p = written(lay, f"u{i}.p1")
        after = moved(p, plan(drained, p))
        per = Counter(drained.node(n).domain for n in after.placement.values())
        assert max(per.values()) <= 2, per


def test_a_part_with_nowhere_to_go_plans_only_what_fits() -> None:
    lay = layout(6)
    drained = layout(7, states={"n00": "draining"}, version=2)  # n06 joins: exactly 6 left
    p = written(lay, "u1.p1")
    moves = plan(drained, p)
    assert [m.dst for m in moves] == ["n06"]
    full = plan(drained, p, unavailable=["n06"])
    assert full == []


@settings(max_examples=60, deadline=None)
@given(st.integers(6, 12), st.sets(st.integers(0, 11), max_size=3),
       st.sets(st.integers(0, 11), max_size=2), st.integers(0, 10_000))
def test_plans_keep_every_part_whole(n: int, drain: set[int], gone: set[int], seed: int) -> None:
    """Any mix of draining and gone nodes: after its moves a part has k+m fragments on
    distinct writable nodes, or (not enough nodes) only the moves that fit."""
    before = layout(12)
    states = {f"n{i:02d}": "draining" for i in drain if i < n}
    states.update({f"n{i:02d}": "gone" for i in gone if i < n})
    lay = layout(n, states=states, version=2)
    p = written(before, f"u{seed}.p1")
    moves = plan(lay, p)
    after = moved(p, moves)
    assert len(set(after.placement.values())) == SCHEME.n  # never two on one node
    takes = {x.id for x in lay.writable()}
    assert all(m.dst in takes for m in moves)
    if len(takes) >= SCHEME.n:
        assert set(after.placement.values()) <= takes
