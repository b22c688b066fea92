"""The node's lean PUT path (zonestore/node/fastput.py) answers exactly as the aiohttp path did:
same bytes stored, same JSON and headers, same refusals (auth, replays, short or tampered
bodies, 100-continue), keep-alive with any request after a PUT, metrics, and heads or bodies
split anywhere across TCP reads."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import socket
import time

import aiohttp
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.nodeproc import NodeCluster, node_request
from zonestore.nodeauth import sign_headers

pytestmark = pytest.mark.timeout(300)
SECRET = "fast-put-secret"
NODE = "node00"  # the id of the one node of the module's cluster: writes are signed for it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, drives_per_node=2,
                     secret=SECRET) as c:
        yield c


# -- raw HTTP/1.1 over a socket: the bytes on the wire are what the tests are about ---------------


def put_request(rid: str, payload: bytes, meta: bytes = b"", *, chunk: int | None = None,
                sign_body: bool = True, nonce: str | None = None, secret: str = SECRET,
                extra: dict[str, str] | None = None, version: str = "1.1") -> bytes:
    """A signed PUT of `payload` + `meta`: Content-Length framed, or chunked in `chunk`-byte
    chunks (as the gateway's node client streams)."""
    body = payload + meta
    path = f"/v1/records/{rid}"
    query = {"nonce": nonce or secrets.token_hex(8)}
    h = sign_headers(secret, "PUT", path, query, body if sign_body else None, node=NODE)
    h.update({"X-ZG-Length": str(len(payload)), "X-ZG-Stream": "fast"})
    if chunk is None:
        h["Content-Length"] = str(len(body))
        framed = body
    else:
        h["Transfer-Encoding"] = "chunked"
        framed = b"".join(f"{len(body[i:i + chunk]):x}\r\n".encode() + body[i:i + chunk]
                          + b"\r\n" for i in range(0, len(body), chunk)) + b"0\r\n\r\n"
    h.update(extra or {})
    head = f"PUT {path}?nonce={query['nonce']} HTTP/{version}\r\nHost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + framed


def get_request(path: str) -> bytes:
    h = sign_headers(SECRET, "GET", path.partition("?")[0],
                     dict(p.split("=") for p in path.partition("?")[2].split("&") if p), b"")
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode()


class Conn:
    """One client connection that sends raw bytes and reads whole responses."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data: bytes, pieces: list[int] | None = None) -> None:
        """Send `data`, cut at the offsets `pieces` with a pause between the parts, so that
        the node reads them separately."""
        cuts = [0, *sorted({p for p in pieces or [] if 0 < p < len(data)}), len(data)]
        for a, b in zip(cuts, cuts[1:], strict=False):
            self.sock.sendall(data[a:b])
            if b != len(data):
                time.sleep(0.003)

    def _fill(self) -> bool:
        got = self.sock.recv(1 << 20)
        self.buf += got
        return bool(got)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"connection closed; got {self.buf[:200]!r}")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if status == 100:
            return status, headers, b""
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("connection closed mid-body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body

    def closed_by_peer(self) -> bool:
        self.sock.settimeout(5)
        try:
            return self.buf == b"" and not self._fill()
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    c = Conn(port)
    try:
        c.send(data)
        return c.response()
    finally:
        c.close()


def port_of(cluster) -> int:
    return cluster.nodes[0].port


def head_status(cluster, rid: str) -> int:
    path = f"/v1/records/{rid}"
    h = sign_headers(SECRET, "HEAD", path, None, b"")
    data = (f"HEAD {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n"
                                                             for k, v in h.items()) + "\r\n")
    c = Conn(port_of(cluster))
    try:
        c.send(data.encode())
        while b"\r\n\r\n" not in c.buf:
            c._fill()
        return int(c.buf.split()[1])
    finally:
        c.close()


def metrics(cluster) -> dict[str, float]:
    status, _, body = exchange(port_of(cluster), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        m = re.fullmatch(r"(zonegate_node_(?:requests_total|received_bytes_total|"
                         r"request_duration_seconds_count)\S*) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


PUT_201 = 'zonegate_node_requests_total{method="PUT",route="record_put",status="201"}'
PUT_403 = 'zonegate_node_requests_total{method="PUT",route="record_put",status="403"}'
PUT_SECONDS = 'zonegate_node_request_duration_seconds_count{method="PUT",route="record_put"}'


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 1 << 20, 100_000], ids=["content-length",
                                                                 "chunked-1MiB", "chunked-100k"])
def test_lean_put_stores_exact_bytes_and_meta(cluster, chunk):
    payload = os.urandom((1 << 20) + 12_345)
    meta = json.dumps({"v": 1, "part": "p", "index": 3}).encode()
    rid = f"lean-{chunk}.f03"
    status, headers, body = exchange(port_of(cluster), put_request(rid, payload, meta,
                                                                   chunk=chunk))
    assert status == 201, body
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert "connection" not in headers  # kept alive, as aiohttp answers HTTP/1.1
    answer = json.loads(body)
    assert list(answer) == ["id", "length", "crc32c", "seq"]
    assert answer["id"] == rid and answer["length"] == len(payload)
    assert answer["crc32c"] == crc32c.crc32c(payload)
    status, headers, body = exchange(port_of(cluster), get_request(f"/v1/records/{rid}"))
    assert status == 200 and body == payload
    assert base64.b64decode(headers["x-zg-meta"]) == meta
    assert headers["x-zg-stream"] == "fast"


def test_lean_and_aiohttp_paths_answer_the_same(cluster):
    """HTTP/1.0 goes to aiohttp; its answer has the same JSON shape and headers."""
    payload = b"same answer" * 100
    lean = exchange(port_of(cluster), put_request("same-lean", payload))
    aio = exchange(port_of(cluster), put_request("same-aio", payload, version="1.0"))
    assert lean[0] == aio[0] == 201
    for (_, headers, body), rid in ((lean, "same-lean"), (aio, "same-aio")):
        answer = json.loads(body)
        assert answer["id"] == rid and answer["crc32c"] == crc32c.crc32c(payload)
        assert headers["content-type"] == "application/json; charset=utf-8"
        assert headers["server"].startswith("Python/") and "aiohttp/" in headers["server"]
        assert "date" in headers
    # Refusals too: the same JSON error, word for word.
    unsigned_lean = exchange(port_of(cluster), b"PUT /v1/records/u HTTP/1.1\r\nHost: x\r\n"
                             b"X-ZG-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
    unsigned_aio = exchange(port_of(cluster), b"PUT /v1/records/u HTTP/1.0\r\nHost: x\r\n"
                            b"X-ZG-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
    assert unsigned_lean[0] == unsigned_aio[0] == 403
    assert unsigned_lean[2] == unsigned_aio[2]
    assert json.loads(unsigned_lean[2]) == {"error": "forbidden",
                                            "message": "request is not signed"}


def test_keep_alive_put_put_then_get_and_list_on_one_connection(cluster):
    c = Conn(port_of(cluster))
    try:
        for i in range(3):
            c.send(put_request(f"ka.{i}", bytes([i]) * 5000, b"m", chunk=4096 if i else None))
            status, headers, body = c.response()
            assert status == 201, body
        # A GET and a listing on the same connection: aiohttp takes the connection over.
        c.send(get_request("/v1/records/ka.1"))
        status, _, body = c.response()
        assert status == 200 and body == bytes([1]) * 5000
        c.send(get_request("/v1/records?prefix=ka.&limit=10"))
        status, _, body = c.response()
        assert status == 200
        assert [r["id"] for r in json.loads(body)["records"]] == ["ka.0", "ka.1", "ka.2"]
        # ... and it still takes PUTs.
        c.send(put_request("ka.3", b"after", b""))
        assert c.response()[0] == 201
    finally:
        c.close()


def test_pipelined_put_and_get_in_one_write(cluster):
    c = Conn(port_of(cluster))
    try:
        c.send(put_request("pipe.1", b"pipelined", b"") + get_request("/v1/records/pipe.1")
               + get_request("/health/ready") + put_request("pipe.2", b"second", b"")
               + get_request("/v1/records/pipe.2"))
        assert c.response()[0] == 201
        status, _, body = c.response()
        assert status == 200 and body == b"pipelined"
        assert c.response()[0] == 200
        assert c.response()[0] == 201
        status, _, body = c.response()
        assert status == 200 and body == b"second"
    finally:
        c.close()


def test_unsigned_badly_signed_and_replayed_puts_are_refused(cluster):
    port = port_of(cluster)
    before = metrics(cluster)
    status, headers, body = exchange(port, put_request("auth.a", b"x" * 10, secret="wrong"))
    assert status == 403 and json.loads(body)["error"] == "forbidden"
    assert headers["connection"] == "close"  # the unread body is not wanted
    # A replay is refused, whichever path saw the first copy: one replay cache for both.
    req = put_request("auth.b", b"y" * 10, nonce="replay-nonce-1")
    assert exchange(port, req)[0] == 201
    status, _, body = exchange(port, req)
    assert status == 403 and "replayed" in json.loads(body)["message"]
    first_on_aiohttp = put_request("auth.c", b"z" * 10, nonce="replay-nonce-2", version="1.0")
    assert exchange(port, first_on_aiohttp)[0] == 201
    replay_on_lean = first_on_aiohttp.replace(b" HTTP/1.0\r\n", b" HTTP/1.1\r\n", 1)
    status, _, body = exchange(port, replay_on_lean)
    assert status == 403 and "replayed" in json.loads(body)["message"]
    # A signature for another id or stream of bytes is refused too.
    status, _, _ = exchange(port, put_request("auth.d", b"x").replace(b"auth.d", b"auth.e"))
    assert status == 403
    for rid in ("auth.a", "auth.e"):
        assert head_status(cluster, rid) == 404
    after = metrics(cluster)
    assert after[PUT_403] - before.get(PUT_403, 0) == 4


def test_a_refused_put_whose_body_keeps_coming_is_not_reset_before_its_answer_is_read(cluster):
    """A PUT refused at its head (another secret) whose client goes on writing a long body
    without reading: the node drops some of it, then stops reading, so the client's writes
    stall; a close with bytes unread would send a reset, and a client that writes before it
    reads (the gateway's, under load) would lose the 403 to it. The node closes later."""
    path = "/v1/records/refused-long"
    query = {"nonce": secrets.token_hex(8)}
    h = sign_headers("wrong", "PUT", path, query, None, node=NODE)
    h.update({"X-ZG-Length": str(1 << 30), "X-ZG-Stream": "fast",
              "Transfer-Encoding": "chunked"})
    head = f"PUT {path}?nonce={query['nonce']} HTTP/1.1\r\nHost: x\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    chunk = b"100000\r\n" + bytes(1 << 20) + b"\r\n"
    c = Conn(port_of(cluster))
    try:
        c.sock.sendall(head.encode())
        c.sock.settimeout(0.5)
        sent = 0
        with pytest.raises(TimeoutError):  # not ConnectionResetError or BrokenPipeError
            while sent < 1 << 30:
                c.sock.sendall(chunk)
                sent += len(chunk)
        c.sock.settimeout(10)
        status, headers, body = c.response()
        assert status == 403 and headers["connection"] == "close"
        assert json.loads(body)["error"] == "forbidden"
        assert c.closed_by_peer()
    finally:
        c.close()
    assert head_status(cluster, "refused-long") == 404


def test_body_hash_mismatch_is_refused_and_nothing_stored(cluster):
    req = put_request("tampered", b"the signed payload", b"meta")
    status, headers, body = exchange(port_of(cluster), req.replace(b"signed", b"SIGNED"))
    assert status == 403 and json.loads(body)["error"] == "body_mismatch"
    assert head_status(cluster, "tampered") == 404


@pytest.mark.parametrize("chunk", [None, 1000])
def test_body_shorter_than_declared_stores_nothing(cluster, chunk):
    rid = f"short-{chunk}"
    req = put_request(rid, os.urandom(50_000), b"meta", chunk=chunk, sign_body=False)
    c = Conn(port_of(cluster))
    c.send(req[:-20_000])
    time.sleep(0.2)
    c.close()  # the client goes away mid-body
    time.sleep(0.2)
    assert head_status(cluster, rid) == 404
    # Content-Length shorter than X-ZG-Length is refused before the body is read.
    short = put_request(rid, b"abc").replace(b"Content-Length: 3", b"Content-Length: 2")
    status, _, body = exchange(port_of(cluster), short[:-1])
    assert status == 400 and json.loads(body)["error"] == "incomplete_body"
    assert head_status(cluster, rid) == 404


def test_broken_chunked_framing_is_refused_and_nothing_stored(cluster):
    req = put_request("badframe", b"a" * 3000, chunk=1000, sign_body=False)
    head, _, body = req.partition(b"\r\n\r\n")
    c = Conn(port_of(cluster))
    try:
        first = body.index(b"\r\n") + 2 + 1000 + 2  # one whole chunk, then garbage
        c.send(head + b"\r\n\r\n" + body[:first])
        time.sleep(0.1)
        c.send(b"zz\r\n")
        status, headers, answer = c.response()
        assert status == 400 and json.loads(answer)["error"] == "bad_body"
        assert headers["connection"] == "close" and c.closed_by_peer()
    finally:
        c.close()
    assert head_status(cluster, "badframe") == 404


def test_expect_100_continue_accepted_and_refused(cluster):
    c = Conn(port_of(cluster))
    try:
        req = put_request("expect.ok", b"continue", extra={"Expect": "100-continue"})
        head, _, body = req.partition(b"\r\n\r\n")
        c.send(head + b"\r\n\r\n")
        assert c.response()[0] == 100
        c.send(body)
        status, _, answer = c.response()
        assert status == 201 and json.loads(answer)["id"] == "expect.ok"
    finally:
        c.close()
    req = put_request("expect.no", b"continue", secret="wrong", extra={"Expect": "100-continue"})
    status, headers, answer = exchange(port_of(cluster), req.partition(b"\r\n\r\n")[0]
                                       + b"\r\n\r\n")
    assert status == 403 and headers["connection"] == "close"
    assert head_status(cluster, "expect.no") == 404


def test_odd_heads_go_to_aiohttp_and_get_its_answers(cluster):
    port = port_of(cluster)
    big = put_request("odd.1", b"abc", extra={"X-Big": "a" * 9000})
    assert exchange(port, big)[0] == 400  # aiohttp's line limit
    many = put_request("odd.2", b"abc", extra={f"X-H{i}": "v" for i in range(70)})
    assert exchange(port, many)[0] == 400  # aiohttp's header-count limit
    both = put_request("odd.3", b"abc", chunk=10).replace(
        b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked\r\nContent-Length: 3")
    assert exchange(port, both)[0] == 400
    status, _, body = exchange(port, put_request(".odd4", b"abc"))
    assert status == 400 and json.loads(body)["error"] == "invalid_id"
    for rid in ("odd.1", "odd.2", "odd.3"):
        assert head_status(cluster, rid) == 404


def test_metrics_count_lean_puts_and_bytes(cluster):
    before = metrics(cluster)
    c = Conn(port_of(cluster))
    try:
        for i in range(5):
            c.send(put_request(f"metric.{i}", b"p" * 1000, b"mm"))
            assert c.response()[0] == 201
    finally:
        c.close()
    after = metrics(cluster)
    assert after[PUT_201] - before.get(PUT_201, 0) == 5
    assert after[PUT_SECONDS] - before.get(PUT_SECONDS, 0) >= 5
    assert after["zonegate_node_received_bytes_total"] - before[
        "zonegate_node_received_bytes_total"] == 5 * 1002


async def test_gateway_style_chunked_puts_and_reads(cluster, session):
    """aiohttp's client with an async generator body (as erasure's node client sends)."""
    payload = os.urandom((1 << 20) + 640)

    async def gen():
        for i in range(0, len(payload), 1 << 20):
            yield payload[i:i + (1 << 20)]
            await asyncio.sleep(0)

    results = []
    for i in range(4):
        path = f"/v1/records/gw.{i}"
        query = {"nonce": secrets.token_hex(8)}
        h = sign_headers(SECRET, "PUT", path, query, None, node=NODE)
        h.update({"X-ZG-Length": str(1 << 20), "X-ZG-Stream": "gw"})
        async with session.put(cluster.urls[0] + path, params=query, data=gen(),
                               headers=h) as resp:
            results.append((resp.status, await resp.json()))
    assert [s for s, _ in results] == [201] * 4
    status, headers, body = await node_request(session, cluster, 0, "GET", "/v1/records/gw.2")
    assert status == 200 and body == payload[:1 << 20]
    assert base64.b64decode(headers["X-ZG-Meta"]) == payload[1 << 20:]


_SPLIT_ID = iter(range(10**9))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload_size=st.one_of(st.integers(0, 300_000),
                              st.integers((1 << 20) - 100, (2 << 20) + 100)),
       meta_size=st.integers(0, 2000),
       chunk=st.one_of(st.none(), st.integers(1, 70_000)),
       cuts=st.lists(st.floats(0, 1), max_size=6))
def test_requests_split_anywhere_across_reads(cluster, payload_size, meta_size, chunk, cuts):
    rid = f"split.{next(_SPLIT_ID)}"
    payload = os.urandom(payload_size)
    meta = os.urandom(meta_size)
    data = put_request(rid, payload, meta, chunk=chunk) + get_request(f"/v1/records/{rid}")
    c = Conn(port_of(cluster))
    try:
        c.send(data, [int(f * len(data)) for f in cuts])
        status, _, body = c.response()
        assert status == 201, body
        assert json.loads(body)["crc32c"] == crc32c.crc32c(payload)
        status, headers, body = c.response()
        assert status == 200 and body == payload
        assert base64.b64decode(headers["x-zg-meta"]) == meta
    finally:
        c.close()


# -- in process: which path served what, and draining ----------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in head[1:] if x)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(head[0].split()[1]), headers, body


@pytest.fixture
async def node(tmp_path):
    from tests.support.nodeproc import TEST_GEOMETRY
    from zonestore.node.server import NodeOptions, NodeServer

    n = NodeServer(NODE, [tmp_path / "d0"], "127.0.0.1", 0, SECRET,
                   NodeOptions(create_drives=True, geometry=TEST_GEOMETRY, reclaim_interval=0,
                               shutdown_timeout=10))
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def test_lean_path_serves_puts_and_lends_other_requests_to_aiohttp(node):
    async def gen():
        yield b"c" * 70_000
        yield b"meta"

    async def put(rid, data):
        path = f"/v1/records/{rid}"
        query = {"nonce": secrets.token_hex(8)}
        h = {**sign_headers(SECRET, "PUT", path, query, None, node=NODE),
             "X-ZG-Length": "70000"}
        async with session.put(node.url + path, params=query, data=data, headers=h) as resp:
            assert resp.status == 201

    # One connection for everything, as a busy gateway's pool reuses each of its connections.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        await put("ip.1", b"b" * 70_000 + b"meta")
        await put("ip.2", gen())
        assert (node.lean.served, node.lean.delegated, node.lean.handed_off) == (2, 0, 0)
        path = "/v1/records/ip.2"
        async with session.get(node.url + path,
                               headers=sign_headers(SECRET, "GET", path, None, b"")) as resp:
            assert resp.status == 200 and await resp.read() == b"c" * 70_000
            assert resp.headers["X-ZG-Meta"] == base64.b64encode(b"meta").decode()
        # The GET was aiohttp's; the connection came back for the next PUT.
        await put("ip.3", b"d" * 70_000)
        assert (node.lean.served, node.lean.delegated, node.lean.handed_off) == (3, 1, 0)
        # Requests in a row that are not lean PUTs share one aiohttp handler.
        for path in ("/health/ready", "/v1/records/ip.3", "/v1/stats"):
            async with session.get(node.url + path,
                                   headers=sign_headers(SECRET, "GET", path, None, b"")) as resp:
                assert resp.status == 200
        assert (node.lean.delegated, node.lean.lent_handlers) == (4, 2)
        await put("ip.4", b"e" * 70_000)
        assert (node.lean.served, node.lean.delegated, node.lean.handed_off) == (4, 4, 0)
        assert len(node.lean.connections) == 1
    # HTTP/1.0 (or anything odd) gives aiohttp the connection for good.
    status, _, _ = await asyncio.to_thread(
        exchange, node.port, put_request("ip.5", b"old", version="1.0"))
    assert status == 201 and node.lean.handed_off == 1


async def test_shutdown_lets_a_lean_put_finish_and_refuses_new_ones(node):
    port = node.port
    # An idle keep-alive connection that already served a PUT ...
    r_idle, w_idle = await asyncio.open_connection("127.0.0.1", port)
    w_idle.write(put_request("drain.0", b"first"))
    assert (await _read_response(r_idle))[0] == 201
    # ... and a PUT whose body is half sent when the node is told to stop.
    req = put_request("drain.1", b"x" * 200_000, b"meta")
    r_busy, w_busy = await asyncio.open_connection("127.0.0.1", port)
    w_busy.write(req[:100_000])
    await w_busy.drain()
    for _ in range(100):
        if node.state.inflight:
            break
        await asyncio.sleep(0.01)
    assert node.state.inflight == 1
    stopping = asyncio.create_task(node.stop())
    await asyncio.sleep(0.2)
    w_idle.write(put_request("drain.2", b"late"))
    status, headers, body = await _read_response(r_idle)
    assert status == 503 and json.loads(body)["error"] == "shutting_down"
    assert headers["connection"] == "close"
    w_busy.write(req[100_000:])
    status, _, body = await _read_response(r_busy)
    assert status == 201 and json.loads(body)["id"] == "drain.1"
    await stopping
    assert await r_busy.read() == b""  # closed once drained
    for w in (w_idle, w_busy):
        w.close()


def test_head_parser_takes_only_what_it_reads_exactly_as_aiohttp():
    from zonestore.node.leanhead import parse_head

    base = b"PUT /v1/records/x.f01?nonce=ab HTTP/1.1\r\nContent-Length: 3\r\n"
    req = parse_head(base + b"X-A:  b  c \t\r\nX-Empty:")
    assert dict(req.headers) == {"Content-Length": "3", "X-A": "b  c", "X-Empty": ""}
    assert (req.raw_path, req.raw_id, req.query, req.declared, req.keep_alive) == (
        "/v1/records/x.f01", "x.f01", [("nonce", "ab")], 3, True)
    assert parse_head(base + b"X-A: " + b"a" * 8185).headers["X-A"] == "a" * 8185
    assert parse_head(base + b"\r\n".join(b"X-%d: v" % i for i in range(63))) is not None
    assert parse_head(b"GET /v1/records/x HTTP/1.1\r\nHost: h") == 0  # lent to aiohttp
    assert parse_head(b"DELETE /v1/records/x HTTP/1.1\r\nContent-Length: 5") == 5
    assert parse_head(base + b"Expect: 100-continue") == 3
    for odd in (base + b"X-A: b\r\n c",  # obs-fold
                base + b"X-A: b\x01", base + b"X-A: \xe9", base + b"X-A: b\nX-B: c",
                base + b"X-A: b\rc", base + b"X A: b", base + b"X-A b",
                base + b"X-A: " + b"a" * 8186,  # a line over aiohttp's 8190 bytes
                base + b"\r\n".join(b"X-%d: v" % i for i in range(64)),  # 65 headers
                base + b"content-length: 3", base + b"Transfer-Encoding: chunked",
                base + b"Upgrade: h2c", base + b"Connection: upgrade",
                b"PUT /v1/records/x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked",
                b"PUT /v1/records/x HTTP/1.1\r\nContent-Length: -3",
                b"PUT /v1/records/x HTTP/1.0\r\nContent-Length: 3",
                b"PUT  /v1/records/x HTTP/1.1\r\nContent-Length: 3",
                b"GET /x HTTP/1.1\r\nTransfer-Encoding: chunked",
                b"get /x HTTP/1.1\r\nHost: h"):
        assert parse_head(odd) is None, odd
    # Ids and queries aiohttp would decode (escapes, '+') are aiohttp's to read.
    for target in (b"/v1/records/a%2Eb", b"/v1/records/x?nonce=a+b", b"/v1/records/x?n=%41",
                   b"/v1/records/.x", b"/v1/records/x/y", b"/v1/records/x?a"):
        assert parse_head(b"PUT " + target + b" HTTP/1.1\r\nContent-Length: 3") == 3, target


def test_quick_test_for_requests_aiohttp_answers_in_a_row():
    from zonestore.node.leanhead import bodiless_other

    get = b"GET /v1/records/x HTTP/1.1\r\nHost: h\r\nAuthorization: a\r\n\r\n"
    assert bodiless_other(get)
    assert bodiless_other(b"DELETE /v1/records/x?nonce=1 HTTP/1.1\r\nHost: h\r\n\r\n")
    for framed in (b"Content-Length: 0", b"content-length:3", b"Transfer-Encoding: chunked",
                   b"Expect: 100-continue", b"Upgrade: h2c"):
        assert not bodiless_other(get[:-2] + framed + b"\r\n\r\n"), framed
    assert not bodiless_other(get.replace(b"HTTP/1.1", b"HTTP/1.0"))
    assert not bodiless_other(get.replace(b"\r\nHost", b"\nHost"))  # a bare LF
    assert not bodiless_other(get.replace(b"Host: h", b"Host: h\rX: y"))  # a bare CR
    assert not bodiless_other(b"PUT /v1/records/x HTTP/1.1\r\nHost: h\r\n\r\n")  # lean's
