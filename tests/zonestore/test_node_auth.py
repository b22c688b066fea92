"""The node refuses unsigned, badly signed and replayed requests and ids that try to escape;
only /health/live (and, from loopback, /health/ready and /metrics) is open."""

from __future__ import annotations

import json
import time

import pytest
from yarl import URL

from tests.support.nodeproc import NodeCluster, node_request

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, drives_per_node=1,
                     secret="the-real-secret") as c:
        yield c


async def raw(session, cluster, method, path, headers, body=None):
    url = URL(cluster.urls[0] + path, encoded=True)
    async with session.request(method, url, headers=headers, data=body) as resp:
        return resp.status, await resp.read()


def put_headers(cluster, path, body, *, secret=None, now=None, length=None):
    from zonestore.nodeauth import sign_headers

    h = sign_headers(secret or cluster.secret, "PUT", path, None, body, node=cluster.ids[0],
                     now=now)
    if body is not None or length is not None:
        h["X-ZG-Length"] = str(len(body) if length is None else length)
    return h


async def assert_absent(session, cluster, rid):
    status, _, _ = await node_request(session, cluster, 0, "HEAD", f"/v1/records/{rid}")
    assert status == 404


async def test_unsigned_requests_are_refused(cluster, session):
    for method, path in [("GET", "/v1/records/a"), ("PUT", "/v1/records/a"),
                         ("DELETE", "/v1/records/a"), ("HEAD", "/v1/records/a"),
                         ("GET", "/v1/records"), ("GET", "/v1/stats")]:
        status, body = await raw(session, cluster, method, path,
                                 {"X-ZG-Length": "1"} if method == "PUT" else {},
                                 b"x" if method == "PUT" else None)
        assert status == 403, (method, path, body)
        if method != "HEAD":
            assert json.loads(body)["error"] == "forbidden"
    await assert_absent(session, cluster, "a")


async def test_wrong_secret_and_tampered_requests_are_refused(cluster, session):
    path = "/v1/records/victim"
    body = b"payload"
    status, answer = await raw(session, cluster, "PUT", path,
                               put_headers(cluster, path, body, secret="not-the-secret"), body)
    assert status == 403 and b"signature" in answer
    # Signed for one id, sent to another.
    h = put_headers(cluster, "/v1/records/other", body)
    status, _ = await raw(session, cluster, "PUT", path, h, body)
    assert status == 403
    # Signed body, different bytes on the wire.
    status, answer = await raw(session, cluster, "PUT", path, put_headers(cluster, path, body),
                               b"PAYLOAD")
    assert status == 403 and json.loads(answer)["error"] == "body_mismatch"
    # A mangled signature or scheme.
    h = put_headers(cluster, path, body)
    h["Authorization"] = h["Authorization"][:-4] + "0000"
    assert (await raw(session, cluster, "PUT", path, h, body))[0] == 403
    h = put_headers(cluster, path, body)
    h["Authorization"] = h["Authorization"].replace("ZG-HMAC-SHA256", "AWS4-HMAC-SHA256")
    assert (await raw(session, cluster, "PUT", path, h, body))[0] == 403
    # A query parameter added after signing.
    h = cluster.headers(0, "GET", "/v1/records")
    assert (await raw(session, cluster, "GET", "/v1/records?prefix=a", h))[0] == 403
    await assert_absent(session, cluster, "victim")


async def test_replayed_and_future_requests_are_refused(cluster, session):
    path = "/v1/records/replayed"
    body = b"old request"
    for skew in (-3600, -301, 301, 86400):
        h = put_headers(cluster, path, body, now=time.time() + skew)
        status, answer = await raw(session, cluster, "PUT", path, h, body)
        assert status == 403 and b"window" in answer, skew
    await assert_absent(session, cluster, "replayed")
    h = cluster.headers(0, "GET", "/v1/stats", now=time.time() - 1000)
    assert (await raw(session, cluster, "GET", "/v1/stats", h))[0] == 403


