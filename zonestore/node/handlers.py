"""The node's HTTP API (docs/design.md, "Node daemon"): records, listing, stats, health, metrics.

Bodies are streamed both ways: a PUT's payload goes from the socket into the zone log chunk by
chunk (see `body.py`) and is answered only once durable; a GET streams verified chunks out.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import sys
from collections.abc import Mapping
from typing import Any

from aiohttp import http_writer, web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from zonestore.drivefail import DriveFailed
from zonestore.errors import CorruptRecord, NoSpace, RecordNotFound
from zonestore.ids import validate_record_id
from zonestore.node.auth import BODY_HASH
from zonestore.node.body import BodyReader, PutBody
from zonestore.node.drivelayout import drive_info, new_drives
from zonestore.node.errors import NodeError, json_error, log
from zonestore.node.state import STATE, NodeState
from zonestore.nodeauth import EMPTY_SHA256, UNSIGNED

MAX_LIST_LIMIT = 10_000
# A record GET's answer head goes out with its first chunk of bytes (`_RecordResponse`), as
# transport.writelines((head, chunk)): one send instead of two (on loopback each send also
# runs the receiver's TCP path and wakes it). Unless aiohttp deems writelines unsafe, as it does
# on every Python before 3.12.9: then it joins head and chunk into a new bytes, a copy of up to
# a record chunk (1 MiB). The bug it avoids is in the writelines asyncio's selector transport
# gained in 3.12.0; before 3.12 asyncio's transports inherit one that joins anyway and
# uvloop's (the node's loop) is a writev.
if sys.version_info < (3, 12):
    http_writer.SKIP_WRITELINES = False


class _RecordResponse(web.StreamResponse):
    """A streamed answer whose head waits for the first body write (as aiohttp's own
    web.Response does for its body), so head and first chunk leave in one send."""

    _send_headers_immediately = False
_STREAM_RE = re.compile(r"[\x21-\x7e]{1,256}")
_INT_RE = re.compile(r"[0-9]{1,20}")
_RANGE_RE = re.compile(r"bytes=([0-9]{0,20})-([0-9]{0,20})")


def _state(request: web.Request) -> NodeState:
    return request.app[STATE]


def _store(request: web.Request) -> Any:
    return store_of(_state(request))


def store_of(state: NodeState) -> Any:
    """The node's store, or 503 while its drives are still opening."""
    if state.pool is None:
        raise NodeError(503, "not_ready", "the node is still opening its drives")
    return state.pool


def _record_id(request: web.Request) -> str:
    return record_id(request.match_info["id"])


def record_id(raw: str) -> str:
    try:
        return validate_record_id(raw)
    except ValueError as exc:
        raise NodeError(400, "invalid_id", str(exc)) from None


def _no_body(request: web.Request) -> None:
    """Requests other than PUT carry no body; a signed hash must be that of the empty body."""
    if request.body_exists:
        raise NodeError(400, "unexpected_body", f"{request.method} takes no request body")
    signed = request.get(BODY_HASH, UNSIGNED)
    if signed not in (UNSIGNED, EMPTY_SHA256):
        raise NodeError(403, "body_mismatch", "signed body hash is not that of the empty body")


