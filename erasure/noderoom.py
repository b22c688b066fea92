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
        v = _writable(d) if isinstance(d, dict) else None
        if v is not None:
            seen = True
            total += v + sum(d.get(k, 0) for k in ("garbage_bytes", "stranded_bytes")
                             if isinstance(d.get(k, 0), int))
    return total if seen else _writable(stats.get("totals") or {})


def writable_of(stats: dict) -> int | None:
    """Writable bytes of a node's largest drive from its /v1/stats answer: `writable_bytes`
    (empty zones + open zones' room), or `free_bytes` from nodes that do not report it."""
    found = [v for d in stats.get("drives") or () if isinstance(d, dict)
             if (v := _writable(d)) is not None]
    return max(found) if found else _writable(stats.get("totals") or {})


def _writable(d: dict) -> int | None:
    """A drive's (or the totals') `writable_bytes`, or `free_bytes` from nodes that do not
    report it; None if neither is an int."""
    v = d.get("writable_bytes", d.get("free_bytes"))
    return v if isinstance(v, int) else None
