"""HTTP client for one storage node's record API (docs/design.md, "Node daemon").

Every request is signed with the cluster secret (zonestore.nodeauth); streamed PUT bodies are
UNSIGNED-PAYLOAD, small bodies are signed. Writes carry a random `nonce` query parameter because
the node accepts a write signature only once (replay protection) and a retry may fall in the
same second. The client tracks whether its node is up: a connection failure or timeout marks it
down, a successful request or health check marks it up again.

It also tracks whether its node is *full* (out of writable space): a 507 answer marks it full,
and `poll_room` (the cluster's health loop) reads the node's writable bytes from `/v1/stats`
and marks it full or clears the flag. A full node is up (reads and deletes go on) but gets no
new archives (`writable` is False) for exactly as long as it has no room.

Node-call observers (`NodeCallObserver`, given to `make_session` among its trace configs) are
told of every request: node, operation, HTTP status (None: no answer) and the time to the
response's headers. The client times its calls itself: aiohttp's own tracing, which did this
before, builds and awaits several signal objects per request and per body chunk written.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode
from weakref import WeakKeyDictionary

import aiohttp

from erasure import nodeget, nodeput
from erasure.config import NodeSpec
from erasure.noderoom import room_of, writable_of
from zonestore.logsetup import REQUEST_ID, REQUEST_ID_HEADER
from zonestore.nodeauth import sign_headers

# the node session keeps connections as the record GETs' pool does (erasure/nodeget.py)
KEEPALIVE_TIMEOUT = nodeget.KEEPALIVE_TIMEOUT


class NodeError(Exception):
    """A node answered with an error, or could not be reached."""

    def __init__(self, node: str, status: int, code: str, message: str) -> None:
        super().__init__(f"node {node}: {status} {code}: {message}")
        self.node, self.status, self.code, self.message = node, status, code, message


class NodeUnavailable(NodeError):
    """Connection refused/reset or no progress within the node timeout."""


class RecordMissing(NodeError):
    """404: the node does not have the record."""


class RecordCorrupt(NodeError):
    """409: the node detected corruption (CRC) in the record, or it arrived short."""


@dataclass(frozen=True)
class RecordHead:
    id: str
    length: int
    meta: bytes
    crc32c: int | None
    drive: int | None = None  # the node's drive index holding it (listings only)


class NodeCallObserver(Protocol):
    """Told of every node request a NodeClient makes (see the module docstring)."""

    def node_call(self, node: str, operation: str, status: int | None,
                  seconds: float) -> None: ...


# The observers of each session made by make_session (NodeClient takes them from there).
_observers: WeakKeyDictionary[aiohttp.ClientSession, tuple[NodeCallObserver, ...]] = \
    WeakKeyDictionary()


def make_session(limit_per_host: int = nodeget.LIMIT,
                 trace_configs: Iterable[aiohttp.TraceConfig | NodeCallObserver] | None = None
                 ) -> aiohttp.ClientSession:
    """The node session; `trace_configs` may mix aiohttp TraceConfigs (they see the requests
    made through this session, not record GETs and PUTs) and NodeCallObservers (every call)."""
    configs = list(trace_configs or ())
    traces = [t for t in configs if isinstance(t, aiohttp.TraceConfig)]
    observers = tuple(t for t in configs if not isinstance(t, aiohttp.TraceConfig))
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=limit_per_host,
                                keepalive_timeout=KEEPALIVE_TIMEOUT)
    session = aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                    trace_configs=traces or None)
    if observers:
        _observers[session] = observers
    return session


class BodyAbandoned(ConnectionError):
    """Raised by a PUT body its caller gave up on (a stalled write handed off elsewhere):
    the request is cut, and that is not the node's failure."""


