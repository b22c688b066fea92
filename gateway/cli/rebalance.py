"""`zonegate rebalance --config C [--dry-run] [--json]`: ask the gateways' data mover for a
rebalance (any gateway on the metadata store picks it up within `mover_interval_seconds`), or,
with `--dry-run`, show the plan a run would carry out now: fragments per route (from -> to),
bytes, each node's fill before and after, what has nowhere to go. And the mover's progress
for `zonegate status` (`move_progress`, `describe_progress`).

Exit status: 0; 1 when the metadata store cannot be reached from here; 2 (dry run) when some
fragments would have nowhere to go."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from erasure.config import ClusterConfig, ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rebalance", help="rebalance the cluster's data (or show the plan)")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.add_argument("--dry-run", action="store_true",
                   help="show what a run would move now; move nothing")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_rebalance)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


async def move_progress(config: ClusterConfig) -> dict[str, Any] | None:
    """The mover's run as stored (erasure/movetypes.py `progress_report`), None when the
    store is not here."""
    from erasure.movetypes import progress_report
    from gateway.metadata import store_from_config
    from gateway.store.partowners import owners_for
    if owners_for(config) is None:
        return None
    store = store_from_config(config.gateway)
    try:
        await store.start()
        doc = await store.move_get("run")
        req = await store.move_get("request")
    except Exception:
        return None
    finally:
        await store.close()
    return progress_report(doc, req)


def describe_progress(p: dict[str, Any] | None) -> str:
    """One line for `zonegate status`."""
    if p is None:
        return "data movement: unknown here (no metadata store)"
    if p.get("phase") == "none":
        return "data movement: none yet"
    head = f"data movement (layout v{p['version']}"
    head += ", rebalance)" if p.get("balance") else ")"
    if p["phase"] == "done":
        line = (f"{head}: done, {p['moves']} fragments moved ({p['rebuilt']} rebuilt, "
                f"{_mib(p['bytes_moved'])})")
        if p.get("failed") or p.get("stuck"):
            line += f"; {p['failed']} failed, {p['stuck']} with nowhere to go"
        if p.get("requested_pending"):
            line += "; a rebalance is requested"
        return line
    eta = p.get("eta_seconds")
    return (f"{head}: {p['phase']}, pass {p['passes'] + 1}: {_mib(p['bytes_left'])} and "
            f"{p['parts_left']} parts left, {p['moves']} fragments moved, "
            f"{_mib(p['rate'])}/s" + (f", ETA {eta:.0f} s" if eta is not None else ""))


async def _dry_run(config: ClusterConfig) -> dict[str, Any]:
    from erasure.cluster import ErasureCluster
    from erasure.mover import Mover
    from gateway.metadata import store_from_config
    from gateway.store.layoutstore import StoreLayouts
    from gateway.store.moves import StoreMoveLeases, StorePartIndex
    store = store_from_config(config.gateway)
    await store.start()
    try:
        async with ErasureCluster(config, layout_store=StoreLayouts(store), layout_poll=0,
                                  health_interval=0, auto_repair=False) as c:
            mover = Mover(c, StorePartIndex(store), StoreMoveLeases(store), owner="dry-run",
                          layout=lambda: c.layout)
            d = await mover.dry_run()
            return {"layout_version": c.layout.version, "parts": d.parts,
                    "fragments": d.fragments, "rebuilds": d.rebuilds, "bytes": d.bytes,
                    "stuck": d.stuck, "routes": [{"from": a, "to": b, "fragments": n}
                                                 for (a, b), n in sorted(d.routes.items())],
                    "before": d.before, "after": d.after,
                    "spread_before": d.spread_before, "spread_after": d.spread_after}
    finally:
        await store.close()


async def _request(config: ClusterConfig) -> dict[str, Any]:
    from gateway.metadata import store_from_config
    store = store_from_config(config.gateway)
    await store.start()
    try:
        await store.move_claim("request", "zonegate-rebalance", 0.0, {"at": time.time()})
    finally:
        await store.close()
    return {"requested": True, "progress": await move_progress(config)}


def cmd_rebalance(args: argparse.Namespace) -> int:
    from gateway.store.partowners import owners_for
    try:
        config = ClusterConfig.load(args.config)
    except ConfigError as e:
        print(f"zonegate rebalance: {e}", file=sys.stderr)
        return 1
    if owners_for(config) is None:
        print("zonegate rebalance: the gateways' metadata store is not reachable from here",
              file=sys.stderr)
        return 1
    doc = asyncio.run(_dry_run(config) if args.dry_run else _request(config))
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    elif args.dry_run:
        print(f"layout v{doc['layout_version']}: {doc['fragments']} fragments of "
              f"{doc['parts']} parts would move ({doc['rebuilds']} rebuilt from parity), "
              f"{_mib(doc['bytes'])}; fill spread {doc['spread_before']:.1%} -> "
              f"{doc['spread_after']:.1%}")
        for r in doc["routes"]:
            print(f"  {r['from']:>12} -> {r['to']:<12} {r['fragments']}")
        nodes = sorted(set(doc["before"]) | set(doc["after"]))
        for n in nodes:
            print(f"  {n:>12}: {_mib(doc['before'].get(n, 0))} -> "
                  f"{_mib(doc['after'].get(n, 0))}")
        if doc["stuck"]:
            print(f"{doc['stuck']} fragments have nowhere to go (too few writable nodes or "
                  "domains with room)")
    else:
        print("rebalance requested: the gateways' mover starts it within "
              f"{float((config.gateway or {}).get('mover_interval_seconds', 10)):g} s")
        print(describe_progress(doc["progress"]))
    return 2 if args.dry_run and doc["stuck"] else 0
