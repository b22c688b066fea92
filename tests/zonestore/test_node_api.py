"""The node API over real HTTP against a real node process: round trips, ranges, listing,
and bad input that must get a clear 4xx (never a 500) and lose nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket

import crc32c
import pytest

from tests.support.nodeproc import node_request

pytestmark = pytest.mark.timeout(300)


async def put(session, cluster, rid, payload, meta=b"", stream="s1", sign_body=True):
    return await node_request(
        session, cluster, 0, "PUT", f"/v1/records/{rid}", body=payload + meta,
        headers={"X-ZG-Length": str(len(payload)), "X-ZG-Stream": stream}, sign_body=sign_body)


async def test_put_get_head_delete_round_trip(cluster, session):
    payload = os.urandom(300_000)
    meta = json.dumps({"bucket": "b", "key": "k", "fragment": 3}).encode()
    status, _, body = await put(session, cluster, "part1.f03", payload, meta)
    assert status == 201, body
    answer = json.loads(body)
    assert answer["id"] == "part1.f03" and answer["length"] == len(payload)
    assert answer["crc32c"] == crc32c.crc32c(payload)

    status, headers, body = await node_request(session, cluster, 0, "GET", "/v1/records/part1.f03")
    assert status == 200 and body == payload
    assert int(headers["X-ZG-Length"]) == len(payload)
    assert base64.b64decode(headers["X-ZG-Meta"]) == meta
    assert int(headers["X-ZG-Crc32c"]) == crc32c.crc32c(payload)

    status, headers, body = await node_request(session, cluster, 0, "HEAD", "/v1/records/part1.f03")
    assert status == 200 and body == b""
    assert int(headers["Content-Length"]) == len(payload)
    assert base64.b64decode(headers["X-ZG-Meta"]) == meta

    status, _, _ = await node_request(session, cluster, 0, "DELETE", "/v1/records/part1.f03")
    assert status == 204
    for method in ("GET", "HEAD", "DELETE"):
        status, _, body = await node_request(session, cluster, 0, method, "/v1/records/part1.f03")
        assert status == 404, (method, body)


async def test_ranges_are_served_exactly(cluster, session):
    payload = os.urandom(1_000_003)
    assert (await put(session, cluster, "ranged", payload))[0] == 201
    cases = {"bytes=0-0": payload[:1], "bytes=10-4105": payload[10:4106],
             "bytes=999999-": payload[999999:], "bytes=-7": payload[-7:],
             "bytes=500000-99999999": payload[500000:]}
    for rng, want in cases.items():
        status, headers, body = await node_request(session, cluster, 0, "GET",
                                                   "/v1/records/ranged", headers={"Range": rng})
        assert status == 206 and body == want, rng
        assert headers["Content-Range"].endswith(f"/{len(payload)}")
    for rng, code in {"bytes=1000003-": 416, "bytes=-0": 416, "bytes=5-2": 400,
                      "bytes=1-2,4-5": 400, "items=0-1": 400, "bytes=-": 400}.items():
        status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records/ranged",
                                             headers={"Range": rng})
        assert status == code, (rng, body)
        assert "error" in json.loads(body)


async def test_empty_record_and_replacing_a_record(cluster, session):
    assert (await put(session, cluster, "empty", b"", b"m"))[0] == 201
    status, headers, body = await node_request(session, cluster, 0, "GET", "/v1/records/empty")
    assert status == 200 and body == b"" and base64.b64decode(headers["X-ZG-Meta"]) == b"m"
    assert (await put(session, cluster, "empty", b"now full", b""))[0] == 201
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records/empty")
    assert (status, body) == (200, b"now full")


async def test_streamed_unsigned_payload_put(cluster, session):
    payload = os.urandom(2_000_000)
    status, _, body = await put(session, cluster, "streamed", payload, b"meta", sign_body=False)
    assert status == 201, body
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records/streamed")
    assert body == payload


async def test_listing_is_paginated_by_prefix(cluster, session):
    ids = [f"lst.{i:03d}" for i in range(25)]
    for rid in ids:
        assert (await put(session, cluster, rid, rid.encode(), b"meta-" + rid.encode()))[0] == 201
    assert (await put(session, cluster, "other.1", b"x"))[0] == 201
    seen, after = [], ""
    while True:
        query = {"prefix": "lst.", "limit": "10", **({"after": after} if after else {})}
        status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records",
                                             query=query)
        assert status == 200, body
        page = json.loads(body)
        assert len(page["records"]) <= 10
        seen += page["records"]
        if page["next"] is None:
            break
        after = page["next"]
    assert [r["id"] for r in seen] == ids
    assert all(base64.b64decode(r["meta"]) == b"meta-" + r["id"].encode() for r in seen)
    assert seen[0]["length"] == len(ids[0]) and seen[0]["stream"] == "s1"


@pytest.mark.parametrize("headers,body,code", [
    ({}, b"abc", 400),                                         # no X-ZG-Length
    ({"X-ZG-Length": "-1"}, b"abc", 400),
    ({"X-ZG-Length": "1e3"}, b"abc", 400),
    ({"X-ZG-Length": "10"}, b"abc", 400),                      # body shorter than the payload
    ({"X-ZG-Length": str(7 << 30)}, b"abc", 413),              # above the 6 GiB default
    ({"X-ZG-Length": "1"}, b"a" + b"m" * (64 * 1024 + 1), 413),  # metadata blob too large
    ({"X-ZG-Length": "1", "X-ZG-Stream": "bad stream"}, b"ab", 400),
])
async def test_bad_puts_are_refused_and_commit_nothing(cluster, session, headers, body, code):
    status, _, answer = await node_request(session, cluster, 0, "PUT", "/v1/records/badput",
                                           body=body, headers=headers)
    assert status == code, answer
    assert json.loads(answer)["error"]
    status, _, _ = await node_request(session, cluster, 0, "HEAD", "/v1/records/badput")
    assert status == 404


@pytest.mark.parametrize("method,path,query,code", [
    ("GET", "/v1/records", {"limit": "0"}, 400),
    ("GET", "/v1/records", {"limit": "abc"}, 400),
    ("GET", "/v1/records", {"limit": "100001"}, 400),
    ("GET", "/v1/records", {"prefix": "../x"}, 400),
    ("GET", "/v1/records", {"bogus": "1"}, 400),
    ("GET", "/v1/nothing", None, 404),
    ("POST", "/v1/records/abc", None, 405),
    ("PATCH", "/v1/stats", None, 405),
])
async def test_bad_requests_get_json_4xx(cluster, session, method, path, query, code):
    status, _, body = await node_request(session, cluster, 0, method, path, query=query)
    assert status == code, body
    assert json.loads(body)["error"]


async def test_get_with_a_body_is_refused(cluster, session):
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records/x",
                                         body=b"surprise")
    assert status == 400 and json.loads(body)["error"] == "unexpected_body"


async def test_oversized_headers_are_refused_without_a_crash(cluster, session):
    port = cluster.nodes[0].port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/stats HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert status_line.split()[1] in (b"400", b"431"), status_line
    status, _, _ = await node_request(session, cluster, 0, "GET", "/health/ready")
    assert status == 200


async def test_client_disconnecting_mid_put_commits_nothing(cluster, session):
    path = "/v1/records/halfway"
    headers = cluster.headers(0, "PUT", path)  # UNSIGNED-PAYLOAD: a streamed body
    sock = socket.create_connection(("127.0.0.1", cluster.nodes[0].port))
    head = [f"PUT {path} HTTP/1.1", "Host: 127.0.0.1", "X-ZG-Length: 4000000",
            "Content-Length: 4000000"] + [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    sock.sendall(os.urandom(1_500_000))
    await asyncio.sleep(0.3)
    sock.close()
    await asyncio.sleep(0.5)
    status, _, _ = await node_request(session, cluster, 0, "HEAD", path)
    assert status == 404
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records",
                                         query={"prefix": "halfway"})
    assert json.loads(body)["records"] == []
    # The node is still healthy and takes the same id afterwards.
    assert (await put(session, cluster, "halfway", b"complete"))[0] == 201


async def test_client_dropping_a_download_leaves_the_node_healthy(cluster, session):
    payload = os.urandom(8 << 20)
    assert (await put(session, cluster, "dropped", payload))[0] == 201
    for _ in range(3):
        path = "/v1/records/dropped"
        headers = cluster.headers(0, "GET", path)
        reader, writer = await asyncio.open_connection("127.0.0.1", cluster.nodes[0].port)
        writer.write((f"GET {path} HTTP/1.1\r\nHost: x\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        await writer.drain()
        assert (await reader.readline()).split()[1] == b"200"
        await reader.readexactly(100_000)
        writer.transport.abort()  # RST mid-body
    await asyncio.sleep(0.3)
    status, _, body = await node_request(session, cluster, 0, "GET", "/v1/records/dropped")
    assert status == 200 and body == payload
    assert "Traceback" not in cluster.log_path(0).read_text()


async def _expect_put(cluster, path, headers):
    """Send a PUT's headers with Expect: 100-continue and no body; return the status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster.nodes[0].port)
    head = [f"PUT {path} HTTP/1.1", "Host: x", "Expect: 100-continue"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    return line, reader, writer


@pytest.mark.parametrize("extra,code", [
    ({"X-ZG-Length": str(7 << 30)}, b"413"),
    ({"X-ZG-Length": "abc"}, b"400"),
    ({"X-ZG-Length": "10", "Content-Length": str(10 + 70_000)}, b"413"),
])
async def test_expect_100_continue_refuses_before_the_body(cluster, session, extra, code):
    path = "/v1/records/expected"
    line, _, writer = await _expect_put(cluster, path, {**cluster.headers(0, "PUT", path),
                                                        **extra})
    writer.close()
    assert line.split()[1] == code, line
    # Unsigned: refused the same way, before any body byte.
    line, _, writer = await _expect_put(cluster, path, extra)
    writer.close()
    assert line.split()[1] == b"403", line


async def test_expect_100_continue_then_the_body(cluster, session):
    path = "/v1/records/continued"
    body = b"payload" + b"meta"
    headers = {**cluster.headers(0, "PUT", path, body=body), "X-ZG-Length": "7",
               "Content-Length": str(len(body))}
    line, reader, writer = await _expect_put(cluster, path, headers)
    assert line.startswith(b"HTTP/1.1 100"), line
    assert await reader.readline() == b"\r\n"
    writer.write(body)
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert line.split()[1] == b"201", line
    status, headers, got = await node_request(session, cluster, 0, "GET", path)
    assert (status, got) == (200, b"payload")
    assert base64.b64decode(headers["X-ZG-Meta"]) == b"meta"


async def test_no_request_in_this_module_caused_a_500(cluster, session):
    status, _, body = await node_request(session, cluster, 0, "GET", "/metrics")
    assert status == 200
    lines = [ln for ln in body.decode().splitlines()
             if ln.startswith("zonegate_node_requests_total{")]
    assert lines, "request counter missing"
    assert not [ln for ln in lines if 'status="500"' in ln], lines
