"""`zonegate status --config C [--json]`: the cluster at a glance.

Asks every node of the config for readiness and its signed `/v1/stats` (through erasure's node
client), and reads the repair queue in the gateways' metadata store (or, with no store here,
the files under `erasure.state_dir`) when this machine can. Prints
nodes up/down, drives, capacity, zones by condition, write amplification, quorum and parts
awaiting repair as tables (colour when the terminal has it), or one JSON document with `--json`.

The nodes asked are those of the cluster layout (issue 25: the metadata store's, else the
layout files under `erasure.state_dir`, else the cluster file's bootstrap); what the layout
says should exist but does not (nodes, drives; failed drives; new drives in a used slot not
yet registered) is listed, and the parts below full redundancy are counted by the gateway's
census (`/health/cluster`) or, with `--census`, by listing every node from here.

Exit status: 0 every node up and nothing missing, 2 some nodes down (or drives missing,
failed or new, or parts below full redundancy) but the write quorum holds, 3 the write quorum
is lost (so scripts and cron can act on it without parsing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from erasure.config import ClusterConfig

EXIT_OK, EXIT_DEGRADED, EXIT_NO_QUORUM = 0, 2, 3
SUMMED = ("free_bytes", "used_bytes", "live_bytes", "records", "user_bytes_written",
          "device_bytes_written", "gc_bytes_copied", "crc_failures", "read_errors")
# zone-aware capacity; summed only when the nodes report them (newer nodes)
CAPACITY = ("writable_bytes", "stranded_bytes", "garbage_bytes")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show nodes, drives, capacity, zones and repair backlog")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for each node (default 5)")
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None,
                   metavar="SECONDS", help="show it again every SECONDS (default 2)")
    p.add_argument("--census", action="store_true",
                   help="count the parts below full redundancy by listing every node")
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
    out["drives"] = [{k: d.get(k) for k in ("drive", "path", *SUMMED, *CAPACITY,
                                             "write_amplification", "failed", "error",
                                             "identity", "replaced", "layout_state",
                                             "zones_by_condition", "open_zones",
                                             "max_open_zones", "empty_zones", "seq_zones")}
                     for d in stats.get("drives", [])]
    out["totals"] = dict(stats.get("totals") or {})
    for k in CAPACITY:  # summed here when a node reports them per drive only
        vals = [d.get(k) for d in out["drives"]]
        if out["totals"].get(k) is None and vals and None not in vals:
            out["totals"][k] = sum(vals)
    return out


async def _mark_foreign(config: ClusterConfig, layout: Any, nodes: list[dict[str, Any]]
                        ) -> None:
    """Drives whose identity differs from the one recorded for their slot (in the store the
    layout came from) are new in a used slot (erasure/layouthealth.py)."""
    from erasure.layouthealth import mark_foreign
    from erasure.layoutstore import FileLayoutStore
    from gateway.metadata import store_from_config
    from gateway.store.layoutstore import StoreLayouts
    from gateway.store.partowners import owners_for
    meta = store_from_config(config.gateway) if owners_for(config) is not None else None
    try:
        if meta is not None:
            await meta.start()
        store = StoreLayouts(meta) if meta is not None else FileLayoutStore(
            config.erasure.state_dir)
        for n in nodes:
            if n["up"]:
                await mark_foreign(store, layout, n["id"], n["drives"])
    except Exception:  # unknown from here: the nodes' own flags stand
        pass
    finally:
        if meta is not None:
            await meta.close()


async def current_layout(config: ClusterConfig) -> tuple[Any, str]:
    """(the cluster layout, where it came from), read only: the gateways' metadata store when
    this machine reaches it, else the layout files, else the cluster file's bootstrap."""
    from erasure.clusterlayout import ClusterLayout
    from erasure.layoutstore import FileLayoutStore
    from gateway.metadata import describe, store_from_config, store_path
    from gateway.store.layoutstore import StoreLayouts
    from gateway.store.partowners import owners_for
    if owners_for(config) is not None:
        store = store_from_config(config.gateway)
        try:
            await store.start()
            got = await StoreLayouts(store).current()
            if got is not None:
                return got, f"metadata store {describe(store_path(config.gateway))}"
        except Exception:
            pass
        finally:
            await store.close()
    got = await FileLayoutStore(config.erasure.state_dir).current()
    if got is not None:
        return got, f"{config.erasure.state_dir}/layout"
    return ClusterLayout.bootstrap(config), f"{config.source} (no layout stored yet)"


