"""Health with a memory (issue 25): what the cluster layout says should exist, compared with
what answers, and how many parts are below full redundancy.

`layout_report(layout, views)` lists the nodes and drives that should exist but do not answer
or are not there (a node removed from a cluster file is still in the layout: it is missing,
not forgotten), failed drives, new drives in a used slot that the layout has not registered
(`zonegate layout drive replace`), registered replacements awaiting their rebuild, draining
and gone nodes. `census(cluster)` lists every node's archives (a full scan: run now and then,
not per request) and counts parts with fewer fragments than their scheme's k+m on the nodes
the layout knows: fragments on gone or missing nodes do not count.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from erasure.clusterlayout import ClusterLayout

if TYPE_CHECKING:
    from erasure.cluster import ErasureCluster


@dataclass
class NodeView:
    """What one node said: up, its /health/ready answer and its /v1/stats drives."""

    up: bool
    ready: dict[str, Any] = field(default_factory=dict)
    drives: list[dict[str, Any]] | None = None  # None: not known (stats not read)


def same_path(a: str, b: str) -> bool:
    return a == b or os.path.abspath(a) == os.path.abspath(b)


def layout_report(layout: ClusterLayout, views: dict[str, NodeView]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "layout_version": layout.version,
        "nodes_expected": [n.id for n in layout.known()],
        "nodes_missing": [], "nodes_draining": [], "nodes_gone": [],
        "drives_missing": [], "drives_failed": [], "drives_new": [], "drives_replaced": [],
        "problems": [],
    }
    problems = out["problems"]
    for n in layout.nodes:
        if n.state == "gone":
            out["nodes_gone"].append(n.id)
            continue
        if n.state == "draining":
            out["nodes_draining"].append(n.id)
        v = views.get(n.id)
        if v is None or not v.up:
            out["nodes_missing"].append(n.id)
            problems.append(f"node {n.id} ({n.url}) should be in the cluster (layout "
                            f"v{layout.version}, {n.state}) but does not answer")
            continue
        for d in n.drives:
            if d.state == "replaced":
                out["drives_replaced"].append(f"{n.id}:{d.path}")
        if v.drives is None:
            continue
        seen = {str(x.get("path")): x for x in v.drives}
        for d in n.drives:
            here = next((x for p, x in seen.items() if same_path(p, d.path)), None)
            name = f"{n.id}:{d.path}"
            if here is None:
                if d.state != "failed":
                    out["drives_missing"].append(name)
                    problems.append(f"drive {name} should exist ({d.state}) but node {n.id} "
                                    "does not have it")
            elif here.get("failed"):
                out["drives_failed"].append(name)
                problems.append(f"drive {name} failed: {here.get('error') or 'device error'}")
            elif here.get("replaced"):
                out["drives_new"].append(name)
                problems.append(f"drive {name} is a new drive in a used slot: what the old one "
                                f"held is gone; register it: zonegate layout drive replace "
                                f"{n.id} {d.path}")
    return out


async def mark_foreign(store: Any, layout: ClusterLayout, node_id: str,
                       drives: list[dict[str, Any]]) -> None:
    """Set `replaced` on the drives whose identity is not the one the layout store recorded
    for their slot and generation (recording it when none was): new drives in used slots."""
    n = layout.node(node_id)
    for d in drives if n is not None else []:
        ident, path = d.get("identity"), str(d.get("path"))
        entry = next((e for e in n.drives if same_path(e.path, path)), None)
        if ident and entry is not None and await store.drive_identity(
                node_id, entry.path, entry.generation, str(ident)) != ident:
            d["replaced"] = True


@dataclass
class Census:
    at: float
    seconds: float
    parts: int = 0
    below_full: int = 0        # parts with fewer than k+m fragments on known nodes
    below_k: int = 0           # ... fewer than k: unreadable until a node comes back
    missing_fragments: int = 0
    unreachable: list[str] = field(default_factory=list)  # nodes that could not be listed
    layout_version: int = 0
    examples: list[str] = field(default_factory=list)  # a few part uids below full

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EXAMPLES = 10


async def census(cluster: ErasureCluster, prefix: str = "") -> Census:
    """Count the parts below full redundancy (one listing of every known node)."""
    start = time.time()
    version = cluster.layout.version
    parts = await cluster.scan(prefix)
    deleting = await cluster.deletions.all()
    c = Census(start, 0.0, unreachable=list(cluster.unreachable), layout_version=version)
    for p in parts:
        if p.part_uid in deleting:
            continue  # going away: not a redundancy problem
        c.parts += 1
        have = len(p.fragments)
        if have < p.scheme.n:
            c.below_full += 1
            c.missing_fragments += p.scheme.n - have
            if have < p.scheme.k:
                c.below_k += 1
            if len(c.examples) < EXAMPLES:
                c.examples.append(p.part_uid)
    c.seconds = time.time() - start
    return c
