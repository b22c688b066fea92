"""A node's `PUT /v1/layout` (zonestore/node/drivelayout.py) over a real node process: only a
signed request whose signature covers its body is taken; bad documents are 400 (never 500);
an older or equal version changes nothing; a draining drive takes no new record and the
node's readiness says which version it holds."""

from __future__ import annotations

import json

from tests.support.nodeproc import NodeCluster, node_request


def doc(cluster: NodeCluster, version: int, states: tuple[str, str],
        node_state: str = "active") -> bytes:
    return json.dumps({"version": version, "node": "node00", "state": node_state,
                       "drives": [{"path": str(p), "state": s, "generation": 1}
                                  for p, s in zip(cluster.drive_paths(0), states,
                                                  strict=True)]}).encode()


async def ready(session, cluster) -> dict:
    status, _, body = await node_request(session, cluster, 0, "GET", "/health/ready")
    assert status == 200
    return json.loads(body)


async def test_layout_put_refusals_and_versions(cluster, session) -> None:
    assert (await ready(session, cluster))["layout_version"] == 0
    body = doc(cluster, 3, ("active", "draining"))
    status, _, _ = await node_request(session, cluster, 0, "PUT", "/v1/layout", body=body,
                                      signed=False)
    assert status == 403
    status, _, _ = await node_request(session, cluster, 0, "PUT", "/v1/layout", body=body,
                                      sign_body=False)
    assert status == 403  # the signature must cover the body
    for bad in (b"not json", b"[1]", b'{"version": "3", "drives": []}',
                b'{"version": 0, "drives": []}', b'{"version": 4, "drives": [7]}',
                b'{"version": 4}', b"x" * 70_000):
        status, _, answer = await node_request(session, cluster, 0, "PUT", "/v1/layout",
                                               body=bad)
        assert status in (400, 413), (bad[:40], status, answer)
    status, _, answer = await node_request(session, cluster, 0, "PUT", "/v1/layout", body=body)
    assert status == 200 and json.loads(answer)["layout_version"] == 3
    # an older version (a gateway that has not adopted v3 yet) changes nothing
    status, _, answer = await node_request(session, cluster, 0, "PUT", "/v1/layout",
                                           body=doc(cluster, 2, ("draining", "active")))
    assert status == 200 and json.loads(answer)["layout_version"] == 3
    assert (await ready(session, cluster))["layout_version"] == 3
    status, _, stats = await node_request(session, cluster, 0, "GET", "/v1/stats")
    drives = json.loads(stats)["drives"]
    assert [d["layout_state"] for d in drives] == ["active", "draining"]
    before = [d["records"] for d in drives]
    for i in range(10):
        status, _, _ = await node_request(session, cluster, 0, "PUT", f"/v1/records/r{i}.f00",
                                          body=b"z" * 1000, headers={"X-ZG-Stream": f"s{i}",
                                                                     "X-ZG-Length": "1000"})
        assert status == 201
    status, _, stats = await node_request(session, cluster, 0, "GET", "/v1/stats")
    after = [d["records"] for d in json.loads(stats)["drives"]]
    assert after == [before[0] + 10, before[1]]
    # every drive draining: the node is full for new records (507), not broken
    status, _, _ = await node_request(session, cluster, 0, "PUT", "/v1/layout",
                                      body=doc(cluster, 4, ("draining", "failed")))
    assert status == 200
    status, _, answer = await node_request(session, cluster, 0, "PUT", "/v1/records/q.f00",
                                           body=b"z" * 10, headers={"X-ZG-Stream": "q",
                                                                    "X-ZG-Length": "10"})
    assert status == 507, answer
    # back to active drives, but the node itself draining: no new records either
    for version, node_state, want in ((5, "active", 201), (6, "draining", 507)):
        status, _, _ = await node_request(session, cluster, 0, "PUT", "/v1/layout",
                                          body=doc(cluster, version, ("active", "active"),
                                                   node_state))
        assert status == 200
        status, _, answer = await node_request(
            session, cluster, 0, "PUT", f"/v1/records/n{version}.f00", body=b"z" * 10,
            headers={"X-ZG-Stream": "q", "X-ZG-Length": "10"})
        assert status == want, (node_state, answer)