async def test_a_write_is_accepted_only_once_within_the_window(cluster, session):
    path = "/v1/records/once"
    body = b"first"
    h = put_headers(cluster, path, body)
    assert (await raw(session, cluster, "PUT", path, h, body))[0] == 201
    # The same signed request again (an attacker re-sending a captured write)...
    status, answer = await raw(session, cluster, "PUT", path, h, body)
    assert status == 403 and b"replayed" in answer
    # ...even with another body: the signature says UNSIGNED-PAYLOAD for streamed writes.
    h2 = put_headers(cluster, path, None) | {"X-ZG-Length": "4"}
    assert (await raw(session, cluster, "PUT", path, h2, b"good"))[0] == 201
    assert (await raw(session, cluster, "PUT", path, h2, b"evil"))[0] == 403
    status, _, got = await node_request(session, cluster, 0, "GET", path)
    assert (status, got) == (200, b"good")
    hd = cluster.headers(0, "DELETE", path)
    assert (await raw(session, cluster, "DELETE", path, hd))[0] == 204
    assert (await node_request(session, cluster, 0, "PUT", path, body=b"again",
                                headers={"X-ZG-Length": "5"}))[0] == 201
    assert (await raw(session, cluster, "DELETE", path, hd))[0] == 403  # replayed delete
    status, _, got = await node_request(session, cluster, 0, "GET", path)
    assert (status, got) == (200, b"again")
    # Reads are idempotent and may repeat.
    hg = cluster.headers(0, "GET", path)
    assert (await raw(session, cluster, "GET", path, hg))[0] == 200
    assert (await raw(session, cluster, "GET", path, hg))[0] == 200


@pytest.mark.parametrize("path", [
    "/v1/records/%2e%2e",                 # ".." escaped
    "/v1/records/..%2fetc%2fpasswd",
    "/v1/records/a%2fb",
    "/v1/records/a%2Fb",
    "/v1/records/.hidden",
    "/v1/records/-rf",
    "/v1/records/a%00b",
    "/v1/records/a%5cb",                  # backslash
    "/v1/records/a%20b",
    "/v1/records/%C3%A9",
    "/v1/records/" + "x" * 201,
])
async def test_ids_that_try_to_escape_are_refused(cluster, session, path):
    for method in ("PUT", "GET", "HEAD", "DELETE"):
        body = b"evil" if method == "PUT" else None
        h = cluster.headers(0, method, path, body=body)
        if method == "PUT":
            h["X-ZG-Length"] = "4"
        status, answer = await raw(session, cluster, method, path, h, body)
        assert status == 400, (method, path, answer)
        if method != "HEAD":
            assert json.loads(answer)["error"] == "invalid_id"


@pytest.mark.parametrize("path", ["/v1/records/../../etc", "/v1/records/./x", "/v1/../v1/stats"])
async def test_dot_segments_never_reach_a_record(cluster, session, path):
    # Whatever the server's URL normalisation makes of these, it is a refusal, not a record.
    body = b"evil"
    _, _, before = await node_request(session, cluster, 0, "GET", "/v1/records")
    h = cluster.headers(0, "PUT", path, body=body)
    h["X-ZG-Length"] = "4"
    status, _ = await raw(session, cluster, "PUT", path, h, body)
    assert 400 <= status < 500
    _, _, after = await node_request(session, cluster, 0, "GET", "/v1/records")
    assert json.loads(after)["records"] == json.loads(before)["records"]
    drive = cluster.drive_paths(0)[0]
    assert not (drive.parent.parent / "etc").exists()