def _record_headers(info: Any) -> dict[str, str]:
    return {
        "X-ZG-Length": str(info.length),
        "X-ZG-Meta": base64.b64encode(info.meta).decode(),
        "X-ZG-Crc32c": str(info.crc32c),
        "X-ZG-Stream": info.stream,
        "X-ZG-Seq": str(info.seq),
        "Accept-Ranges": "bytes",
    }


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(offset, length) of a single `bytes=` range, None for the whole record. Raises 416."""
    if header is None:
        return None
    m = _RANGE_RE.fullmatch(header.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        raise NodeError(400, "bad_range", f"unsupported Range {header[:100]!r} "
                        "(use one range: bytes=a-b, bytes=a- or bytes=-n)")
    first, last = m.group(1), m.group(2)
    unsatisfiable = NodeError(416, "invalid_range", f"range {header[:100]!r} outside the "
                              f"record of {size} bytes", {"Content-Range": f"bytes */{size}"})
    if not first:  # suffix: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            raise unsatisfiable
        n = min(n, size)
        return size - n, n
    start = int(first)
    end = size - 1 if not last else min(int(last), size - 1)
    if last and int(last) < start:
        raise NodeError(400, "bad_range", f"Range {header[:100]!r} ends before it starts")
    if start >= size:
        raise unsatisfiable
    return start, end - start + 1


def _put_params(request: web.Request, state: NodeState) -> tuple[str, int, str]:
    return put_params(request.match_info["id"], request.headers, request.content_length, state)


def put_params(raw_id: str, headers: Mapping[str, str], declared: int | None,
               state: NodeState) -> tuple[str, int, str]:
    """The record id, payload length and stream of a PUT (its id as routed, its headers and
    Content-Length, None if chunked), checked (NodeError otherwise)."""
    rid = record_id(raw_id)
    raw_len = headers.get("X-ZG-Length")
    if raw_len is None or not _INT_RE.fullmatch(raw_len):
        raise NodeError(400, "bad_length", "X-ZG-Length (payload bytes, a decimal integer) "
                        "is required")
    length = int(raw_len)
    if length > state.max_record_size:
        raise NodeError(413, "too_large", f"record of {length} bytes exceeds this node's limit "
                        f"of {state.max_record_size} bytes")
    stream = headers.get("X-ZG-Stream", "default")
    if not _STREAM_RE.fullmatch(stream):
        raise NodeError(400, "bad_stream", "X-ZG-Stream must be 1-256 printable ASCII characters")
    if declared is not None:
        if declared < length:
            raise NodeError(400, "incomplete_body", f"Content-Length {declared} is shorter than "
                            f"X-ZG-Length {length}")
        if declared > length + state.max_meta_size:
            raise NodeError(413, "meta_too_large", f"Content-Length {declared} leaves "
                            f"{declared - length} bytes of metadata (max {state.max_meta_size})")
    return rid, length, stream


async def expect_put(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue`: refuse before the client sends a byte of body if the request
    is unsigned, malformed, too large or does not fit (aiohttp calls this before the
    middlewares, so it checks the signature itself, without the replay bookkeeping)."""
    state = _state(request)
    expect = request.headers.get("Expect", "")
    try:
        if expect.lower() != "100-continue":
            raise NodeError(417, "expectation_failed", f"unsupported Expect {expect[:100]!r}")
        if state.check_signature is not None:
            state.check_signature(request)
        _, length, _ = _put_params(request, state)
        _store(request)
        await _check_room(state, length)
    except NodeError as err:
        state.metrics.requests.labels("PUT", "record_put", str(err.status)).inc()
        resp = json_error(err.status, err.code, err.message, err.headers)
        resp.force_close()  # the body the client would send next is not wanted
        return resp
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0
    return None


async def put_record(request: web.Request) -> web.Response:
    state = _state(request)
    rid, length, stream = _put_params(request, state)
    answer = await store_put(state, rid, length, stream, request.content,
                             request.get(BODY_HASH, UNSIGNED))
    return web.json_response(answer, status=201)


async def store_put(state: NodeState, rid: str, length: int, stream: str, content: BodyReader,
                    body_hash: str) -> dict[str, Any]:
    """Store a PUT's body read from `content` (checked params from `put_params`); returns the
    201 answer once the record is durable. Raises NodeError (or a store error) otherwise."""
    store = store_of(state)
    await _check_room(state, length)
    body = PutBody(content, length, state.max_meta_size, body_hash)
    try:
        info = await store.put(rid, body.payload(), stream=stream, meta=body.meta, length=length)
    except Exception as exc:
        if body.error is not None:  # the body's own fault, whatever the store wrapped it in
            raise body.error from exc
        if isinstance(exc, DriveFailed):
            raise NodeError(507, "drive_failed", str(exc),
                            extra={"writable_bytes": writable_bytes(state)}) from exc
        if isinstance(exc, NoSpace):
            raise _no_space(state, str(exc)) from exc
        if type(exc) is ValueError:  # the store's "body shorter/longer than length"
            raise NodeError(400, "bad_body", str(exc)) from exc
        raise
    finally:
        state.metrics.received.inc(body.received)
    return {"id": info.id, "length": info.length, "crc32c": info.crc32c, "seq": info.seq}