class NodeClient:
    def __init__(self, spec: NodeSpec, secret: str, session: aiohttp.ClientSession,
                 timeout: float = 30.0) -> None:
        self.spec = spec
        self.id = spec.id
        self.secret = secret
        self.session = session
        self.timeout = timeout
        self.up = True
        self.last_error: str | None = None
        self.last_checked = 0.0
        self.bytes_read = 0      # record payload bytes received (GET bodies)
        self.full = False        # out of writable space: no new archives (see the docstring)
        self.full_need = 0       # writable bytes (largest drive) that clear `full` again ...
        self.full_floor: int | None = None  # ... if above this figure, seen when it got full
        self.writable_bytes: int | None = None  # largest drive's writable bytes, last known
        # all drives' writable + reclaimable bytes (room_of): last polled, less the fragments
        # placed here since (the weight of room-weighted placement)
        self.room_bytes: int | None = None
        self.on_full: Callable[[NodeClient], None] | None = None  # told when `full` changes
        # the cluster layout version the node last said it knows (/health/ready), None from
        # nodes that do not take layouts
        self.layout_version: int | None = None
        self.ready: dict[str, Any] = {}  # the node's last /health/ready answer
        self.drives: list[dict[str, Any]] | None = None  # its drives in the last /v1/stats
        self.observers = _observers.get(session, ()) if session is not None else ()
        # a write here took no bytes and gave no answer (erasure/writer.py): no new archives
        # until this monotonic time, or until a write here succeeds
        self.stalled_until = 0.0
        self._gets: nodeget.GetPool | None = None  # record GETs' connections (nodeget.py)
        self._puts: nodeget.GetPool | None = None  # record PUTs' connections (nodeput.py)

    @property
    def stalled(self) -> bool:
        return bool(self.stalled_until) and time.monotonic() < self.stalled_until

    @property
    def writable(self) -> bool:
        return self.up and not self.full and not self.stalled

    def note_stalled(self, seconds: float) -> None:
        """A write here made no progress: place no new archives here for `seconds` (until
        then the health check's timeout may say whether the node is down)."""
        self.stalled_until = time.monotonic() + seconds

    # -- space -------------------------------------------------------------------------------

    def _set_full(self, full: bool) -> None:
        if full != self.full:
            self.full = full
            if self.on_full is not None:
                self.on_full(self)

    def note_full(self, need: int = 0, writable: int | None = None) -> None:
        """The node refused a record for lack of space: full until one drive has `need` bytes
        (or the poll's headroom, whichever is larger) writable, and more than when it refused
        (`writable`, from the 507; else the next poll's figure), whatever the figure claims."""
        if not self.full:
            self.full_need, self.full_floor = 0, None
        self.full_need = max(self.full_need, need)
        if writable is not None:
            self.writable_bytes = writable
            self.full_floor = writable if self.full_floor is None else min(self.full_floor,
                                                                           writable)
        self._set_full(True)

    def note_room(self, writable: int, headroom: int) -> bool:
        """The node's largest drive has `writable` bytes: full below `headroom`; a full node
        stays full until it passes both its floor and max(headroom, need). Returns `full`."""
        self.writable_bytes = writable
        if self.full:
            if self.full_floor is None:
                self.full_floor = writable  # the first figure after a 507 that had none
            elif writable > self.full_floor and writable >= max(headroom, self.full_need):
                self._set_full(False)
        elif writable < headroom:
            self.full_need, self.full_floor = 0, writable
            self._set_full(True)
        return self.full

    async def poll_room(self, headroom: int) -> int | None:
        """Read the node's writable bytes from /v1/stats (the largest drive's, as a record
        lives on one drive) and update `full`; None (nothing changed) if it cannot be read."""
        try:
            doc = await self.stats()
        except (NodeError, TimeoutError, aiohttp.ClientError, ConnectionError, ValueError):
            return None
        drives = doc.get("drives") if isinstance(doc, dict) else None
        self.drives = drives if isinstance(drives, list) else None
        room = writable_of(doc)
        if room is not None:
            self.note_room(room, headroom)
        self.room_bytes = room_of(doc)
        return room

    # -- plumbing ----------------------------------------------------------------------------

    def _timeout(self) -> aiohttp.ClientTimeout:
        # No total limit (parts can be large): fail when nothing moves for `timeout` seconds.
        # `connect` would also count waiting for a pooled connection, which is our own queue,
        # not the node's fault: only the socket connect is bounded.
        return aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.timeout,
                                     sock_read=self.timeout)

    def _headers(self, method: str, path: str, query: dict[str, str],
                 body: bytes | None) -> dict[str, str]:
        # Bound to this node: a captured request cannot be replayed to another one.
        headers = sign_headers(self.secret, method, path, query, body, node=self.id)
        rid = REQUEST_ID.get()
        if rid != "-":  # the S3 request this serves, for the node's log lines
            headers[REQUEST_ID_HEADER] = rid
        return headers

    def _down(self, exc: BaseException) -> NodeUnavailable:
        self.up = False
        self.last_error = f"{type(exc).__name__}: {exc}"
        return NodeUnavailable(self.id, 0, "unavailable", self.last_error)

    async def _error(self, resp: aiohttp.ClientResponse) -> NodeError:
        try:
            raw = await resp.read()
        except Exception:
            raw = b""
        return self._error_of(resp.status, resp.reason or "", raw)

    def _error_of(self, status: int, reason: str, raw: bytes) -> NodeError:
        """The NodeError of an error answer (status, reason and its JSON body)."""
        try:
            body = json.loads(raw)
            code, msg = body.get("error", "error"), body.get("message", "")
        except Exception:
            body = None
            code, msg = "error", reason
        cls = {404: RecordMissing, 409: RecordCorrupt}.get(status, NodeError)
        if status == 507:  # out of space: no new archives until it has room again
            room = body.get("writable_bytes") if isinstance(body, dict) else None
            self.note_full(0, room if isinstance(room, int) else None)
        if status >= 500 and status != 507:
            self.last_error = f"{status} {code}"
        return cls(self.id, status, code, msg)

    def close_idle(self) -> None:
        """Close the record GETs' and PUTs' idle keep-alive connections (the session's are
        its own)."""
        for pool in (self._gets, self._puts):
            if pool is not None:
                pool.close()

    def _url(self, path: str) -> str:
        return self.spec.url + path

    async def _send(self, operation: str, method: str, path: str,
                    **kwargs: Any) -> aiohttp.ClientResponse:
        """The response to a request, once its headers are in (use it with `async with`);
        observers learn the status and how long that took, or that no answer came."""
        if not self.observers:
            return await self.session.request(method, self.spec.url + path, **kwargs)
        started = time.perf_counter()
        try:
            resp = await self.session.request(method, self.spec.url + path, **kwargs)
        except BaseException:
            self._observe(operation, None, started)
            raise
        self._observe(operation, resp.status, started)
        return resp

    def _observe(self, operation: str, status: int | None, started: float) -> None:
        seconds = time.perf_counter() - started
        for o in self.observers:
            o.node_call(self.id, operation, status, seconds)

    # -- record API --------------------------------------------------------------------------

    async def put(self, record_id: str, body: AsyncIterable[bytes | list[bytes]], *,
                  length: int, stream: str, meta: bytes | Callable[[], bytes]) -> dict:
        """Stream `length` payload bytes then the metadata blob (`meta` may be a callable,
        evaluated once the payload is sent). Returns the node's JSON once durable. An item of
        `body` may be a list of buffers: they go out as one HTTP chunk in one writelines,
        without being joined (the erasure writer's fragments, see erasure/nodeput.py)."""
        path = f"/v1/records/{quote(record_id, safe=':')}"
        query = {"nonce": secrets.token_hex(8)}
        headers = self._headers("PUT", path, query, None)
        headers.update({"X-ZG-Stream": stream, "X-ZG-Length": str(length),
                        "Content-Type": "application/octet-stream",
                        "Transfer-Encoding": "chunked"})
        sent = 0

        async def gen() -> AsyncIterator[bytes | list[bytes]]:
            nonlocal sent
            async for chunk in body:
                sent += len(chunk) if type(chunk) is not list else sum(map(len, chunk))
                yield chunk
            if sent != length:
                raise ValueError(f"archive body has {sent} bytes, announced {length}")
            yield meta() if callable(meta) else meta

        pool = self._puts
        if pool is None:
            pool = self._puts = nodeget.GetPool(self.spec.url)
        head = pool.head(f"{path}?{urlencode(query)}", headers, "PUT")
        started = time.perf_counter()
        try:
            answer, raw = await nodeput.put(pool, head, gen(), self.timeout)
        except BodyAbandoned as e:  # we cut it: the node took bytes, it is up
            raise NodeUnavailable(self.id, 0, "abandoned", str(e)) from e
        except OSError as e:  # a timeout, a refused or lost connection, a bad answer
            self._observe("put", None, started)
            raise self._down(e) from e
        if self.observers:
            self._observe("put", answer.status, started)
        if answer.status != 201:
            err = self._error_of(answer.status, answer.reason, raw)
            if answer.status == 507:  # room for twice this record before it gets more
                self.note_full(2 * length)
            raise err
        try:
            out = json.loads(raw)
        except ValueError as e:
            raise self._down(nodeget.ProtocolError(f"bad answer to a PUT: {raw[:100]!r}")) from e
        self.up = True
        self.stalled_until = 0.0
        return out

    async def head(self, record_id: str) -> RecordHead:
        path = f"/v1/records/{record_id}"
        try:
            async with await self._send("head", "HEAD", path,
                                        headers=self._headers("HEAD", path, {}, b""),
                                        timeout=self._timeout()) as resp:
                if resp.status != 200:
                    raise await self._error(resp)
                return _head_of(record_id, resp.headers)
        except NodeError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise self._down(e) from e

    def get(self, record_id: str, start: int = 0, end: int | None = None) -> RecordReader:
        """`async with client.get(id, a, b) as r:` — r.head, await r.read_exactly(n)."""
        return RecordReader(self, record_id, start, end)

    async def get_bytes(self, record_id: str, start: int = 0, end: int | None = None) -> bytes:
        async with self.get(record_id, start, end) as r:
            return await r.read_exactly(r.expected)

    async def delete(self, record_id: str) -> bool:
        path = f"/v1/records/{record_id}"
        query = {"nonce": secrets.token_hex(8)}
        try:
            async with await self._send("delete", "DELETE", path, params=query,
                                        headers=self._headers("DELETE", path, query, b""),
                                        timeout=self._timeout()) as resp:
                if resp.status == 404:
                    return False
                if resp.status not in (200, 204):
                    raise await self._error(resp)
                return True
        except NodeError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise self._down(e) from e

    async def list(self, prefix: str = "", after: str = "", limit: int = 1000
                   ) -> tuple[list[RecordHead], str | None]:
        query = {"prefix": prefix, "after": after, "limit": str(limit)}
        try:
            body = await self._get_json("list", "/v1/records", query)
        except NodeError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise self._down(e) from e
        recs = [RecordHead(r["id"], int(r["length"]), base64.b64decode(r.get("meta") or ""),
                           r.get("crc32c"), r.get("drive")) for r in body.get("records", [])]
        return recs, body.get("next")

    async def scan(self, prefix: str = "", page: int = 1000) -> AsyncIterator[RecordHead]:
        after = ""
        while True:
            recs, nxt = await self.list(prefix, after, page)
            for r in recs:
                yield r
            if not nxt or not recs:
                return
            after = nxt

    async def check(self) -> bool:
        """Health check (/health/ready); updates and returns `up`."""
        path = "/health/ready"
        self.last_checked = time.monotonic()
        try:
            async with await self._send(
                "health", "GET", path, headers=self._headers("GET", path, {}, b""),
                timeout=aiohttp.ClientTimeout(total=min(self.timeout, 5.0)),
            ) as resp:
                raw = await resp.read()
                text = raw[:300].decode(errors="replace")
                was_up, self.up = self.up, resp.status == 200
                if self.up:
                    self._note_ready(raw)
                    if not was_up:  # back from down: a stall before it is forgotten
                        self.stalled_until = 0.0
                self.last_error = None if self.up else (
                    f"/health/ready answered {resp.status}: {text}")
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            self._down(e)
        return self.up

    def _note_ready(self, raw: bytes) -> None:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = {}
        self.ready = doc if isinstance(doc, dict) else {}
        v = self.ready.get("layout_version")
        self.layout_version = v if isinstance(v, int) else None

    async def put_layout(self, doc: dict[str, Any]) -> int:
        """Tell the node the cluster layout's version and its drives' states (`PUT
        /v1/layout`, signed); returns the version the node now holds."""
        got = await self._send_json("layout", "PUT", "/v1/layout",
                                    json.dumps(doc, sort_keys=True).encode())
        self.layout_version = int(got.get("layout_version", doc["version"]))
        return self.layout_version

    async def purge(self, prefixes: list[str]) -> dict[str, int]:
        """Delete the records one level under each prefix (`POST /v1/purge`, signed, at most
        1000 prefixes: zonestore/node/purge.py); returns prefix -> records deleted."""
        try:
            got = await self._send_json("purge", "POST", "/v1/purge",
                                        json.dumps({"prefixes": prefixes}).encode())
        except NodeError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise self._down(e) from e
        return {p: int(n) for p, n in got["deleted"].items()}

    async def _send_json(self, operation: str, method: str, path: str, body: bytes) -> Any:
        """A write with a JSON document signed with its body, answered 200 with JSON."""
        query = {"nonce": secrets.token_hex(8)}
        async with await self._send(operation, method, path, params=query, data=body,
                                    headers={**self._headers(method, path, query, body),
                                             "Content-Type": "application/json"},
                                    timeout=self._timeout()) as resp:
            if resp.status != 200:
                raise await self._error(resp)
            return await resp.json(content_type=None)

    async def _get_json(self, operation: str, path: str, query: dict[str, str] | None = None,
                        *, missing: Any = NotImplemented) -> Any:
        """A signed GET answered with JSON; NodeError on any other status than 200 (or, when
        `missing` is given, that value on a 404)."""
        query = query or {}
        async with await self._send(operation, "GET", path, params=query or None,
                                    headers=self._headers("GET", path, query, b""),
                                    timeout=self._timeout()) as resp:
            if resp.status == 404 and missing is not NotImplemented:
                return missing
            if resp.status != 200:
                raise await self._error(resp)
            return await resp.json(content_type=None)

    async def stats(self) -> dict:
        return await self._get_json("stats", "/v1/stats")

    async def zones(self) -> dict:
        """Per-zone state of every drive (`GET /v1/zones`: condition, capacity, written, live,
        garbage, reclaiming). A node without that endpoint raises NodeError with status 404."""
        return await self._get_json("zones", "/v1/zones")

    async def damage(self) -> list[dict]:
        """Records the node's scrubber found damaged (`GET /v1/damage`): dicts with id, drive,
        seq, length, error. [] from a node without a scrubber (404)."""
        try:
            body = await self._get_json("damage", "/v1/damage", missing={})
        except NodeError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise self._down(e) from e
        return list(body.get("damage") or [])