async def test_health_and_metrics_access(cluster, session):
    status, body = await raw(session, cluster, "GET", "/health/live", {})
    assert status == 200 and json.loads(body)["status"] == "live"
    # From loopback, unsigned scrapes are allowed by default...
    assert (await raw(session, cluster, "GET", "/health/ready", {}))[0] == 200
    assert (await raw(session, cluster, "GET", "/metrics", {}))[0] == 200
    # ...but a signature, when present, must be right.
    h = cluster.headers(0, "GET", "/metrics")
    h["Authorization"] = h["Authorization"][:-1] + ("0" if h["Authorization"][-1] != "0" else "1")
    assert (await raw(session, cluster, "GET", "/metrics", h))[0] == 403


async def test_metrics_can_require_signatures(tmp_path, session):
    with NodeCluster(tmp_path, 1, drives_per_node=1, extra_args=["--open-metrics", "signed"]) as c:
        assert (await raw(session, c, "GET", "/metrics", {}))[0] == 403
        assert (await raw(session, c, "GET", "/health/live", {}))[0] == 200
        status, _, body = await node_request(session, c, 0, "GET", "/metrics")
        assert status == 200 and b"zonegate_node_requests_total" in body


async def test_a_write_signed_for_one_node_is_refused_by_another_and_after_a_restart(
        tmp_path, session):
    """Issue 12 defect 3: a captured gateway->node write can be replayed neither to another
    node nor to the same node once it restarted (kill -9 included)."""
    with NodeCluster(tmp_path, 2, drives_per_node=1, secret="bind-secret") as c:
        path = "/v1/records/bound"
        body = b"for node00"
        from zonestore.nodeauth import sign_headers
        h = sign_headers(c.secret, "PUT", path, None, body, node=c.ids[0])
        h["X-ZG-Length"] = str(len(body))
        url1 = URL(c.urls[1] + path, encoded=True)
        async with session.put(url1, headers=h, data=body) as resp:
            assert resp.status == 403 and b"not for this node" in await resp.read()
        # The node id is signed: rewriting the header breaks the signature.
        async with session.put(url1, headers={**h, "X-ZG-Node": c.ids[1]}, data=body) as resp:
            assert resp.status == 403 and b"signature" in await resp.read()
        # A write that names no node is refused; a read may (a readiness probe).
        unbound = sign_headers(c.secret, "PUT", path, None, body) | {"X-ZG-Length": "10"}
        async with session.put(URL(c.urls[0] + path, encoded=True), headers=unbound,
                               data=body) as resp:
            assert resp.status == 403 and b"X-ZG-Node" in await resp.read()
        ready = sign_headers(c.secret, "GET", "/v1/stats")
        async with session.get(c.urls[0] + "/v1/stats", headers=ready) as resp:
            assert resp.status == 200
        for i in (0, 1):
            await assert_absent_on(session, c, i, "bound")
        # The write goes to its node once...
        url0 = URL(c.urls[0] + path, encoded=True)
        async with session.put(url0, headers=h, data=body) as resp:
            assert resp.status == 201
        hd = c.headers(0, "DELETE", path, {"nonce": "n1"})
        async with session.delete(URL(c.urls[0] + path + "?nonce=n1", encoded=True),
                                  headers=hd) as resp:
            assert resp.status == 204
        # ...and neither it nor the delete is taken again after a kill -9 and a restart.
        c.kill(0)
        c.restart(0)
        async with session.put(url0, headers=h, data=body) as resp:
            assert resp.status == 403 and b"replayed" in await resp.read()
        async with session.delete(URL(c.urls[0] + path + "?nonce=n1", encoded=True),
                                  headers=hd) as resp:
            assert resp.status == 403
        await assert_absent_on(session, c, 0, "bound")
        # Fresh writes are served as before.
        status, _, _ = await node_request(session, c, 0, "PUT", path, body=b"new",
                                          headers={"X-ZG-Length": "3"})
        assert status == 201


async def assert_absent_on(session, cluster, i, rid):
    status, _, _ = await node_request(session, cluster, i, "HEAD", f"/v1/records/{rid}")
    assert status == 404