def failed_drives(state: NodeState) -> dict[int, str]:
    """Drive index -> error, for the drives the pool has marked failed (zonestore/drivefail)."""
    return dict(getattr(state.pool, "failed", None) or {})


def host_full_drives(state: NodeState) -> dict[int, str]:
    """Drive index -> why it takes no puts: the filesystem under it is out of space
    (zonestore/hostspace.py)."""
    host_full = getattr(state.pool, "host_full", None)
    return host_full() if host_full is not None else {}


def working_logs(state: NodeState) -> list[Any]:
    failed = failed_drives(state)
    return [lg for i, lg in enumerate(state.logs) if i not in failed and hasattr(lg, "free_bytes")]


def drive_writable(state: NodeState, i: int) -> int:
    """What drive i can take without reclaim (0 if failed or its filesystem is full)."""
    pool = state.pool
    if pool is not None and hasattr(pool, "writable"):
        return pool.writable(i)
    return 0 if i in failed_drives(state) else state.logs[i].free_bytes()


def writable_bytes(state: NodeState) -> int:
    """What this node's working drives can still take without reclaim (the sum over drives)."""
    failed = failed_drives(state)
    return sum(drive_writable(state, i) for i in range(len(state.logs)) if i not in failed)


def _no_space(state: NodeState, message: str) -> NodeError:
    return NodeError(507, "no_space", message,
                     extra={"writable_bytes": writable_bytes(state)})


async def _check_room(state: NodeState, length: int) -> None:
    """Refuse before reading the body a record no drive can take (a record lives on one
    drive), after letting each drive's reclaim make room for it where reclaim can."""
    logs = working_logs(state)
    if failed_drives(state) and not logs:
        raise NodeError(507, "drive_failed", "every drive of this node has failed",
                        extra={"writable_bytes": 0})
    host_full = host_full_drives(state)
    failed = failed_drives(state)
    takers = [i for i in range(len(state.logs)) if i not in failed and i not in host_full]
    if logs and not takers:  # every working drive's filesystem is out of space
        raise _no_space(state, "; ".join(f"drive {i}: {why}" for i, why in host_full.items()))
    frees = [drive_writable(state, i) for i in takers]
    if not frees or length <= max(frees):
        return
    room = 0
    pool = state.pool
    for i in takers:
        lg = state.logs[i]
        got = await lg.room_for(length)
        cap = pool.host.cap(i) if pool is not None and hasattr(pool, "host") else None
        room = max(room, got if cap is None else min(got, cap))
        if room >= length:
            return
    raise _no_space(state, f"record of {length} bytes does not fit: the largest writable "
                    f"space on this node's drives is {room} bytes")


async def _aclose(it: Any) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()


async def get_record(request: web.Request) -> web.StreamResponse:
    state = _state(request)
    rid = _record_id(request)
    _no_body(request)
    # One lookup gives the info and a reader of that very record: headers and bytes describe
    # the same put with no second look.
    found = _store(request).find(rid)
    if found is None:
        raise RecordNotFound(rid)
    info, read = found
    rng = parse_range(request.headers.get("Range"), info.length)
    offset, length = rng if rng is not None else (0, info.length)
    it = read(offset, length)
    headers = _record_headers(info)
    if rng is not None:
        headers["Content-Range"] = f"bytes {offset}-{offset + length - 1}/{info.length}"
    # Pull the first chunk before answering: corruption found here is still a clean 409.
    first = await anext(it, b"") if length else b""
    resp = _RecordResponse(status=206 if rng is not None else 200, headers=headers)
    resp.content_length = length
    resp.content_type = "application/octet-stream"
    await resp.prepare(request)
    sent = 0
    try:
        # Written as memoryviews: when the socket takes only part of a chunk, asyncio (3.11)
        # slices the rest off before buffering it, a copy for bytes but not for a view.
        if first:
            await resp.write(memoryview(first))
            sent += len(first)
        if length:
            async for chunk in it:
                await resp.write(memoryview(chunk))
                sent += len(chunk)
    except CorruptRecord as exc:
        # Too late for a status: cut the connection so the client sees a short body, never
        # bad bytes.
        log.error("record %s: corrupt data after %d bytes sent: %s", rid, sent, exc)
        resp.force_close()
        if request.transport is not None:
            request.transport.close()
        return resp
    except ConnectionError:  # aiohttp's ClientConnectionResetError included
        log.debug("record %s: client went away after %d bytes", rid, sent)
        resp.force_close()
        return resp
    finally:
        state.metrics.sent.inc(sent)
        await _aclose(it)
    await resp.write_eof()
    return resp


