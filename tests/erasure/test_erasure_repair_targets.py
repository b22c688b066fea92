"""Where repair puts rebuilt fragments: the layout's node when it is up, else the next node in
rendezvous order, and never two fragments of a part on one node."""

from __future__ import annotations

from erasure.cluster import ErasureCluster, ScannedPart
from erasure.config import ClusterConfig
from erasure.nodeclient import NodeClient
from erasure.repair import Damage, _targets


def config() -> ClusterConfig:
    # nothing listens on these ports: no request is made by what is tested here
    return ClusterConfig.from_dict({
        "secret": "targets-test-secret",
        "nodes": [{"id": f"n{i:02d}", "url": f"http://127.0.0.1:{i + 1}"} for i in range(12)]})


def test_rebuilt_fragments_never_share_a_node() -> None:
    c = ErasureCluster(config(), health_interval=0, auto_repair=False)
    c.clients = {n.id: NodeClient(n, c.config.secret, None) for n in c.config.nodes}
    checked = 0
    for n in range(400):
        uid = f"t{n:04d}.p1"
        prim = c.placement.primary(uid)
        spare = [x for x in c.placement.ranked(uid) if x not in prim[:8]]
        if spare[0] != prim[8]:
            continue  # want the case where the first handoff is fragment 8's own node
        for cl in c.clients.values():
            cl.up = True
        c.clients[prim[9]].up = False  # fragment 9's node is down, fragment 8's is up
        part = ScannedPart(uid, 100, c.scheme, 0, {}, {i: [prim[i]] for i in range(8)})
        t = _targets(c, Damage(part, [8, 9], {}, None))
        assert t[8] == prim[8]
        assert t[9] not in prim and t[9] != prim[8]
        assert len(set(t.values()) | set(prim[:8])) == 10
        checked += 1
    assert checked > 5
