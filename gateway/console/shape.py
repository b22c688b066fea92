"""The console's view of the cluster's shape (issue 25): the layout the gateway runs on
(version, note, scheme), each node of it (url, failure domain, weight, state, up or down,
its fill against its share, its drives with their layout state and what the node says of
them), the staged changes, the layout problems `/health/cluster` lists, and the data mover's
stored run.

Nothing is computed anew: the layout is the cluster's adopted one (`cluster.layout`), the
problems `cluster.layout_report()` (erasure/layouthealth.py, as `/health/cluster`), the
mover's figures `progress_report` (erasure/movetypes.py, as `zonegate status` / `zonegate
rebalance --json` and the `zonegate_gateway_move_*` gauges) and the fill `Fill`
(erasure/moveplan.py, what the mover balances: bytes held against the share of the node's
weight) over the live bytes each node reports now. Node answers are the overview's (its
one-second cache of `/v1/stats`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from erasure.layouthealth import same_path
from erasure.moveplan import TOLERANCE, Fill
from erasure.movetypes import progress_report

STORE_TIMEOUT = 2.0  # the page must not hang on a store that does not answer
DRIVE_FIELDS = ("drive", "records", "live_bytes", "used_bytes", "empty_zones", "seq_zones",
                "failed", "error", "replaced", "layout_state")


async def _bounded(coro: Any) -> tuple[Any, bool]:
    """(value, True), or (None, False) when it failed or took too long."""
    try:
        return await asyncio.wait_for(coro, STORE_TIMEOUT), True
    except Exception:
        return None, False


async def _staged(cluster: Any) -> list[dict[str, Any]] | None:
    store = getattr(cluster, "layout_store", None)
    if store is None:
        return []
    changes, ok = await _bounded(store.staged())
    if not ok:
        return None
    return [{**c.to_dict(), "text": c.describe()} for c in changes]


async def _run_docs(gw: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
    """(the mover's `run` document, its `request` one, whether the store answered)."""
    store = getattr(gw, "store", None)
    if store is None or not hasattr(store, "move_get"):
        return None, None, False
    both, ok = await _bounded(asyncio.gather(store.move_get("run"), store.move_get("request")))
    return (both[0], both[1], True) if ok else (None, None, False)


def _drives(entry: Any, reported: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The layout's drives of a node, each with what the node said of it (None: not known)."""
    out = []
    for d in entry.drives:
        here = next((x for x in reported or () if same_path(str(x.get("path")), d.path)), None)
        out.append({"path": d.path, "state": d.state, "generation": d.generation,
                    "present": None if reported is None else here is not None,
                    **{k: (here or {}).get(k) for k in DRIVE_FIELDS}})
    return out


def _held(layout: Any, clients: dict[str, Any],
          stats: dict[str, tuple[dict | None, str | None]]) -> dict[str, int]:
    """Bytes each answering node of the layout holds (its drives' live bytes, now): the
    mover's measure of fill, read from the nodes instead of the last run's tally (which is
    as old as the run)."""
    out = {}
    for n in layout.known():
        st = (stats.get(n.id) or (None, None))[0]
        c = clients.get(n.id)
        drives = (st or {}).get("drives") or []
        if c is not None and c.up and drives and all("live_bytes" in d for d in drives):
            out[n.id] = sum(int(d.get("live_bytes") or 0) for d in drives
                            if not d.get("failed"))
    return out


async def cluster_shape(gw: Any, stats: dict[str, tuple[dict | None, str | None]]
                        ) -> dict[str, Any]:
    """The layout view's document; `stats` is node id -> (its /v1/stats, or None and why)."""
    cluster = gw.storage.cluster
    layout = cluster.layout
    (run, request, store_ok), staged = await asyncio.gather(_run_docs(gw), _staged(cluster))
    clients = dict(getattr(cluster, "clients", {}) or {})
    held = _held(layout, clients, stats)
    fill = Fill(layout, held)
    per_node = fill.report() if held else {}
    nodes = []
    for n in layout.nodes:
        client = clients.get(n.id)
        st, err = stats.get(n.id, (None, None if client is None else "unknown"))
        up = None if n.state == "gone" else bool(client is not None and client.up and st)
        f = per_node.get(n.id)
        nodes.append({
            "id": n.id, "url": n.url, "domain": n.domain, "weight": n.weight, "state": n.state,
            "up": up, "error": None if up or n.state == "gone" else (err or "down"),
            "fill": f, "drives": _drives(n, (st or {}).get("drives") if up else None)})
    report = cluster.layout_report() if hasattr(cluster, "layout_report") else {}
    s = layout.scheme
    return {
        "t": time.time(),
        "layout": {"version": layout.version, "note": layout.note,
                   "applied_at": layout.applied_at or None, "k": s.k, "m": s.m},
        "nodes": nodes,
        "staged": staged,
        "problems": report.get("problems", []),
        # the mover's run (None: the metadata store did not answer)
        "moves": progress_report(run, request) if store_ok else None,
        # the largest fill deviation of a writable node now; None when no node answered
        "fill": {"spread": fill.spread(), "tolerance": TOLERANCE} if held else None,
    }