def _head_of(record_id: str, headers: Any) -> RecordHead:
    """A record's head from an answer's headers (any case-insensitive mapping); values that
    are not what a node sends are a nodeget.ProtocolError (a ConnectionError), not data."""
    crc = headers.get("X-ZG-Crc32c")
    length = headers.get("X-ZG-Length", "0")
    try:
        if not (length.isascii() and length.isdigit()):
            raise ValueError(f"X-ZG-Length {length[:40]!r}")
        meta = base64.b64decode(headers.get("X-ZG-Meta", ""), validate=True)
    except (ValueError, binascii.Error) as e:
        raise nodeget.ProtocolError(f"{record_id}: bad record head: {e}") from None
    return RecordHead(record_id, int(length), meta,
                      int(crc) if crc and crc.isascii() and crc.isdigit() else None)


class RecordReader:
    """A streamed GET of bytes [start, end) of one record, over erasure/nodeget.py's lean
    connections: the body arrives into buffers whose views `take` hands out."""

    def __init__(self, client: NodeClient, record_id: str, start: int, end: int | None) -> None:
        self.client, self.record_id, self.start, self.end = client, record_id, start, end
        self._conn: nodeget.GetProtocol | None = None
        self._pool: nodeget.GetPool | None = None
        self.head: RecordHead | None = None
        self.expected = 0

    async def __aenter__(self) -> RecordReader:
        c = self.client
        path = f"/v1/records/{quote(self.record_id, safe=':')}"
        headers = c._headers("GET", path, {}, b"")
        if self.start or self.end is not None:
            last = "" if self.end is None else str(self.end - 1)
            headers["Range"] = f"bytes={self.start}-{last}"
        pool = c._gets
        if pool is None:
            pool = c._gets = nodeget.GetPool(c.spec.url)
        head = pool.head(path, headers)
        started = time.perf_counter()
        try:
            conn, answer = await pool.request(head, c.timeout)
        except (TimeoutError, OSError, nodeget.ProtocolError) as e:  # Lost is an OSError
            c._observe("get", None, started)
            raise c._down(e) from e
        if c.observers:
            c._observe("get", answer.status, started)
        self._pool, self._conn = pool, conn
        if answer.status not in (200, 206):
            try:
                raw = await conn.read_rest(c.timeout)
            except (TimeoutError, OSError, nodeget.ProtocolError):
                raw = b""
            self._close()
            raise c._error_of(answer.status, answer.reason, raw)
        try:
            self.head = _head_of(self.record_id, answer.headers)
        except nodeget.ProtocolError as e:
            self._close()
            raise c._down(e) from e
        c.up = True
        end = self.head.length if self.end is None else min(self.end, self.head.length)
        self.expected = max(0, end - self.start)
        return self

    async def take(self, n: int) -> list[memoryview]:
        """The next n bytes of the body as views of the buffers received, copying nothing; a
        short body (the node aborts on a bad CRC) → RecordCorrupt."""
        conn = self._conn
        assert conn is not None
        try:
            pieces = await conn.take(n, self.client.timeout)
        except EOFError as e:
            raise RecordCorrupt(self.client.id, 0, "short_body",
                                f"{self.record_id}: body ended early ({e})") from None
        except nodeget.Lost as e:
            raise await self._cut(e) from None
        except (TimeoutError, OSError, nodeget.ProtocolError) as e:
            raise self.client._down(e) from None
        self.client.bytes_read += n
        return pieces

    async def read_exactly(self, n: int) -> bytes:
        """n bytes of the body; a short body (the node aborts on a bad CRC) → RecordCorrupt."""
        pieces = await self.take(n)
        return bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)

    async def _cut(self, e: BaseException) -> NodeError:
        # The node cuts a stream whose CRC fails; a node that dies mid-body looks the same
        # from here. Tell them apart by asking whether the node is still there.
        if await self.client.check():
            return RecordCorrupt(self.client.id, 0, "short_body",
                                 f"{self.record_id}: stream cut by the node ({e})")
        return NodeUnavailable(self.client.id, 0, "unavailable",
                               self.client.last_error or str(e))

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pool is not None:
            self._pool.release(conn)  # kept alive if its answer was read to the end

    async def __aexit__(self, *exc: object) -> None:
        self._close()

    def meta_json(self) -> dict:
        assert self.head is not None
        return json.loads(self.head.meta or b"{}")