async def run_census(config: ClusterConfig, layout: Any) -> dict[str, Any]:
    """erasure/layouthealth.py's census from here (a listing of every node)."""
    from erasure.cluster import ErasureCluster
    from erasure.layouthealth import census
    async with ErasureCluster(config, layout=layout, health_interval=0,
                              auto_repair=False) as c:
        return (await census(c)).to_dict()


async def gather_status(config: ClusterConfig, node_timeout: float = 5.0,
                        with_census: bool = False) -> dict[str, Any]:
    """The status document (what `--json` prints)."""
    from erasure.config import NodeSpec
    from erasure.layouthealth import NodeView, layout_report
    from erasure.nodeclient import NodeClient, make_session

    layout, layout_from = await current_layout(config)
    async with make_session() as session:
        clients = [NodeClient(NodeSpec(n.id, n.url, n.domain, tuple(d.path for d in n.drives)),
                              config.secret, session, node_timeout) for n in layout.known()]
        nodes, health = await asyncio.gather(
            asyncio.gather(*(_node_status(c) for c in clients)),
            _gateway_health(config, min(node_timeout, 2.0)))
        nodes = list(nodes)
    if "no layout stored" not in layout_from:
        await _mark_foreign(config, layout, nodes)
    report = layout_report(layout, {n["id"]: NodeView(n["up"], {}, n["drives"] if n["up"]
                                                      else None) for n in nodes})
    census = await run_census(config, layout) if with_census else (
        (health or {}).get("census"))
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
    for k in CAPACITY:
        vals = [d.get(k) for n in nodes for d in n["drives"]]
        totals[k] = sum(vals) if vals and all(v is not None for v in vals) else None
    totals["drives"] = drives
    totals["zones_by_condition"] = dict(sorted(zones.items()))
    totals["write_amplification"] = (totals["device_bytes_written"] / totals["user_bytes_written"]
                                     if totals["user_bytes_written"] else None)
    down = [n["id"] for n in nodes if not n["up"]]
    s = layout.scheme
    wq = config.erasure.write_quorum if config.erasure.scheme == s else min(s.k + 1, s.n)
    up = len(nodes) - len(down)
    awaiting, where = await repair_backlog(config)
    from gateway.cli.rebalance import move_progress
    moves = await move_progress(config)
    return {
        "nodes": nodes,
        "nodes_up": up,
        "nodes_down": down,
        "erasure": {"k": s.k, "m": s.m, "write_quorum_needed": wq},
        "write_quorum": up >= wq,
        "read_quorum": len(down) <= s.m and up >= s.k,
        # what the layout says should exist but does not (erasure/layouthealth.py)
        "layout": report,
        "layout_from": layout_from,
        # parts below full redundancy: the gateway's census or --census; None: unknown
        "census": census,
        "parts_below_full_redundancy": census.get("below_full") if census else None,
        "totals": totals,
        # None: this machine has no repair queue (it lives where the gateway runs)
        "parts_awaiting_repair": awaiting,
        "repair_queue": where,
        # the data mover's run (gateway/cli/rebalance.py; None: no metadata store here)
        "moves": moves,
        # the gateway's /health/cluster when it answers from here (None otherwise)
        "gateway_health": health,
    }


async def repair_backlog(config: ClusterConfig) -> tuple[int | None, str]:
    """(parts awaiting repair or None when unknown here, where the queue is): the gateways'
    metadata store when this machine reaches it, else an older gateway's state directory."""
    from gateway.metadata import describe, store_from_config, store_path
    from gateway.store.partowners import owners_for
    target = store_path(config.gateway)
    if owners_for(config) is not None:  # a database URL, or the SQLite file is here
        store = store_from_config(config.gateway)
        try:
            await store.start()
            return await store.repair_count(), f"metadata store {describe(target)}"
        except Exception:
            return None, f"metadata store {describe(target)} not reachable"
        finally:
            await store.close()
    from erasure.repairqueue import RepairQueue
    repair_dir = Path(config.erasure.state_dir) / "repair"
    if repair_dir.is_dir():
        return await RepairQueue(config.erasure.state_dir).size(), str(repair_dir)
    return None, f"no metadata store {describe(target)} here"


