"""The cluster layout: which nodes and drives make up the cluster, in which state, versioned.

A layout is owned by the cluster (kept in a `LayoutStore`: the gateway's metadata store, or
files for erasure-only use), not by each machine's cluster file, which only bootstraps version
1. Operators stage changes (`Change`) and apply them as one new version; every gateway and node
adopts the newest version without a restart. Pure code: no I/O.

Node states: active (takes new fragments), draining (readable, no new fragments, the mover
empties it), gone (never asked again; what it held is rebuilt elsewhere from parity).
Drive states: active, draining (the node empties it), replaced (a new empty drive at the same
slot: what the old one held is rebuilt onto it), failed (dead, its records are lost).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from erasure.codec import Scheme
from erasure.placement import NodeSlot

if TYPE_CHECKING:
    from erasure.config import ClusterConfig

NODE_STATES = ("active", "draining", "gone")
DRIVE_STATES = ("active", "draining", "replaced", "failed")


class LayoutError(ValueError):
    """A layout or a change that cannot be applied; the message is one line for the operator."""


@dataclass(frozen=True)
class DriveEntry:
    path: str
    state: str = "active"
    generation: int = 1  # bumped when the drive at this slot is replaced

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "state": self.state, "generation": self.generation}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DriveEntry:
        return cls(str(d["path"]), str(d.get("state", "active")), int(d.get("generation", 1)))


@dataclass(frozen=True)
class NodeEntry:
    id: str
    url: str
    domain: str
    weight: float = 1.0
    state: str = "active"
    drives: tuple[DriveEntry, ...] = ()

    @property
    def takes_writes(self) -> bool:
        return self.state == "active" and self.weight > 0

    @property
    def holds_data(self) -> bool:
        """Readable: its fragments count until the mover has emptied it."""
        return self.state in ("active", "draining")

    def drive(self, path: str) -> DriveEntry | None:
        return next((d for d in self.drives if d.path == path), None)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "url": self.url, "domain": self.domain, "weight": self.weight,
                "state": self.state, "drives": [d.to_dict() for d in self.drives]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeEntry:
        return cls(str(d["id"]), str(d["url"]), str(d.get("domain") or d["id"]),
                   float(d.get("weight", 1.0)), str(d.get("state", "active")),
                   tuple(DriveEntry.from_dict(x) for x in d.get("drives", ())))


@dataclass(frozen=True)
class ClusterLayout:
    """One version of the cluster's shape. `scheme` is the code of new writes; every part
    keeps the scheme it was written with (its PartLayout says which)."""

    version: int
    scheme: Scheme
    nodes: tuple[NodeEntry, ...]
    note: str = ""
    applied_at: float = field(default=0.0, compare=False)

    # -- queries --------------------------------------------------------------------------

    def node(self, node_id: str) -> NodeEntry | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def known(self) -> list[NodeEntry]:
        """Nodes that may hold fragments (active and draining): the ones to ask."""
        return [n for n in self.nodes if n.holds_data]

    def writable(self) -> list[NodeEntry]:
        """Nodes that take new fragments."""
        return [n for n in self.nodes if n.takes_writes]

    def slots(self) -> list[NodeSlot]:
        """Placement slots of the nodes that take new fragments."""
        return [NodeSlot(n.id, n.domain) for n in self.writable()]

    def weights(self) -> dict[str, float]:
        return {n.id: n.weight for n in self.writable()}

    @property
    def width(self) -> int:
        return self.scheme.k + self.scheme.m

    # -- checks ---------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise LayoutError when the layout cannot hold new parts with full redundancy."""
        ids = [n.id for n in self.nodes]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise LayoutError(f"node ids must be unique: {', '.join(sorted(dup))}")
        for n in self.nodes:
            if n.state not in NODE_STATES:
                raise LayoutError(f"node {n.id}: state {n.state!r} is not one of "
                                  f"{', '.join(NODE_STATES)}")
            if n.weight < 0 or math.isnan(n.weight):
                raise LayoutError(f"node {n.id}: weight must be >= 0")
            for d in n.drives:
                if d.state not in DRIVE_STATES:
                    raise LayoutError(f"node {n.id} drive {d.path}: state {d.state!r} is not "
                                      f"one of {', '.join(DRIVE_STATES)}")
        k, m = self.scheme.k, self.scheme.m
        writable = self.writable()
        if len(writable) < k + m:
            raise LayoutError(f"{k}+{m} needs {k + m} nodes that take writes, the layout has "
                              f"{len(writable)}")
        domains = {n.domain for n in writable}
        per_domain = -(-(k + m) // len(domains))
        if per_domain > m:
            raise LayoutError(f"{len(domains)} failure domains would hold up to {per_domain} "
                              f"of a part's {k + m} fragments each: losing one domain loses "
                              f"more than m={m}; use at least {-(-(k + m) // m)} domains or a "
                              f"larger m")

    # -- serialisation --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        s = self.scheme
        return {"version": self.version, "note": self.note, "applied_at": self.applied_at,
                "erasure": {"k": s.k, "m": s.m, "segment_size": s.segment_size,
                            "backend": s.backend},
                "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterLayout:
        e = d["erasure"]
        return cls(int(d["version"]),
                   Scheme(int(e["k"]), int(e["m"]), int(e["segment_size"]), str(e["backend"])),
                   tuple(NodeEntry.from_dict(n) for n in d["nodes"]), str(d.get("note", "")),
                   float(d.get("applied_at", 0.0)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ClusterLayout:
        return cls.from_dict(json.loads(text))

    @classmethod
    def bootstrap(cls, config: ClusterConfig) -> ClusterLayout:
        """Version 1 from a cluster file: every node and drive active, weight 1."""
        return cls(1, config.erasure.scheme,
                   tuple(NodeEntry(n.id, n.url, n.domain,
                                   drives=tuple(DriveEntry(p) for p in n.drives))
                         for n in config.nodes),
                   note="bootstrapped from the cluster file", applied_at=time.time())


# -- staged changes ----------------------------------------------------------------------

CHANGE_OPS = ("node add", "node drain", "node remove", "node weight", "node activate",
              "node domain", "drive add", "drive drain", "drive replace", "drive fail",
              "drive activate", "erasure")


@dataclass(frozen=True)
class Change:
    """One staged change; `args` by op:
    node add {id, url, domain?, weight?, drives: [path]}; node drain|remove|activate {id};
    node weight {id, weight}; node domain {id, domain}; drive add|drain|replace|fail|activate
    {node, path} (activate: back to active, e.g. once a replacement is rebuilt); erasure
    {k, m}."""

    op: str
    args: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "args": self.args}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Change:
        if d.get("op") not in CHANGE_OPS:
            raise LayoutError(f"unknown layout change {d.get('op')!r}")
        return cls(str(d["op"]), dict(d.get("args") or {}))

    def describe(self) -> str:
        a = self.args
        what = a.get("id") or (f"{a.get('node')}:{a.get('path')}" if "path" in a else "")
        rest = {k: v for k, v in a.items() if k not in ("id", "node", "path")}
        return " ".join(x for x in (self.op, str(what), json.dumps(rest) if rest else "") if x)


def _set_node(nodes: list[NodeEntry], node_id: str, **kw: Any) -> None:
    for i, n in enumerate(nodes):
        if n.id == node_id:
            nodes[i] = replace(n, **kw)
            return
    raise LayoutError(f"no node {node_id!r} in the layout")


def _set_drive(nodes: list[NodeEntry], node_id: str, path: str, *, add: bool = False,
               **kw: Any) -> None:
    for i, n in enumerate(nodes):
        if n.id != node_id:
            continue
        drives = list(n.drives)
        for j, d in enumerate(drives):
            if d.path == path:
                if add:
                    raise LayoutError(f"node {node_id} already has drive {path}")
                drives[j] = replace(d, **kw)
                break
        else:
            if not add:
                raise LayoutError(f"node {node_id} has no drive {path}")
            drives.append(DriveEntry(path, **kw))
        nodes[i] = replace(n, drives=tuple(drives))
        return
    raise LayoutError(f"no node {node_id!r} in the layout")


def apply_changes(layout: ClusterLayout, changes: Sequence[Change], note: str = ""
                  ) -> ClusterLayout:
    """The next version: `layout` with `changes` applied in order, validated."""
    nodes = list(layout.nodes)
    scheme = layout.scheme
    for c in changes:
        a = c.args
        if c.op == "node add":
            if any(n.id == a["id"] for n in nodes):
                raise LayoutError(f"node {a['id']} is already in the layout")
            nodes.append(NodeEntry(a["id"], a["url"], a.get("domain") or a["id"],
                                   float(a.get("weight", 1.0)),
                                   drives=tuple(DriveEntry(p) for p in a.get("drives", ()))))
        elif c.op == "node drain":
            _set_node(nodes, a["id"], state="draining")
        elif c.op == "node remove":
            _set_node(nodes, a["id"], state="gone")
        elif c.op == "node activate":
            _set_node(nodes, a["id"], state="active")
        elif c.op == "node weight":
            _set_node(nodes, a["id"], weight=float(a["weight"]))
        elif c.op == "node domain":
            _set_node(nodes, a["id"], domain=str(a["domain"]))
        elif c.op == "drive add":
            _set_drive(nodes, a["node"], a["path"], add=True)
        elif c.op == "drive drain":
            _set_drive(nodes, a["node"], a["path"], state="draining")
        elif c.op == "drive fail":
            _set_drive(nodes, a["node"], a["path"], state="failed")
        elif c.op == "drive activate":
            _set_drive(nodes, a["node"], a["path"], state="active")
        elif c.op == "drive replace":
            n = next((x for x in nodes if x.id == a["node"]), None)
            old = n.drive(a["path"]) if n else None
            gen = (old.generation + 1) if old else 1
            _set_drive(nodes, a["node"], a["path"], state="replaced", generation=gen)
        elif c.op == "erasure":
            scheme = Scheme(int(a["k"]), int(a["m"]), scheme.segment_size, scheme.backend)
        else:
            raise LayoutError(f"unknown layout change {c.op!r}")
    new = ClusterLayout(layout.version + 1, scheme, tuple(nodes),
                        note or "; ".join(c.describe() for c in changes), time.time())
    new.validate()
    check_transition(layout, new)
    return new


def check_transition(old: ClusterLayout, new: ClusterLayout) -> None:
    """Nodes that go from holding data to gone in one version lose what they hold, rebuilt
    from parity afterwards: more than m failure domains at once could take parts below k."""
    lost = [n for n in old.nodes if n.holds_data and (
        (nn := new.node(n.id)) is None or not nn.holds_data)]
    domains = {n.domain for n in lost}
    m = min(old.scheme.m, new.scheme.m)
    if len(domains) > m:
        raise LayoutError(f"removing {', '.join(n.id for n in lost)} at once loses "
                          f"{len(domains)} failure domains, more than m={m}: parts could "
                          f"lose more fragments than parity covers; remove at most {m} "
                          f"domain(s) per version, and the next once their data is moved")


def diff(old: ClusterLayout | None, new: ClusterLayout) -> list[str]:
    """What changes from `old` to `new`, one line each (for `zonegate layout diff`)."""
    out: list[str] = []
    if old is None or old.scheme != new.scheme:
        out.append(f"erasure: {new.scheme.k}+{new.scheme.m} for new writes"
                   + ("" if old is None else f" (was {old.scheme.k}+{old.scheme.m})"))
    before = {n.id: n for n in (old.nodes if old else ())}
    for n in new.nodes:
        o = before.pop(n.id, None)
        if o is None:
            out.append(f"+ node {n.id} {n.url} domain={n.domain} weight={n.weight:g} "
                       f"{n.state}, {len(n.drives)} drives")
            continue
        for attr in ("url", "domain", "weight", "state"):
            if getattr(o, attr) != getattr(n, attr):
                out.append(f"~ node {n.id} {attr}: {getattr(o, attr)} -> {getattr(n, attr)}")
        od = {d.path: d for d in o.drives}
        for d in n.drives:
            was = od.pop(d.path, None)
            if was is None:
                out.append(f"+ drive {n.id}:{d.path}")
            elif was != d:
                out.append(f"~ drive {n.id}:{d.path} {was.state} -> {d.state}"
                           + (f" (generation {d.generation})"
                              if d.generation != was.generation else ""))
        out.extend(f"- drive {n.id}:{p}" for p in od)
    out.extend(f"- node {nid}" for nid in before)
    return out


def changes_from_dicts(items: Iterable[dict[str, Any]]) -> list[Change]:
    return [Change.from_dict(d) for d in items]
