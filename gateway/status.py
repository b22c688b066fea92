"""`zonegate status --config C [--json]`: the cluster at a glance.

Asks every node of the config for readiness and its signed `/v1/stats` (through erasure's node
client), and reads the repair queue under `erasure.state_dir` when this machine has it. Prints
nodes up/down, drives, capacity, zones by condition, write amplification, quorum and parts
awaiting repair as tables (colour when the terminal has it), or one JSON document with `--json`.

Exit status: 0 every node up, 2 some nodes down but the write quorum holds, 3 the write quorum
is lost (so scripts and cron can act on it without parsing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from erasure.config import ClusterConfig

EXIT_OK, EXIT_DEGRADED, EXIT_NO_QUORUM = 0, 2, 3
SUMMED = ("free_bytes", "used_bytes", "live_bytes", "records", "user_bytes_written",
          "device_bytes_written", "gc_bytes_copied", "crc_failures", "read_errors")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show nodes, drives, capacity, zones and repair backlog")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for each node (default 5)")
    p.set_defaults(func=cmd_status)


async def _node_status(client: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": client.id, "url": client.spec.url, "domain": client.spec.domain,
                           "up": False, "error": None, "drives": [], "totals": {}}
    up = await client.check()
    if not up:
        out["error"] = client.last_error or "not ready"
        return out
    try:
        stats = await client.stats()
    except Exception as e:  # a node that answers health but not stats is down for us
        out["error"] = f"stats: {type(e).__name__}: {e}"
        return out
    out["up"] = True
    out["drives"] = [{k: d.get(k) for k in ("drive", "path", *SUMMED, "write_amplification",
                                             "zones_by_condition", "open_zones",
                                             "max_open_zones")} for d in stats.get("drives", [])]
    out["totals"] = stats.get("totals", {})
    return out


async def gather_status(config: ClusterConfig, node_timeout: float = 5.0) -> dict[str, Any]:
    """The status document (what `--json` prints)."""
    from erasure.nodeclient import NodeClient, make_session
    from erasure.repairqueue import RepairQueue

    async with make_session() as session:
        clients = [NodeClient(n, config.secret, session, node_timeout) for n in config.nodes]
        nodes = list(await asyncio.gather(*(_node_status(c) for c in clients)))
    totals: dict[str, Any] = {k: 0 for k in SUMMED}
    zones: dict[str, int] = {}
    drives = 0
    for n in nodes:
        for d in n["drives"]:
            drives += 1
            for k in SUMMED:
                totals[k] += d.get(k) or 0
            for cond, count in (d.get("zones_by_condition") or {}).items():
                zones[str(cond).lower()] = zones.get(str(cond).lower(), 0) + int(count)
    totals["drives"] = drives
    totals["zones_by_condition"] = dict(sorted(zones.items()))
    totals["write_amplification"] = (totals["device_bytes_written"] / totals["user_bytes_written"]
                                     if totals["user_bytes_written"] else None)
    down = [n["id"] for n in nodes if not n["up"]]
    e = config.erasure
    up = len(nodes) - len(down)
    state_dir = Path(e.state_dir)
    repair_dir = state_dir / "repair"
    awaiting = len(RepairQueue(state_dir).records()) if repair_dir.is_dir() else None
    return {
        "nodes": nodes,
        "nodes_up": up,
        "nodes_down": down,
        "erasure": {"k": e.k, "m": e.m, "write_quorum_needed": e.write_quorum},
        "write_quorum": up >= e.write_quorum,
        "read_quorum": len(down) <= e.m and up >= e.k,
        "totals": totals,
        # None: this machine has no repair queue (it lives where the gateway runs)
        "parts_awaiting_repair": awaiting,
        "repair_queue": str(repair_dir),
    }


def exit_code(doc: dict[str, Any]) -> int:
    if not doc["write_quorum"]:
        return EXIT_NO_QUORUM
    return EXIT_DEGRADED if doc["nodes_down"] else EXIT_OK


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _wa(v: float | None) -> str:
    return "-" if not v else f"{v:.3f}"


def render(doc: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    t = doc["totals"]
    used, free = t["used_bytes"], t["free_bytes"]
    quorum = "[green]write and read quorum hold[/]" if doc["write_quorum"] and doc["read_quorum"] \
        else ("[yellow]write quorum holds, some parts may be unreadable[/]" if doc["write_quorum"]
              else "[bold red]WRITE QUORUM LOST[/]")
    e = doc["erasure"]
    console.print(f"[bold]ZoneGate cluster[/]  {e['k']}+{e['m']} erasure coding, "
                  f"write quorum {e['write_quorum_needed']}")
    console.print(f"nodes: [green]{doc['nodes_up']} up[/]"
                  + (f", [red]{len(doc['nodes_down'])} down[/] ({', '.join(doc['nodes_down'])})"
                     if doc["nodes_down"] else "") + f" — {quorum}")
    pct = f" ({100 * used / (used + free):.1f}% used)" if used + free else ""
    console.print(f"capacity: {_size(used)} used, {_size(free)} free{pct}; "
                  f"{t['drives']} drives; write amplification {_wa(t['write_amplification'])}")
    zones = ", ".join(f"{c} {n}" for c, n in t["zones_by_condition"].items()) or "-"
    console.print(f"zones: {zones}")
    backlog = doc["parts_awaiting_repair"]
    if backlog is None:
        console.print(f"parts awaiting repair: unknown here (no {doc['repair_queue']})")
    else:
        style = "green" if backlog == 0 else "yellow"
        console.print(f"parts awaiting repair: [{style}]{backlog}[/]")

    table = Table(title="nodes", show_lines=False)
    for col in ("node", "state", "drives", "used", "free", "user written", "device written",
                "WA", "zones"):
        table.add_column(col, justify="right" if col not in ("node", "state", "zones") else "left")
    for n in doc["nodes"]:
        if not n["up"]:
            table.add_row(n["id"], "[red]down[/]", "-", "-", "-", "-", "-", "-",
                          f"[red]{n['error'] or ''}[/]")
            continue
        nt = n["totals"]
        z = nt.get("zones_by_condition") or {}
        table.add_row(n["id"], "[green]up[/]", str(len(n["drives"])), _size(nt.get("used_bytes")),
                      _size(nt.get("free_bytes")), _size(nt.get("user_bytes_written")),
                      _size(nt.get("device_bytes_written")),
                      _wa(nt.get("write_amplification")),
                      ", ".join(f"{str(c).lower()} {v}" for c, v in sorted(z.items())))
    console.print(table)


def cmd_status(args: argparse.Namespace) -> int:
    config = ClusterConfig.load(args.config)
    doc = asyncio.run(gather_status(config, args.timeout))
    if args.json:
        json.dump(doc, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        render(doc, Console(highlight=False))
    return exit_code(doc)
