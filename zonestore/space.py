"""Space accounting of a zone log (no device I/O): what every zone's bytes are.

Each sequential zone's capacity is exactly one of: live (bytes of live records, headers
included), garbage (written bytes nothing live points at: dead records, padding), stranded
(unwritten room of finished or failed zones, unusable until a reset), writable (room puts can
still use: empty zones beyond the reserve, room of the open put zones and of closed partly
written ones) or reserve (empty zones held back for reclaim and deletes, room of the reclaim
and tombstone zone). So live + garbage + stranded + writable + reserve == capacity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zonestore.zonelog import ZoneLog


def writable_bytes(log: ZoneLog) -> int:
    """Bytes puts can still write without reclaim (cheap: O(open zones))."""
    cap = log.zone_capacity
    free = cap * max(0, len(log._empty) - log._put_keep())
    free += sum(w.remaining for w in log._writers.values() if not w.gc)
    free += sum(cap - log._written[z] for z in log._spares)
    return free


def space(log: ZoneLog) -> dict[str, int]:
    """live, garbage, stranded, writable, reserve bytes and empty zones, reclaiming zone."""
    cap = log.zone_capacity
    live_of = log.index.live
    zs = log.zone_size
    out = {"live": 0, "garbage": 0, "stranded": 0, "writable": 0, "reserve": 0}
    empties = len(log._empty)
    out["writable"] = cap * max(0, empties - log._put_keep())
    out["reserve"] = cap * empties - out["writable"]
    for z in log.seq_zones:
        if z in log._empty:
            continue
        w = log._writers.get(z)
        written = (w.tail - z * zs) if w is not None else log._written.get(z, 0)
        live = min(max(0, live_of.get(z, 0)), written)
        out["live"] += live
        out["garbage"] += written - live
        rest = cap - written
        if w is not None and not w.closing and w.error is None:
            out["reserve" if w.gc else "writable"] += rest
        elif z in log._spares:
            out["writable"] += rest
        else:
            out["stranded"] += rest
    return out


def zone_map(log: ZoneLog) -> list[dict[str, Any]]:
    """Every zone as the log sees it: index, cond (empty, open, closed, full, conventional,
    offline), capacity, written, live, garbage, reclaiming."""
    out: list[dict[str, Any]] = [
        {"index": i, "cond": "conventional", "capacity": c, "written": 0, "live": 0,
         "garbage": 0, "reclaiming": False} for i, c in log._conventional]
    live_of = log.index.live
    zs = log.zone_size
    for z in log.seq_zones:
        w = log._writers.get(z)
        if z in log._bad:
            cond = "offline"
        elif w is not None:
            cond = "open"
        elif z in log._full:
            cond = "full"
        elif z in log._empty:
            cond = "empty"
        else:
            cond = "closed"  # a partly written zone without a writer
        written = (w.tail - z * zs) if w is not None else log._written.get(z, 0)
        live = min(max(0, live_of.get(z, 0)), written)
        out.append({"index": z, "cond": cond, "capacity": log.zone_capacity,
                    "written": written, "live": live, "garbage": written - live,
                    "reclaiming": z in log._reclaiming})
    out.sort(key=lambda d: d["index"])
    return out