async def head_record(request: web.Request) -> web.StreamResponse:
    rid = _record_id(request)
    _no_body(request)
    info = await _store(request).head(rid)
    resp = web.StreamResponse(status=200, headers=_record_headers(info))
    resp.content_length = info.length  # the length a GET would send; HEAD sends no body
    resp.content_type = "application/octet-stream"
    await resp.prepare(request)
    await resp.write_eof()
    return resp


async def delete_record(request: web.Request) -> web.Response:
    rid = _record_id(request)
    _no_body(request)
    if not await _store(request).delete(rid):
        raise NodeError(404, "not_found", "no such record")
    return web.Response(status=204)


def _query_text(request: web.Request, name: str) -> str:
    values = request.rel_url.query.getall(name, [])
    if len(values) > 1:
        raise NodeError(400, "bad_query", f"{name} given more than once")
    value = values[0] if values else ""
    if value:
        # A prefix may be any start of a valid id; `after` is an id (or a prefix of one).
        try:
            validate_record_id(value)
        except ValueError:
            raise NodeError(400, "bad_query", f"{name} {value[:100]!r} is not (the start of) a "
                            "valid record id") from None
    return value


async def list_records(request: web.Request) -> web.Response:
    _no_body(request)
    unknown = set(request.rel_url.query) - {"prefix", "after", "limit", "nonce"}
    if unknown:
        raise NodeError(400, "bad_query", f"unknown query parameter(s): {sorted(unknown)}")
    prefix = _query_text(request, "prefix")
    after = _query_text(request, "after")
    raw_limit = request.rel_url.query.get("limit", "1000")
    if not _INT_RE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
        raise NodeError(400, "bad_query", f"limit must be 1-{MAX_LIST_LIMIT}")
    limit = int(raw_limit)
    # One more than asked tells whether another page exists.
    infos = _store(request).scan(prefix, after, limit + 1)
    more = len(infos) > limit
    infos = infos[:limit]
    # which drive holds each record (a drive pool's index; what a drive drain empties)
    locate = getattr(_store(request), "locate", None)
    return web.json_response({
        "records": [
            {"id": i.id, "length": i.length, "meta": base64.b64encode(i.meta).decode(),
             "stream": i.stream, "crc32c": i.crc32c, "seq": i.seq,
             "drive": locate(i.id) if locate is not None else None}
            for i in infos
        ],
        "next": infos[-1].id if more and infos else None,
    })