def exit_code(doc: dict[str, Any]) -> int:
    if not doc["write_quorum"]:
        return EXIT_NO_QUORUM
    bad = doc["nodes_down"] or (doc.get("layout") or {}).get("problems") or \
        doc.get("parts_below_full_redundancy")
    return EXIT_DEGRADED if bad else EXIT_OK


def _size(n: float | None) -> str:
    """Short sizes (at most 6 characters) so the node table fits 80 columns."""
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1000 or unit == "P":
            return f"{n:.0f}{unit}" if unit == "B" or abs(n) >= 100 else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def _wa(v: float | None) -> str:
    return "-" if not v else f"{v:.2f}"


# zone conditions as the table counts them (conventional zones left out)
_ZONE_KIND = {"empty": "empty", "implicit_open": "open", "explicit_open": "open",
              "closed": "closed", "full": "full", "read_only": "read-only", "offline": "offline"}


def _zone_counts(z: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cond, n in z.items():
        kind = _ZONE_KIND.get(str(cond).lower())
        if kind:
            counts[kind] = counts.get(kind, 0) + int(n)
    return counts


def _capacity_fields(t: dict[str, Any]) -> bool:
    """Whether the nodes report zone-aware capacity (writable / stranded / garbage / live)."""
    return t.get("writable_bytes") is not None


def render(doc: dict[str, Any], console: Any) -> None:
    """Everything in 80 columns: summary lines, then one table row per node."""
    from rich import box
    from rich.table import Table

    t = doc["totals"]
    used, free = t["used_bytes"], t["free_bytes"]
    quorum = "[green]quorum holds[/]" if doc["write_quorum"] and doc["read_quorum"] \
        else ("[yellow]write quorum holds, reads may fail[/]" if doc["write_quorum"]
              else "[bold red]WRITE QUORUM LOST[/]")
    e = doc["erasure"]
    console.print(f"[bold]ZoneGate[/] {e['k']}+{e['m']}, write quorum {e['write_quorum_needed']};"
                  f" nodes [green]{doc['nodes_up']} up[/]"
                  + (f", [red]{len(doc['nodes_down'])} down[/]" if doc["nodes_down"] else "")
                  + f"; {quorum}")
    if doc["nodes_down"]:
        console.print(f"down: {', '.join(doc['nodes_down'])}")
    full = (doc.get("gateway_health") or {}).get("nodes_full")
    if full:
        console.print(f"[yellow]full[/]: {', '.join(full)}")
    pct = f" ({100 * used / (used + free):.1f}%)" if used + free else ""
    console.print(f"capacity: {_size(used)} used{pct}, {_size(free)} free, {t['drives']} drives,"
                  f" WA {_wa(t['write_amplification'])}")
    zoned = _capacity_fields(t)
    if zoned:
        console.print(f"zones hold: {_size(t.get('writable_bytes'))} writable, "
                      f"{_size(t.get('live_bytes'))} live, {_size(t.get('garbage_bytes'))} "
                      f"garbage, {_size(t.get('stranded_bytes'))} stranded")
    zc = _zone_counts(t["zones_by_condition"])
    console.print("zones: " + (", ".join(f"{n} {k}" for k, n in zc.items() if n) or "-"))
    lay = doc.get("layout") or {}
    if lay:
        extra = [f"{len(lay[k])} {k.split('_')[1]}" for k in ("nodes_draining", "nodes_gone")
                 if lay.get(k)]
        console.print(f"layout v{lay['layout_version']} ({doc.get('layout_from')})"
                      + (f": {', '.join(extra)}" if extra else ""))
        for line in lay.get("problems") or []:
            console.print(f"[red]{line}[/]", overflow="fold")
    below = doc.get("parts_below_full_redundancy")
    census = doc.get("census") or {}
    if below is None:
        console.print("parts below full redundancy: unknown (`--census` counts them)")
    else:
        style = "green" if below == 0 else "red"
        console.print(f"parts below full redundancy: [{style}]{below}[/] of "
                      f"{census.get('parts', '?')} (census of layout "
                      f"v{census.get('layout_version', '?')})")
    backlog = doc["parts_awaiting_repair"]
    if backlog is None:
        console.print(f"repair backlog: unknown here ({doc['repair_queue']})")
    else:
        style = "green" if backlog == 0 else "yellow"
        console.print(f"repair backlog: [{style}]{backlog}[/] parts")
    if "moves" in doc:
        from gateway.cli.rebalance import describe_progress
        console.print(describe_progress(doc["moves"]))

    sizes = (["writable", "live", "garbage", "strand"] if zoned else ["free", "written"])
    zone_cols = ["open", "full"] if zoned else ["open", "full", "empty"]
    cols = ["node", "state", "used", *sizes, "WA", *zone_cols]
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False,
                  collapse_padding=True)
    for col in cols:
        table.add_column(col, justify="left" if col in ("node", "state") else "right",
                         no_wrap=True)
    errors = []
    for n in doc["nodes"]:
        if not n["up"]:
            table.add_row(n["id"], "[red]down[/]", *["-"] * (len(cols) - 2))
            errors.append(f"{n['id']}: {n['error'] or 'down'}")
            continue
        nt = n["totals"]
        keys = (["writable_bytes", "live_bytes", "garbage_bytes", "stranded_bytes"] if zoned
                else ["free_bytes", "user_bytes_written"])
        z = _zone_counts(nt.get("zones_by_condition") or {})
        table.add_row(n["id"], "[green]up[/]", _size(nt.get("used_bytes")),
                      *(_size(nt.get(k)) for k in keys), _wa(nt.get("write_amplification")),
                      *(str(z.get(c, 0)) for c in zone_cols))
    console.print(table)
    for line in errors:
        console.print(f"[red]{line}[/]", overflow="fold")


