"""What a node knows of the cluster layout (issue 25): its drives' identities and states.

Drive identity: each emulated drive holds `zonegate-drive.json` ({"uuid", "created", "peers":
the uuids of every drive of the node by path, "replaced": {...} while unregistered}), written
when the node first opens it. A drive with no identity, or another drive's, at a path where a
sibling drive remembers a different uuid is a *new drive in a used slot* (a replaced drive):
the node says so (`/health/ready` "degraded" with `new_drives`, `/v1/stats` per drive
`identity` and `replaced`) until the layout registers it (`zonegate layout drive replace`,
state "replaced"): the old drive's records are gone and must be rebuilt onto it. A node with one
drive, or whose every drive is new, cannot tell (nothing on it remembers the slot): the
gateways can, from the identity they recorded for the slot (erasure/clusterlayoutmix.py).
Block devices carry no file: no identity.

Drive states: the gateways send `PUT /v1/layout` (signed) with the layout version and this
node's drives' states whenever the version changes or the node reports an older one
(`layout_version` in `/health/ready`: 0 after a restart, so it is told again). A draining or
failed drive takes no new records (reads and deletes go on), nor does any drive of a node the
layout drains. The node resets a draining drive's zones that hold no live data at once, and
every zone once its last record is gone (zonestore/reclaim.py `vacate`, run by the drive's
reclaim loop), so a drained drive ends with every zone empty.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from zonestore.emulated import is_emulated_drive
from zonestore.node.auth import BODY_HASH
from zonestore.node.body import read_signed_doc
from zonestore.node.errors import NodeError, log
from zonestore.node.state import STATE, NodeState

IDENTITY_FILE = "zonegate-drive.json"
NO_NEW_RECORDS = ("draining", "failed")  # drive states that take no new records
MAX_LAYOUT_DOC = 64 * 1024


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((path / IDENTITY_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("uuid"), str) else None


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path / (IDENTITY_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / IDENTITY_FILE)


def check_identities(paths: list[Path]) -> list[dict[str, Any] | None]:
    """Read (and write where missing) each drive's identity; mark drives new in a slot a
    sibling remembers holding another drive. Returns each drive's identity (None: a block
    device). Run before the node serves, once its drives are open."""
    docs = [_read(p) if is_emulated_drive(p) else None for p in paths]
    remembered: dict[str, str] = {}
    for doc in docs:
        for slot, u in (doc or {}).get("peers", {}).items():
            remembered.setdefault(slot, u)
    now = time.time()
    for i, p in enumerate(paths):
        if not is_emulated_drive(p):
            continue
        slot = str(p)
        doc = docs[i]
        was = remembered.get(slot)
        if doc is None:
            doc = {"uuid": uuid.uuid4().hex, "created": now}
        if was is not None and was != doc["uuid"] and "replaced" not in doc:
            doc["replaced"] = {"was": was, "since": now}
            log.warning("drive %s is a new drive in a used slot (was %s): its records are "
                        "gone; register it with `zonegate layout drive replace`", p, was)
        docs[i] = doc
    peers = {str(p): d["uuid"] for p, d in zip(paths, docs, strict=True) if d}
    for p, doc in zip(paths, docs, strict=True):
        if doc is not None and (doc.get("peers") != peers or _read(p) != doc):
            doc["peers"] = peers
            _write(p, doc)
    return docs


def new_drives(state: NodeState) -> list[int]:
    """Indexes of the drives that are new in a used slot and not registered yet."""
    return [i for i, d in enumerate(state.identities) if d and d.get("replaced")]


def drive_info(state: NodeState, i: int) -> dict[str, Any]:
    """Per-drive fields for /v1/stats: identity, replaced, layout state."""
    d = state.identities[i] if i < len(state.identities) else None
    return {"identity": d["uuid"] if d else None,
            "replaced": bool(d and d.get("replaced")),
            "layout_state": state.drive_states.get(i, "active")}


def _match(state: NodeState, path: str) -> int | None:
    p = Path(path)
    for i, mine in enumerate(state.drive_paths):
        if mine == p or os.path.abspath(mine) == os.path.abspath(p):
            return i
    return None


def apply_layout(state: NodeState, doc: dict[str, Any]) -> None:
    """Take a layout document (newer versions only): drive states, registrations."""
    version = doc.get("version")
    drives = doc.get("drives")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1 \
            or not isinstance(drives, list):
        raise NodeError(400, "bad_layout", "a layout needs an integer version and drives")
    if version <= state.layout_version:
        return  # an older or the same version (another gateway told it first)
    states: dict[int, str] = {}
    for d in drives:
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            raise NodeError(400, "bad_layout", "each drive needs a path")
        i = _match(state, d["path"])
        if i is None:
            continue  # a drive the layout has and this node does not: health reports it
        states[i] = str(d.get("state", "active"))
        ident = state.identities[i] if i < len(state.identities) else None
        if states[i] == "replaced" and ident and ident.get("replaced"):
            ident.pop("replaced")
            ident["generation"] = int(d.get("generation", 1))
            _write(state.drive_paths[i], ident)
            log.info("drive %s registered as a replacement (generation %s)",
                     state.drive_paths[i], ident["generation"])
    if doc.get("state") in ("draining", "gone"):
        # the whole node is being emptied: a gateway still on an older layout must not put
        # new records here either (it gets 507 and hands the fragment off)
        states = {i: "draining" for i in range(len(state.drive_paths))}
    was = state.drive_states
    state.drive_states = states
    state.layout_version = version
    if state.pool is not None:
        state.pool.no_new = {i for i, s in states.items() if s in NO_NEW_RECORDS}
        for i, s in states.items():
            if s == "draining" and was.get(i) != "draining" and i < len(state.logs):
                # its reclaim loop resets the zones without live data now (reclaim.vacate)
                state.logs[i].reclaim_wanted.set()
    log.info("layout v%d: drive states %s", version,
             {str(state.drive_paths[i]): s for i, s in sorted(states.items())})


async def put_layout(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await read_signed_doc(request.content, MAX_LAYOUT_DOC, request.get(BODY_HASH),
                                 "layout")
    try:
        doc = json.loads(body)
    except ValueError:
        raise NodeError(400, "bad_layout", "not JSON") from None
    if not isinstance(doc, dict):
        raise NodeError(400, "bad_layout", "not a JSON object")
    apply_layout(state, doc)
    return web.json_response({"node_id": state.node_id, "layout_version": state.layout_version,
                              "new_drives": new_drives(state)})


def add_layout_routes(app: web.Application) -> None:
    app.router.add_put("/v1/layout", put_layout, name="layout")
