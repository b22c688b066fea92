"""Fuzz of the gateway protocol's body handling (gateway/server/httpproto.py): bodies of a
known length are taken from the socket's reads past the parser, and handed to the app in
BODY_SEGMENT pieces. Whatever the sizes, framing, pipelining and read boundaries, each request
of a connection reaches the app, in order, with exactly its body bytes; every piece but the
last is one whole segment; a body asked for as segments (read straight into pooled buffers)
comes as read-only views that stay intact while held; a receive() after the end waits; an app that answers before reading its body leaves the next
pipelined request intact."""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.server.httpbody import BODY_SEGMENT

pytestmark = pytest.mark.timeout(300)
SEG = BODY_SEGMENT


async def _app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path.startswith("/early"):  # answers without reading its body
        out = b"early"
    else:
        # /s...: asks for segments (read-only views of pooled buffers) when they are offered,
        # and holds every piece until the end: a buffer reused while held would show here
        # (/t...: later, once some of the body waits: it is copied into the first segments)
        if path.startswith("/t"):
            await asyncio.sleep(0.005)
        segs = path[1] in "st" and scope.get("extensions", {}).get(
            "zonegate.segments", lambda: False)()
        held, n, sizes, more = [], 0, [], True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            assert type(body) is bytes or (segs and type(body) is memoryview and body.readonly)
            held.append(body)
            n += len(body)
            sizes.append(len(body))
            more = msg.get("more_body", False)
        h = hashlib.sha256()
        for body in held:
            h.update(body)
        aligned = all(s == SEG for s in sizes[:-1])
        # After the end, receive() waits (for a disconnect: Starlette listens for one while
        # it streams a response) instead of answering again at once.
        extra = []

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                extra.append(1)

        listener = asyncio.ensure_future(listen())
        for _ in range(3):
            await asyncio.sleep(0)
        listener.cancel()
        out = f"{n}:{h.hexdigest()}:{aligned}:{len(extra)}".encode()
    out = path.encode() + b" " + out
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http="gateway.server.httpproto:GatewayHttpProtocol",
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: uvloop.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(30)
    sock.close()


def _sizes() -> st.SearchStrategy[int]:
    near = st.sampled_from([SEG, 2 * SEG]).flatmap(
        lambda b: st.integers(b - 300, b + 300))
    return st.one_of(st.integers(0, 3000), near, st.integers(0, 2 * SEG + 5000))


@st.composite
def _request(draw: st.DrawFn, i: int) -> tuple[bytes, bytes, bytes | None]:
    size = draw(_sizes())
    body = random.Random(draw(st.integers(0, 2**32))).randbytes(size)  # no two segments alike
    kind = draw(st.sampled_from(["early", "r", "s", "t"]))
    early = kind == "early"
    path = f"/{kind}{i}"
    if draw(st.booleans()):  # Content-Length: taken past the parser
        head = f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n".encode()
        wire = head + body
    else:  # chunked: the parser's own body handling
        cuts = sorted(draw(st.lists(st.integers(0, size), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, size], strict=True)]
        wire = f"PUT {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        wire += b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"
    want = None if early else body
    return path.encode(), wire, want


def _read_response(f) -> bytes:
    status = f.readline()
    assert b" 200 " in status, status
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return f.read(length)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_every_request_gets_exactly_its_body_whatever_the_reads(port: int, data) -> None:
    n = data.draw(st.integers(1, 4))
    reqs = [data.draw(_request(i)) for i in range(n)]
    wire = b"".join(w for _, w, _ in reqs)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=6))))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True):
            s.sendall(wire[a:b])
            time.sleep(0.002)  # let the server read up to here: reads end at the cuts
        f = s.makefile("rb")
        for path, _, want in reqs:
            got = _read_response(f)
            if want is None:
                assert got == path + b" early"
            else:
                expect = f"{len(want)}:{hashlib.sha256(want).hexdigest()}:True:0".encode()
                assert got == path + b" " + expect