async def _gateway_health(config: ClusterConfig, seconds: float) -> dict[str, Any] | None:
    """The gateway's /health/cluster (for `nodes_full`), when its listen address answers here
    (over HTTPS or HTTP: `zonegate dev --tls` passes its certificate as flags)."""
    import ssl

    import aiohttp
    listen = str(config.gateway.get("listen") or "")
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        return None
    host = host.strip("[]")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
    base = f"{f'[{host}]' if ':' in host else host}:{port}"
    # Unverified: the answer is public health data and decides nothing.
    ctx = ssl._create_unverified_context()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as s:
        for scheme in ("https", "http"):
            try:
                async with s.get(f"{scheme}://{base}/health/cluster",
                                 ssl=ctx if scheme == "https" else False) as resp:
                    doc = await resp.json(content_type=None)
                    return doc if isinstance(doc, dict) else None
            except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
                continue
    return None


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    config = ClusterConfig.load(args.config)
    console = Console(highlight=False)
    code = EXIT_OK
    interrupted = False

    def on_sigint(_signum: int, _frame: Any) -> None:
        # Not asyncio.run's handler, which makes SIGINT a cancellation of the running check: a
        # cancellation something swallows is lost, and the watch went on (seen at load 14).
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint) if args.watch else None
    try:
        while not interrupted:
            doc = asyncio.run(gather_status(config, args.timeout, args.census))
            code = exit_code(doc)
            if args.json:
                # with --watch: one document per line
                json.dump(doc, sys.stdout, indent=None if args.watch else 2, sort_keys=True)
                sys.stdout.write("\n")
                sys.stdout.flush()
            else:
                if args.watch and console.is_terminal:
                    console.clear()
                render(doc, console)
                if args.watch:
                    console.print(f"[dim]{time.strftime('%H:%M:%S')}, every {args.watch:g}s; "
                                  "Ctrl-C stops[/]")
            if not args.watch:
                return code
            time.sleep(args.watch)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return code
