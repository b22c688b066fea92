"""`POST /v1/purge`: delete every record under each of many id prefixes in one request.

Why: deleting an object is deleting each of its parts' archives wherever they are. Asked one
record at a time, a part of an 8+2 cluster cost a listing on every node and ten DELETEs, 22
requests per 8 MiB part (bench/README.md, crt: ten times the CPU per GiB freed). Here a gateway
sends each node the prefixes of up to MAX_PREFIXES parts at once; the node deletes what it
holds under them, the request's tombstones made durable together by the zone log's group
flush.

Body (signed with its hash, at most MAX_DOC bytes): JSON `{"prefixes": ["<id prefix>", ...]}`.
A prefix covers the records whose id is the prefix followed by characters other than '.'
(one level down, as a directory's files): the prefix `v.p1.f` takes part `v.p1`'s archives
(`v.p1.f00`...) and not those of a part named `v.p1.f1` (`v.p1.f1.f00`).
Answer 200, once every tombstone is durable: `{"deleted": {"<prefix>": N, ...}}`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from zonestore.ids import validate_record_id
from zonestore.node.auth import BODY_HASH
from zonestore.node.body import read_signed_doc
from zonestore.node.errors import NodeError
from zonestore.node.handlers import store_of
from zonestore.node.state import STATE

MAX_PREFIXES = 1000
MAX_DOC = 256 * 1024
PAGE = 1000  # records listed, then deleted together, at a time per prefix


def parse_prefixes(body: bytes) -> list[str]:
    """The request's prefixes, or NodeError 400 with what is wrong."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise NodeError(400, "bad_purge", "not JSON") from None
    prefixes = doc.get("prefixes") if isinstance(doc, dict) else None
    if not isinstance(prefixes, list) or not 1 <= len(prefixes) <= MAX_PREFIXES:
        raise NodeError(400, "bad_purge", f"a purge needs \"prefixes\": a list of 1-"
                        f"{MAX_PREFIXES} record id prefixes")
    for p in prefixes:
        try:
            validate_record_id(p)
        except ValueError:
            raise NodeError(400, "bad_purge", f"{str(p)[:100]!r} is not (the start of) a valid "
                            "record id") from None
    return list(dict.fromkeys(prefixes))


async def purge(store: Any, prefix: str) -> int:
    """Delete the live records `prefix` covers (module docstring); returns how many."""
    n, after, cut = 0, "", len(prefix)
    while True:
        infos = store.scan(prefix, after, PAGE)
        if not infos:
            return n
        done = await asyncio.gather(*(store.delete(i.id) for i in infos
                                      if "." not in i.id[cut:]))
        n += sum(map(bool, done))
        if len(infos) < PAGE:
            return n
        after = infos[-1].id


async def purge_records(request: web.Request) -> web.Response:
    body = await read_signed_doc(request.content, MAX_DOC, request.get(BODY_HASH), "purge")
    prefixes = parse_prefixes(body)
    store = store_of(request.app[STATE])
    counts = await asyncio.gather(*(purge(store, p) for p in prefixes))
    return web.json_response({"deleted": dict(zip(prefixes, counts, strict=True))})


def add_purge_routes(app: web.Application) -> None:
    app.router.add_post("/v1/purge", purge_records, name="purge")
