"""Fuzz of erasure/nodeget.py and nodeput.py, the hand-written HTTP/1.1 client of record GETs and
PUTs: whatever bytes a peer answers (well-formed, mutated or random, cut anywhere, in any
pieces), a record GET ends in bytes that are exactly the body announced, or in a NodeError,
within the node timeout; never another exception, never a hang, never bytes the peer did not
send as the body. A streamed PUT ends in the node's JSON or a NodeError, wherever in the body
the peer answered."""

from __future__ import annotations

import asyncio
import base64

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from erasure.nodeclient import NodeError
from tests.support.peerclient import peer_client

SECRET = "nodeget-fuzz-secret"


def answer(status: int, body: bytes, *, length: int | None, extra: list[bytes],
           record_len: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X".encode()]
    if length is not None:
        lines.append(b"Content-Length: %d" % length)
    if record_len is not None:
        lines.append(b"X-ZG-Length: %d" % record_len)
        lines.append(b"X-ZG-Meta: " + base64.b64encode(b"{}"))
    lines += extra
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


header_lines = st.lists(st.one_of(
    st.sampled_from([b"Content-Length: 3", b"Content-Length: x", b"Transfer-Encoding: chunked",
                     b"Connection: close", b"X-ZG-Length: -1", b"X-ZG-Length: zz",
                     b"X-ZG-Meta: !!!", b"X-ZG-Crc32c: 12", b"no colon", b" X: y", b":"]),
    st.binary(max_size=40).filter(lambda b: b"\r\n" not in b)), max_size=3)


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["good", "mutated", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=400))
    body = draw(st.binary(max_size=300))
    status = draw(st.sampled_from([200, 206, 404, 409, 500, 503]))
    length = len(body) if kind == "good" else draw(st.one_of(
        st.none(), st.integers(0, 400)))
    raw = answer(status, body, length=length, record_len=len(body),
                 extra=[] if kind == "good" else draw(header_lines))
    if kind == "mutated" and raw and draw(st.booleans()):
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + draw(st.binary(max_size=8)) + raw[at + draw(st.integers(0, 8)):]
    return raw


def _body_of(raw: bytes) -> bytes:
    return raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=answers(), cuts=st.lists(st.integers(1, 64), max_size=6), ranged=st.booleans())
def test_any_answer_is_its_body_or_a_node_error(raw: bytes, cuts: list[int],
                                                ranged: bool) -> None:
    async def run() -> None:
        async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await r.readuntil(b"\r\n\r\n")
                rest, i = raw, 0
                while rest:  # in pieces: heads and bodies split anywhere
                    n = cuts[i % len(cuts)] if cuts else len(rest)
                    w.write(rest[:n])
                    await w.drain()
                    rest, i = rest[n:], i + 1
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()  # always ends: an incomplete answer is cut, not held open

        async with peer_client(accept, SECRET, node_timeout=2.0) as c:
            try:
                got = await asyncio.wait_for(
                    c.get_bytes("fuzz.r", 0, 100) if ranged else c.get_bytes("fuzz.r"), 30)
            except NodeError as e:
                event(f"error: {type(e).__name__}")
                return
            event("bytes" if got else "no bytes")
            assert _body_of(raw).startswith(got)

    asyncio.run(run())


@st.composite
def put_answers(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["good", "mutated", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=400))
    status = draw(st.sampled_from([201, 400, 403, 500, 507]))
    body = b'{"length": 5}' if status == 201 else b'{"error": "x", "message": "y"}'
    length = len(body) if kind == "good" else draw(st.one_of(st.none(), st.integers(0, 60)))
    raw = answer(status, body, length=length, record_len=None,
                 extra=[] if kind == "good" else draw(header_lines))
    if kind == "mutated" and draw(st.booleans()):
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + draw(st.binary(max_size=8)) + raw[at + draw(st.integers(0, 8)):]
    return raw


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=put_answers(), cuts=st.lists(st.integers(1, 64), max_size=6),
       read=st.sampled_from([0, 1000, 70_000, None]), items=st.integers(1, 4))
def test_any_answer_to_a_streamed_put_is_its_json_or_a_node_error(
        raw: bytes, cuts: list[int], read: int | None, items: int) -> None:
    """The same for record PUTs (erasure/nodeput.py): the peer reads none, some or all of the
    streamed body (`read`, None: all of it), then answers anything in any pieces and closes."""
    chunk = b"z" * 65_536

    async def run() -> None:
        async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await r.readuntil(b"\r\n\r\n")
                if read is None:
                    await r.readuntil(b"\r\n0\r\n\r\n")
                elif read:
                    await r.readexactly(min(read, items * len(chunk)))
                rest, i = raw, 0
                while rest:
                    n = cuts[i % len(cuts)] if cuts else len(rest)
                    w.write(rest[:n])
                    await w.drain()
                    rest, i = rest[n:], i + 1
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                w.close()

        async def body():
            for _ in range(items):
                yield [chunk]

        async with peer_client(accept, SECRET, node_timeout=2.0) as c:
            try:
                got = await asyncio.wait_for(
                    c.put("fuzz.r", body(), length=items * len(chunk), stream="s",
                          meta=b"{}"), 30)
            except NodeError as e:
                event(f"error: {type(e).__name__} {e.status}")
                return
            event("stored")
            assert raw.startswith(b"HTTP/1.1 201 ") and got == {"length": 5}

    asyncio.run(run())
