"""What the console shows, as JSON-ready dicts: cluster health, nodes and drives, capacity,
repair backlog, request counters, and the zone map.

Everything comes from what the gateway already has: its erasure cluster's node clients
(readiness, signed `/v1/stats` and `/v1/zones`), the repair queue (the metadata store's,
shared by every gateway) and its own
Prometheus registry (every worker's, merged, when several run). Node answers are cached for
a second per worker, so any number of open consoles polling every 2 s cost the nodes one
request each per second at most.

Capacity (writable / stranded / garbage / live) is summed from what each node reports:
its own space accounting in `/v1/stats` (`writable_bytes`, `stranded_bytes`,
`garbage_bytes`: source "node"), else its per-zone numbers (source "zones"), else older
stats (writable = free bytes, garbage = used - live, stranded unknown: source "stats");
`capacity.source` says which.

A node that has no `/v1/zones` (404) gets a zone map built from `/v1/stats`
`zones_by_condition`: one cell per zone in the right condition, but fill and garbage are the
drive's averages (`"source": "stats"` says so, and the page shows it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.console.shape import cluster_shape
from gateway.server.health import cluster_health, refresh_nodes

NODE_TIMEOUT = 3.0
CACHE_SECONDS = 1.0
NO_ZONES_RETRY = 60.0  # a node that lacks /v1/zones is asked again after this long

# /v1/stats zones_by_condition keys -> the zone map's conditions
STATS_CONDITIONS = {"not_wp": "conventional", "empty": "empty", "implicit_open": "open",
                    "explicit_open": "open", "closed": "closed", "full": "full",
                    "readonly": "offline", "offline": "offline"}
# fallback map order: what is written first comes first
FALLBACK_ORDER = ("conventional", "full", "closed", "open", "empty", "offline")
CONDITIONS = ("empty", "open", "closed", "full", "conventional", "offline")


class Cached:
    """One value per worker, refreshed at most every `ttl` seconds by one task (concurrent
    callers share the refresh in flight)."""

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._value: Any = None
        self._at = 0.0
        self._task: asyncio.Task | None = None

    async def get(self, make: Callable[[], Awaitable[Any]]) -> Any:
        if self._value is not None and time.monotonic() - self._at < self.ttl:
            return self._value
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._refresh(make))
        return await asyncio.shield(self._task)

    async def _refresh(self, make: Callable[[], Awaitable[Any]]) -> Any:
        value = await make()
        self._value, self._at = value, time.monotonic()
        return value


async def _ask(coro: Awaitable[Any]) -> tuple[Any, str | None]:
    try:
        return await asyncio.wait_for(coro, NODE_TIMEOUT), None
    except TimeoutError:
        return None, "timed out"
    except Exception as e:  # the node's problem is shown, never raised to the page
        return None, f"{type(e).__name__}: {e}"


async def node_stats(cluster: Any) -> dict[str, tuple[dict | None, str | None]]:
    """node id -> (its /v1/stats, or None and why not)."""
    clients = dict(getattr(cluster, "clients", {}) or {})

    async def one(c: Any) -> tuple[dict | None, str | None]:
        if not c.up:
            return None, c.last_error or "down"
        return await _ask(c.stats())

    results = await asyncio.gather(*(one(c) for c in clients.values()))
    return dict(zip(clients, results, strict=True))


def _drive_capacity(d: dict[str, Any]) -> dict[str, int | None]:
    """Capacity of one drive from its stats: the one computation of writable space that the
    overview and the zone map both show (the node's own space accounting, zonestore/space.py,
    which holds some empty zones back as a reserve for reclaim and deletes). Older nodes:
    writable is the free space and garbage what is written but no longer live. `total` is
    what the parts add up to (the sequential zones' capacity), `used` the bytes written."""
    used, live = d.get("used_bytes"), d.get("live_bytes")
    garbage = d.get("garbage_bytes")
    if garbage is None and used is not None and live is not None:
        garbage = max(0, used - live)
    writable = d.get("writable_bytes", d.get("free_bytes"))
    reserve = d.get("reserve_bytes")
    parts = (live, garbage, d.get("stranded_bytes"), writable, reserve)
    total = sum(v for v in parts if v is not None) if writable is not None else None
    return {"writable": writable, "stranded": d.get("stranded_bytes"), "garbage": garbage,
            "live": live, "used": used, "reserve": reserve, "total": total}


def _add(total: dict[str, int | None], part: dict[str, int | None]) -> None:
    for k, v in part.items():
        if v is None:
            continue
        total[k] = (total.get(k) or 0) + v


async def repair_backlog(cluster: Any) -> int | None:
    """Parts in the repair queue, None when it cannot be read (the store is away)."""
    queue = getattr(cluster, "repair_queue", None)
    if queue is None:
        return None
    try:
        return await asyncio.wait_for(queue.size(), 2.0)  # the page must not hang on it
    except Exception:
        return None


def request_counters() -> dict[str, Any]:
    """Cumulative S3 request counts by operation and status class, node calls by outcome and
    the erasure event counters, from the gateway's Prometheus registry (all workers). The
    page turns two successive answers into rates."""
    from gateway.server.metrics import PREFIX, get_metrics, multiprocess_active

    if multiprocess_active():
        from prometheus_client import CollectorRegistry, multiprocess
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = get_metrics().registry
    ops: dict[str, dict[str, float]] = {}
    node_calls: dict[str, float] = {}
    events: dict[str, float] = {}
    in_flight = 0.0
    wanted_events = {"degraded_reads", "degraded_writes", "failed_quorum_writes",
                     "fragment_errors", "healed_parts", "heal_failures", "parts_written"}
    for metric in registry.collect():
        name = metric.name.removeprefix(PREFIX + "_")
        for s in metric.samples:
            if name == "requests" and s.name.endswith("_total"):
                op = ops.setdefault(s.labels.get("operation", "?"),
                                    {"total": 0.0, "client_errors": 0.0, "server_errors": 0.0})
                op["total"] += s.value
                status = s.labels.get("status", "")
                if status.startswith("4"):
                    op["client_errors"] += s.value
                elif status.startswith("5"):
                    op["server_errors"] += s.value
            elif name == "node_requests" and s.name.endswith("_total"):
                out = s.labels.get("outcome", "?")
                node_calls[out] = node_calls.get(out, 0.0) + s.value
            elif name in wanted_events and s.name.endswith("_total"):
                events[name] = events.get(name, 0.0) + s.value
            elif name == "requests_in_flight" and s.name == metric.name:
                in_flight += s.value
    return {"t": time.time(), "operations": dict(sorted(ops.items())),
            "node_calls": dict(sorted(node_calls.items())), "events": dict(sorted(events.items())),
            "in_flight": in_flight}


class ConsoleData:
    """Per-worker builder of the console's JSON documents for one gateway."""

    def __init__(self, gateway: Any) -> None:
        self.gw = gateway
        self._stats = Cached()
        self._zones = Cached()
        self._no_zones_until: dict[str, float] = {}

    @property
    def cluster(self) -> Any:
        return self.gw.storage.cluster

    async def overview(self) -> dict[str, Any]:
        cluster = self.cluster
        await refresh_nodes(cluster)
        health = cluster_health(cluster)
        stats, zmap = await asyncio.gather(self._stats.get(lambda: node_stats(cluster)),
                                           self.zone_map())
        # per-zone numbers, for nodes whose stats lack the space accounting
        zoned = {n["id"]: {d.get("drive"): d["capacity"] for d in n["drives"]}
                 for n in zmap["nodes"] if n["source"] == "zones"}
        sources: set[str] = set()
        nodes = []
        totals: dict[str, int | None] = {}
        records = 0
        wa_user = wa_device = 0
        zones: dict[str, int] = {}
        for nid, client in (getattr(cluster, "clients", {}) or {}).items():
            st, err = stats.get(nid, (None, "unknown"))
            if not client.up:  # down since the cached stats were read: they are stale
                st, err = None, err or client.last_error or "down"
            node: dict[str, Any] = {"id": nid, "url": client.spec.url,
                                    "domain": client.spec.domain, "up": bool(client.up and st),
                                    "error": err, "drives": []}
            for d in (st or {}).get("drives", []):
                cap = _drive_capacity(d)
                from_zones = zoned.get(nid, {}).get(d.get("drive"))
                if "stranded_bytes" in d:  # the node's own space accounting: the best source
                    sources.add("node")
                elif from_zones is not None:
                    cap = {**from_zones, "used": cap["used"]}
                    sources.add("zones")
                else:
                    sources.add("stats")
                _add(totals, cap)
                records += d.get("records") or 0
                wa_user += d.get("user_bytes_written") or 0
                wa_device += d.get("device_bytes_written") or 0
                drive_zones: dict[str, int] = {}
                for cond, n in (d.get("zones_by_condition") or {}).items():
                    c = STATS_CONDITIONS.get(str(cond).lower(), str(cond).lower())
                    zones[c] = zones.get(c, 0) + int(n)
                    drive_zones[c] = drive_zones.get(c, 0) + int(n)
                node["drives"].append({
                    "drive": d.get("drive"), "path": d.get("path"), "capacity": cap,
                    "records": d.get("records"), "open_zones": d.get("open_zones"),
                    "max_open_zones": d.get("max_open_zones"),
                    "write_amplification": d.get("write_amplification"),
                    "zones_by_condition": dict(sorted(drive_zones.items())),
                    "crc_failures": d.get("crc_failures"), "read_errors": d.get("read_errors"),
                })
            nodes.append(node)
        backlog = await repair_backlog(cluster)
        return {
            "t": time.time(),
            "health": {**health, "ok": health["write_quorum"] and health["read_quorum"]},
            "nodes": nodes,
            "capacity": {**{k: totals.get(k) for k in ("writable", "stranded", "garbage",
                                                        "live", "used", "reserve", "total")},
                         "records": records,
                         "source": "/".join(sorted(sources)) or None,
                         "write_amplification": (wa_device / wa_user) if wa_user else None,
                         "zones_by_condition": dict(sorted(zones.items()))},
            "repair": {"parts_awaiting_repair": backlog},
            "requests": request_counters(),
        }

    async def shape(self) -> dict[str, Any]:
        """The layout view: the cluster's shape and the data mover's run (shape.py)."""
        cluster = self.cluster
        await refresh_nodes(cluster)
        stats = await self._stats.get(lambda: node_stats(cluster))
        return await cluster_shape(self.gw, stats)

    async def zone_map(self) -> dict[str, Any]:
        return await self._zones.get(self._zone_map)

    async def _zone_map(self) -> dict[str, Any]:
        cluster = self.cluster
        clients = dict(getattr(cluster, "clients", {}) or {})
        results, stats = await asyncio.gather(
            asyncio.gather(*(self._node_zones(c) for c in clients.values())),
            self._stats.get(lambda: node_stats(cluster)))
        for node in results:
            if node["source"] == "zones":
                _capacity_from_stats(node, (stats.get(node["id"]) or (None, None))[0])
        return {"t": time.time(), "nodes": results}

    async def _node_zones(self, client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"id": client.id, "up": bool(client.up), "source": None,
                               "error": None, "drives": []}
        if not client.up:
            out["error"] = client.last_error or "down"
            return out
        if time.monotonic() >= self._no_zones_until.get(client.id, 0.0):
            try:
                doc = await asyncio.wait_for(client.zones(), NODE_TIMEOUT)
            except Exception as e:
                if getattr(e, "status", None) != 404:  # 404: an older node, use its stats
                    # a node that does not answer is down for the map, even before this
                    # worker's health loop has noticed
                    out["up"] = False
                    out["error"] = "timed out" if isinstance(e, TimeoutError) else \
                        f"{type(e).__name__}: {e}"
                    return out
                self._no_zones_until[client.id] = time.monotonic() + NO_ZONES_RETRY
            else:
                out["source"] = "zones"
                out["drives"] = [_zones_drive(d) for d in doc.get("drives", [])]
                return out
        st, err = await _ask(client.stats())
        if st is None:
            out["up"], out["error"] = False, err
            return out
        out["source"] = "stats"
        out["drives"] = [_drive_from_stats(d) for d in st.get("drives", [])]
        return out


def _capacity_from_stats(node: dict[str, Any], st: dict[str, Any] | None) -> None:
    """Give the zone map's drives the capacity the overview shows (the node's own space
    accounting in its stats) instead of the sum over their zones, which cannot tell the
    reserved empty zones from writable ones: one drive read 15.5 GiB writable on the map and
    15.2 on the overview."""
    by_drive = {d.get("drive"): d for d in (st or {}).get("drives", [])}
    for drive in node["drives"]:
        d = by_drive.get(drive.get("drive"))
        if d is not None and "stranded_bytes" in d:
            drive["capacity"] = _drive_capacity(d)


def _zones_drive(d: dict[str, Any]) -> dict[str, Any]:
    """A drive of /v1/zones, with its zone-derived capacity added."""
    zones = d.get("zones") or []
    cap = {"writable": 0, "stranded": 0, "garbage": 0, "live": 0}
    for z in zones:
        room = max(0, int(z.get("capacity") or 0) - int(z.get("written") or 0))
        cond = z.get("cond")
        if cond in ("empty", "open", "closed"):
            cap["writable"] += room
        elif cond == "full":
            cap["stranded"] += room
        elif cond == "offline":
            cap["stranded"] += int(z.get("capacity") or 0)
        cap["garbage"] += int(z.get("garbage") or 0)
        cap["live"] += int(z.get("live") or 0)
    return {**{k: d.get(k) for k in ("drive", "path", "zone_size", "zone_capacity", "max_open",
                                      "max_active")},
            "capacity": cap, "zones": zones}


def _drive_from_stats(d: dict[str, Any]) -> dict[str, Any]:
    """Zone cells from a drive's zones_by_condition: conditions exact, fill and garbage the
    drive's averages (per-zone numbers need /v1/zones)."""
    counts: dict[str, int] = {}
    for cond, n in (d.get("zones_by_condition") or {}).items():
        c = STATS_CONDITIONS.get(str(cond).lower(), "offline")
        counts[c] = counts.get(c, 0) + int(n)
    used, live = int(d.get("used_bytes") or 0), int(d.get("live_bytes") or 0)
    garbage_share = (used - live) / used if used else 0.0
    written_zones = counts.get("full", 0) + counts.get("closed", 0) + counts.get("open", 0)
    seq_zones = written_zones + counts.get("empty", 0)
    total = used + int(d.get("free_bytes") or 0)
    zone_cap = total // seq_zones if seq_zones else 0
    # bytes not in full zones are spread over the open and closed ones
    partial = max(0, used - counts.get("full", 0) * zone_cap)
    partial_zones = counts.get("closed", 0) + counts.get("open", 0)
    zones = []
    for cond in FALLBACK_ORDER:
        for _ in range(counts.get(cond, 0)):
            if cond == "full":
                written = zone_cap
            elif cond in ("open", "closed") and partial_zones:
                written = min(zone_cap, partial // partial_zones)
            else:
                written = 0
            garbage = int(written * garbage_share)
            zones.append({"index": len(zones), "cond": cond, "capacity": zone_cap,
                          "written": written, "live": written - garbage, "garbage": garbage,
                          "reclaiming": False})
    return {"drive": d.get("drive"), "path": d.get("path"), "zone_size": None,
            "zone_capacity": zone_cap or None, "max_open": d.get("max_open_zones"),
            "max_active": d.get("max_active_zones"), "capacity": _drive_capacity(d),
            "zones": zones}

