"""Placement around a node that stalled a write (erasure/writer.py): new parts skip it for a
while, unless that would leave fewer nodes than the write quorum (then a write rather waits
`write_stall` for it than fails). No node is contacted: only the placement is computed."""

from __future__ import annotations

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig


def cluster(n: int, quorum: int) -> ErasureCluster:
    c = ErasureCluster(ClusterConfig.from_dict({
        "secret": "s" * 32,
        "erasure": {"k": 4, "m": 2, "write_quorum": quorum, "state_dir": "/nonexistent"},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9 + i}"} for i in range(n)],
    }, source="test"))
    c._sync_clients()  # what start() does first, without a session: nothing is sent
    return c


def test_a_stalled_node_gets_no_new_fragments_while_others_can_take_them():
    c = cluster(7, 5)
    stalled = c.targets("part1.p1")[0]
    c.clients[stalled].note_stalled(60)
    assert not c.clients[stalled].writable
    for i in range(20):
        nodes = c.targets(f"part{i}.p1")
        assert stalled not in nodes and None not in nodes  # the spare node takes its place


def test_a_stalled_node_still_counts_when_the_quorum_needs_it():
    c = cluster(6, 6)  # every node is needed
    stalled = c.targets("part1.p1")[0]
    c.clients[stalled].note_stalled(60)
    assert stalled in c.targets("part1.p1")
    c.clients[stalled].stalled_until = 0.0
    assert c.clients[stalled].writable
