"""How much a node can still take, from its `/v1/stats` answer (the node client's room
polls and the placement weights read these)."""

from __future__ import annotations


def room_of(stats: dict) -> int | None:
    """What all of a node's drives could still take, from its /v1/stats answer: writable
    bytes plus the garbage and stranded room reclaim can give back (the capacity less live
    data and reserve: a node with garbage to reclaim is not fuller than its writable figure
    says); None if it says nothing."""
    total, seen = 0, False
    for d in stats.get("drives") or ():
        if not isinstance(d, dict):
            continue
        v = d.get("writable_bytes", d.get("free_bytes"))
        if isinstance(v, int):
            seen = True
            total += v + sum(d.get(k, 0) for k in ("garbage_bytes", "stranded_bytes")
                             if isinstance(d.get(k, 0), int))
    if seen:
        return total
    totals = stats.get("totals") or {}
    v = totals.get("writable_bytes", totals.get("free_bytes"))
    return v if isinstance(v, int) else None


def writable_of(stats: dict) -> int | None:
    """Writable bytes of a node's largest drive from its /v1/stats answer: `writable_bytes`
    (empty zones + open zones' room), or `free_bytes` from nodes that do not report it."""
    best: int | None = None
    for d in stats.get("drives") or ():
        if not isinstance(d, dict):
            continue
        v = d.get("writable_bytes", d.get("free_bytes"))
        if isinstance(v, int) and (best is None or v > best):
            best = v
    if best is None:
        totals = stats.get("totals") or {}
        v = totals.get("writable_bytes", totals.get("free_bytes"))
        best = v if isinstance(v, int) else None
    return best