def _as_dict(stats: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(stats):
        return dataclasses.asdict(stats)
    if isinstance(stats, dict):
        return dict(stats)
    return dict(vars(stats))


_SUMMED = ("user_bytes_written", "device_bytes_written", "gc_bytes_copied", "free_bytes",
           "used_bytes", "live_bytes", "flushes", "flush_bytes", "records", "crc_failures",
           "read_errors", "open_zones", "writable_bytes", "stranded_bytes", "garbage_bytes",
           "reserve_bytes", "empty_zones", "seq_zones")


async def node_stats(request: web.Request) -> web.Response:
    _no_body(request)
    state = _state(request)
    drives = []
    failed = failed_drives(state)
    host_full = host_full_drives(state)
    for i, (path, log_) in enumerate(zip(state.drive_paths, state.logs, strict=False)):
        d = _as_dict(log_.stats())
        d.update(drive=i, path=str(path), failed=i in failed, error=failed.get(i),
                 host_full=host_full.get(i), **drive_info(state, i))
        if i in failed:  # nothing of it can be written (or read) any more
            d.update(free_bytes=0, writable_bytes=0)
        else:  # its filesystem may hold less than its zones promise
            d.update(free_bytes=drive_writable(state, i), writable_bytes=drive_writable(state, i))
        drives.append(d)
    # reclaiming_zone is per drive only.
    totals: dict[str, Any] = {k: sum(d.get(k, 0) or 0 for d in drives) for k in _SUMMED}
    totals["write_amplification"] = (
        totals["device_bytes_written"] / totals["user_bytes_written"]
        if totals["user_bytes_written"] else 0.0
    )
    zones: dict[str, int] = {}
    for d in drives:
        for cond, n in (d.get("zones_by_condition") or {}).items():
            zones[str(cond)] = zones.get(str(cond), 0) + n
    totals["zones_by_condition"] = zones
    return web.json_response({"node_id": state.node_id, "ready": state.ready,
                              "inflight": state.inflight, "drives": drives, "totals": totals})


async def node_zones(request: web.Request) -> web.Response:
    """Per drive, every zone's condition and bytes (written, live, garbage), from the logs'
    own bookkeeping (no device I/O): what a console draws as a zone map."""
    _no_body(request)
    state = _state(request)
    drives = []
    for i, (path, log_) in enumerate(zip(state.drive_paths, state.logs, strict=False)):
        info = log_.device.info
        drives.append({"drive": i, "path": str(path), "zone_size": log_.zone_size,
                       "zone_capacity": log_.zone_capacity,
                       "max_open": info.max_open_zones, "max_active": info.max_active_zones,
                       "zones": log_.zone_map()})
    return web.json_response({"node_id": state.node_id, "drives": drives})


async def health_live(request: web.Request) -> web.Response:
    return web.json_response({"status": "live", "node_id": _state(request).node_id})


async def health_ready(request: web.Request) -> web.Response:
    state = _state(request)
    if not state.ready:
        return web.json_response({"status": "starting", "node_id": state.node_id}, status=503)
    # Stays 200 when the drives are full: the node still serves reads and deletes; the
    # writable figure says whether it can take writes.
    # Stays 200 with failed drives too (status "degraded"): the gateways must keep asking
    # the node to learn that its records are gone (missing, so rebuilt elsewhere); its
    # writable figure (0 when every drive failed) keeps new writes away.
    # A new drive in a used slot (a replaced drive) is "degraded" too until the layout
    # registers it: what the old drive held is gone (zonestore/node/drivelayout.py).
    # Stays 200 when a drive's filesystem is out of space too (status "full" once no
    # working drive takes puts), with the reasons: it still serves reads and deletes.
    failed = failed_drives(state)
    new = new_drives(state)
    host_full = host_full_drives(state)
    reasons = [f"drive {i} failed: {why}" for i, why in sorted(failed.items())]
    reasons += [f"drive {i} takes no writes: {why}" for i, why in sorted(host_full.items())]
    reasons += [f"drive {i} is new in a used slot: what it held is lost" for i in new]
    status = "degraded" if failed or new else "ready"
    if host_full and len(failed) + len(host_full) == len(state.logs):
        status = "full"
    return web.json_response({"status": status, "reasons": reasons,
                              "node_id": state.node_id, "drives": len(state.logs),
                              "failed_drives": sorted(failed), "new_drives": new,
                              "full_drives": sorted(host_full),
                              "layout_version": state.layout_version,
                              "writable_bytes": writable_bytes(state)})


async def metrics(request: web.Request) -> web.Response:
    resp = web.Response(body=_state(request).metrics.render())
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_put("/v1/records/{id}", put_record, name="record_put", expect_handler=expect_put)
    r.add_get("/v1/records/{id}", get_record, name="record_get", allow_head=False)
    r.add_head("/v1/records/{id}", head_record, name="record_head")
    r.add_delete("/v1/records/{id}", delete_record, name="record_delete")
    r.add_get("/v1/records", list_records, name="list", allow_head=False)
    r.add_get("/v1/stats", node_stats, name="stats", allow_head=False)
    r.add_get("/v1/zones", node_zones, name="zones", allow_head=False)
    r.add_get("/health/live", health_live, name="live")
    r.add_get("/health/ready", health_ready, name="ready")
    r.add_get("/metrics", metrics, name="metrics", allow_head=False)
