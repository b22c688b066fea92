"""The node client's full flag as a state machine (no I/O: the flag's rules alone): a 507
makes a node full; the /v1/stats poll clears it only once the node has more room than when it
refused and enough for what it refused; a poll below the headroom makes it full."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient
from erasure.noderoom import writable_of

HEADROOM = 1000
events = st.lists(st.one_of(
    st.tuples(st.just("refused"), st.integers(0, 5000), st.none() | st.integers(0, 5000)),
    st.tuples(st.just("poll"), st.integers(0, 10_000), st.none())), max_size=30)


@given(events)
def test_full_flag_follows_the_rules(evs: list) -> None:
    c = NodeClient(NodeSpec("n1", "http://127.0.0.1:1", "n1", ()), "s", None)  # type: ignore
    changes: list[bool] = []
    c.on_full = lambda cl: changes.append(cl.full)
    full, need, floor = False, 0, None
    for kind, n, w in evs:
        was = full
        if kind == "refused":
            c.note_full(2 * n, w)
            if not full:
                need, floor = 0, None
            need = max(need, 2 * n)
            if w is not None:
                floor = w if floor is None else min(floor, w)
            full = True
        else:
            c.note_room(n, HEADROOM)
            if full:
                if floor is None:
                    floor = n
                elif n > floor and n >= max(HEADROOM, need):
                    full = False
            elif n < HEADROOM:
                full, need, floor = True, 0, n
        assert c.full == full and c.writable == (not full)
        if was != full:
            assert changes and changes[-1] == full
    assert changes == [b for a, b in zip([False, *changes], changes, strict=False) if a != b]


def test_a_refused_node_stays_full_until_it_gained_room() -> None:
    c = NodeClient(NodeSpec("n1", "http://127.0.0.1:1", "n1", ()), "s", None)  # type: ignore
    c.note_full(0)                 # a 507 without a figure (older node)
    assert c.full
    c.note_room(5000, HEADROOM)    # the figure claims room: taken as the floor
    assert c.full
    c.note_room(5000, HEADROOM)    # no gain: still full
    assert c.full
    c.note_room(6000, HEADROOM)
    assert not c.full and c.up


def test_writable_of_prefers_writable_bytes_and_the_largest_drive() -> None:
    assert writable_of({"drives": [{"free_bytes": 9, "writable_bytes": 3},
                                   {"free_bytes": 1, "writable_bytes": 5}]}) == 5
    assert writable_of({"drives": [{"free_bytes": 9}, {"free_bytes": 4}]}) == 9
    assert writable_of({"drives": [], "totals": {"writable_bytes": 7}}) == 7
    assert writable_of({}) is None
