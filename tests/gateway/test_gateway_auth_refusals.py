"""Every authentication refusal of issue 12, one table, against a real gateway (node processes
plus `zonegate serve`): what an attacker sends, what the gateway must answer, and what must be
left unchanged. Positive rows (status 200/204) show that the refusals are not a gateway that
refuses everything. Requests are signed with botocore's own signers (tests/support/s3raw.py).

Defects: 1 presigned SigV4 URLs taking unsigned x-amz-* headers; 2 SigV2 / path-style versus
virtual-host confusion (the resource verified must be the one served;
the issue's buckets b, b-x and a are bkt, bkt-x and aaa here: S3 names have 3 characters or more); 7 SigV2 Expires that
overflowed before any signature check; 10 keys with line breaks and the 307 built from Host.
(Defect 3, node-API replays, is tests/zonestore/test_node_auth.py: it needs the node processes alone.)
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway
from tests.support.s3raw import Creds, code_of, presign_v2, presign_v4, send, sign_v2, sign_v4

pytestmark = pytest.mark.timeout(300)

def B(bucket: str, key: str) -> bytes:
    """The body of an object: unique, and unlike any path an error body names."""
    return f"<content of {bucket} {key}>".encode()


OBJECTS = {  # (bucket, key) -> body; "bkt/bkt-x/k" is what the confused SigV2 requests reached
    ("bkt", "k"): B("bkt", "k"),
    ("bkt", "private-key"): B("bkt", "private-key"),
    ("bkt", "bkt-x/k"): B("bkt", "bkt-x/k"),
    ("bkt-x", "k"): B("bkt-x", "k"),
    ("aaa", "k"): B("aaa", "k"),
    ("aaa", "aaa/k"): B("aaa", "aaa/k"),
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gw-auth"))
    try:
        g.start()
        s3 = g.client()
        for bucket in sorted({b for b, _ in OBJECTS}):
            s3.create_bucket(Bucket=bucket)
        for (bucket, key), body in OBJECTS.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        yield g
    finally:
        g.stop()
    assert "internal error" not in g.log_path.read_text(errors="replace"), g.log_tail()


@pytest.fixture(scope="module")
def c(gw) -> Creds:
    return Creds(gw.port, ACCESS_KEY, SECRET_KEY)


Request = tuple[str, str, dict[str, str], bytes]  # method, target, headers, body


@dataclass
class Row:
    build: Callable[[Creds], Request]
    status: int
    code: str | None = None        # None: any code (the status is what matters)
    # What must hold afterwards: (bucket, key) -> body, or None for "absent".
    after: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    body: bytes | None = None      # the body a 200 must carry


def vhost(c: Creds, bucket: str) -> str:
    return f"{bucket}.localhost:{c.port}"


def _presigned_put_with(extra: dict[str, str]) -> Callable[[Creds], Request]:
    def build(c: Creds) -> Request:
        return "PUT", presign_v4(c, "PUT", "/bkt/upload"), extra, b"data"
    return build


def _sigv2_query_with_host(path: str, host_bucket: str) -> Callable[[Creds], Request]:
    def build(c: Creds) -> Request:
        return "GET", presign_v2(c, "GET", path), {"Host": vhost(c, host_bucket)}, b""
    return build


def _sigv2_header_with_host(method: str, path: str, host_bucket: str
                            ) -> Callable[[Creds], Request]:
    def build(c: Creds) -> Request:
        h = sign_v2(c, method, path)
        h["Host"] = vhost(c, host_bucket)
        return method, path, h, b""
    return build


def _v2_expires(expires: str) -> Callable[[Creds], Request]:
    def build(c: Creds) -> Request:
        q = urllib.parse.urlencode({"AWSAccessKeyId": c.access_key, "Signature": "bogus=",
                                    "Expires": expires})
        return "GET", f"/aaa/k?{q}", {}, b""
    return build


def _v4_expires(expires: str) -> Callable[[Creds], Request]:
    def build(c: Creds) -> Request:
        target = presign_v4(c, "GET", "/aaa/k").replace("X-Amz-Expires=300",
                                                      f"X-Amz-Expires={expires}")
        return "GET", target, {}, b""
    return build


ROWS: dict[str, Row] = {
    # -- defect 1: a presigned PutObject URL (SignedHeaders=host) plus unsigned x-amz-* ------
    "presigned-put+unsigned-copy-source": Row(
        _presigned_put_with({"x-amz-copy-source": "/bkt/private-key"}), 403, "AccessDenied",
        after={("bkt", "upload"): None}),
    "presigned-put+unsigned-meta": Row(
        _presigned_put_with({"x-amz-meta-owner": "attacker"}), 403, "AccessDenied",
        after={("bkt", "upload"): None}),
    "presigned-put+unsigned-acl": Row(
        _presigned_put_with({"x-amz-acl": "public-read"}), 403, "AccessDenied",
        after={("bkt", "upload"): None}),
    "presigned-get+unsigned-checksum-mode": Row(
        lambda c: ("GET", presign_v4(c, "GET", "/bkt/k"), {"x-amz-checksum-mode": "ENABLED"},
                   b""), 403, "AccessDenied"),
    "presigned-put (control)": Row(
        lambda c: ("PUT", presign_v4(c, "PUT", "/bkt/presigned-ok"), {}, b"ok"), 200,
        after={("bkt", "presigned-ok"): b"ok"}),
    "presigned-put+signed-meta (control)": Row(
        lambda c: ("PUT", presign_v4(c, "PUT", "/bkt/presigned-meta",
                                     headers={"x-amz-meta-a": "1"}),
                   {"x-amz-meta-a": "1"}, b"m"), 200, after={("bkt", "presigned-meta"): b"m"}),
    "v4-header+unsigned-meta": Row(
        lambda c: ("PUT", "/bkt/v4-unsigned", {**sign_v4(c, "PUT", "/bkt/v4-unsigned", body=b"x"),
                                             "x-amz-meta-evil": "1"}, b"x"),
        403, "AccessDenied", after={("bkt", "v4-unsigned"): None}),
    # -- defect 2: SigV2 signs the resource, not the Host; the gateway routes by Host --------
    "v2-query /bkt-x/k sent as Host bkt.localhost": Row(
        _sigv2_query_with_host("/bkt-x/k", "bkt"), 403, "SignatureDoesNotMatch"),
    "v2-header /aaa/k sent as Host aaa.localhost": Row(
        _sigv2_header_with_host("GET", "/aaa/k", "aaa"), 403, "SignatureDoesNotMatch"),
    "v2-header DELETE /bkt-x/k sent as Host bkt.localhost": Row(
        _sigv2_header_with_host("DELETE", "/bkt-x/k", "bkt"), 403, "SignatureDoesNotMatch",
        after={("bkt", "bkt-x/k"): B("bkt", "bkt-x/k"), ("bkt-x", "k"): B("bkt-x", "k")}),
    "v2-query DELETE /aaa/k sent as Host aaa.localhost": Row(
        lambda c: ("DELETE", presign_v2(c, "DELETE", "/aaa/k"), {"Host": vhost(c, "aaa")}, b""),
        403, "SignatureDoesNotMatch", after={("aaa", "aaa/k"): B("aaa", "aaa/k"), ("aaa", "k"): B("aaa", "k")}),
    "v2-header path-style /bkt-x/k (control: bucket bkt-x, not bkt)": Row(
        lambda c: ("GET", "/bkt-x/k", sign_v2(c, "GET", "/bkt-x/k"), b""), 200, body=B("bkt-x", "k")),
    "v2-header virtual-host bkt.localhost/k (control)": Row(
        lambda c: ("GET", "/k", sign_v2(c, "GET", "/k", host=vhost(c, "bkt"), auth_path="/bkt/k"),
                   b""), 200, body=B("bkt", "k")),
    "v2-query virtual-host bkt.localhost/bkt-x/k (control)": Row(
        lambda c: ("GET", presign_v2(c, "GET", "/bkt-x/k", auth_path="/bkt/bkt-x/k"),
                   {"Host": vhost(c, "bkt")}, b""), 200, body=B("bkt", "bkt-x/k")),
    "v4-header virtual-host aaa.localhost/aaa/k (control)": Row(
        lambda c: ("GET", "/aaa/k", sign_v4(c, "GET", "/aaa/k", host=vhost(c, "aaa")), b""), 200,
        body=B("aaa", "aaa/k")),
    "v4-header signed for 127.0.0.1 sent as Host aaa.localhost": Row(
        lambda c: ("GET", "/aaa/k", {**sign_v4(c, "GET", "/aaa/k"), "Host": vhost(c, "aaa")}, b""),
        403, "SignatureDoesNotMatch"),
    # -- defect 7 and friends: expiry numbers before (or without) a valid signature ----------
    "v2-query Expires=-99999999999999999999, bogus signature": Row(
        _v2_expires("-99999999999999999999"), 403, "AccessDenied"),
    # past the year 9999: refused before the signature (issue 24 D4), not saturated
    "v2-query Expires=5000 digits, bogus signature": Row(
        _v2_expires("9" * 5000), 403, "AccessDenied"),
    "v2-query Expires=²": Row(_v2_expires("²"), 403, "AccessDenied"),
    "v2-query Expires in the past": Row(_v2_expires("1000"), 403, "AccessDenied"),
    "v4-query X-Amz-Expires=5000 digits": Row(
        _v4_expires("9" * 5000), 403, "AccessDenied"),
    "v4-query X-Amz-Expires=-1": Row(_v4_expires("-1"), 403, "AccessDenied"),
    "v4-query X-Amz-Expires=٣": Row(_v4_expires("%D9%A3"), 403, "AccessDenied"),
    # -- anonymous and unknown ----------------------------------------------------------------
    "anonymous GET": Row(lambda c: ("GET", "/bkt/k", {}, b""), 403, "AccessDenied"),
    "anonymous DELETE": Row(lambda c: ("DELETE", "/bkt/k", {}, b""), 403, "AccessDenied",
                            after={("bkt", "k"): B("bkt", "k")}),
    "unknown SigV2 access key": Row(
        lambda c: ("GET", "/bkt/k", {"Authorization": "AWS NOSUCHKEY:c2lnbmF0dXJl",
                                   "Date": "Mon, 01 Jan 2024 00:00:00 GMT"}, b""),
        403, "InvalidAccessKeyId"),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_auth_refusals(gw, c, name):
    row = ROWS[name]
    method, target, headers, body = row.build(c)
    status, _, answer = send(c, method, target, headers, body, timeout=30)
    got = code_of(status, answer)
    assert got[0] == row.status, (name, got, answer[:500])
    if row.code is not None:
        assert got[1] == row.code, (name, got, answer[:500])
    if row.body is not None:
        assert answer == row.body
    if status >= 400:
        for value in OBJECTS.values():
            assert value not in answer  # no object's bytes in a refusal
    s3 = gw.client()
    for (bucket, key), want in row.after.items():
        if want is None:
            with pytest.raises(ClientError) as e:
                s3.head_object(Bucket=bucket, Key=key)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        else:
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == want
    if name == "presigned-put+signed-meta (control)":
        assert s3.head_object(Bucket="bkt", Key="presigned-meta")["Metadata"] == {"a": "1"}


@pytest.mark.parametrize("key", ["a\nb", "a\n/", "a\r\nb", "\n", "x/\n/y", "a\tb", "trailing\n"])
def test_keys_with_line_breaks_work(gw, c, key):
    """Defect 10: such keys reach the S3 app (no plain-text 404, no 307 built from Host)."""
    s3 = gw.client()
    s3.put_object(Bucket="bkt", Key=key, Body=b"lines")
    assert s3.get_object(Bucket="bkt", Key=key)["Body"].read() == b"lines"
    assert s3.head_object(Bucket="bkt", Key=key)["ContentLength"] == 5
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix=key)["Contents"]]
    assert key in listed
    # The raw request, as the issue sent it, with a Host an attacker chose.
    target = "/bkt/" + urllib.parse.quote(key, safe="/")
    h = sign_v4(c, "GET", target)
    status, headers, body = send(c, "GET", target, {**h}, timeout=30)
    assert (status, body) == (200, b"lines")
    status, headers, body = send(c, "GET", target, {"Host": "evil.example"}, timeout=30)
    assert status == 403 and "location" not in headers and b"<Error>" in body
    s3.delete_object(Bucket="bkt", Key=key)
    with pytest.raises(ClientError):
        s3.head_object(Bucket="bkt", Key=key)


# ---- defect 3: gateway->node signatures, as the gateway's own node client makes them --------

def _node_send(url: str, method: str, path: str, query: dict[str, str],
               headers: dict[str, str], body: bytes = b"") -> int:
    import http.client
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path + "?" + urllib.parse.urlencode(query), body=body or None,
                     headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_node_requests_are_bound_to_their_node_and_a_restart_keeps_the_replay_memory(gw):
    """The signing call the gateway uses (NodeClient._headers) binds each request to its
    node: replayed to another node, or to the same node again (after a kill -9 and restart
    too), a write or a delete is refused and changes nothing."""
    from erasure.config import ClusterConfig
    from erasure.nodeclient import NodeClient
    cfg = ClusterConfig.load(gw.config_path)
    clients = [NodeClient(spec, cfg.secret, None) for spec in cfg.nodes[:2]]
    urls = [spec.url for spec in cfg.nodes[:2]]
    path = "/v1/records/replay-victim.f00"
    body = b"payload" + b"meta"

    def put(i: int) -> tuple[dict[str, str], dict[str, str]]:
        q = {"nonce": f"n{i}"}
        h = clients[i]._headers("PUT", path, q, None)
        h.update({"X-ZG-Length": "7", "X-ZG-Stream": "replay"})
        return q, h

    def delete(i: int) -> tuple[dict[str, str], dict[str, str]]:
        q = {"nonce": f"d{i}"}
        return q, clients[i]._headers("DELETE", path, q, None)

    def head(i: int) -> int:
        return _node_send(urls[i], "HEAD", path, {}, clients[i]._headers("HEAD", path, {}, None))

    q0, put0 = put(0)
    q1, put1 = put(1)
    dq0, del0 = delete(0)
    steps = [  # (what, node sent to, method, query, headers, body, status, then HEAD on 0, 1)
        ("write for node 0 at node 0", 0, "PUT", q0, put0, body, 201, (200, 404)),
        ("the same write replayed to node 1", 1, "PUT", q0, put0, body, 403, (200, 404)),
        ("the same write again at node 0", 0, "PUT", q0, put0, b"evil" + b"meta", 403,
         (200, 404)),
        ("write for node 1 at node 1", 1, "PUT", q1, put1, body, 201, (200, 200)),
        ("node 0's delete replayed to node 1", 1, "DELETE", dq0, del0, b"", 403, (200, 200)),
        ("node 0's delete at node 0", 0, "DELETE", dq0, del0, b"", 204, (404, 200)),
        ("node 1's write sent to node 0", 0, "PUT", q1, put1, body, 403, (404, 200)),
        ("X-ZG-Node rewritten to node 0", 0, "PUT", q1, {**put1, "X-ZG-Node": cfg.nodes[0].id},
         body, 403, (404, 200)),
    ]
    for what, i, method, q, h, data, status, heads in steps:
        assert _node_send(urls[i], method, path, q, h, data) == status, what
        assert (head(0), head(1)) == heads, what
    gw.nodes.kill(0)
    gw.nodes.restart(0)
    for what, method, q, h, data in [("node 0's write after its restart", "PUT", q0, put0, body),
                                     ("node 0's delete after its restart", "DELETE", dq0, del0,
                                      b"")]:
        assert _node_send(urls[0], method, path, q, h, data) == 403, what
        assert (head(0), head(1)) == (404, 200), what
    # Node 1 cleans up with a fresh, bound delete.
    dq1, del1 = delete(1)
    assert _node_send(urls[1], "DELETE", path, dq1, del1) == 204
